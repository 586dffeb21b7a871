//! A model-based test of one catalog shared by several sessions and
//! processes (issue 29): two library sessions, a `dfmv serve` process
//! (over REST, and over one Flight SQL connection kept for the whole
//! sequence, whose prepared statements are kept and executed again step
//! after step) and short-lived `dfmv` processes run random sequences of
//! table and plain-view (re)definitions, appends, removals and in-place
//! rewrites (same size, modification time put back), refreshes, drops and
//! re-creations of materialized views, VACUUM by a session whose window
//! is zero, and freshness checks. After every refresh and creation, and
//! for every view any of them reports `fresh`, the view must equal its
//! query run by a new DataFusion session that shares nothing with them
//! (the oracle), over the relations as the model says they are defined
//! now.
//!
//! Short run (part of `cargo test`): 3 sequences of 12 steps. Long run:
//! `DFMV_MODEL_SEQUENCES=2000 DFMV_MODEL_STEPS=10 cargo test --test it model:: -- --nocapture`;
//! `DFMV_MODEL_SEED` replays one sequence (`DFMV_MODEL_TRACE=1` prints
//! its steps as they run).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow_flight::sql::client::{FlightSqlServiceClient, PreparedStatement};
use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use datafusion_matview::MatviewSession;
use futures::TryStreamExt;
use tonic::transport::Channel;

use crate::common;
use common::{http, sorted_text};

const BIN: &str = env!("CARGO_BIN_EXE_dfmv");

/// xorshift64*: a small seeded generator, so a failing sequence replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const FOLDERS: [&str; 2] = ["one", "two"];

/// The materialized views of every sequence: through a plain view,
/// row-wise, grouped, and over a folder named by path.
fn views(dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        (
            "m_agg",
            "SELECT count(*) AS c, sum(n) AS s FROM pv".to_owned(),
        ),
        ("m_rows", "SELECT n FROM t WHERE n % 3 = 0".to_owned()),
        (
            "m_grp",
            "SELECT n % 5 AS k, count(*) AS c, max(n) AS hi FROM t GROUP BY n % 5".to_owned(),
        ),
        (
            "m_path",
            format!(
                "SELECT n % 7 AS k, count(*) AS c FROM '{}/one/' GROUP BY n % 7",
                dir.display()
            ),
        ),
    ]
}

/// What the relations are now, as the model knows them.
struct Model {
    dir: PathBuf,
    table_folder: &'static str,
    view_bound: u64,
    next_file: usize,
}

impl Model {
    fn table_sql(&self) -> String {
        format!(
            "CREATE OR REPLACE EXTERNAL TABLE t (n BIGINT) STORED AS CSV LOCATION '{}/{}/' OPTIONS ('format.has_header' 'true')",
            self.dir.display(),
            self.table_folder
        )
    }

    fn view_sql(&self) -> String {
        format!(
            "CREATE OR REPLACE VIEW pv AS SELECT n FROM t WHERE n <= {}",
            self.view_bound
        )
    }

    fn files(&self, folder: &str) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
    }

    /// A new CSV file of 5 to 30 four-digit numbers in `folder`.
    fn append(&mut self, rng: &mut Rng, folder: &str) {
        let rows = 5 + rng.below(26);
        let path = self
            .dir
            .join(folder)
            .join(format!("f{:04}.csv", self.next_file));
        self.next_file += 1;
        std::fs::write(&path, numbers(rng, rows)).unwrap();
    }

    /// The query of `view` as the oracle runs it, in a new session.
    async fn oracle(&self, query: &str) -> String {
        let ctx = SessionContext::new().enable_url_table();
        for statement in [self.table_sql(), self.view_sql()] {
            ctx.sql(&statement).await.unwrap().collect().await.unwrap();
        }
        sorted_text(ctx.sql(query).await.unwrap().collect().await.unwrap())
    }
}

fn numbers(rng: &mut Rng, rows: u64) -> String {
    let mut text = String::from("n\n");
    for _ in 0..rows {
        text.push_str(&format!("{}\n", 1000 + rng.below(9000)));
    }
    text
}

async fn session(catalog: &Path) -> MatviewSession {
    common::remembering(SessionContext::new().enable_url_table(), catalog).await
}

/// Who runs a step: one of the two library sessions, a new `dfmv`
/// process, or the `dfmv serve` process (through `POST /v1/sql`, or its
/// Flight SQL connection).
#[derive(Debug, Clone, Copy)]
enum Runner {
    A,
    B,
    Process,
    Server,
    Flight,
}

/// A `dfmv serve` process over the catalog, killed when dropped.
struct Server {
    child: std::process::Child,
    /// Its REST address.
    addr: String,
    /// Its Flight SQL address.
    flight: String,
}

/// The Flight SQL client of the sequence: one connection, and the
/// statements it prepared, by their SQL.
struct Flight {
    client: FlightSqlServiceClient<Channel>,
    prepared: HashMap<String, PreparedStatement<Channel>>,
}

impl Flight {
    async fn connect(addr: &str) -> Self {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Self {
            client: FlightSqlServiceClient::new(channel),
            prepared: HashMap::new(),
        }
    }

    /// Runs `sql` once, or (`keep`) through the statement prepared for it
    /// the first time, executed again.
    async fn run(&mut self, sql: &str, keep: bool) -> Vec<RecordBatch> {
        let info = if keep {
            if !self.prepared.contains_key(sql) {
                let prepared = self.client.prepare(sql.to_owned(), None).await.unwrap();
                self.prepared.insert(sql.to_owned(), prepared);
            }
            let prepared = self.prepared.get_mut(sql).unwrap();
            prepared
                .execute()
                .await
                .unwrap_or_else(|e| panic!("Flight SQL prepared {sql}: {e}"))
        } else {
            self.client
                .execute(sql.to_owned(), None)
                .await
                .unwrap_or_else(|e| panic!("Flight SQL {sql}: {e}"))
        };
        let mut batches = vec![];
        for endpoint in info.endpoint {
            let stream = self.client.do_get(endpoint.ticket.unwrap()).await.unwrap();
            batches.extend(
                stream
                    .try_collect::<Vec<_>>()
                    .await
                    .unwrap_or_else(|e| panic!("Flight SQL {sql}: {e}")),
            );
        }
        batches
    }
}

/// Rows as `a,b` lines, as `dfmv --format csv` prints them without its
/// header.
fn lines(batches: &[RecordBatch]) -> String {
    let mut out = vec![];
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = (0..batch.num_columns())
                .map(|c| {
                    datafusion::arrow::util::display::array_value_to_string(batch.column(c), row)
                        .unwrap()
                })
                .collect();
            out.push(cells.join(","));
        }
    }
    out.join("\n")
}

impl Server {
    fn start(catalog: &Path) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(BIN)
            .arg("--catalog")
            .arg(catalog)
            .args([
                "serve",
                "--http",
                "127.0.0.1:0",
                "--flight-sql",
                "127.0.0.1:0",
                // The sources sit beside the catalog.
                "--data-dir",
            ])
            .arg(catalog.parent().unwrap())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (mut addr, mut flight) = (None, None);
        while addr.is_none() || flight.is_none() {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "dfmv serve ended");
            if let Some(a) = line.trim_end().strip_prefix("REST on http://") {
                addr = Some(a.to_owned());
            }
            if let Some(a) = line.trim_end().strip_prefix("Flight SQL on grpc://") {
                flight = Some(a.to_owned());
            }
        }
        // Keep its output flowing.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        Self {
            child,
            addr: addr.unwrap(),
            flight: flight.unwrap(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Run<'a> {
    catalog: PathBuf,
    a: &'a MatviewSession,
    b: &'a MatviewSession,
    /// Keeps nothing for readers: its VACUUM removes whatever is not
    /// referenced at once.
    vacuum: &'a MatviewSession,
    server: Server,
    flight: tokio::sync::Mutex<Flight>,
}

impl Run<'_> {
    /// Runs `sql`; in a `dfmv` process its output as CSV.
    async fn sql(&self, runner: Runner, sql: &str) -> String {
        match runner {
            Runner::A | Runner::B => {
                let s = if matches!(runner, Runner::A) {
                    self.a
                } else {
                    self.b
                };
                let batches = s
                    .sql(sql)
                    .await
                    .unwrap_or_else(|e| panic!("{runner:?}: {sql}: {e}"))
                    .collect()
                    .await
                    .unwrap_or_else(|e| panic!("{runner:?}: {sql}: {e}"));
                lines(&batches)
            }
            Runner::Flight => {
                // Listings are kept prepared; changes run once each.
                let keep = sql.starts_with("SELECT");
                lines(&self.flight.lock().await.run(sql, keep).await)
            }
            Runner::Server => {
                let body = serde_json::json!({ "sql": sql }).to_string();
                let (status, answer) = http(&self.server.addr, "POST", "/v1/sql", &body);
                assert_eq!(status, 200, "dfmv serve: {sql}: {answer}");
                answer.to_string()
            }
            Runner::Process => {
                let output = Command::new(BIN)
                    .arg("--catalog")
                    .arg(&self.catalog)
                    .args(["-q", "--format", "csv", "-c", sql])
                    .output()
                    .unwrap();
                assert!(
                    output.status.success(),
                    "dfmv -c {sql:?}: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                String::from_utf8(output.stdout).unwrap()
            }
        }
    }

    /// The freshness of every view, as `runner` reports it.
    async fn freshness(&self, runner: Runner) -> Vec<(String, String)> {
        let text = self
            .sql(
                runner,
                "SELECT table_name, freshness FROM materialized_views() ORDER BY table_name",
            )
            .await;
        if let Runner::Server = runner {
            let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
            return rows
                .iter()
                .map(|row| {
                    let field = |f: &str| row[f].as_str().unwrap().to_owned();
                    (field("table_name"), field("freshness"))
                })
                .collect();
        }
        text.lines()
            .filter(|l| !l.starts_with("table_name"))
            .filter_map(|l| l.split_once(','))
            .map(|(v, f)| (v.to_owned(), f.to_owned()))
            .collect()
    }

    /// The view's stored rows as the Flight SQL client reads them, through
    /// the statement it prepared for the view when it first read it.
    async fn flight_rows(&self, view: &str) -> String {
        sorted_text(
            self.flight
                .lock()
                .await
                .run(&format!("SELECT * FROM {view}"), true)
                .await,
        )
    }

    /// The view's stored rows, read by session A.
    async fn rows(&self, view: &str) -> String {
        sorted_text(
            self.a
                .sql(&format!("SELECT * FROM {view}"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap(),
        )
    }
}

async fn sequence(seed: u64, steps: usize) {
    // Printed (shown with --nocapture or on failure) to replay with
    // DFMV_MODEL_SEED.
    println!("sequence seed {seed}");
    let mut rng = Rng(seed.max(1));
    let dir = tempfile::tempdir().unwrap();
    for folder in FOLDERS {
        std::fs::create_dir(dir.path().join(folder)).unwrap();
    }
    let mut model = Model {
        dir: dir.path().to_owned(),
        table_folder: "one",
        view_bound: 5000,
        next_file: 0,
    };
    for folder in FOLDERS {
        model.append(&mut rng, folder);
        model.append(&mut rng, folder);
    }
    let catalog = dir.path().join("cat");
    let a = session(&catalog).await;
    let b = session(&catalog).await;
    let vacuum = MatviewSession::open_with_options(
        SessionContext::new(),
        &catalog.display().to_string(),
        datafusion_matview::MatviewOptions {
            retention: std::time::Duration::ZERO,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let server = Server::start(&catalog);
    let flight = tokio::sync::Mutex::new(Flight::connect(&server.flight).await);
    let run = Run {
        catalog: catalog.clone(),
        a: &a,
        b: &b,
        vacuum: &vacuum,
        server,
        flight,
    };
    let views = views(dir.path());
    run.sql(Runner::A, &model.table_sql()).await;
    run.sql(Runner::A, &model.view_sql()).await;
    for (name, query) in &views {
        run.sql(
            Runner::A,
            &format!("CREATE MATERIALIZED VIEW {name} AS {query}"),
        )
        .await;
    }
    let mut present: BTreeSet<&str> = views.iter().map(|(name, _)| *name).collect();
    let mut log = vec![];
    let trace = std::env::var("DFMV_MODEL_TRACE").is_ok();
    for step in 0..steps {
        if trace && let Some(last) = log.last() {
            eprintln!("{last}");
        }
        let runner = match rng.below(6) {
            0 | 1 => Runner::A,
            2 => Runner::B,
            3 => Runner::Process,
            4 => Runner::Server,
            _ => Runner::Flight,
        };
        let folder = FOLDERS[rng.below(2) as usize];
        match rng.below(10) {
            0 | 1 => {
                model.append(&mut rng, folder);
                log.push(format!("append to {folder}"));
            }
            2 => {
                let files = model.files(folder);
                if files.len() > 1 {
                    let file = &files[rng.below(files.len() as u64) as usize];
                    std::fs::remove_file(file).unwrap();
                    log.push(format!("remove {}", file.display()));
                }
            }
            3 => {
                // Same size, same inode, other rows, modification time put back.
                let files = model.files(folder);
                let file = &files[rng.below(files.len() as u64) as usize];
                let old = std::fs::read_to_string(file).unwrap();
                let rows = old.lines().count() as u64 - 1;
                datafusion_matview_testing::rewrite_in_place(file, numbers(&mut rng, rows));
                log.push(format!("rewrite {} in place", file.display()));
            }
            4 => {
                model.table_folder = folder;
                let sql = model.table_sql();
                run.sql(runner, &sql).await;
                log.push(format!("{runner:?}: t over {folder}"));
            }
            5 => {
                model.view_bound = 1000 + rng.below(9000);
                let sql = model.view_sql();
                run.sql(runner, &sql).await;
                log.push(format!("{runner:?}: pv n <= {}", model.view_bound));
            }
            6 => {
                let (name, query) = &views[rng.below(views.len() as u64) as usize];
                if !present.contains(name) {
                    continue;
                }
                let full = if rng.below(4) == 0 { " FULL" } else { "" };
                let out = run
                    .sql(runner, &format!("REFRESH MATERIALIZED VIEW {name}{full}"))
                    .await;
                log.push(format!("{runner:?}: refresh {name}{full}: {out}"));
                let (stored, expected) = (run.rows(name).await, model.oracle(query).await);
                assert_eq!(
                    stored,
                    expected,
                    "seed {seed}, step {step}: {name} differs from its query right after a refresh\n{}",
                    log.join("\n")
                );
            }
            7 => {
                let (name, query) = &views[rng.below(views.len() as u64) as usize];
                if present.remove(name) {
                    run.sql(runner, &format!("DROP MATERIALIZED VIEW {name}"))
                        .await;
                    log.push(format!("{runner:?}: drop {name}"));
                } else {
                    run.sql(
                        runner,
                        &format!("CREATE MATERIALIZED VIEW {name} AS {query}"),
                    )
                    .await;
                    present.insert(name);
                    log.push(format!("{runner:?}: create {name}"));
                    let (stored, expected) = (run.rows(name).await, model.oracle(query).await);
                    assert_eq!(
                        stored,
                        expected,
                        "seed {seed}, step {step}: {name} differs from its query right after its creation\n{}",
                        log.join("\n")
                    );
                }
            }
            8 => {
                run.vacuum
                    .sql("VACUUM MATERIALIZED VIEWS")
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                log.push("vacuum (zero window)".to_owned());
            }
            _ => {
                log.push(format!("{runner:?}: check freshness"));
                for (name, freshness) in run.freshness(runner).await {
                    if freshness != "fresh" {
                        continue;
                    }
                    let query = &views.iter().find(|(n, _)| *n == name).unwrap().1;
                    let (stored, expected) = (run.rows(&name).await, model.oracle(query).await);
                    assert_eq!(
                        stored,
                        expected,
                        "seed {seed}, step {step}: {runner:?} reports {name} fresh but it differs from its query\n{}",
                        log.join("\n")
                    );
                    // A client that kept its prepared statement reads the same.
                    assert_eq!(
                        run.flight_rows(&name).await,
                        expected,
                        "seed {seed}, step {step}: a kept Flight SQL statement reads {name} otherwise\n{}",
                        log.join("\n")
                    );
                }
            }
        }
    }
    // A new process agrees with what the model says is fresh.
    for (name, freshness) in run.freshness(Runner::Process).await {
        if freshness == "fresh" {
            let query = &views.iter().find(|(n, _)| *n == name).unwrap().1;
            assert_eq!(
                run.rows(&name).await,
                model.oracle(query).await,
                "seed {seed}: a new process reports {name} fresh but it differs\n{}",
                log.join("\n")
            );
        }
    }
    // Sanity: the sessions saw rows (the views are not all empty).
    if present.contains("m_path") {
        let total = a
            .sql("SELECT c FROM m_path")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert!(total.iter().map(|b| b.num_rows()).sum::<usize>() > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_shared_by_sessions_and_processes_are_never_silently_wrong() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    if let Ok(seed) = std::env::var("DFMV_MODEL_SEED") {
        sequence(seed.parse().unwrap(), env("DFMV_MODEL_STEPS", 12) as usize).await;
        return;
    }
    let sequences = env("DFMV_MODEL_SEQUENCES", 3);
    let steps = env("DFMV_MODEL_STEPS", 12) as usize;
    let started = std::time::Instant::now();
    for i in 0..sequences {
        sequence(
            0x9E37_79B9_7F4A_7C15 ^ (i + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9),
            steps,
        )
        .await;
    }
    eprintln!(
        "{sequences} sequences of {steps} steps passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
