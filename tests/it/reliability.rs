//! Durability under faults, with real processes:
//!
//! - every write of a scenario (REFRESH, CREATE, CREATE OR REPLACE, DROP,
//!   VACUUM) is, in turn, the point where a child process is killed with
//!   SIGKILL (before the write, and after it); plus kills at random times;
//! - every write of a refresh fails in turn, as on a full disk;
//! - several processes refresh, create and drop against one catalog;
//! - a corrupt or lost manifest log is named, and rebuilt from the data.
//!
//! After every fault the catalog must open and every view must hold either
//! its complete old data or its complete new data.
//!
//! `cargo test --test it reliability::` runs the short version (every
//! deterministic kill point, a few random kills). The long version:
//! `DFMV_CRASH_TRIALS=500 cargo test --release --test reliability -- --ignored --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use common::files_under;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::SessionContext;
use datafusion_matview_testing::{Fault, FaultAction, InstrumentedStore};

use datafusion_matview::{Error, MatviewOptions, MatviewSession};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

// ---- helpers -------------------------------------------------------------

fn options(retention: Duration) -> MatviewOptions {
    MatviewOptions {
        retention,
        lease_ttl: CRASH_LEASE_TTL,
        ..Default::default()
    }
}

/// The lease of a write in these tests: a process killed mid-write keeps
/// its leftovers from cleanup for this long.
const CRASH_LEASE_TTL: Duration = Duration::from_millis(300);

/// Where a catalog lives: a local folder, or a prefix on the S3-compatible
/// server `.ci/run` starts (`DFMV_TEST_S3_ENDPOINT`).
#[derive(Debug, Clone)]
struct Target {
    location: String,
    url: url::Url,
    store: Arc<dyn ObjectStore>,
    root: ObjectPath,
}

impl Target {
    fn local(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let absolute = std::fs::canonicalize(dir).unwrap();
        Self {
            location: absolute.display().to_string(),
            url: url::Url::parse("file://").unwrap(),
            store: Arc::new(object_store::local::LocalFileSystem::new()),
            root: ObjectPath::from_absolute_path(&absolute).unwrap(),
        }
    }

    /// A fresh prefix on the S3 server; `None` (skip) when none is
    /// configured, which CI does not allow.
    fn s3() -> Option<Self> {
        let endpoint = common::s3_endpoint()?;
        let prefix = format!("reliability/{}", uuid::Uuid::new_v4().simple());
        Some(Self::s3_at(&endpoint, &prefix))
    }

    fn s3_at(endpoint: &str, prefix: &str) -> Self {
        let bucket = common::s3_bucket();
        Self {
            location: format!("s3://{bucket}/{prefix}"),
            url: url::Url::parse(&format!("s3://{bucket}")).unwrap(),
            store: common::s3_store(endpoint),
            root: ObjectPath::from(prefix),
        }
    }

    /// The target a child process was given.
    fn from_env() -> Self {
        let location = std::env::var("DFMV_CATALOG").unwrap();
        match location.strip_prefix("s3://") {
            Some(rest) => {
                let (_, prefix) = rest.split_once('/').unwrap();
                Self::s3_at(&std::env::var("DFMV_TEST_S3_ENDPOINT").unwrap(), prefix)
            }
            None => Self::local(Path::new(&location)),
        }
    }

    /// A context where the target's store is `store` (or the plain one).
    fn context(&self, store: Option<Arc<dyn ObjectStore>>) -> SessionContext {
        let ctx = SessionContext::new();
        ctx.register_object_store(&self.url, store.unwrap_or_else(|| Arc::clone(&self.store)));
        ctx
    }

    /// Every object under the catalog, relative to it.
    async fn files(&self) -> BTreeSet<String> {
        let metas: Vec<_> = self
            .store
            .list(Some(&self.root))
            .try_collect()
            .await
            .unwrap();
        metas
            .into_iter()
            .map(|m| {
                let parts: Vec<_> = m.location.prefix_match(&self.root).unwrap().collect();
                ObjectPath::from_iter(parts).to_string()
            })
            .collect()
    }
}

async fn open(target: &Target, retention: Duration) -> MatviewSession {
    MatviewSession::open_with_options(target.context(None), &target.location, options(retention))
        .await
        .unwrap()
}

/// A session whose store is instrumented.
async fn open_instrumented(
    target: &Target,
    retention: Duration,
) -> (MatviewSession, InstrumentedStore) {
    let store = InstrumentedStore::new(Arc::clone(&target.store));
    let ctx = target.context(Some(Arc::new(store.clone())));
    let s = MatviewSession::open_with_options(ctx, &target.location, options(retention))
        .await
        .unwrap();
    (s, store)
}

/// The folder under `_matview/views/` of the log of view `name` (in
/// `datafusion.public`), as the loaded index has it.
fn log_slot(s: &MatviewSession, name: &str) -> String {
    s.catalog()
        .index()
        .view(&datafusion_matview::spec::QualifiedName::new(
            "datafusion",
            "public",
            name,
        ))
        .expect("the view is in the index")
        .slot
        .clone()
}

async fn values(s: &MatviewSession, sql: &str) -> Vec<i64> {
    let mut out = vec![];
    for batch in s.sql(sql).await.unwrap().collect().await.unwrap() {
        let col = batch.column(0).as_primitive::<Int64Type>();
        out.extend((0..col.len()).map(|i| col.value(i)));
    }
    out
}

fn source_sql(source: &Path) -> String {
    format!(
        "CREATE EXTERNAL TABLE t (x BIGINT) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
        source.display()
    )
}

fn write_csv(path: &Path, range: std::ops::RangeInclusive<i64>) {
    let mut text = String::from("x\n");
    for x in range {
        text.push_str(&format!("{x}\n"));
    }
    std::fs::write(path, text).unwrap();
}

/// Runs this test binary again as a child process, in the ignored test
/// `child`, with `vars` in its environment.
fn spawn_child(vars: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "reliability::child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd
}

/// The ignored test the children run: a role chosen by `DFMV_CHILD`.
#[test]
#[ignore = "run as a child process by the other tests"]
fn child() {
    let Ok(role) = std::env::var("DFMV_CHILD") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let target = Target::from_env();
        match role.as_str() {
            "crash" => crash_scenario(&target).await,
            "worker" => worker(&target).await,
            "replace" => replace_and_drop(&target).await,
            other => panic!("unknown child role {other}"),
        }
    });
}

// ---- crash safety ----------------------------------------------------------

/// Lays out a source (in `dir`) and a catalog (local in `dir`, or on S3)
/// with view `a` over the first source file.
async fn crash_setup(dir: &Path, s3: bool) -> (PathBuf, Target) {
    let source = dir.join("source");
    let catalog = if s3 {
        Target::s3().unwrap()
    } else {
        Target::local(&dir.join("catalog"))
    };
    std::fs::create_dir_all(&source).unwrap();
    write_csv(&source.join("1.csv"), 1..=50);
    let s = open(&catalog, Duration::ZERO).await;
    s.sql(&source_sql(&source)).await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW a AS SELECT x FROM t")
        .await
        .unwrap();
    write_csv(&source.join("2.csv"), 51..=80);
    (source, catalog)
}

/// The statements of the crash scenario, in order.
const SCENARIO: [&str; 5] = [
    "REFRESH MATERIALIZED VIEW a",
    "CREATE MATERIALIZED VIEW b AS SELECT x FROM t WHERE x % 2 = 0",
    "CREATE OR REPLACE MATERIALIZED VIEW a AS SELECT x * 2 AS x FROM t",
    "DROP MATERIALIZED VIEW b",
    "VACUUM MATERIALIZED VIEWS",
];

/// What views `a` and `b` hold (`None`: `b` does not exist) after the
/// first `done` statements of [`SCENARIO`] committed.
fn scenario_state(done: usize) -> (Vec<i64>, Option<Vec<i64>>) {
    let evens: Vec<i64> = (1..=40).map(|x| x * 2).collect();
    let doubled: Vec<i64> = (1..=80).map(|x| x * 2).collect();
    match done {
        0 => ((1..=50).collect(), None),
        1 => ((1..=80).collect(), None),
        2 => ((1..=80).collect(), Some(evens)),
        3 => (doubled, Some(evens)),
        _ => (doubled, None),
    }
}

/// The child's work: every kind of statement that writes. After each
/// statement it prints `ACK <n> <version>` (flushed before the next one
/// starts): the statement was acknowledged, at that catalog version. With
/// `DFMV_FAULT` set, the instrumented store kills the process at that
/// write, or fails it (before or after it reached the store): a statement
/// that fails prints `FAILED <n> <error>` and the child exits with code 3.
/// Without a fault, the child prints how many writes the scenario makes.
async fn crash_scenario(catalog: &Target) {
    let source = PathBuf::from(std::env::var("DFMV_SOURCE").unwrap());
    let (s, store) = open_instrumented(catalog, Duration::ZERO).await;
    s.sql(&source_sql(&source)).await.unwrap();
    store.set_fault(
        std::env::var("DFMV_FAULT")
            .ok()
            .and_then(|f| Fault::parse(&f)),
    );
    let start = store
        .counters()
        .writes
        .load(std::sync::atomic::Ordering::SeqCst);
    for (i, sql) in SCENARIO.iter().enumerate() {
        let result = match s.sql(sql).await {
            Ok(df) => df.collect().await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            println!("FAILED {} {}", i + 1, e.replace('\n', " "));
            std::io::stdout().flush().unwrap();
            std::process::exit(3);
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "ACK {} {}", i + 1, position(s.catalog()).await).unwrap();
        out.flush().unwrap();
    }
    let writes = store
        .counters()
        .writes
        .load(std::sync::atomic::Ordering::SeqCst)
        - start;
    println!("WRITES {writes}");
}

/// Where a catalog is: its index version, and the log and version of
/// each view, as `<index>[,<view>=<log>@<version>...]`.
async fn position(catalog: &datafusion_matview::Catalog) -> String {
    let index = catalog.index();
    let mut out = index.version.to_string();
    for state in catalog.views().await.unwrap() {
        let slot = &index.view(&state.view.name).unwrap().slot;
        out.push_str(&format!(
            ",{}={slot}@{}",
            state.view.name.name, state.version
        ));
    }
    out
}

/// Whether the catalog at `now` (see [`position`]) holds every commit made
/// up to `acked`: a later index version, and each view acknowledged in
/// the same log at a later version, or replaced or dropped by a later
/// index version. Else what is missing.
fn lost_commits(acked: &str, now: &str) -> Option<String> {
    fn parse(position: &str) -> (u64, BTreeMap<String, (String, u64)>) {
        let mut parts = position.split(',');
        let index = parts.next().unwrap_or("0").parse().unwrap_or(0);
        let views = parts
            .filter_map(|p| {
                let (name, rest) = p.split_once('=')?;
                let (slot, version) = rest.split_once('@')?;
                Some((name.to_owned(), (slot.to_owned(), version.parse().ok()?)))
            })
            .collect();
        (index, views)
    }
    let (acked_index, acked_views) = parse(acked);
    let (index, views) = parse(now);
    if index < acked_index {
        return Some(format!(
            "index version {acked_index} acknowledged, {index} found"
        ));
    }
    for (name, (slot, version)) in acked_views {
        match views.get(&name) {
            Some((s, v)) if *s == slot && *v < version => {
                return Some(format!("view {name} acknowledged at {version}, {v} found"));
            }
            Some((s, _)) if *s != slot && index == acked_index => {
                return Some(format!(
                    "view {name} is in another log at the same index version"
                ));
            }
            None if index == acked_index => {
                return Some(format!("view {name} is gone at the same index version"));
            }
            _ => {}
        }
    }
    None
}

/// The last acknowledgement a child printed: (statements done, position).
fn last_ack(stdout: &str) -> (usize, String) {
    stdout
        .lines()
        .rev()
        .find_map(|l| {
            // libtest's "test child ... " may precede the first one.
            let mut words = l.split("ACK ").nth(1)?.split_whitespace();
            Some((words.next()?.parse().ok()?, words.next()?.to_owned()))
        })
        .unwrap_or((0, "0".to_owned()))
}

/// How a crash-test child ended.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ending {
    /// It ran the whole scenario.
    Finished,
    /// It was killed with `SIGKILL`.
    Killed,
    /// A statement failed with the injected error; `may_have_landed` when
    /// the error said its commit may have landed.
    Failed { may_have_landed: bool },
}

/// After the child ended: the catalog opens at or past the last
/// acknowledged version; views `a` and `b` together hold the state of the
/// last acknowledged statement, or (after a kill, or a commit that may
/// have landed) of the one in flight, never an older one and never a mix;
/// a child that finished holds the final state; and cleanup leaves exactly
/// the files of the committed snapshots.
async fn check_after_crash(
    catalog: &Target,
    source: &Path,
    acked: (usize, String),
    ending: Ending,
) -> Result<(), String> {
    let s = MatviewSession::open_with_options(
        catalog.context(None),
        &catalog.location,
        options(Duration::ZERO),
    )
    .await
    .map_err(|e| format!("catalog does not open: {e}"))?;
    s.sql(&source_sql(source)).await.unwrap();
    let (done, acked) = acked;
    let now = position(s.catalog()).await;
    if let Some(lost) = lost_commits(&acked, &now) {
        return Err(format!(
            "statement {done} was acknowledged at {acked}, the catalog is at {now}: {lost}"
        ));
    }
    let a = values(&s, "SELECT x FROM a ORDER BY x").await;
    let has_b = s
        .catalog()
        .index()
        .views
        .keys()
        .any(|name| name.name == "b");
    let b = if has_b {
        Some(values(&s, "SELECT x FROM b ORDER BY x").await)
    } else {
        None
    };
    let state = (a, b);
    let allowed: Vec<usize> = match ending {
        Ending::Finished => vec![SCENARIO.len()],
        Ending::Failed {
            may_have_landed: false,
        } => vec![done],
        Ending::Killed
        | Ending::Failed {
            may_have_landed: true,
        } => (done..=(done + 1).min(SCENARIO.len())).collect(),
    };
    if !allowed.iter().any(|&n| scenario_state(n) == state) {
        let found = (0..=SCENARIO.len()).find(|&n| scenario_state(n) == state);
        return Err(format!(
            "{done} statements acknowledged{}, but views a and b hold {} (a: {} rows, b: {:?} rows)",
            match ending {
                Ending::Finished => " and the child finished",
                Ending::Killed => " before the kill",
                Ending::Failed { .. } => " before one failed",
            },
            match found {
                Some(n) => format!("the state after statement {n}"),
                None => "no committed state".into(),
            },
            state.0.len(),
            state.1.as_ref().map(Vec::len),
        ));
    }
    // A killed writer's lease protects its leftovers until it expires.
    if catalog
        .files()
        .await
        .iter()
        .any(|f| f.starts_with("_matview/leases/"))
    {
        tokio::time::sleep(CRASH_LEASE_TTL).await;
    }
    s.sql("VACUUM MATERIALIZED VIEWS")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut expected: BTreeSet<String> = BTreeSet::new();
    for state in s.catalog().views().await.unwrap() {
        let view = &state.view;
        if let Some(snapshot) = &view.snapshot {
            expected.extend(snapshot.files.iter().map(|f| f.path.clone()));
            // Each directory the snapshot uses has its marker (an
            // incremental refresh reuses the files of the one before).
            for dir in view.data_dirs() {
                expected.insert(format!("{dir}/_snapshot.json"));
            }
        }
    }
    let data: BTreeSet<String> = catalog
        .files()
        .await
        .into_iter()
        .filter(|f| !f.starts_with("_matview/"))
        .collect();
    if data != expected {
        return Err(format!(
            "after cleanup, leftover {:?}, missing {:?}",
            data.difference(&expected).collect::<Vec<_>>(),
            expected.difference(&data).collect::<Vec<_>>()
        ));
    }
    // The view still refreshes.
    s.sql("REFRESH MATERIALIZED VIEW a")
        .await
        .map_err(|e| format!("refresh after crash failed: {e}"))?;
    Ok(())
}

/// Runs one crash trial: whether the child stopped early (killed, or
/// stopped by a failed statement) rather than finished, and if it
/// finished, how many writes it made.
async fn crash_trial(
    s3: bool,
    fault: Option<&str>,
    kill_after: Option<Duration>,
) -> Result<Trial, String> {
    let dir = tempfile::tempdir().unwrap();
    let (source, catalog) = crash_setup(dir.path(), s3).await;
    let mut vars = vec![
        ("DFMV_CHILD", "crash".to_string()),
        ("DFMV_CATALOG", catalog.location.clone()),
        ("DFMV_SOURCE", source.display().to_string()),
    ];
    if let Some(f) = fault {
        vars.push(("DFMV_FAULT", f.to_string()));
    }
    let mut process = spawn_child(&vars)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The child writes a few lines: read them on threads so it never blocks.
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            use std::io::Read as _;
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = read(process.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(process.stderr.take().map(|p| Box::new(p) as _));
    let status = match kill_after {
        Some(delay) => {
            let deadline = Instant::now() + delay;
            loop {
                if let Some(status) = process.try_wait().unwrap() {
                    break status;
                }
                if Instant::now() >= deadline {
                    process.kill().unwrap();
                    break process.wait().unwrap();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        None => process.wait().unwrap(),
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    // Killed means SIGKILL; exit code 3 a statement that failed with the
    // injected error; a panic or any other exit is a failure of the test.
    use std::os::unix::process::ExitStatusExt;
    let failure = stdout.lines().find_map(|l| l.split("FAILED ").nth(1));
    let ending = match (status.signal(), status.code(), failure) {
        (Some(9), _, _) => Ending::Killed,
        (_, Some(0), None) => Ending::Finished,
        (_, Some(3), Some(failure)) if failure.contains("injected failure") => Ending::Failed {
            may_have_landed: failure.contains("may have landed"),
        },
        _ => return Err(format!("the child failed ({status}):\n{stdout}\n{stderr}")),
    };
    check_after_crash(&catalog, &source, last_ack(&stdout), ending)
        .await
        .map_err(|e| format!("{e}\nthe child printed:\n{stdout}"))?;
    // A child that finished prints how many writes it made.
    let writes = (ending == Ending::Finished)
        .then(|| {
            stdout
                .lines()
                .find_map(|l| l.split("WRITES ").nth(1)?.trim().parse().ok())
        })
        .flatten();
    Ok(Trial {
        stopped: ending != Ending::Finished,
        writes,
    })
}

/// What the child of a crash trial did.
struct Trial {
    /// It was killed, or stopped by a failed statement, before its end.
    stopped: bool,
    /// When it finished: how many writes it made.
    writes: Option<u64>,
}

/// Runs the scenario once without faults: its number of writes and how
/// long the child process takes.
fn measure_scenario(s3: bool) -> (u64, Duration) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (source, catalog) = rt.block_on(crash_setup(dir.path(), s3));
    let started = Instant::now();
    let out = spawn_child(&[
        ("DFMV_CHILD", "crash".to_string()),
        ("DFMV_CATALOG", catalog.location.clone()),
        ("DFMV_SOURCE", source.display().to_string()),
    ])
    .output()
    .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let writes = stdout
        .lines()
        .find_map(|l| l.split("WRITES ").nth(1))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no write count in {stdout}"));
    (writes, took)
}

/// A small deterministic pseudo-random sequence (the seed is printed).
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Kills the scenario's child at random times within its usual run time.
fn random_kills(s3: bool, trials: u64, scenario: Duration) {
    let seed = std::env::var("DFMV_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("random kills: {trials} trials, DFMV_CRASH_SEED={seed}");
    let mut state = seed;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut killed = 0;
    for trial in 0..trials {
        let range = scenario.as_millis() as u64 + 1;
        let delay = Duration::from_millis(next_random(&mut state) % range);
        match rt.block_on(crash_trial(s3, None, Some(delay))) {
            Ok(trial) => killed += u64::from(trial.stopped),
            Err(e) => panic!("trial {trial} (kill after {delay:?}, DFMV_CRASH_SEED={seed}): {e}"),
        }
    }
    println!("random kills: {killed} of {trials} children killed mid-scenario, no data lost");
}

/// Kills the scenario's child before and after each of its writes, fails
/// each write before and after it reached the store, then kills it at
/// random times; checks the catalog after every one.
fn sigkill_at_every_write(s3: bool) {
    let (writes, took) = measure_scenario(s3);
    assert!(writes >= 10, "the scenario makes {writes} writes");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The number of writes varies a little between runs (DataFusion's
    // writer may split a result into more or fewer files), so the last few
    // points may fall after a run's final write and never be met: a child
    // that finished in fewer writes than a point's is not counted.
    let (mut points, mut stopped, mut not_met) = (0, 0, 0);
    for n in 1..=writes {
        for when in ["kill-before", "kill-after", "error-before", "error-after"] {
            let fault = format!("{when}:{n}");
            match rt.block_on(crash_trial(s3, Some(&fault), None)) {
                Ok(Trial {
                    writes: Some(made), ..
                }) if made < n => not_met += 1,
                Ok(trial) => {
                    stopped += u64::from(trial.stopped);
                    points += 1;
                }
                Err(e) => panic!("{fault}: {e}"),
            }
        }
    }
    // A failure after a write reached the store may be a commit that
    // landed (the statement then succeeds), or a pointer write that is
    // best effort: most points met, not all, stop the child.
    assert!(
        stopped * 10 >= points * 6,
        "only {stopped} of {points} fault points met stopped the child"
    );
    let store = if s3 { "S3" } else { "local folder" };
    println!(
        "deterministic faults ({store}): {points} fault points met (kill or fail each of {writes} writes, before and after it reached the store; {not_met} after a run's last write), {stopped} children stopped early, no acknowledged commit lost"
    );
    random_kills(s3, trials_from_env(10), took);
}

fn trials_from_env(default: u64) -> u64 {
    std::env::var("DFMV_CRASH_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

#[test]
fn sigkill_at_every_write_loses_nothing() {
    sigkill_at_every_write(false);
}

#[test]
fn sigkill_at_every_write_loses_nothing_on_s3() {
    if Target::s3().is_some() {
        sigkill_at_every_write(true);
    }
}

#[test]
#[ignore = "long: DFMV_CRASH_TRIALS=500 cargo test --release --test reliability -- --ignored --nocapture"]
fn sigkill_at_random_times_long() {
    let (_, took) = measure_scenario(false);
    random_kills(false, trials_from_env(200), took);
    if Target::s3().is_some() {
        let (_, took) = measure_scenario(true);
        random_kills(true, trials_from_env(200), took);
    }
}

// ---- failed writes ---------------------------------------------------------

/// In `s`: table `t` (1, 2), view `v` over it, then 3 appended to `t`
/// (`v` is stale).
async fn stale_view(s: &MatviewSession) {
    s.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2)")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT x FROM t")
        .await
        .unwrap();
    s.sql("INSERT INTO t VALUES (3)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    // The pointer to the view log's latest version, which CREATE's commit
    // writes in the background, is written before the next load of the
    // log returns: a read of `v` now, so that it is not the first write a
    // test's fault meets (on a loaded machine it could be, and the
    // refresh then met no fault at all).
    values(s, "SELECT x FROM v ORDER BY x").await;
}

/// Fails each write of a refresh in turn, `after` it reached the store or
/// before: a refresh that reports an error leaves the old data, readable;
/// one that reports success has the new data; and what failed attempts
/// wrote is swept.
async fn failed_writes(target: &Target, after: bool) {
    let (s, store) = open_instrumented(target, Duration::from_secs(3600)).await;
    stale_view(&s).await;
    let mut n = 1;
    let mut failures = 0;
    loop {
        store.set_fault(Some(Fault {
            at_write: n,
            after,
            action: FaultAction::Error,
        }));
        let result = s.sql("REFRESH MATERIALIZED VIEW v").await;
        store.set_fault(None);
        // The view is readable whatever happened: no committed file was
        // deleted (a commit whose put failed after landing is its own).
        let now = values(&s, "SELECT x FROM v ORDER BY x").await;
        match result {
            Err(e) => {
                failures += 1;
                assert!(e.to_string().contains("injected failure"), "write {n}: {e}");
                assert_eq!(now, [1, 2], "write {n}: a failed refresh changed the data");
            }
            Ok(_) => {
                // The fault hit the commit after it landed, or a write after
                // it (pointer, cleanup): the refresh took effect.
                assert_eq!(now, [1, 2, 3]);
                break;
            }
        }
        n += 1;
        assert!(n < 100, "a refresh should not make 100 writes");
    }
    assert!(
        failures >= 3,
        "only {failures} writes failed before the commit"
    );
    // Whatever the failed attempts wrote is removed (a commit whose
    // outcome is unknown keeps its files leased until the lease expires).
    tokio::time::sleep(CRASH_LEASE_TTL).await;
    s.sql("VACUUM MATERIALIZED VIEWS").await.unwrap();
    let s2 = open(target, Duration::ZERO).await;
    s2.sql("VACUUM MATERIALIZED VIEWS").await.unwrap();
    let views = s2.catalog().views().await.unwrap();
    let snapshot = views[0].view.snapshot.as_ref().unwrap();
    let dirs: BTreeSet<String> = target
        .files()
        .await
        .into_iter()
        .filter(|f| f.ends_with(".parquet"))
        .map(|f| f.rsplit_once('/').unwrap().0.to_string())
        .collect();
    assert_eq!(dirs, BTreeSet::from([views[0].view.snapshot_dir(snapshot)]));
}

#[tokio::test]
async fn a_failed_write_anywhere_in_a_refresh_keeps_the_old_data() {
    let dir = tempfile::tempdir().unwrap();
    failed_writes(&Target::local(&dir.path().join("before")), false).await;
    failed_writes(&Target::local(&dir.path().join("after")), true).await;
}

#[tokio::test]
async fn a_failed_write_anywhere_in_a_refresh_keeps_the_old_data_on_s3() {
    if let Some(target) = Target::s3() {
        failed_writes(&target, false).await;
    }
    if let Some(target) = Target::s3() {
        failed_writes(&target, true).await;
    }
}

// ---- writes in progress ----------------------------------------------------

/// Runs `sql` in `s` in a task of its own (to be held mid-way).
fn spawn_sql(
    s: &Arc<MatviewSession>,
    sql: &'static str,
) -> tokio::task::JoinHandle<Result<(), Error>> {
    let s = Arc::clone(s);
    tokio::spawn(async move { s.sql(sql).await.map(|_| ()) })
}

/// The Parquet files under the target that are not in `before`, as soon
/// as there is one (a write part running beside a held one may be late).
async fn new_parquet_files(target: &Target, before: &BTreeSet<String>) -> Vec<String> {
    let mut written = vec![];
    for _ in 0..500 {
        written = target
            .files()
            .await
            .difference(before)
            .filter(|f| f.ends_with(".parquet"))
            .cloned()
            .collect();
        if !written.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    written
}

impl Target {
    /// The object path of `relative` (to the catalog root).
    fn object(&self, relative: &str) -> ObjectPath {
        self.root
            .parts()
            .chain(ObjectPath::from(relative).parts())
            .collect()
    }
}

/// A REFRESH and a CREATE, each paused before it commits for longer than
/// its lease lasts without renewal, while another process with a zero
/// retention window runs VACUUM: their files and the new view's log stay
/// (the lease, renewed, names them), and both commit complete views.
async fn in_flight_writes_survive_vacuum(target: &Target) {
    let (a, store) = open_instrumented(target, Duration::from_secs(3600)).await;
    a.catalog().set_lease_ttl(Duration::from_millis(300));
    stale_view(&a).await;
    let b = open(target, Duration::ZERO).await;
    let a = Arc::new(a);

    // The refresh has written its data files; its marker waits.
    let hold = store.hold_next_put(datafusion_matview::spec::SNAPSHOT_MARKER);
    let refresh = spawn_sql(&a, "REFRESH MATERIALIZED VIEW v");
    hold.reached().await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    b.sql("VACUUM MATERIALIZED VIEWS").await.unwrap();
    hold.release();
    refresh.await.unwrap().unwrap();

    // The CREATE has written its data and its view log; the index commit
    // that names them waits.
    let next = format!("{:020}.json", a.catalog().index().version + 1);
    let hold = store.hold_next_put(&next);
    let create = spawn_sql(
        &a,
        "CREATE MATERIALIZED VIEW w AS SELECT x * 10 AS y FROM t",
    );
    hold.reached().await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    b.sql("VACUUM MATERIALIZED VIEWS").await.unwrap();
    hold.release();
    create.await.unwrap().unwrap();

    let fresh = open(target, Duration::from_secs(3600)).await;
    assert_eq!(
        values(&fresh, "SELECT x FROM v ORDER BY x").await,
        [1, 2, 3]
    );
    assert_eq!(
        values(&fresh, "SELECT y FROM w ORDER BY y").await,
        [10, 20, 30]
    );
    // Committed writes give their leases back.
    let leases: Vec<String> = target
        .files()
        .await
        .into_iter()
        .filter(|f| f.starts_with("_matview/leases/"))
        .collect();
    assert!(leases.is_empty(), "{leases:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_longer_than_the_retention_window_is_never_swept() {
    let dir = tempfile::tempdir().unwrap();
    in_flight_writes_survive_vacuum(&Target::local(dir.path())).await;
    if let Some(target) = Target::s3() {
        in_flight_writes_survive_vacuum(&target).await;
    }
}

/// A file of the new snapshot removed behind the writer's back (by a
/// program, or a cleanup while the writer was stalled past its lease) is
/// found before the commit: the refresh fails and the old data stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_whose_files_vanished_before_its_commit_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let target = Target::local(dir.path());
    let (a, store) = open_instrumented(&target, Duration::from_secs(3600)).await;
    stale_view(&a).await;
    let before = target.files().await;
    let a = Arc::new(a);
    let hold = store.hold_next_put(datafusion_matview::spec::SNAPSHOT_MARKER);
    let refresh = spawn_sql(&a, "REFRESH MATERIALIZED VIEW v");
    hold.reached().await;
    let written = new_parquet_files(&target, &before).await;
    assert!(!written.is_empty());
    for file in &written {
        target.store.delete(&target.object(file)).await.unwrap();
    }
    hold.release();
    let err = refresh.await.unwrap().unwrap_err().to_string();
    assert!(
        err.contains("changed before the commit") && err.contains("it is gone"),
        "{err}"
    );
    let fresh = open(&target, Duration::from_secs(3600)).await;
    assert_eq!(values(&fresh, "SELECT x FROM v ORDER BY x").await, [1, 2]);
}

/// A write part's task that ran twice (an executor declared lost that was
/// still alive) while another part's file went missing leaves the right
/// total of rows but the wrong rows: each part's files are checked against
/// the rows that part wrote, and nothing is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_written_twice_is_refused_even_when_the_total_matches() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("src");
    std::fs::create_dir_all(&source).unwrap();
    write_csv(&source.join("a.csv"), 1..=3);
    write_csv(&source.join("b.csv"), 4..=6);
    let target = Target::local(&dir.path().join("cat"));
    let (a, store) = open_instrumented(&target, Duration::from_secs(3600)).await;
    a.sql(&source_sql(&source)).await.unwrap();
    a.sql("CREATE MATERIALIZED VIEW v AS SELECT x FROM t")
        .await
        .unwrap();
    let before = target.files().await;
    let a = Arc::new(a);
    // Parts run one after the other here (small input): hold the second
    // part's file, then lose it, while the first part's file appears twice.
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hold = store.hold_next_put_where({
        let seen = Arc::clone(&seen);
        move |path| {
            path.filename().is_some_and(|f| f.ends_with(".parquet"))
                && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1
        }
    });
    let refresh = spawn_sql(&a, "REFRESH MATERIALIZED VIEW v FULL");
    hold.reached().await;
    let written = new_parquet_files(&target, &before).await;
    assert_eq!(written.len(), 1, "{written:?}");
    let twice = written[0].replace(".parquet", "-again.parquet");
    let bytes = target.store.get(&target.object(&written[0])).await.unwrap();
    let bytes = bytes.bytes().await.unwrap();
    target
        .store
        .put(&target.object(&twice), bytes.into())
        .await
        .unwrap();
    hold.release_lost();
    let err = refresh.await.unwrap().unwrap_err().to_string();
    assert!(
        err.contains("ran twice") && err.contains("nothing was committed"),
        "{err}"
    );
    let fresh = open(&target, Duration::from_secs(3600)).await;
    assert_eq!(
        values(&fresh, "SELECT x FROM v ORDER BY x").await,
        [1, 2, 3, 4, 5, 6]
    );
}

/// A commit whose conditional put timed out and is not there when read
/// back may still land (a server applies a request after the client gave
/// up): the refresh says its outcome is unknown (typed), keeps its files,
/// and once the put lands every reader, this session's next commit
/// included, sees the view it committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_may_still_land_is_reported_unknown_and_its_files_kept() {
    // A remote-like store: a failed put there proves nothing.
    let target = Target {
        location: "s3://late/cat".into(),
        url: url::Url::parse("s3://late").unwrap(),
        store: Arc::new(object_store::memory::InMemory::new()),
        root: ObjectPath::from("cat"),
    };
    let (a, store) = open_instrumented(&target, Duration::from_secs(3600)).await;
    stale_view(&a).await;
    let mut n = 1;
    let unknown = loop {
        store.set_fault(Some(Fault {
            at_write: n,
            after: false,
            action: FaultAction::Late,
        }));
        let result = a.sql("REFRESH MATERIALIZED VIEW v FULL").await;
        store.set_fault(None);
        // Whatever failed lands now, before the next attempt.
        tokio::time::sleep(datafusion_matview_testing::LATE_PUT_DELAY * 2).await;
        match result {
            Err(e @ Error::CommitOutcomeUnknown { .. }) => break e,
            Err(Error::RefreshFailed { source, .. })
                if matches!(*source, Error::CommitOutcomeUnknown { .. }) =>
            {
                break *source;
            }
            Err(e) => {
                assert!(!e.to_string().contains("may have landed"), "write {n}: {e}");
                let now = values(&a, "SELECT x FROM v ORDER BY x").await;
                assert_eq!(now, [1, 2], "write {n}: a failed refresh changed the data");
            }
            Ok(_) => panic!("no write of the refresh was its commit ({n} tried)"),
        }
        n += 1;
        assert!(n < 100, "a refresh should not make 100 writes");
    };
    assert_eq!(
        unknown.code(),
        datafusion_matview::ErrorCode::TransactionResolutionUnknown
    );
    assert!(unknown.to_string().contains("may have landed"), "{unknown}");
    // It landed late: a new reader sees the refreshed view, whose files
    // were kept, and so does this session's next commit.
    let fresh = open(&target, Duration::from_secs(3600)).await;
    assert_eq!(
        values(&fresh, "SELECT x FROM v ORDER BY x").await,
        [1, 2, 3]
    );
    a.sql("INSERT INTO t VALUES (4)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    a.sql("REFRESH MATERIALIZED VIEW v FULL").await.unwrap();
    let fresh = open(&target, Duration::from_secs(3600)).await;
    assert_eq!(
        values(&fresh, "SELECT x FROM v ORDER BY x").await,
        [1, 2, 3, 4]
    );
}

// ---- concurrent processes --------------------------------------------------

/// A worker process: refreshes the shared view and creates and drops its own.
async fn worker(catalog: &Target) {
    let id: usize = std::env::var("DFMV_WORKER").unwrap().parse().unwrap();
    let rounds: usize = std::env::var("DFMV_ROUNDS").unwrap().parse().unwrap();
    let s = open(catalog, Duration::from_secs(3600)).await;
    let (mut refreshed, mut conflicts) = (0, 0);
    for round in 0..rounds {
        match s.sql("REFRESH MATERIALIZED VIEW shared").await {
            Ok(_) => refreshed += 1,
            Err(Error::CommitConflict { .. }) => conflicts += 1,
            Err(e) => panic!("worker {id}: unexpected {e}"),
        }
        let own = format!("w{id}_{round}");
        s.sql(&format!(
            "CREATE MATERIALIZED VIEW {own} AS SELECT {id} AS worker, {round} AS round"
        ))
        .await
        .unwrap();
        assert_eq!(
            values(&s, &format!("SELECT worker FROM {own}")).await,
            [id as i64]
        );
        if round % 2 == 1 {
            s.sql(&format!("DROP MATERIALIZED VIEW {own}"))
                .await
                .unwrap();
        }
    }
    println!("REFRESHED {refreshed} CONFLICTS {conflicts}");
}

/// Several processes refresh one view and create and drop their own, all
/// at once, against one catalog.
fn concurrent_processes(catalog: &Target) {
    let (workers, rounds) = (4, 6);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let s = open(catalog, Duration::from_secs(3600)).await;
        s.sql(
            "CREATE MATERIALIZED VIEW shared AS SELECT value AS x FROM generate_series(1, 20000)",
        )
        .await
        .unwrap();
    });
    let handles: Vec<_> = (0..workers)
        .map(|id| {
            spawn_child(&[
                ("DFMV_CHILD", "worker".to_string()),
                ("DFMV_CATALOG", catalog.location.clone()),
                ("DFMV_WORKER", id.to_string()),
                ("DFMV_ROUNDS", rounds.to_string()),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut refreshed = 0;
    for handle in handles {
        let out = handle.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let counts = stdout.split("REFRESHED ").nth(1).unwrap();
        refreshed += counts
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<usize>()
            .unwrap();
    }
    rt.block_on(async {
        let s = open(catalog, Duration::from_secs(3600)).await;
        // Every worker's views: odd rounds dropped, even rounds kept.
        let names: BTreeSet<String> = s
            .catalog()
            .index()
            .views
            .keys()
            .map(|name| name.name.clone())
            .collect();
        for id in 0..workers {
            for round in 0..rounds {
                assert_eq!(
                    names.contains(&format!("w{id}_{round}")),
                    round % 2 == 0,
                    "w{id}_{round}"
                );
            }
        }
        assert_eq!(values(&s, "SELECT count(*) FROM shared").await, [20000]);
        // Each successful refresh retired exactly one snapshot: none landed
        // twice, none was lost.
        let shared = common::view(&s, "shared").await;
        let shared = &shared.view;
        let retired_shared = common::retired_snapshots(&s, "shared").await;
        assert_eq!(retired_shared, refreshed);
        // Losers removed their files: the only snapshot directories of the
        // shared view are the committed ones (retired or current).
        let on_disk: BTreeSet<String> = catalog
            .files()
            .await
            .into_iter()
            .filter(|f| f.starts_with(&format!("{}/", shared.dir)))
            .map(|f| f.rsplit_once('/').unwrap().0.to_string())
            .collect();
        assert_eq!(on_disk.len(), retired_shared + 1);
    });
    println!(
        "concurrency ({}): {workers} processes x {rounds} rounds, {refreshed} concurrent refreshes landed",
        catalog.location
    );
}

#[test]
fn concurrent_processes_never_lose_or_double_commit() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_processes(&Target::local(&dir.path().join("catalog")));
}

#[test]
fn concurrent_processes_never_lose_or_double_commit_on_s3() {
    if let Some(target) = Target::s3() {
        concurrent_processes(&target);
    }
}

// ---- bad state and recovery -----------------------------------------------

#[tokio::test]
async fn a_corrupt_or_lost_log_is_named_and_rebuilt_from_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog");
    let location = catalog.display().to_string();
    {
        let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
        s.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2)")
            .await
            .unwrap();
        s.sql("CREATE MATERIALIZED VIEW a AS SELECT x FROM t")
            .await
            .unwrap();
        s.sql("CREATE MATERIALIZED VIEW later AS SELECT x FROM t WITH NO DATA")
            .await
            .unwrap();
        s.sql("INSERT INTO t VALUES (3)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        s.sql("REFRESH MATERIALIZED VIEW a").await.unwrap();
        s.sql("CREATE MATERIALIZED VIEW gone AS SELECT 1 AS x")
            .await
            .unwrap();
        s.sql("DROP MATERIALIZED VIEW gone").await.unwrap();
        // The version that will be lost.
        s.sql("INSERT INTO t VALUES (4)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        s.sql("REFRESH MATERIALIZED VIEW a").await.unwrap();
    }
    let log = catalog.join("_matview/log");
    let latest = files_under(&log).into_iter().max().unwrap();
    // The index truncated: the error names the file and says what to do.
    let text = std::fs::read_to_string(log.join(&latest)).unwrap();
    std::fs::write(log.join(&latest), &text[..text.len() / 2]).unwrap();
    let err = MatviewSession::open(SessionContext::new(), &location)
        .await
        .unwrap_err()
        .to_string();
    // The whole path, as the user knows it, and what to run.
    let absolute = std::fs::canonicalize(&catalog).unwrap();
    assert!(
        err.contains(&format!(
            "manifest {}/_matview/log/{latest} is unreadable",
            absolute.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("HINT:") && err.contains("dfmv recover"),
        "{err}"
    );
    // From a newer format: named too.
    let newer = datafusion_matview::spec::MANIFEST_FORMAT + 1;
    std::fs::write(
        log.join(&latest),
        format!(r#"{{"format_version": {newer}}}"#),
    )
    .unwrap();
    let err = MatviewSession::open(SessionContext::new(), &location)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedFormat { found, .. } if found == newer),
        "{err}"
    );

    std::fs::write(log.join(&latest), &text).unwrap();
    // The last refresh of `a` lost: its log's latest version truncated.
    // Opening reads no view's log; a query of `a` names the file.
    let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    let slot = log_slot(&s, "a");
    let a_log = catalog.join("_matview/views").join(&slot);
    let a_latest = files_under(&a_log)
        .into_iter()
        .filter(|f| f != "_latest.json")
        .max()
        .unwrap();
    let a_text = std::fs::read_to_string(a_log.join(&a_latest)).unwrap();
    std::fs::write(a_log.join(&a_latest), &a_text[..a_text.len() / 2]).unwrap();
    let err = s.sql("SELECT * FROM a").await.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "manifest {}/_matview/views/{slot}/{a_latest} is unreadable",
            absolute.display()
        )),
        "{err}"
    );
    drop(s);

    // The newest readable version knows the views (and that `gone` was
    // dropped); the lost refresh of `a` is found from its snapshot marker.
    let report = MatviewSession::recover(&SessionContext::new(), &location)
        .await
        .unwrap();
    assert_eq!(
        report.views,
        [
            "datafusion.public.a (4 rows)",
            "datafusion.public.later (0 rows)"
        ]
    );
    let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    assert_eq!(values(&s, "SELECT x FROM a ORDER BY x").await, [1, 2, 3, 4]);
    assert!(matches!(
        s.sql("SELECT * FROM later").await.unwrap_err(),
        Error::NotPopulated { .. }
    ));
    assert!(
        s.sql("SELECT * FROM gone").await.is_err(),
        "a dropped view came back"
    );
    // Readable again: a second recover changes nothing.
    let version = s.catalog().index().version;
    let err = MatviewSession::recover(&SessionContext::new(), &location)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NothingToRecover { version: v, .. } if v == version),
        "{err}"
    );
    assert_eq!(
        open(&Target::local(&catalog), Duration::from_secs(3600))
            .await
            .catalog()
            .index()
            .version,
        version
    );
    // A location with no catalog at all (a typo) is not made one.
    let typo = dir.path().join("catalgo");
    let err = MatviewSession::recover(&SessionContext::new(), &typo.display().to_string())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoCatalogData { .. }), "{err}");
    assert!(!typo.join("_matview").exists());

    // A version missing in the middle of the log: opening names it and
    // refuses, so nothing is committed where a later version hides it.
    s.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2), (3), (4)")
        .await
        .unwrap();
    s.sql("REFRESH MATERIALIZED VIEW later").await.unwrap();
    s.sql("REFRESH MATERIALIZED VIEW a FULL").await.unwrap();
    // Two index versions after the recovery's.
    s.sql("CREATE MATERIALIZED VIEW g1 AS SELECT 1 AS x")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW g2 AS SELECT 2 AS x")
        .await
        .unwrap();
    // (Waits for the session's own pointer write.)
    s.catalog().reload().await.unwrap();
    let versions: Vec<String> = files_under(&log).into_iter().collect();
    let middle = &versions[versions.len() - 2];
    std::fs::remove_file(log.join(middle)).unwrap();
    // The latest-version pointer lags (it is written in the background and
    // may be a few versions behind): it names the version before the gap.
    let before: u64 = versions[versions.len() - 3]
        .trim_end_matches(".json")
        .parse()
        .unwrap();
    std::fs::write(
        catalog.join("_matview/_latest.json"),
        format!(r#"{{"version":{before}}}"#),
    )
    .unwrap();
    let err = MatviewSession::open(SessionContext::new(), &location)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LogGap { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "{}/_matview/log/{middle} is missing",
            absolute.display()
        )) && message.contains("dfmv recover"),
        "{message}"
    );
    drop(s);
    let report = MatviewSession::recover(&SessionContext::new(), &location)
        .await
        .unwrap();
    assert!(report.lost.is_empty(), "{report:?}");
    let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    assert_eq!(
        values(&s, "SELECT x FROM later ORDER BY x").await,
        [1, 2, 3, 4]
    );

    // The whole log lost: the data alone rebuilds the populated views
    // (with no log to say otherwise, a dropped view whose data is still
    // within the retention window comes back too).
    std::fs::remove_dir_all(catalog.join("_matview")).unwrap();
    let report = MatviewSession::recover(&SessionContext::new(), &location)
        .await
        .unwrap();
    assert!(
        report
            .views
            .contains(&"datafusion.public.a (4 rows)".to_string()),
        "{report:?}"
    );
    // What it could not rebuild is said.
    assert!(
        report.lost.iter().any(|l| l.contains("remembered")),
        "{report:?}"
    );
    let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    assert_eq!(values(&s, "SELECT x FROM a ORDER BY x").await, [1, 2, 3, 4]);
}

#[tokio::test]
async fn a_missing_data_file_is_named_and_other_views_stay_usable() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog");
    let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    s.sql("CREATE MATERIALIZED VIEW a AS SELECT 1 AS x")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW b AS SELECT 2 AS x")
        .await
        .unwrap();
    let views = s.catalog().views().await.unwrap();
    let file = &views[0].view.snapshot.as_ref().unwrap().files[0].path;
    std::fs::remove_file(catalog.join(file)).unwrap();
    let err = s
        .sql("SELECT * FROM a")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(file.rsplit('/').next().unwrap()), "{err}");
    assert_eq!(values(&s, "SELECT x FROM b").await, [2]);
}

#[tokio::test]
async fn another_process_commits_are_seen_without_listing() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog");
    let (reader, store) =
        open_instrumented(&Target::local(&catalog), Duration::from_secs(3600)).await;
    let writer = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    for i in 0..300 {
        writer
            .sql(&format!(
                "CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT {i} AS x"
            ))
            .await
            .unwrap();
    }
    // A long-lived session sees the latest version at its next statement.
    assert_eq!(values(&reader, "SELECT x FROM v").await, [299]);
    writer
        .sql("CREATE MATERIALIZED VIEW w AS SELECT 7 AS x")
        .await
        .unwrap();
    assert_eq!(values(&reader, "SELECT x FROM w").await, [7]);
    writer.sql("DROP MATERIALIZED VIEW w").await.unwrap();
    assert!(reader.sql("SELECT x FROM w").await.is_err());
    // Opening after hundreds of commits reads a pointer, probes, makes one
    // LIST that starts after the latest version (a gap in the log would
    // show there), and reads the newest checkpoint and the index versions
    // after it (at most CHECKPOINT_INTERVAL); no view's log. HEADs: the
    // pointer's version and the next (the probe), then the session's first
    // check (the next version and the loaded one).
    use std::sync::atomic::Ordering::SeqCst;
    let lists = store.counters().lists.load(SeqCst);
    let (gets, heads) = (
        store.counters().gets.load(SeqCst),
        store.counters().heads.load(SeqCst),
    );
    let ctx = SessionContext::new();
    ctx.register_object_store(
        &url::Url::parse("file://").unwrap(),
        Arc::new(store.clone()),
    );
    let again = MatviewSession::open(ctx, &catalog.display().to_string())
        .await
        .unwrap();
    assert_eq!(again.catalog().index().views.len(), 1);
    assert_eq!(store.counters().lists.load(SeqCst), lists + 1);
    let read = store.counters().gets.load(SeqCst) - gets;
    assert!(
        read <= 2 + datafusion_matview::catalog::CHECKPOINT_INTERVAL,
        "{read} reads"
    );
    let probed = store.counters().heads.load(SeqCst) - heads;
    assert!(probed <= 4, "{probed} HEAD requests");
}

/// The writer of the readers test, in its own process: replaces view `v`,
/// drops it and vacuums.
async fn replace_and_drop(target: &Target) {
    let writer = open(target, Duration::from_secs(3600)).await;
    for sql in [
        "CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT 1 AS x",
        "DROP MATERIALIZED VIEW v",
        "VACUUM MATERIALIZED VIEWS",
    ] {
        writer.sql(sql).await.unwrap().collect().await.unwrap();
    }
}

/// A query planned against a snapshot finishes reading it after another
/// process replaced the view, dropped it and vacuumed.
async fn a_reader_keeps_its_snapshot(target: &Target) {
    let reader = open(target, Duration::from_secs(3600)).await;
    reader
        .sql("CREATE MATERIALIZED VIEW v AS SELECT value AS x FROM generate_series(1, 1000)")
        .await
        .unwrap();
    // Planned against the first snapshot...
    let df = reader.sql("SELECT sum(x) FROM v").await.unwrap();
    let task = Arc::new(df.task_ctx());
    let planned = df.create_physical_plan().await.unwrap();
    // ...which another process replaces and drops meanwhile.
    let out = spawn_child(&[
        ("DFMV_CHILD", "replace".to_string()),
        ("DFMV_CATALOG", target.location.clone()),
    ])
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(reader.catalog().reload().await.unwrap().views.is_empty());
    let batches = datafusion::physical_plan::collect(planned, task)
        .await
        .unwrap();
    assert_eq!(
        batches[0].column(0).as_primitive::<Int64Type>().value(0),
        500500
    );
    assert!(!batches[0].column(0).is_null(0));
}

#[tokio::test]
async fn a_reader_keeps_its_snapshot_while_another_process_refreshes() {
    let dir = tempfile::tempdir().unwrap();
    a_reader_keeps_its_snapshot(&Target::local(&dir.path().join("catalog"))).await;
}

#[tokio::test]
async fn a_reader_keeps_its_snapshot_while_another_process_refreshes_on_s3() {
    if let Some(target) = Target::s3() {
        a_reader_keeps_its_snapshot(&target).await;
    }
}

#[tokio::test]
async fn names_that_could_escape_the_root_stay_inside_and_work() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog");
    let long = "v".repeat(300);
    let names = [
        "My View".to_string(),
        "..".to_string(),
        "a/../../b".to_string(),
        "naïve ü".to_string(),
        "it's \"q\"".to_string(),
        "back\\slash:*?<>|%".to_string(),
        long.clone(),
        format!("{long}2"),
    ];
    let quoted = |n: &str| format!("\"{}\"", n.replace('"', "\"\""));
    {
        let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
        for (i, name) in names.iter().enumerate() {
            s.sql(&format!(
                "CREATE MATERIALIZED VIEW {} AS SELECT {i} AS x",
                quoted(name)
            ))
            .await
            .unwrap();
            s.sql(&format!("REFRESH MATERIALIZED VIEW {}", quoted(name)))
                .await
                .unwrap();
        }
    }
    // Nothing was written outside the catalog's folder.
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, ["catalog"]);
    let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            values(&s, &format!("SELECT x FROM {}", quoted(name))).await,
            [i as i64],
            "{name:?}"
        );
        s.sql(&format!("DROP MATERIALIZED VIEW {}", quoted(name)))
            .await
            .unwrap();
    }
    assert!(s.catalog().index().views.is_empty());
    // A control character never reaches a path: the name is refused.
    let err = s
        .sql("CREATE MATERIALIZED VIEW \"tab\tname\" AS SELECT 1 AS x")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("invalid character"), "{err}");
    assert!(s.catalog().index().views.is_empty());
}

#[tokio::test]
async fn a_view_from_a_newer_definition_format_is_queryable_but_not_refreshable() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog");
    {
        let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
        s.sql("CREATE MATERIALIZED VIEW v AS SELECT 1 AS x")
            .await
            .unwrap();
    }
    // Written by a future version: definition format 2 (in the view's log).
    let views = catalog.join("_matview/views");
    let latest = files_under(&views)
        .into_iter()
        .filter(|f| !f.ends_with("_latest.json"))
        .max()
        .unwrap();
    let text = std::fs::read_to_string(views.join(&latest)).unwrap();
    assert!(text.contains("\"format\":1"), "{text}");
    std::fs::write(
        views.join(&latest),
        text.replacen("\"format\":1", "\"format\":2", 1),
    )
    .unwrap();
    let s = open(&Target::local(&catalog), Duration::from_secs(3600)).await;
    assert_eq!(values(&s, "SELECT x FROM v").await, [1]);
    let err = s
        .sql("REFRESH MATERIALIZED VIEW v")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "materialized view \"v\" was defined with definition format 2, but this build reads up to 1: \
         it can be queried but not refreshed\nHINT: Upgrade datafusion-matview to refresh it."
    );
}

/// A view whose log alone was lost (its data and snapshot marker intact)
/// is listed as broken while the others answer, and `recover` brings it
/// back with its data even when the index moved on after its last
/// refresh (issue 29, item 8).
#[tokio::test]
async fn recover_keeps_a_view_whose_log_alone_was_lost() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    let target = Target::local(&catalog);
    let s = open(&target, Duration::from_secs(3600)).await;
    s.sql("CREATE MATERIALIZED VIEW a AS SELECT * FROM (VALUES (1), (2), (3)) AS t(x)")
        .await
        .unwrap();
    // The index moves on after `a`'s snapshot was written.
    s.sql("CREATE MATERIALIZED VIEW b AS SELECT 7 AS x")
        .await
        .unwrap();
    let slot = log_slot(&s, "a");
    s.catalog().reload().await.unwrap();
    drop(s);
    std::fs::remove_dir_all(catalog.join("_matview/views").join(&slot)).unwrap();

    // The listing shows `a` as broken, with why, and `b` as usual.
    let s = open(&target, Duration::from_secs(3600)).await;
    let batches = s
        .sql("SELECT table_name, freshness, error IS NOT NULL FROM materialized_views() ORDER BY table_name")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    assert!(text.contains("| a          | broken    | true"), "{text}");
    assert!(text.contains("| b          | fresh     | false"), "{text}");
    let error = s
        .sql("SELECT error FROM materialized_views() WHERE table_name = 'a'")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let error = error[0].column(0).as_string::<i32>().value(0).to_owned();
    assert!(error.contains("dfmv recover"), "{error}");
    assert!(!error.contains("RECOVER MATERIALIZED VIEWS"), "{error}");
    drop(s);

    let report = MatviewSession::recover(&SessionContext::new(), &target.location)
        .await
        .unwrap();
    assert!(report.lost.is_empty(), "{:?}", report.lost);
    assert_eq!(
        report.views,
        [
            "datafusion.public.a (3 rows)",
            "datafusion.public.b (1 rows)"
        ]
    );
    let s = open(&target, Duration::from_secs(3600)).await;
    assert_eq!(values(&s, "SELECT x FROM a ORDER BY x").await, [1, 2, 3]);
    assert_eq!(values(&s, "SELECT x FROM b").await, [7]);
}
