//! How the catalog's costs grow with the number of views (issues 14 and
//! 35), each measured as a ratio in one run:
//!
//! 1. `REFRESH MATERIALIZED VIEW target FULL` (100 rows) as a new `dfmv`
//!    process (the release binary, as a script or cron job runs it) in a
//!    catalog of 10,000 views against the same in a catalog holding only
//!    that view, with the metadata bytes each commit writes;
//! 2. a new `dfmv` process opening the catalog and running `SELECT 1`,
//!    10,000 views against 1;
//! 3. a new `dfmv` process describing one view (`\dm target`), 10,000
//!    views against 1;
//! 4. 8 processes refreshing their own view 50 times each in one catalog at
//!    once, against one process making the same 400 refreshes in turn
//!    (lost commits and conflicts counted; on the S3 server too when
//!    `DFMV_TEST_S3_ENDPOINT` is set);
//! 5. creating the 10,000 views from one script, against 10,000 times
//!    creating a catalog of one view (both in one process, statement by
//!    statement as `dfmv -f` runs them), and the catalog's metadata files
//!    and bytes per view.
//!
//! Run: `cargo bench --bench catalog_scale`
//! (`DFMV_SCALE_VIEWS` changes 10,000, `DFMV_SCALE_SAMPLES` the 15 samples
//! per timing). The process also runs as one worker of part 4 when
//! `DFMV_SCALE_WORKER` is set.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
#[path = "../src/bin/dfmv/script.rs"]
#[allow(dead_code)]
mod script;
use datafusion_matview::{MatviewOptions, MatviewSession};
use script::ScriptSplitter;

mod common;
use common::{compare_checked, dfmv, env_usize, median, ms};

const TARGET: &str = "CREATE MATERIALIZED VIEW target AS \
    SELECT value AS id, value * 2 AS doubled FROM generate_series(1, 100)";

/// A context that reaches the S3 test server as `s3://<bucket>`.
fn context(s3: Option<&str>) -> SessionContext {
    let ctx = SessionContext::new();
    if let Some(endpoint) = s3 {
        let bucket =
            std::env::var("DFMV_TEST_S3_BUCKET").unwrap_or_else(|_| "dfmv-test".to_owned());
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_bucket_name(&bucket)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .build()
            .expect("an S3 store for the test server");
        ctx.register_object_store(
            &url::Url::parse(&format!("s3://{bucket}")).unwrap(),
            Arc::new(store),
        );
    }
    ctx
}

async fn open(location: &str, s3: Option<&str>) -> MatviewSession {
    let options = MatviewOptions {
        // Nothing expires while measuring: cleanup costs stay out.
        retention: Duration::from_secs(3600),
        ..Default::default()
    };
    MatviewSession::open_with_options(context(s3), location, options)
        .await
        .unwrap()
}

async fn run(s: &MatviewSession, sql: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    s.sql(sql).await.unwrap().collect().await.unwrap()
}

/// The script of `views` CREATE statements (`target` last) and runs it
/// statement by statement in a new session, as `dfmv -f` does: how long
/// (opening included) and how many statements.
async fn create_catalog(location: &Path, views: usize) -> (Duration, usize) {
    let mut script = String::new();
    for i in 0..views.saturating_sub(1) {
        script.push_str(&format!(
            "CREATE MATERIALIZED VIEW v{i:05} AS SELECT {i} AS x, 'view {i}' AS label;\n"
        ));
    }
    script.push_str(TARGET);
    script.push_str(";\n");
    let started = Instant::now();
    let s = open(&location.display().to_string(), None).await;
    let mut splitter = ScriptSplitter::new();
    let mut count = 0;
    for line in script.split_inclusive('\n') {
        if let Some(chunk) = splitter.push_line(line, "generic") {
            run(&s, &chunk.text).await;
            count += 1;
        }
    }
    if let Some(chunk) = splitter.finish() {
        run(&s, &chunk.text).await;
        count += 1;
    }
    (started.elapsed(), count)
}

fn dir_bytes(dir: &Path) -> (u64, usize) {
    let (mut bytes, mut files) = (0, 0);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                let (b, f) = dir_bytes(&path);
                bytes += b;
                files += f;
            } else {
                bytes += path.metadata().unwrap().len();
                files += 1;
            }
        }
    }
    (bytes, files)
}

/// The bytes of the newest version of `target`'s log.
fn last_view_commit_bytes(catalog: &Path, s: &MatviewSession) -> u64 {
    let index = s.catalog().index();
    let entry = index
        .views
        .values()
        .find(|e| e.name.name == "target")
        .unwrap();
    let log = catalog.join("_matview/views").join(&entry.slot);
    let newest = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "_latest.json")
        .max()
        .unwrap();
    newest.metadata().unwrap().len()
}

/// Parts 1 to 3: `sql` as a new `dfmv` process in the small and the large
/// catalog, alternating; `check` sees each output.
fn processes(
    small: &Path,
    large: &Path,
    samples: usize,
    sql: &str,
    check: impl Fn(&str),
) -> (Duration, Duration) {
    compare_checked(samples, || dfmv(small, sql), || dfmv(large, sql), check)
}

/// Part 5's unit: a new catalog of one view, created in a new session
/// (median of `samples`).
async fn one_view_catalog(root: &Path, samples: usize) -> Duration {
    let mut times = vec![];
    for i in 0..samples {
        let (took, count) = create_catalog(&root.join(format!("single-{i}")), 1).await;
        assert_eq!(count, 1);
        times.push(took);
    }
    median(times)
}

/// A worker of part 4: refreshes `view` `rounds` times; prints how many
/// refreshes failed (a conflict reported to the user would be one).
async fn worker(location: &str, views: &[String], rounds: usize, s3: Option<&str>) {
    let s = open(location, s3).await;
    let mut failed = 0;
    for _ in 0..rounds {
        for view in views {
            if let Err(e) = s
                .sql(&format!("REFRESH MATERIALIZED VIEW {view} FULL"))
                .await
            {
                eprintln!("{view}: {e}");
                failed += 1;
            }
        }
    }
    println!("FAILED {failed}");
}

/// Part 4: `procs` processes, each refreshing its own view `rounds` times,
/// against one process refreshing all of them in turn. Returns the two
/// wall times, the failures, and the commits missing from the logs.
async fn concurrent(
    location: &str,
    s3: Option<&str>,
    procs: usize,
    rounds: usize,
) -> (Duration, Duration, usize, u64) {
    let setup = open(location, s3).await;
    let views: Vec<String> = (0..procs).map(|i| format!("p{i}")).collect();
    for view in &views {
        run(
            &setup,
            &format!(
                "CREATE MATERIALIZED VIEW {view} AS SELECT value AS id FROM generate_series(1, 100)"
            ),
        )
        .await;
    }
    let exe = std::env::current_exe().unwrap();
    let spawn = |views: &[String]| {
        let mut cmd = Command::new(&exe);
        cmd.env("DFMV_SCALE_WORKER", location)
            .env("DFMV_SCALE_WORKER_VIEWS", views.join(","))
            .env("DFMV_SCALE_WORKER_ROUNDS", rounds.to_string());
        if let Some(endpoint) = s3 {
            cmd.env("DFMV_SCALE_WORKER_S3", endpoint);
        }
        cmd.stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the bench re-runs itself as a worker")
    };
    let failures = |children: Vec<std::process::Child>| -> usize {
        children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().unwrap();
                assert!(out.status.success());
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .find_map(|l| l.strip_prefix("FAILED ")?.parse::<usize>().ok())
                    .unwrap()
            })
            .sum()
    };
    let started = Instant::now();
    let one = failures(vec![spawn(&views)]);
    let serial = started.elapsed();
    let started = Instant::now();
    let children: Vec<_> = views
        .iter()
        .map(|v| spawn(std::slice::from_ref(v)))
        .collect();
    let many = failures(children);
    let parallel = started.elapsed();
    // Every refresh landed: each view's log has 1 + 2 x rounds versions.
    setup.catalog().reload().await.unwrap();
    let mut missing = 0;
    for state in setup.catalog().views().await.unwrap() {
        missing += (1 + 2 * rounds as u64).saturating_sub(state.version);
    }
    (serial, parallel, one + many, missing)
}

fn main() {
    if let Ok(location) = std::env::var("DFMV_SCALE_WORKER") {
        let views: Vec<String> = std::env::var("DFMV_SCALE_WORKER_VIEWS")
            .unwrap()
            .split(',')
            .map(str::to_owned)
            .collect();
        let rounds = env_usize("DFMV_SCALE_WORKER_ROUNDS", 50);
        let s3 = std::env::var("DFMV_SCALE_WORKER_S3").ok();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(worker(&location, &views, rounds, s3.as_deref()));
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` does not run
    // benches with harness = false unless asked, but never let a test run
    // build 10,000 views.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let views = env_usize("DFMV_SCALE_VIEWS", 10_000);
    let samples = env_usize("DFMV_SCALE_SAMPLES", 15);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = dir.path().to_path_buf();
    rt.block_on(async {
        let (large, one) = (root.join("large"), root.join("one"));
        let (took, statements) = create_catalog(&large, views).await;
        let (metadata, metadata_files) = dir_bytes(&large.join("_matview"));
        let (data, _) = dir_bytes(&large);
        create_catalog(&one, 1).await;
        // One view's definition: its own log as created (its entry: SQL,
        // columns, defaults, sources, its first snapshot; and the log's
        // pointer).
        let (one_definition, _) = dir_bytes(&one.join("_matview/views"));

        println!("== 1. REFRESH FULL of a 100-row view, new dfmv process, 1 view vs {views} views ({samples} samples)");
        let (small_t, large_t) = processes(
            &one,
            &large,
            samples,
            "REFRESH MATERIALIZED VIEW target FULL",
            // The work timed is a full refresh that wrote all 100 rows.
            |out| assert!(out.contains("target,full,") && out.contains(",100,"), "{out}"),
        );
        let (a, b) = (open(&one.display().to_string(), None).await, open(&large.display().to_string(), None).await);
        println!(
            "1 view: {:.2} ms, {} metadata bytes per commit; {views} views: {:.2} ms, {} bytes; ratio {:.2}",
            ms(small_t),
            last_view_commit_bytes(&one, &a),
            ms(large_t),
            last_view_commit_bytes(&large, &b),
            large_t.as_secs_f64() / small_t.as_secs_f64()
        );

        println!("== 2. open + SELECT 1, new dfmv process, 1 view vs {views} views ({samples} samples)");
        let (small_t, large_t) = processes(&one, &large, samples, "SELECT 1", |out| {
            assert_eq!(out, "Int64(1)\n1\n")
        });
        println!(
            "1 view: {:.2} ms; {views} views: {:.2} ms; ratio {:.2}",
            ms(small_t),
            ms(large_t),
            large_t.as_secs_f64() / small_t.as_secs_f64()
        );

        println!("== 3. describe one view (\\dm target), new dfmv process, 1 view vs {views} views ({samples} samples)");
        let (small_t, large_t) = processes(&one, &large, samples, "\\dm target", |out| {
            assert_eq!(out.lines().count(), 2, "a header and the one view: {out}");
            assert!(out.lines().nth(1).unwrap().contains("target"), "{out}");
        });
        println!(
            "1 view: {:.2} ms; {views} views: {:.2} ms; ratio {:.2}",
            ms(small_t),
            ms(large_t),
            large_t.as_secs_f64() / small_t.as_secs_f64()
        );

        // What one view's statement reads of the newest checkpoint, in a
        // new session: its header and the view's block, not every view.
        let s = open(&large.display().to_string(), None).await;
        run(&s, "SELECT count(*) FROM target").await;
        if let Some((read, total)) = s.catalog().index().views.checkpoint_bytes_read() {
            println!("one view's query read {read} of the newest checkpoint's {total} bytes of views");
            assert!(views < 1000 || read * 4 < total, "{read} of {total}");
        }

        println!("== 5. create {views} views from one script vs {views} x a catalog of one view");
        let single = one_view_catalog(&root, samples).await;
        println!(
            "{statements} statements in {:.1} s ({:.2} ms each); one view's catalog {:.2} ms, x {views} = {:.1} s; \
             ratio {:.2}",
            took.as_secs_f64(),
            ms(took) / statements as f64,
            ms(single),
            single.as_secs_f64() * views as f64,
            took.as_secs_f64() / (single.as_secs_f64() * views as f64),
        );
        println!(
            "metadata on disk {} bytes in {} files: {:.0} bytes and {:.2} files per view \
             = {:.2} x (views x one view's log, {} bytes); data and metadata {} bytes",
            metadata,
            metadata_files,
            metadata as f64 / views as f64,
            metadata_files as f64 / views as f64,
            metadata as f64 / (views as f64 * one_definition as f64),
            one_definition,
            data,
        );

        let rounds = env_usize("DFMV_SCALE_ROUNDS", 50);
        let procs = 8;
        let mut targets = vec![(
            "local folder".to_owned(),
            root.join("shared").display().to_string(),
            None,
        )];
        if let Ok(endpoint) = std::env::var("DFMV_TEST_S3_ENDPOINT") {
            let bucket =
                std::env::var("DFMV_TEST_S3_BUCKET").unwrap_or_else(|_| "dfmv-test".to_owned());
            let prefix = uuid::Uuid::new_v4().simple().to_string();
            targets.push((
                "S3 server".to_owned(),
                format!("s3://{bucket}/scale-{prefix}"),
                Some(endpoint),
            ));
        }
        for (what, location, s3) in targets {
            println!("== 4. {procs} processes x {rounds} refreshes, {what}");
            let (serial, parallel, failed, missing) =
                concurrent(&location, s3.as_deref(), procs, rounds).await;
            println!(
                "1 process, {} refreshes in turn: {:.2} s; {procs} processes at once: {:.2} s; \
                 ratio {:.2}; failed refreshes {failed}; lost commits {missing}",
                procs * rounds,
                serial.as_secs_f64(),
                parallel.as_secs_f64(),
                parallel.as_secs_f64() / serial.as_secs_f64()
            );
        }
    });
}
