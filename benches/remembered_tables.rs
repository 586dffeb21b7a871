//! What remembered tables cost a new process (issue 36), as whole `dfmv`
//! processes timed in one run:
//!
//! 1. `dfmv -c "SELECT 1"` over a catalog remembering 20 Parquet tables of
//!    100 files each, against the same over an empty catalog (target
//!    ≤ 1.2×): opening a catalog builds no remembered table;
//! 2. `SELECT count(*), sum(k) FROM t7` over that catalog, against the
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
//! Run: `cargo bench --bench remembered_tables` (release; builds `dfmv`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::SessionContext;
use datafusion_matview::{MatviewOptions, MatviewSession};

const TABLES: usize = 20;
const FILES: usize = 100;
const ROWS: i64 = 1_000;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `dfmv --catalog <catalog> -q -c <sql>`: its output and how long it took.
fn dfmv(catalog: &Path, sql: &str) -> (String, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_dfmv"))
        .arg("--catalog")
        .arg(catalog)
        .args(["-q", "--format", "csv", "-c", sql])
        .output()
        .expect("dfmv runs");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), took)
}

/// Folder `t<i>` of `FILES` Parquet files of `ROWS` rows `(k, c)`.
fn write_table(folder: &Path) {
    std::fs::create_dir_all(folder).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("c", DataType::Utf8, false),
    ]));
    for f in 0..FILES as i64 {
        let keys: Vec<i64> = (f * ROWS..(f + 1) * ROWS).collect();
        let strings: Vec<String> = keys.iter().map(|k| format!("s{}", k % 97)).collect();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(StringArray::from(strings)),
            ],
        )
        .unwrap();
        let file = std::fs::File::create(folder.join(format!("part-{f:03}.parquet"))).unwrap();
        let mut writer =
            datafusion::parquet::arrow::ArrowWriter::try_new(file, Arc::clone(&schema), None)
                .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }
}

/// Times `a` and `b` `samples` times each, interleaved; checks each run
/// answers as the first did. Returns the medians.
fn compare(
    samples: usize,
    a: impl Fn() -> (String, Duration),
    b: impl Fn() -> (String, Duration),
) -> (Duration, Duration) {
    let (expected, _) = a();
    let (other, _) = b();
    assert_eq!(expected, other, "both sides answer the same");
    let (mut xs, mut ys) = (vec![], vec![]);
    for _ in 0..samples {
        let (out, took) = a();
        assert_eq!(out, expected);
        xs.push(took);
        let (out, took) = b();
        assert_eq!(out, expected);
        ys.push(took);
    }
    (median(xs), median(ys))
}

fn main() {
    // `cargo test --benches` runs this without `--bench`: nothing to do.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let samples = std::env::var("DFMV_TABLES_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let dir = tempfile::tempdir().unwrap();
    let (tables, empty) = (dir.path().join("tables"), dir.path().join("empty"));
    let mut script = String::new();
    for i in 0..TABLES {
        let folder = dir.path().join(format!("data/t{i}"));
        write_table(&folder);
        script.push_str(&format!(
            "CREATE EXTERNAL TABLE t{i} STORED AS PARQUET LOCATION '{}/';\n",
            folder.display()
        ));
    }
    dfmv(&tables, &script);
    dfmv(&empty, "SELECT 1");

    // What is timed is the kept schema: every table has one.
    let rt = tokio::runtime::Runtime::new().unwrap();
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
    let query = "SELECT count(*) AS n, sum(k) AS s FROM";
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
