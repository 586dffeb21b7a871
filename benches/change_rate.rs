//! What REFRESH picks against `REFRESH ... FULL`, by the kind and size of
//! the change (issue 32's change-rate table): for each view shape and each
//! change to its sources (append, delete or rewrite 1%, 10% or 50% of the
//! files), the time of `REFRESH` (whatever mode it picks) against `REFRESH
//! ... FULL` after the same change, as interleaved medians.
//!
//! Every sample starts from the same state: the sources as generated and
//! the view refreshed FULL (not timed), then the change (not timed), then
//! the timed refresh. Each timed refresh is checked: FULL ran `full`, and
//! the mode REFRESH picked is printed beside the ratio; after the last
//! sample the view equals its query run now (`EXCEPT ALL` both ways).
//!
//! Sources: `src`, 100 Parquet files (id, grp: 1,000 values, amount, name:
//! 5,000 values); `dim`, 100 CSV files of 10 rows (grp, label), which
//! changes with `src` for the join rows (not for the `_fact` ones, where
//! only `src` changes); `psrc`, `src`'s files in 10 Hive partitions.
//!
//! Run: `cargo bench --bench change_rate` (10 million rows);
//! `DFMV_BENCH_ROWS` changes that, `DFMV_BENCH_SAMPLES` the 3 samples per
//! side, `DFMV_BENCH_VIEWS_ONLY` (comma-separated names) runs some rows,
//! and `DFMV_BENCH_INCREMENTAL=1` times `REFRESH ... INCREMENTAL` (where
//! possible) instead of `REFRESH`: what the cost rule turned down.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::SessionContext;
use datafusion_matview::{MatviewOptions, MatviewSession};
use tokio::runtime::Runtime;

mod common;
use common::{env_usize, median, ms};

/// The rows of the table: (name, query, the tables a change touches).
const VIEWS: &[(&str, &str, &[&str])] = &[
    (
        "filter",
        "SELECT id, grp, amount * 2 AS amount2, name FROM src WHERE amount % 3 <> 0",
        &["src"],
    ),
    (
        "group_by_int",
        "SELECT grp, count(*) AS n, sum(amount) AS total, min(amount) AS lo, max(amount) AS hi FROM src GROUP BY grp",
        &["src"],
    ),
    (
        "group_by_string",
        "SELECT name, count(*) AS n, sum(amount) AS total, max(id) AS last_id FROM src GROUP BY name",
        &["src"],
    ),
    (
        "join",
        "SELECT s.id, s.amount, d.label FROM src s JOIN dim d ON s.grp = d.grp",
        &["src", "dim"],
    ),
    (
        "aggregate_over_join",
        "SELECT d.label, count(*) AS n, sum(s.amount) AS total FROM src s JOIN dim d ON s.grp = d.grp GROUP BY d.label",
        &["src", "dim"],
    ),
    // The same join while only the fact table changes (dimensions that
    // stay put): its lineage and partials follow src.
    (
        "join_fact",
        "SELECT s.id, s.amount, d.label FROM src s JOIN dim d ON s.grp = d.grp",
        &["src"],
    ),
    (
        "aggregate_over_join_fact",
        "SELECT d.label, count(*) AS n, sum(s.amount) AS total FROM src s JOIN dim d ON s.grp = d.grp GROUP BY d.label",
        &["src"],
    ),
    (
        "distinct",
        "SELECT DISTINCT grp, amount % 100 AS bucket FROM src",
        &["src"],
    ),
    (
        "window",
        "SELECT id, grp, row_number() OVER (PARTITION BY grp ORDER BY id) AS rn FROM src",
        &["src"],
    ),
    (
        "partitioned_group_by",
        "SELECT part, grp, count(*) AS n, sum(amount) AS total FROM psrc GROUP BY part, grp",
        &["psrc"],
    ),
];

#[derive(Clone, Copy, Debug)]
enum Kind {
    Append,
    Delete,
    Rewrite,
}

/// A table of 100 files that can be changed by a share of its files and
/// put back as generated.
struct Table {
    /// The files as generated, relative to `root`.
    files: Vec<PathBuf>,
    root: PathBuf,
    /// Where deleted files wait to be put back.
    stash: PathBuf,
}

impl Table {
    fn new(root: &Path, stash: &Path) -> Table {
        let mut files = vec![];
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    files.push(path.strip_prefix(root).unwrap().to_path_buf());
                }
            }
        }
        files.sort();
        std::fs::create_dir_all(stash).unwrap();
        Table {
            files,
            root: root.to_path_buf(),
            stash: stash.to_path_buf(),
        }
    }

    fn appended(file: &Path) -> PathBuf {
        let name = file.file_name().unwrap().to_string_lossy();
        file.with_file_name(format!("zz-appended-{name}"))
    }

    /// Changes `percent` of the files (at least one).
    fn change(&self, kind: Kind, percent: usize) {
        let n = (self.files.len() * percent).div_ceil(100).max(1);
        for file in &self.files[..n] {
            let path = self.root.join(file);
            match kind {
                Kind::Append => {
                    std::fs::copy(&path, self.root.join(Self::appended(file))).unwrap();
                }
                Kind::Delete => {
                    let to = self.stash.join(file);
                    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                    std::fs::rename(&path, to).unwrap();
                }
                // The same bytes written again: a new version of the file.
                Kind::Rewrite => {
                    let bytes = std::fs::read(&path).unwrap();
                    std::fs::write(&path, bytes).unwrap();
                }
            }
        }
    }

    /// The files as generated again.
    fn restore(&self) {
        for file in &self.files {
            let _ = std::fs::remove_file(self.root.join(Self::appended(file)));
            let stashed = self.stash.join(file);
            if stashed.exists() {
                std::fs::rename(stashed, self.root.join(file)).unwrap();
            }
        }
    }
}

async fn run(s: &MatviewSession, sql: &str) -> Vec<RecordBatch> {
    s.sql(sql).await.unwrap().collect().await.unwrap()
}

/// The `mode` REFRESH returned.
fn mode_of(result: &[RecordBatch]) -> String {
    let batch = result.last().expect("REFRESH returns a row");
    let modes = batch.column_by_name("mode").unwrap().as_string::<i32>();
    modes.value(modes.len() - 1).to_owned()
}

fn main() {
    let rows = env_usize("DFMV_BENCH_ROWS", 10_000_000);
    let samples = env_usize("DFMV_BENCH_SAMPLES", 3);
    // What the cost rule turned down: INCREMENTAL instead of REFRESH.
    let incremental = std::env::var_os("DFMV_BENCH_INCREMENTAL").is_some();
    let only: Option<Vec<String>> = std::env::var("DFMV_BENCH_VIEWS_ONLY")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let rt = Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let per_file = rows / 100;
    let src = dir.path().join("src");
    common::write_source(&rt, &src, 100, per_file, true);
    // dim: grp -> label, 10 rows per file.
    let dim = dir.path().join("dim");
    std::fs::create_dir_all(&dim).unwrap();
    for part in 0..100 {
        let mut text = String::from("grp,label\n");
        for grp in part * 10..part * 10 + 10 {
            text.push_str(&format!("{grp},label-{}\n", grp % 37));
        }
        std::fs::write(dim.join(format!("d{part:03}.csv")), text).unwrap();
    }
    // psrc: the same files in 10 partitions.
    let psrc = dir.path().join("psrc");
    for part in 0..100 {
        let to = psrc.join(format!("part=p{}", part % 10));
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(
            src.join(format!("part-{part:03}.parquet")),
            to.join(format!("part-{part:03}.parquet")),
        )
        .unwrap();
    }
    let tables: Vec<(&str, Table)> = ["src", "dim", "psrc"]
        .into_iter()
        .map(|name| {
            let table = Table::new(&dir.path().join(name), &dir.path().join("stash").join(name));
            (name, table)
        })
        .collect();
    let table = |name: &str| &tables.iter().find(|(n, _)| *n == name).unwrap().1;

    let s = rt.block_on(async {
        let s = MatviewSession::open_with_options(
            SessionContext::new(),
            &dir.path().join("catalog").display().to_string(),
            MatviewOptions {
                retention: Duration::ZERO,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let root = dir.path().display();
        for sql in [
            format!("CREATE EXTERNAL TABLE src STORED AS PARQUET LOCATION '{root}/src/'"),
            format!(
                "CREATE EXTERNAL TABLE dim (grp BIGINT, label VARCHAR) STORED AS CSV LOCATION '{root}/dim/' OPTIONS ('format.has_header' 'true')"
            ),
            format!(
                "CREATE EXTERNAL TABLE psrc STORED AS PARQUET PARTITIONED BY (part) LOCATION '{root}/psrc/'"
            ),
        ] {
            run(&s, &sql).await;
        }
        s
    });

    let changes: Vec<(Kind, usize)> = [Kind::Append, Kind::Delete, Kind::Rewrite]
        .into_iter()
        .flat_map(|kind| [1, 10, 50].map(|p| (kind, p)))
        .collect();
    let mut table_rows = vec![];
    for (view, query, changed) in VIEWS {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == view)) {
            continue;
        }
        rt.block_on(run(
            &s,
            &format!("CREATE MATERIALIZED VIEW {view} AS {query}"),
        ));
        let mut cells = vec![];
        for &(kind, percent) in &changes {
            let (mut picked, mut full) = (vec![], vec![]);
            let mut modes = std::collections::BTreeSet::new();
            for round in 0..=samples {
                for forced in [false, true] {
                    for name in *changed {
                        table(name).restore();
                    }
                    rt.block_on(run(&s, &format!("REFRESH MATERIALIZED VIEW {view} FULL")));
                    for name in *changed {
                        table(name).change(kind, percent);
                    }
                    let sql = if forced {
                        format!("REFRESH MATERIALIZED VIEW {view} FULL")
                    } else if incremental {
                        format!("REFRESH MATERIALIZED VIEW {view} INCREMENTAL")
                    } else {
                        format!("REFRESH MATERIALIZED VIEW {view}")
                    };
                    let start = Instant::now();
                    let result = match rt.block_on(s.sql(&sql)) {
                        Ok(df) => rt.block_on(df.collect()).unwrap(),
                        // INCREMENTAL where the shape or change rules it
                        // out: what REFRESH picks instead.
                        Err(e) if incremental && !forced => {
                            assert!(
                                e.to_string().contains("cannot be refreshed incrementally"),
                                "{e}"
                            );
                            rt.block_on(run(&s, &format!("REFRESH MATERIALIZED VIEW {view}")))
                        }
                        Err(e) => panic!("{sql}: {e}"),
                    };
                    let took = start.elapsed();
                    let mode = mode_of(&result);
                    if forced {
                        assert_eq!(mode, "full", "{sql}");
                    } else {
                        assert_ne!(mode, "no_op", "{sql} after a change");
                        modes.insert(mode);
                    }
                    if round > 0 {
                        (if forced { &mut full } else { &mut picked }).push(took);
                    }
                    if round == samples && !forced {
                        // What the picked mode wrote is the query's answer now.
                        let differ = rt.block_on(run(
                            &s,
                            &format!(
                                "SELECT count(*) FROM ((SELECT * FROM {view} EXCEPT ALL ({query})) \
                                 UNION ALL (({query}) EXCEPT ALL SELECT * FROM {view}))"
                            ),
                        ));
                        let n = differ[0].column(0).as_primitive::<Int64Type>().value(0);
                        assert_eq!(
                            n, 0,
                            "{view} after {kind:?} {percent}% differs from its query"
                        );
                    }
                }
            }
            let (picked, full) = (median(picked), median(full));
            let modes: Vec<String> = modes.into_iter().collect();
            println!(
                "{view:<22} {kind:?} {percent:>2}%: REFRESH {:>9.1} ms ({}) vs FULL {:>9.1} ms: full/picked = {:.2}x",
                ms(picked),
                modes.join("/"),
                ms(full),
                full.as_secs_f64() / picked.as_secs_f64()
            );
            cells.push(format!(
                "{:.2}× ({})",
                full.as_secs_f64() / picked.as_secs_f64(),
                modes.join("/")
            ));
        }
        for name in *changed {
            table(name).restore();
        }
        table_rows.push((view, cells));
    }
    println!(
        "\nfull / REFRESH after the change ({} rows, {} samples per side; the mode REFRESH picked in brackets)\n",
        per_file * 100,
        samples
    );
    let header: Vec<String> = changes
        .iter()
        .map(|(kind, p)| format!("{kind:?} {p}%").to_lowercase())
        .collect();
    println!("| view | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(header.len()));
    for (view, cells) in table_rows {
        println!("| {view} | {} |", cells.join(" | "));
    }
}
