//! Materialized views on a Ballista cluster: a scheduler and two stock
//! executors in this process on loopback (issue 17).

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion_matview::MatviewSession;
use datafusion_matview_ballista::{LocalCluster, LocalExecutor};
use datafusion_matview_testing::InstrumentedStore;

#[path = "it/common.rs"]
mod common;

async fn rows(s: &MatviewSession, sql: &str) -> Vec<RecordBatch> {
    s.sql(sql).await.unwrap().collect().await.unwrap()
}

fn text(batches: &[RecordBatch]) -> String {
    pretty_format_batches(batches).unwrap().to_string()
}

/// (mode, detail) of a REFRESH.
async fn refresh(s: &MatviewSession, view: &str) -> (String, String) {
    let batches = rows(s, &format!("REFRESH MATERIALIZED VIEW {view}")).await;
    let b = &batches[0];
    (
        b.column(1).as_string::<i32>().value(0).to_owned(),
        b.column(5).as_string::<i32>().value(0).to_owned(),
    )
}

/// A runtime with the test S3 store registered when there is one; the
/// in-process executors share it.
fn runtime() -> Arc<RuntimeEnv> {
    let runtime = Arc::new(RuntimeEnv::default());
    if let Some((url, store)) = test_bucket() {
        runtime.register_object_store(&url, store);
    }
    runtime
}

/// The S3 test bucket's URL and store, when the test server runs.
fn test_bucket() -> Option<(url::Url, Arc<dyn object_store::ObjectStore>)> {
    let endpoint = common::s3_endpoint()?;
    let url = url::Url::parse(&format!("s3://{}", common::s3_bucket())).unwrap();
    Some((url, common::s3_store(&endpoint)))
}

/// A session on `cluster` over `catalog`, with `orders` registered (see
/// [`with_orders`]).
async fn session(
    cluster: &LocalCluster,
    runtime: Arc<RuntimeEnv>,
    dir: &std::path::Path,
    catalog: &str,
) -> MatviewSession {
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_runtime_env(runtime)
        .build();
    let ctx = cluster.context(state).await.unwrap();
    let s = MatviewSession::open(ctx, catalog).await.unwrap();
    with_orders(&s, dir).await;
    s
}

/// Registers `orders`: CSV files under `dir/orders/`, with a first file
/// written if there is none.
async fn with_orders(s: &MatviewSession, dir: &std::path::Path) {
    let data = dir.join("orders");
    if !data.exists() {
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(
            data.join("jan.csv"),
            "region,amount\nnorth,10\nsouth,5\nnorth,2\n",
        )
        .unwrap();
    }
    rows(
        s,
        &format!(
            "CREATE EXTERNAL TABLE orders (region TEXT, amount BIGINT) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
            data.display()
        ),
    )
    .await;
}

/// A session on a fresh 2-executor cluster (see [`session`]).
async fn session_on_cluster(
    dir: &std::path::Path,
    catalog: &str,
) -> (LocalCluster, MatviewSession) {
    on_cluster(runtime(), dir, catalog).await
}

/// A session on a fresh 2-executor cluster whose every single-request put
/// (to S3 when the test server runs, else to local files) is held for
/// 50 ms: writers working at once read the same latest manifest and meet
/// at the put of the next (see `InstrumentedStore::set_put_delay`).
async fn racing_session_on_cluster(
    dir: &std::path::Path,
    catalog: &str,
) -> (LocalCluster, MatviewSession) {
    let runtime = Arc::new(RuntimeEnv::default());
    let (url, store) = test_bucket().unwrap_or_else(|| {
        let local: Arc<dyn object_store::ObjectStore> =
            Arc::new(object_store::local::LocalFileSystem::new());
        (url::Url::parse("file://").unwrap(), local)
    });
    let store = InstrumentedStore::new(store);
    store.set_put_delay(Some(std::time::Duration::from_millis(50)));
    runtime.register_object_store(&url, Arc::new(store));
    on_cluster(runtime, dir, catalog).await
}

async fn on_cluster(
    runtime: Arc<RuntimeEnv>,
    dir: &std::path::Path,
    catalog: &str,
) -> (LocalCluster, MatviewSession) {
    // One task slot per executor: the schedule under which Ballista's
    // adaptive planner miscounted an incremental merge (see
    // `datafusion_matview_ballista::for_cluster`).
    let cluster = LocalCluster::start(Arc::clone(&runtime), 2, 1)
        .await
        .unwrap();
    let s = session(&cluster, runtime, dir, catalog).await;
    (cluster, s)
}

/// The catalog location tests share: on S3 when the test server is there.
fn shared_catalog(dir: &std::path::Path, name: &str) -> String {
    match common::s3_endpoint() {
        Some(_) => format!(
            "s3://{}/{name}-{}",
            common::s3_bucket(),
            uuid::Uuid::new_v4()
        ),
        None => dir.join(name).display().to_string(),
    }
}

const TOTALS: &str =
    "SELECT region, count(*) AS n, sum(amount) AS total FROM orders GROUP BY region";

/// The view's rows against its query's, run now (both sorted).
async fn assert_matches_query(s: &MatviewSession, view: &str, query: &str) {
    let view = text(&rows(s, &format!("SELECT * FROM {view} ORDER BY 1")).await);
    let query = text(&rows(s, &format!("{query} ORDER BY 1")).await);
    assert_eq!(view, query);
}

async fn views_work_on_a_cluster(dir: &std::path::Path, catalog: &str) {
    let (cluster, s) = session_on_cluster(dir, catalog).await;
    let writes = || cluster.write_tasks().iter().sum::<usize>();
    rows(&s, &format!("CREATE MATERIALIZED VIEW totals AS {TOTALS}")).await;
    assert_eq!(
        writes(),
        1,
        "the population's COPY ran on an executor: {:?}",
        cluster.tasks()
    );
    assert_eq!(
        text(&rows(&s, "SELECT * FROM totals ORDER BY region").await),
        "+--------+---+-------+\n\
         | region | n | total |\n\
         +--------+---+-------+\n\
         | north  | 2 | 12    |\n\
         | south  | 1 | 5     |\n\
         +--------+---+-------+"
    );

    // An append: the delta query and its merge run on the executors.
    std::fs::write(
        dir.join("orders/feb.csv"),
        "region,amount\neast,7\nnorth,1\n",
    )
    .unwrap();
    assert_eq!(
        refresh(&s, "totals").await,
        (
            "incremental".into(),
            "orders: 1 file(s) appended; merged into the existing groups".into()
        )
    );
    assert_eq!(writes(), 2);
    assert_matches_query(&s, "totals", TOTALS).await;
    assert_eq!(refresh(&s, "totals").await.0, "no_op");
    assert_eq!(writes(), 2, "a no_op refresh runs nothing");
    assert_eq!(
        refresh(&s, "totals FULL").await,
        ("full".into(), "FULL requested".into())
    );
    // Two source files: a partial aggregate of each, then their merge,
    // three writes on the executors.
    assert_eq!(writes(), 5);
    let partials = common::view(&s, "totals").await;
    let partials = &partials.view.snapshot.as_ref().unwrap().partials;
    assert_eq!(partials.len(), 2, "one partial per source file");
    assert!(
        partials
            .iter()
            .all(|p| p.lineage.as_ref().is_some_and(|l| l.len() == 1))
    );
    assert_matches_query(&s, "totals", TOTALS).await;

    // A view over a view reads its snapshot's files; pinned, an older one.
    rows(
        &s,
        "CREATE MATERIALIZED VIEW top AS SELECT sum(total) AS s FROM totals",
    )
    .await;
    assert_eq!(
        text(&rows(&s, "SELECT s FROM top").await),
        "+----+\n| s  |\n+----+\n| 25 |\n+----+"
    );
    let statement = datafusion_matview::sql::RefreshMaterializedView {
        name: datafusion::sql::sqlparser::ast::ObjectName::from(vec![
            datafusion::sql::sqlparser::ast::Ident::new("top"),
        ]),
        full: false,
        incremental: false,
        cascade: false,
    };
    let totals = datafusion_matview::spec::QualifiedName::new("datafusion", "public", "totals");
    s.refresh_at(&statement, &[(totals, 1)].into_iter().collect())
        .await
        .unwrap();
    assert_eq!(
        text(&rows(&s, "SELECT s FROM top").await),
        "+----+\n| s  |\n+----+\n| 17 |\n+----+"
    );
    assert_eq!(writes(), 7);

    // The client's memory is not the executors'.
    rows(
        &s,
        "CREATE TABLE mem (region TEXT, target BIGINT) AS VALUES ('north', 20)",
    )
    .await;
    let error = s
        .sql("CREATE MATERIALIZED VIEW mixed AS SELECT o.region, m.target FROM orders o JOIN mem m ON o.region = m.region")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("relation \"mem\" cannot be read on a Ballista cluster: it is an in-memory table, held by this process only"),
        "{error}"
    );
    assert!(
        s.sql("SELECT * FROM mixed").await.is_err(),
        "a refused CREATE leaves nothing"
    );
    // What reads only the client's memory runs on the client.
    rows(
        &s,
        "CREATE MATERIALIZED VIEW local_only AS SELECT * FROM mem",
    )
    .await;
    assert_eq!(writes(), 7);
    assert_eq!(
        text(&rows(&s, "SELECT * FROM local_only").await),
        "+--------+--------+\n| region | target |\n+--------+--------+\n| north  | 20     |\n+--------+--------+"
    );
    assert_eq!(
        text(
            &rows(
                &s,
                "SELECT table_name, freshness FROM materialized_views() ORDER BY 1"
            )
            .await
        ),
        "+------------+-----------+\n\
         | table_name | freshness |\n\
         +------------+-----------+\n\
         | local_only | unknown   |\n\
         | top        | stale     |\n\
         | totals     | fresh     |\n\
         +------------+-----------+"
    );
    // A removal: the partial of the removed file is dropped and the other
    // merged again, on an executor (one write: no partial to recompute).
    std::fs::remove_file(dir.join("orders/feb.csv")).unwrap();
    assert_eq!(
        refresh(&s, "totals").await,
        (
            "incremental".into(),
            "orders: 1 file(s) removed; dropped 1 of 2 partial aggregate(s), merged with the others"
                .into()
        )
    );
    assert_eq!(writes(), 8);
    assert_matches_query(&s, "totals", TOTALS).await;
    rows(&s, "DROP MATERIALIZED VIEW top").await;
    rows(&s, "DROP MATERIALIZED VIEW totals").await;
    assert!(cluster.tasks().iter().sum::<usize>() > 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn views_are_created_refreshed_and_read_on_the_executors() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog");
    views_work_on_a_cluster(dir.path(), catalog.to_str().unwrap()).await;
}

/// The same with the catalog on S3 (the S3-compatible server CI starts;
/// skipped without `DFMV_TEST_S3_ENDPOINT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn views_on_a_cluster_with_the_catalog_on_s3() {
    if common::s3_endpoint().is_none() {
        eprintln!("skipped: DFMV_TEST_S3_ENDPOINT is not set");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let catalog = shared_catalog(dir.path(), "catalog");
    views_work_on_a_cluster(dir.path(), &catalog).await;
}

/// The `.slt` suites under `sqllogictest/` against a Ballista-backed
/// session: every record passes but those listed, with their reasons, in
/// `sqllogictest/ballista-expected-failures.txt`, and those do fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_slt_suites_pass_on_a_cluster() {
    let runtime = Arc::new(RuntimeEnv::default());
    let cluster = LocalCluster::start(runtime, 2, 2).await.unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sqllogictest");
    let expected: std::collections::BTreeSet<String> =
        std::fs::read_to_string(root.join("ballista-expected-failures.txt"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect();
    let files = datafusion_matview_slt::collect_files(std::slice::from_ref(&root), &[]).unwrap();
    assert!(files.len() >= 6, "{files:?}");
    let options = datafusion_matview_slt::RunOptions {
        ballista: Some(cluster.url()),
        ..Default::default()
    };
    let mut failed = std::collections::BTreeSet::new();
    let mut reports = String::new();
    for file in &files {
        let outcome = datafusion_matview_slt::run_file(file, &options).await;
        match outcome.outcome {
            datafusion_matview_slt::Outcome::Passed => {}
            datafusion_matview_slt::Outcome::Failed(report) => {
                // Each failing record ends with `at <file>:<line>`.
                for line in report.lines().filter_map(|l| l.strip_prefix("at ")) {
                    let name = std::path::Path::new(line).file_name().unwrap();
                    failed.insert(name.to_string_lossy().into_owned());
                }
                reports.push_str(&report);
                reports.push('\n');
            }
            other => panic!("{}: {other:?}", file.display()),
        }
    }
    assert_eq!(failed, expected, "{reports}");
    let tasks = cluster.tasks();
    assert!(
        tasks.iter().all(|&n| n > 0),
        "every executor ran tasks: {tasks:?}"
    );
}

/// `dfmv --ballista df://…` runs its statements on that cluster: the
/// population's write is a task of this test's executors.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dfmv_runs_statements_on_the_cluster_it_is_pointed_at() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("orders")).unwrap();
    std::fs::write(
        dir.path().join("orders/jan.csv"),
        "region,amount\nnorth,10\nsouth,5\nnorth,2\n",
    )
    .unwrap();
    let cluster = LocalCluster::start(Arc::new(RuntimeEnv::default()), 2, 2)
        .await
        .unwrap();
    let home = dir.path().to_owned();
    let url = cluster.url();
    let run = move |sql: String| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_dfmv"))
            .current_dir(&home)
            .env("HOME", &home)
            .args([
                "--catalog",
                home.join("catalog").to_str().unwrap(),
                "--ballista",
                &url,
            ])
            .args(["-q", "--format", "csv", "-c", &sql])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        String::from_utf8(output.stdout).unwrap()
    };
    let run = tokio::task::spawn_blocking(move || {
        run("CREATE EXTERNAL TABLE orders (region TEXT, amount BIGINT) STORED AS CSV LOCATION 'orders/' OPTIONS ('format.has_header' 'true')".into());
        run(format!("CREATE MATERIALIZED VIEW totals AS {TOTALS}"));
        run("SELECT * FROM totals ORDER BY region".into())
    });
    let out = run.await.unwrap();
    assert_eq!(out, "region,n,total\nnorth,2,12\nsouth,1,5\n");
    assert_eq!(
        cluster.write_tasks().iter().sum::<usize>(),
        1,
        "{:?}",
        cluster.tasks()
    );
    assert!(cluster.tasks().iter().sum::<usize>() > 1);
}

/// Two clients, each with its own Ballista session (and cluster), create
/// views and refresh one shared view in one catalog (on S3 when the test
/// server runs) at once: every refresh either commits its own version or
/// fails as a retryable conflict, none is lost, and every view created is
/// there with its data. Puts are held so that commits meet: with
/// overwriting puts in place of conditional ones this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clients_on_two_clusters_share_one_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = shared_catalog(dir.path(), "shared");
    let (cluster_a, a) = racing_session_on_cluster(dir.path(), &catalog).await;
    let (cluster_b, b) = racing_session_on_cluster(dir.path(), &catalog).await;
    rows(&a, &format!("CREATE MATERIALIZED VIEW shared AS {TOTALS}")).await;
    let client = |s: MatviewSession, me: &'static str| async move {
        let mut landed = vec![];
        let mut lost = 0;
        for i in 0..12 {
            if i % 3 == 0 {
                let i = i / 3;
                rows(
                    &s,
                    &format!("CREATE MATERIALIZED VIEW {me}_{i} AS SELECT {i} AS i, sum(amount) AS total FROM orders"),
                )
                .await;
            }
            match s.sql("REFRESH MATERIALIZED VIEW shared FULL").await {
                Ok(df) => {
                    let batches = df.collect().await.unwrap();
                    let version = batches[0]
                        .column(3)
                        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                        .value(0);
                    landed.push(version);
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.contains("could not commit") && e.contains("retry"), "{e}");
                    lost += 1;
                }
            }
        }
        eprintln!(
            "{me}: {} refreshes landed, {lost} lost the race",
            landed.len()
        );
        (s, landed)
    };
    let ((a, landed_a), (_b, landed_b)) = tokio::join!(client(a, "a"), client(b, "b"));
    let mut landed: Vec<i64> = landed_a.into_iter().chain(landed_b).collect();
    landed.sort();
    let count = landed.len();
    landed.dedup();
    assert_eq!(
        landed.len(),
        count,
        "two refreshes claimed one version: {landed:?}"
    );
    assert!(count >= 1);
    let version = common::view(&a, "shared").await.version;
    assert_eq!(
        version as usize,
        1 + count,
        "a committed refresh was lost: {landed:?}"
    );
    assert_matches_query(&a, "shared", TOTALS).await;
    for me in ["a", "b"] {
        for i in 0..4 {
            assert_eq!(
                text(&rows(&a, &format!("SELECT i, total FROM {me}_{i}")).await),
                text(
                    &rows(
                        &a,
                        &format!("SELECT {i} AS i, sum(amount) AS total FROM orders")
                    )
                    .await
                )
            );
        }
    }
    assert!(cluster_a.write_tasks().iter().sum::<usize>() >= 4);
    assert!(cluster_b.write_tasks().iter().sum::<usize>() >= 4);
}

/// Scheduler and executors that build their object stores as Ballista's
/// binaries do, from the `s3.*` settings each job carries: a view in an
/// S3 catalog is created, refreshed and read with no store registered
/// anywhere (skipped without `DFMV_TEST_S3_ENDPOINT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_settings_reach_the_executors_with_each_job() {
    let Some(endpoint) = common::s3_endpoint() else {
        eprintln!("skipped: DFMV_TEST_S3_ENDPOINT is not set");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start_like_binaries(2, 1).await.unwrap();
    let state = datafusion_matview_ballista::s3_settings_state(&[
        ("s3.endpoint", &endpoint),
        ("s3.allow_http", "true"),
        ("s3.region", "us-east-1"),
        ("s3.access_key_id", "test"),
        ("s3.secret_access_key", "test"),
    ])
    .unwrap();
    let catalog = format!(
        "s3://{}/settings-{}",
        common::s3_bucket(),
        uuid::Uuid::new_v4()
    );
    let ctx = cluster.context(state).await.unwrap();
    let s = MatviewSession::open(ctx, &catalog).await.unwrap();
    with_orders(&s, dir.path()).await;
    let data = dir.path().join("orders");
    rows(&s, &format!("CREATE MATERIALIZED VIEW totals AS {TOTALS}")).await;
    std::fs::write(data.join("feb.csv"), "region,amount\neast,7\n").unwrap();
    assert_eq!(refresh(&s, "totals").await.0, "incremental");
    assert_matches_query(&s, "totals", TOTALS).await;
    assert_eq!(
        cluster.write_tasks().iter().sum::<usize>(),
        2,
        "{:?}",
        cluster.tasks()
    );
}

/// The ignored test that child processes run: with `DFMV_EXECUTOR_OF` set
/// to a scheduler's URL, a stock executor (one task slot) that joins it
/// and runs until killed. It prints `READY` once started; while the file
/// `DFMV_HOLD_WRITES` names exists, after each task that wrote files it
/// prints `WROTE` and holds the task's report back for 3 s, in which time
/// the parent kills it: the files are written, the scheduler has not heard
/// of them.
#[test]
#[ignore = "run as a child process by an_executor_killed_during_a_refresh_never_leaves_a_partial_view"]
fn executor_process() {
    use std::io::Write;
    let Ok(url) = std::env::var("DFMV_EXECUTOR_OF") else {
        return;
    };
    let hold = std::path::PathBuf::from(std::env::var("DFMV_HOLD_WRITES").unwrap());
    // Exit when the parent goes, however it goes: its end of stdin closes.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let observer: datafusion_matview_ballista::TaskObserver = Arc::new(move |plan: &str| {
            if plan.contains("DataSinkExec") && hold.exists() {
                let mut out = std::io::stdout().lock();
                writeln!(out, "WROTE").unwrap();
                out.flush().unwrap();
                std::thread::sleep(std::time::Duration::from_secs(3));
            }
        });
        let _executor = LocalExecutor::start(&url, 1, Some(observer)).await.unwrap();
        println!("READY");
        std::io::stdout().flush().unwrap();
        std::future::pending::<()>().await;
    });
}

/// Executors in child processes, killed with the test.
struct ExecutorProcesses {
    children: Vec<std::process::Child>,
    /// (child, line) of each line the children print.
    lines: tokio::sync::mpsc::UnboundedReceiver<(usize, String)>,
}

impl ExecutorProcesses {
    /// Starts `n` executor processes (see [`executor_process`]) for the
    /// scheduler at `url`, and waits until each has started.
    async fn start(n: usize, url: &str, hold: &std::path::Path) -> ExecutorProcesses {
        use std::io::BufRead;
        let (send, lines) = tokio::sync::mpsc::unbounded_channel();
        let mut children = vec![];
        for i in 0..n {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "executor_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("DFMV_EXECUTOR_OF", url)
                .env("DFMV_HOLD_WRITES", hold)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
            let send = send.clone();
            std::thread::spawn(move || {
                for line in stdout.lines().map_while(Result::ok) {
                    let _ = send.send((i, line));
                }
            });
            children.push(child);
        }
        let mut processes = ExecutorProcesses { children, lines };
        let mut ready = std::collections::BTreeSet::new();
        while ready.len() < n {
            ready.insert(processes.next_line("READY").await);
        }
        processes
    }

    /// The child that next prints `wanted`.
    async fn next_line(&mut self, wanted: &str) -> usize {
        let wait = std::time::Duration::from_secs(120);
        loop {
            let (child, line) = tokio::time::timeout(wait, self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("no executor printed {wanted} in {wait:?}"))
                .expect("an executor process is running");
            // The test harness may print its `test executor_process ... `
            // on the same line.
            if line.ends_with(wanted) {
                return child;
            }
        }
    }

    /// Kills child `i` with SIGKILL.
    fn kill(&mut self, i: usize) {
        self.children[i].kill().unwrap();
        self.children[i].wait().unwrap();
    }
}

impl Drop for ExecutorProcesses {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The Parquet files under `dir` (relative to it) whose directory holds no
/// snapshot marker: files no committed (or committable) snapshot accounts
/// for.
fn unmarked_parquet(dir: &std::path::Path) -> Vec<String> {
    let files = common::files_under(dir);
    files
        .iter()
        .filter(|file| {
            let path = std::path::Path::new(file);
            let marker = path.with_file_name(datafusion_matview::spec::SNAPSHOT_MARKER);
            path.extension().is_some_and(|e| e == "parquet")
                && !files.contains(&marker.display().to_string())
        })
        .cloned()
        .collect()
}

/// An executor process is killed with SIGKILL during a refresh, at the
/// worst moment: its task has written the new snapshot's file, and the
/// scheduler has not heard of it. The scheduler declares the executor dead
/// and runs the task again on the other one, which writes the rows again
/// into a second file. The refresh either commits exactly the query's
/// rows or fails and leaves the view as it was; never the rows twice,
/// never a part of them. A second refresh then lands on the survivor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_killed_during_a_refresh_never_leaves_a_partial_view() {
    let dir = tempfile::tempdir().unwrap();
    let hold = dir.path().join("hold-writes");
    let runtime = Arc::new(RuntimeEnv::default());
    let cluster = LocalCluster::start_with_executor_timeout(
        Arc::clone(&runtime),
        0,
        1,
        std::time::Duration::from_secs(8),
    )
    .await
    .unwrap();
    let mut executors = ExecutorProcesses::start(2, &cluster.url(), &hold).await;
    let catalog = dir.path().join("catalog");
    let s = session(&cluster, runtime, dir.path(), catalog.to_str().unwrap()).await;
    rows(&s, &format!("CREATE MATERIALIZED VIEW totals AS {TOTALS}")).await;
    let before = text(&rows(&s, "SELECT * FROM totals ORDER BY 1").await);
    std::fs::write(
        dir.path().join("orders/feb.csv"),
        "region,amount\neast,7\nnorth,1\n",
    )
    .unwrap();

    std::fs::write(&hold, "").unwrap();
    let s = Arc::new(s);
    let refreshing = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            match s.sql("REFRESH MATERIALIZED VIEW totals").await {
                Ok(df) => df.collect().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
    };
    let victim = executors.next_line("WROTE").await;
    executors.kill(victim);
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(180), refreshing)
        .await
        .expect("the refresh ends once the dead executor is found out")
        .unwrap();
    std::fs::remove_file(&hold).unwrap();

    let after = text(&rows(&s, "SELECT * FROM totals ORDER BY 1").await);
    match &outcome {
        Ok(_) => assert_matches_query(&s, "totals", TOTALS).await,
        Err(e) => {
            eprintln!("the refresh failed: {e}");
            assert_eq!(after, before, "a failed refresh left the view as it was");
        }
    }
    assert_eq!(unmarked_parquet(&catalog), Vec::<String>::new());

    // The survivor alone brings the view up to date.
    let (mode, _) = refresh(&s, "totals").await;
    assert_eq!(
        mode,
        if outcome.is_ok() {
            "no_op"
        } else {
            "incremental"
        }
    );
    assert_matches_query(&s, "totals", TOTALS).await;
    assert_ne!(
        text(&rows(&s, "SELECT * FROM totals ORDER BY 1").await),
        before
    );
}
