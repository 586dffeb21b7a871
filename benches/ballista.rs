//! Materialized views on a Ballista cluster against the same views in one
//! process, measured in the same run (feature `ballista`):
//!
//! - `full_refresh`: REFRESH ... FULL of a GROUP BY view in one process,
//!   and on in-process loopback clusters of 1 and 2 executors;
//! - `incremental_refresh`: REFRESH of the same view after appending one
//!   source file (5% of the source), in one process and on the 2-executor
//!   cluster.
//!
//! `cargo bench --features ballista --bench ballista` (2 million source
//! rows; `DFMV_BENCH_ROWS` changes it). Ratios are printed at the end
//! (`ratio` = cluster / one process). On a 2-core machine a cluster
//! cannot be faster: this measures what the cluster's planning, task
//! scheduling and shuffles add.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::SessionContext;
use datafusion_matview::{MatviewOptions, MatviewSession};
use datafusion_matview_ballista::LocalCluster;
use tokio::runtime::Runtime;

mod common;
use common::{criterion_dir, env_usize, mean_ns};

const VIEW: &str = "CREATE MATERIALIZED VIEW v AS SELECT grp, count(*) AS n, sum(amount) AS total, max(id) AS last_id FROM src GROUP BY grp";

/// A session over a new catalog under `dir` with `v` created: in this
/// process, or on a loopback cluster of `executors` executors.
fn session(
    rt: &Runtime,
    dir: &Path,
    name: &str,
    executors: usize,
) -> (MatviewSession, Option<LocalCluster>) {
    rt.block_on(async {
        let runtime = Arc::new(RuntimeEnv::default());
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_runtime_env(Arc::clone(&runtime))
            .build();
        let (ctx, cluster) = if executors == 0 {
            (SessionContext::new_with_state(state), None)
        } else {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            let cluster = LocalCluster::start(runtime, executors, cores.div_ceil(executors))
                .await
                .unwrap();
            (cluster.context(state).await.unwrap(), Some(cluster))
        };
        let options = MatviewOptions {
            retention: Duration::ZERO,
            ..Default::default()
        };
        let catalog = dir.join(name).display().to_string();
        let s = MatviewSession::open_with_options(ctx, &catalog, options)
            .await
            .unwrap();
        s.sql(&format!(
            "CREATE EXTERNAL TABLE src STORED AS PARQUET LOCATION '{}/src/'",
            dir.display()
        ))
        .await
        .unwrap();
        s.sql(VIEW).await.unwrap().collect().await.unwrap();
        (s, cluster)
    })
}

/// Checks that a timed REFRESH did what the benchmark claims.
fn assert_mode(result: &[RecordBatch], expected: &str) {
    let modes = result[0].column_by_name("mode").unwrap().as_string::<i32>();
    assert_eq!(modes.value(0), expected, "the benchmark times {expected}");
}

fn refresh(rt: &Runtime, s: &MatviewSession, sql: &str) -> Vec<RecordBatch> {
    rt.block_on(async { s.sql(sql).await.unwrap().collect().await.unwrap() })
}

fn main() {
    let rows = env_usize("DFMV_BENCH_ROWS", 2_000_000);
    let out = criterion_dir();
    let rt = Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    common::write_source(&rt, &dir.path().join("src"), 20, rows / 20, false);
    let mut c = Criterion::default()
        .output_directory(&out)
        .configure_from_args();

    let setups = [
        ("one_process", 0),
        ("cluster_1_executor", 1),
        ("cluster_2_executors", 2),
    ];
    let sessions: Vec<_> = setups
        .iter()
        .map(|(name, executors)| (*name, session(&rt, dir.path(), name, *executors)))
        .collect();

    let mut group = c.benchmark_group("full_refresh");
    group.sample_size(10);
    for (name, (s, cluster)) in &sessions {
        let writes_before = cluster
            .as_ref()
            .map(|c| c.write_tasks().iter().sum::<usize>());
        group.bench_function(*name, |b| {
            b.iter(|| {
                let result = refresh(&rt, s, "REFRESH MATERIALIZED VIEW v FULL");
                assert_mode(&result, "full");
            })
        });
        if let (Some(cluster), Some(before)) = (cluster, writes_before) {
            let after: usize = cluster.write_tasks().iter().sum();
            assert!(after > before, "the writes ran on the executors");
        }
    }
    group.finish();

    // Each iteration appends one file (untimed, after a FULL that brings
    // the view up to date without it) and times the refresh that follows.
    let appended = dir.path().join("src").join("zz-appended.parquet");
    let mut group = c.benchmark_group("incremental_refresh");
    group.sample_size(10);
    for (name, (s, _)) in sessions.iter().filter(|(n, _)| *n != "cluster_1_executor") {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let _ = std::fs::remove_file(&appended);
                    refresh(&rt, s, "REFRESH MATERIALIZED VIEW v FULL");
                    std::fs::copy(dir.path().join("src/part-000.parquet"), &appended).unwrap();
                    let start = Instant::now();
                    let result = refresh(&rt, s, "REFRESH MATERIALIZED VIEW v");
                    total += start.elapsed();
                    assert_mode(&result, "incremental");
                }
                total
            })
        });
    }
    group.finish();
    c.final_summary();

    println!("\nratio = on the cluster / in one process (lower is better)");
    for (group, ours) in [
        ("full_refresh", "cluster_1_executor"),
        ("full_refresh", "cluster_2_executors"),
        ("incremental_refresh", "cluster_2_executors"),
    ] {
        match (
            mean_ns(&out, group, ours),
            mean_ns(&out, group, "one_process"),
        ) {
            (Some(a), Some(b)) => println!(
                "{group:<20} {ours:<20} {:>9.1} ms vs {:>9.1} ms  ratio {:.2}",
                a / 1e6,
                b / 1e6,
                a / b
            ),
            _ => println!("{group:<20} {ours:<20} not measured in this run"),
        }
    }
}
