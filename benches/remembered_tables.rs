//! What remembered tables cost a new process (issue 36), as whole `dfmv`
//! processes timed in one run:
//!
//! 1. `dfmv -c "SELECT 1"` over a catalog remembering 20 Parquet tables of
//!    100 files each, against the same over an empty catalog (target
//!    ≤ 1.2×): opening a catalog builds no remembered table;
//! 2. `SELECT count(*), sum(amount) FROM t7` over that catalog, against the
//!    same query in a process over an empty catalog that makes the table
//!    itself, reading the folder by path (DataFusion lists it and infers
//!    its schema as `CREATE EXTERNAL TABLE` does; nothing is committed)
//!    (target ≤ 1.1×).
//!
//! Each ratio is of medians of `DFMV_TABLES_SAMPLES` (15) runs, the two
//! sides interleaved. The bench checks that both sides answer the same and
//! that every remembered table is kept with its schema (so the timed path
//! infers nothing).
//!
//! Run: `cargo bench --bench remembered_tables`
//! (release; builds `dfmv`).

use datafusion::prelude::SessionContext;
use datafusion_matview::{MatviewOptions, MatviewSession};

mod common;
use common::{compare, dfmv, env_usize, ms};

const TABLES: usize = 20;
const FILES: usize = 100;
const ROWS: usize = 1_000;

fn main() {
    // `cargo test --benches` runs this without `--bench`: nothing to do.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let samples = env_usize("DFMV_TABLES_SAMPLES", 15);
    let dir = tempfile::tempdir().unwrap();
    let (tables, empty) = (dir.path().join("tables"), dir.path().join("empty"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut script = String::new();
    for i in 0..TABLES {
        let folder = dir.path().join(format!("data/t{i}"));
        common::write_source(&rt, &folder, FILES, ROWS, true);
        script.push_str(&format!(
            "CREATE EXTERNAL TABLE t{i} STORED AS PARQUET LOCATION '{}/';\n",
            folder.display()
        ));
    }
    dfmv(&tables, &script);
    dfmv(&empty, "SELECT 1");

    // What is timed is the kept schema: every table has one.
    rt.block_on(async {
        let s = MatviewSession::open_with_options(
            SessionContext::new(),
            tables.to_str().unwrap(),
            MatviewOptions {
                remember_relations: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let relations = s.catalog().relations();
        assert_eq!(relations.len(), TABLES);
        assert!(relations.iter().all(|r| r.resolved.is_some()));
    });

    println!(
        "== 1. SELECT 1: {TABLES} remembered tables of {FILES} files each vs an empty catalog"
    );
    let (ours, plain) = compare(
        samples,
        || dfmv(&tables, "SELECT 1"),
        || dfmv(&empty, "SELECT 1"),
    );
    println!(
        "{:.1} ms vs {:.1} ms = {:.2}x (target <= 1.2)",
        ms(ours),
        ms(plain),
        ours.as_secs_f64() / plain.as_secs_f64()
    );

    println!("== 2. a query of one remembered table vs the same table made in the process");
    let folder = dir.path().join("data/t7");
    let query = "SELECT count(*) AS n, sum(amount) AS s FROM";
    let (ours, plain) = compare(
        samples,
        || dfmv(&tables, &format!("{query} t7")),
        || dfmv(&empty, &format!("{query} '{}/'", folder.display())),
    );
    println!(
        "{:.1} ms vs {:.1} ms = {:.2}x (target <= 1.1)",
        ms(ours),
        ms(plain),
        ours.as_secs_f64() / plain.as_secs_f64()
    );
}
