//! Materialized views against the plain-DataFusion way of doing the same
//! work, measured in the same run:
//!
//! - `refresh`: full REFRESH of a view vs `COPY (same query) TO ... STORED AS PARQUET`,
//!   for the filter view and for a GROUP BY view (which also writes partial
//!   aggregates);
//! - `scan_filter` / `scan_aggregate`: querying the view vs the same Parquet
//!   files registered with `CREATE EXTERNAL TABLE`;
//! - `open_catalog`: opening a catalog of N views vs registering N Parquet
//!   files as external tables;
//! - `rewrite_rollup`: a query the 1,000-group view answers (rolled up to
//!   10 groups) vs the same query in plain DataFusion; `rewrite_after_append`:
//!   the same after 1% was appended (the view and the new file);
//!   `rewrite_after_file_rewritten`: the same after 1 of 100 files was
//!   rewritten (the view's partial aggregates, one group recomputed);
//!   `rewrite_planning`:
//!   planning it with the rewrite on and off vs plain DataFusion, in a
//!   catalog of N views;
//! - `after_append`: after appending one file (1% of the source), REFRESH
//!   of a filter view and of two GROUP BY views vs REFRESH ... FULL of the same
//!   view; REFRESH of an unchanged view (no_op) vs FULL; and REFRESH of
//!   the filter view and the two GROUP BY views after one source file was
//!   rewritten vs FULL.
//!
//! `cargo bench --bench matview` (10 million source rows, 1,000 views);
//! `DFMV_BENCH_ROWS` and `DFMV_BENCH_VIEWS` shrink it for a quick run.
//! Ratios are printed at the end (`ratio` = view / plain DataFusion).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::Criterion;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::prelude::SessionContext;
use datafusion_matview::{MatviewOptions, MatviewSession};
use tokio::runtime::Runtime;

mod common;
use common::{criterion_dir, env_usize, mean_ns};

const VIEW_QUERY: &str =
    "SELECT id, grp, amount * 2 AS amount2, name FROM src WHERE amount % 3 <> 0";

/// The GROUP BY view of the benchmarks (1,000 groups); its full refresh
/// also writes partial aggregates per group of source files.
const GROUPED_QUERY: &str = "SELECT grp, count(*) AS n, sum(amount) AS total, min(amount) AS lo, max(amount) AS hi, avg(amount) AS mean FROM src GROUP BY grp";

struct Fixture {
    dir: tempfile::TempDir,
    rows: usize,
}

impl Fixture {
    /// A Parquet source of `rows` rows in 100 files (1% each), written by
    /// DataFusion.
    fn new(rt: &Runtime, rows: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let per_file = rows / 100;
        common::write_source(rt, &dir.path().join("src"), 100, per_file, true);
        Self {
            dir,
            rows: per_file * 100,
        }
    }

    /// Appends a copy of the first file (1% of the source) under a new
    /// name, after removing the one appended before, so the source stays
    /// at 101% over any number of iterations.
    fn append_one_percent(&self, n: usize) {
        let src = self.dir.path().join("src");
        if n > 0 {
            let _ = std::fs::remove_file(src.join(format!("zz-appended-{:05}.parquet", n - 1)));
        }
        std::fs::copy(
            src.join("part-000.parquet"),
            src.join(format!("zz-appended-{n:05}.parquet")),
        )
        .unwrap();
    }

    /// Rewrites one source file in place (same rows, new modification
    /// time): a changed file for freshness.
    fn rewrite_one(&self) {
        let path = self.dir.path().join("src").join("part-050.parquet");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, bytes).unwrap();
    }

    /// Removes the last appended file.
    fn remove_appended(&self, n: usize) {
        let src = self.dir.path().join("src");
        let _ = std::fs::remove_file(src.join(format!("zz-appended-{n:05}.parquet")));
    }

    fn src_sql(&self) -> String {
        format!(
            "CREATE EXTERNAL TABLE src STORED AS PARQUET LOCATION '{}/src/'",
            self.dir.path().display()
        )
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

async fn session(fixture: &Fixture, catalog: &Path) -> MatviewSession {
    // Retention zero: every refresh also removes the snapshot it replaced,
    // so the measured cost includes cleanup.
    let options = MatviewOptions {
        retention: Duration::ZERO,
        ..Default::default()
    };
    let s = MatviewSession::open_with_options(
        SessionContext::new(),
        &catalog.display().to_string(),
        options,
    )
    .await
    .unwrap();
    s.sql(&fixture.src_sql()).await.unwrap();
    s
}

/// Checks that a timed REFRESH did the work its benchmark claims: the
/// `mode` of the named view's row (the last) in its result.
fn assert_mode(result: &[RecordBatch], sql: &str, expected: &str) {
    let batch = result.last().expect("REFRESH returns a row");
    let modes = batch
        .column_by_name("mode")
        .expect("a mode column")
        .as_string::<i32>();
    let got = modes.value(modes.len() - 1);
    assert_eq!(
        got, expected,
        "{sql} ran {got}, the benchmark times {expected}"
    );
}

/// Times one REFRESH statement `sql` (`REFRESH MATERIALIZED VIEW v ...`)
/// in `s` and checks it ran `mode`. With `append`, the view first starts
/// from its source without what the previous round appended (an untimed
/// full refresh), then 1% more is appended (untimed): the timed refresh
/// sees exactly one new file. `appended` counts the rounds.
fn timed_refresh(
    rt: &Runtime,
    fixture: &Fixture,
    appended: &std::cell::Cell<usize>,
    s: &MatviewSession,
    sql: &str,
    append: bool,
    mode: &str,
) -> Duration {
    if append {
        fixture.remove_appended(appended.get());
        let view = sql.split_whitespace().nth(3).unwrap();
        rt.block_on(async {
            s.sql(&format!("REFRESH MATERIALIZED VIEW {view} FULL"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap()
        });
        appended.set(appended.get() + 1);
        fixture.append_one_percent(appended.get());
    }
    let start = Instant::now();
    let result = rt.block_on(async { s.sql(sql).await.unwrap().collect().await.unwrap() });
    let elapsed = start.elapsed();
    assert_mode(&result, sql, mode);
    elapsed
}

/// Full REFRESH of a view of `query` vs `COPY (query) TO`, in the group
/// `refresh_{rows}_rows` (the filter view) or `refresh_{rows}_rows_{label}`.
fn bench_refresh(c: &mut Criterion, rt: &Runtime, fixture: &Fixture, query: &str, label: &str) {
    let catalog = fixture.path(&format!("refresh-catalog{label}"));
    let s = rt.block_on(async {
        let s = session(fixture, &catalog).await;
        s.sql(&format!("CREATE MATERIALIZED VIEW v AS {query}"))
            .await
            .unwrap();
        s
    });
    let mut group = c.benchmark_group(format!("refresh_{}_rows{label}", fixture.rows));
    group.sample_size(10);
    group.bench_function("matview_refresh", |b| {
        b.to_async(rt).iter(|| async {
            let sql = "REFRESH MATERIALIZED VIEW v FULL";
            let result = s.sql(sql).await.unwrap().collect().await.unwrap();
            assert_mode(&result, sql, "full");
            result
        })
    });
    let ctx = rt.block_on(async {
        let ctx = SessionContext::new();
        ctx.sql(&fixture.src_sql()).await.unwrap();
        ctx
    });
    let out = fixture.path("copy-out");
    group.bench_function("datafusion_copy", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let _ = std::fs::remove_dir_all(&out);
                let start = Instant::now();
                rt.block_on(async {
                    ctx.sql(&format!(
                        "COPY ({query}) TO '{}/' STORED AS PARQUET",
                        out.display()
                    ))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap()
                });
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

fn bench_scans(c: &mut Criterion, rt: &Runtime, fixture: &Fixture) {
    let catalog = fixture.path("scan-catalog");
    let (s, plain) = rt.block_on(async {
        let s = session(fixture, &catalog).await;
        s.sql(&format!(
            "CREATE MATERIALIZED VIEW v AS {VIEW_QUERY} ORDER BY id"
        ))
        .await
        .unwrap();
        // The same files, registered the plain way.
        let entry = s.catalog().views().await.unwrap()[0].view.clone();
        let snapshot = entry.snapshot.as_ref().unwrap();
        let dir = catalog.join(entry.snapshot_dir(snapshot));
        let plain = SessionContext::new();
        plain
            .sql(&format!(
                "CREATE EXTERNAL TABLE v STORED AS PARQUET LOCATION '{}/'",
                dir.display()
            ))
            .await
            .unwrap();
        (s, plain)
    });
    let lo = fixture.rows / 2;
    let queries = [
        (
            "scan_filter",
            format!("SELECT * FROM v WHERE id BETWEEN {lo} AND {}", lo + 1000),
        ),
        (
            "scan_aggregate",
            "SELECT grp, count(*), sum(amount2) FROM v GROUP BY grp".to_string(),
        ),
    ];
    for (name, sql) in queries {
        let mut group = c.benchmark_group(name);
        group.sample_size(20);
        group.bench_function("matview", |b| {
            b.to_async(rt)
                .iter(|| async { s.sql(&sql).await.unwrap().collect().await.unwrap() })
        });
        group.bench_function("datafusion_external_table", |b| {
            b.to_async(rt)
                .iter(|| async { plain.sql(&sql).await.unwrap().collect().await.unwrap() })
        });
        group.finish();
    }
}

fn bench_open(c: &mut Criterion, rt: &Runtime, fixture: &Fixture, views: usize) {
    let catalog = fixture.path("open-catalog");
    let files = fixture.path("open-files");
    rt.block_on(async {
        let s = session(fixture, &catalog).await;
        let ctx = SessionContext::new();
        for i in 0..views {
            s.sql(&format!(
                "CREATE MATERIALIZED VIEW v{i} AS SELECT {i} AS k, 'x' AS label"
            ))
            .await
            .unwrap();
            ctx.sql(&format!(
                "COPY (SELECT {i} AS k, 'x' AS label) TO '{}/f{i}.parquet'",
                files.display()
            ))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        }
    });
    let mut group = c.benchmark_group(format!("open_{views}_views"));
    group.sample_size(10);
    group.bench_function("matview_open_catalog", |b| {
        b.to_async(rt).iter(|| async {
            let s = MatviewSession::open(SessionContext::new(), &catalog.display().to_string())
                .await
                .unwrap();
            assert_eq!(s.catalog().index().views.len(), views);
        })
    });
    group.bench_function("datafusion_create_external_tables", |b| {
        b.to_async(rt).iter(|| async {
            let ctx = SessionContext::new();
            for i in 0..views {
                ctx.sql(&format!(
                    "CREATE EXTERNAL TABLE v{i} STORED AS PARQUET LOCATION '{}/f{i}.parquet'",
                    files.display()
                ))
                .await
                .unwrap();
            }
        })
    });
    group.finish();
}

/// Refreshes after appending 1% of the source: what REFRESH picks
/// (incremental: new files read alone for the filter view, merged into the
/// stored groups for the GROUP BY view) vs REFRESH ... FULL; and REFRESH
/// with nothing changed.
fn bench_after_append(c: &mut Criterion, rt: &Runtime, fixture: &Fixture) {
    let catalog = fixture.path("append-catalog");
    let s = rt.block_on(async {
        let s = session(fixture, &catalog).await;
        s.sql(&format!("CREATE MATERIALIZED VIEW filtered AS {VIEW_QUERY}"))
            .await
            .unwrap();
        s.sql(&format!("CREATE MATERIALIZED VIEW grouped AS {GROUPED_QUERY}"))
            .await
            .unwrap();
        s.sql("CREATE MATERIALIZED VIEW grouped_by_name AS SELECT name, count(*) AS n, sum(amount) AS total, max(id) AS last_id, avg(amount) AS mean FROM src GROUP BY name")
            .await
            .unwrap();
        s
    });
    let appended = std::cell::Cell::new(0);
    let bench = |b: &mut criterion::Bencher, sql: &str, append: bool, mode: &str| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| timed_refresh(rt, fixture, &appended, &s, sql, append, mode))
                .sum()
        })
    };
    for view in ["filtered", "grouped", "grouped_by_name"] {
        let mut group = c.benchmark_group(format!("after_append_{view}"));
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        let refresh = format!("REFRESH MATERIALIZED VIEW {view}");
        let full = format!("{refresh} FULL");
        group.bench_function("matview_refresh", |b| {
            bench(b, &refresh, true, "incremental")
        });
        group.bench_function("full_refresh", |b| bench(b, &full, true, "full"));
        group.finish();
    }
    fixture.remove_appended(appended.get());
    rt.block_on(async {
        s.sql("REFRESH MATERIALIZED VIEW filtered FULL")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
    });
    let mut group = c.benchmark_group("unchanged");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.bench_function("matview_refresh", |b| {
        bench(b, "REFRESH MATERIALIZED VIEW filtered", false, "no_op")
    });
    group.bench_function("full_refresh", |b| {
        bench(b, "REFRESH MATERIALIZED VIEW filtered FULL", false, "full")
    });
    group.finish();

    // One of the 100 source files rewritten: the filter view evicts the
    // data computed from its group of files and reads the group again; the
    // GROUP BY views recompute the partial aggregate of that group and
    // merge it with the other 15.
    for view in ["filtered", "grouped", "grouped_by_name"] {
        let mut group = c.benchmark_group(format!("after_rewrite_{view}"));
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        let refresh = format!("REFRESH MATERIALIZED VIEW {view}");
        let full = format!("{refresh} FULL");
        for (function, sql, mode) in [
            ("matview_refresh", &refresh, "incremental"),
            ("full_refresh", &full, "full"),
        ] {
            group.bench_function(function, |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let run = |sql: &str| {
                            rt.block_on(async {
                                s.sql(sql).await.unwrap().collect().await.unwrap()
                            })
                        };
                        // Untimed: every iteration starts from a full refresh.
                        run(&full);
                        fixture.rewrite_one();
                        let start = Instant::now();
                        let result = run(sql);
                        total += start.elapsed();
                        assert_mode(&result, sql, mode);
                    }
                    total
                })
            });
        }
        group.finish();
    }
}

/// The refresh history's cost: REFRESH of the filter view after a 1%
/// append (incremental), with the history on (one record per attempt)
/// vs the same over a catalog with it off (`history_per_view: 0`).
fn bench_history_cost(c: &mut Criterion, rt: &Runtime, fixture: &Fixture) {
    let open = |name: &str, history_per_view: usize| {
        rt.block_on(async {
            let catalog = fixture.path(name);
            let s = MatviewSession::open_with_options(
                SessionContext::new(),
                &catalog.display().to_string(),
                MatviewOptions {
                    retention: Duration::ZERO,
                    history_per_view,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            s.sql(&fixture.src_sql()).await.unwrap();
            s.sql(&format!(
                "CREATE MATERIALIZED VIEW filtered AS {VIEW_QUERY}"
            ))
            .await
            .unwrap();
            s
        })
    };
    let with = open("history-on-catalog", 100);
    let without = open("history-off-catalog", 0);
    let appended = std::cell::Cell::new(0);
    let sql = "REFRESH MATERIALIZED VIEW filtered";
    let timed_once =
        |s: &MatviewSession| timed_refresh(rt, fixture, &appended, s, sql, true, "incremental");
    let timed = |b: &mut criterion::Bencher, s: &MatviewSession| {
        b.iter_custom(|iters| (0..iters).map(|_| timed_once(s)).sum())
    };
    let mut group = c.benchmark_group("history_cost");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.bench_function("with_history", |b| timed(b, &with));
    group.bench_function("without_history", |b| timed(b, &without));
    group.finish();
    // Criterion times the two one after the other, so drift between them
    // (the source's files, the page cache) counts as their difference;
    // the same measurement interleaved, one of each per round, says how
    // much of that is the history.
    let rounds = env_usize("DFMV_BENCH_HISTORY_ROUNDS", 20);
    let mut times: [Vec<Duration>; 2] = [vec![], vec![]];
    for _ in 0..rounds {
        for (i, s) in [&with, &without].into_iter().enumerate() {
            times[i].push(timed_once(s));
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (on, off) = (median(&mut times[0]), median(&mut times[1]));
    println!(
        "history_cost interleaved, {rounds} rounds: median {:.2} ms with the history vs {:.2} ms without, ratio {:.3}",
        on.as_secs_f64() * 1e3,
        off.as_secs_f64() * 1e3,
        on.as_secs_f64() / off.as_secs_f64()
    );
    fixture.remove_appended(appended.get());
    // The history recorded every timed attempt (and the untimed ones).
    let recorded = rt.block_on(with.refresh_history(None)).unwrap();
    assert!(
        recorded
            .iter()
            .any(|a| a.mode.as_deref() == Some("incremental"))
    );
    assert!(
        rt.block_on(without.refresh_history(None))
            .unwrap()
            .is_empty()
    );
}

/// `query` through the session (`ours`) vs in plain DataFusion, run to
/// the end, as criterion group `group`.
fn bench_query(
    c: &mut Criterion,
    rt: &Runtime,
    group: &str,
    ours: &str,
    s: &MatviewSession,
    plain: &SessionContext,
    query: &str,
) {
    let mut group = c.benchmark_group(group);
    group.sample_size(20);
    group.bench_function(ours, |b| {
        b.to_async(rt)
            .iter(|| async { s.sql(query).await.unwrap().collect().await.unwrap() })
    });
    group.bench_function("datafusion_query", |b| {
        b.to_async(rt)
            .iter(|| async { plain.sql(query).await.unwrap().collect().await.unwrap() })
    });
    group.finish();
}

/// Queries answered from a materialized view (`matview.rewrite`): a
/// rollup of the 1,000-group view to 10 groups vs the same query in plain
/// DataFusion; and the planning of that query (physical plan included)
/// with the rewrite on, off, and in plain DataFusion, in a catalog of
/// `views` views of which one reads the query's table.
fn bench_rewrite(c: &mut Criterion, rt: &Runtime, fixture: &Fixture, views: usize) {
    let catalog = fixture.path("rewrite-catalog");
    let query = "SELECT grp % 10 AS g, sum(amount) AS total, count(*) AS n, min(amount) AS lo, max(amount) AS hi FROM src GROUP BY grp % 10";
    let (s, off, plain) = rt.block_on(async {
        let s = session(fixture, &catalog).await;
        s.sql(&format!(
            "CREATE MATERIALIZED VIEW by_grp AS {GROUPED_QUERY}"
        ))
        .await
        .unwrap();
        for i in 1..views {
            s.sql(&format!(
                "CREATE MATERIALIZED VIEW other{i} AS SELECT {i} AS k"
            ))
            .await
            .unwrap();
        }
        let off = s.fork();
        off.sql("SET matview.rewrite = 'off'").await.unwrap();
        let plain = SessionContext::new();
        plain.sql(&fixture.src_sql()).await.unwrap();
        (s, off, plain)
    });
    // The timed query is the one the view answers, with the same rows.
    let shows = |s: &MatviewSession, mark: &str| {
        let batches = rt
            .block_on(async { s.sql(&format!("EXPLAIN {query}")).await?.collect().await })
            .unwrap();
        batches.iter().any(|b| {
            let plan = b.column(1).as_string::<i32>();
            (0..plan.len()).any(|i| plan.value(i).contains(mark))
        })
    };
    let rows = |ctx: &SessionContext| {
        let batches = rt
            .block_on(async { ctx.sql(query).await?.collect().await })
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        let mut rows: Vec<String> = text.lines().skip(3).map(str::to_owned).collect();
        rows.sort();
        rows
    };
    assert!(
        shows(&s, "MatviewRewrite: by_grp (fresh)"),
        "the view answers"
    );
    assert!(
        !shows(&off, "MatviewRewrite"),
        "with the rewrite off it does not"
    );
    assert_eq!(
        rows(s.context()),
        rows(&plain),
        "the view's answer is the query's"
    );
    bench_query(
        c,
        rt,
        "rewrite_rollup",
        "matview_rewritten",
        &s,
        &plain,
        query,
    );
    // A plain context over the source as it is now (DataFusion keeps a
    // session's listings).
    let new_plain = || {
        rt.block_on(async {
            let plain = SessionContext::new();
            plain.sql(&fixture.src_sql()).await.unwrap();
            plain
        })
    };
    // After 1% of the source was appended: the view's groups and the new
    // file's, aggregated again, vs the query over the whole source.
    fixture.append_one_percent(0);
    let plain_now = new_plain();
    assert!(
        shows(
            &s,
            "MatviewRewrite: by_grp (stale: src: 1 file(s) appended; merged into the existing groups)"
        ),
        "the view and the appended file answer the query"
    );
    assert_eq!(
        rows(s.context()),
        rows(&plain_now),
        "with the appended file too"
    );
    bench_query(
        c,
        rt,
        "rewrite_after_append",
        "matview_union",
        &s,
        &plain_now,
        query,
    );
    fixture.remove_appended(0);
    let mut group = c.benchmark_group(format!("rewrite_planning_{views}_views"));
    group.sample_size(30);
    group.bench_function("matview_rewrite_on", |b| {
        b.to_async(rt).iter(|| async {
            s.sql(query)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap()
        })
    });
    group.bench_function("matview_rewrite_off", |b| {
        b.to_async(rt).iter(|| async {
            off.sql(query)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap()
        })
    });
    group.bench_function("datafusion_query", |b| {
        b.to_async(rt).iter(|| async {
            plain
                .sql(query)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap()
        })
    });
    group.finish();
    // After one source file (1%) was rewritten: the view's data computed
    // as its incremental refresh would (the partial aggregates of the
    // other files, and the rewritten file's group recomputed), vs the
    // query over the whole source.
    fixture.rewrite_one();
    let plain_now = new_plain();
    assert!(
        shows(
            &s,
            "MatviewRewrite: by_grp (stale: src: 1 file(s) rewritten; recomputed 1 of"
        ),
        "the view's partials and the rewritten file answer the query"
    );
    assert_eq!(rows(s.context()), rows(&plain_now), "after the rewrite too");
    bench_query(
        c,
        rt,
        "rewrite_after_file_rewritten",
        "matview_partials",
        &s,
        &plain_now,
        query,
    );
}

fn main() {
    let rows = env_usize("DFMV_BENCH_ROWS", 10_000_000);
    let views = env_usize("DFMV_BENCH_VIEWS", 1_000);
    let out = criterion_dir();
    let rt = Runtime::new().unwrap();
    let fixture = Fixture::new(&rt, rows);
    let mut c = Criterion::default()
        .output_directory(&out)
        .configure_from_args();
    bench_refresh(&mut c, &rt, &fixture, VIEW_QUERY, "");
    bench_refresh(&mut c, &rt, &fixture, GROUPED_QUERY, "_grouped");
    bench_scans(&mut c, &rt, &fixture);
    bench_open(&mut c, &rt, &fixture, views);
    bench_rewrite(&mut c, &rt, &fixture, views);
    // Last: they append to the source.
    bench_after_append(&mut c, &rt, &fixture);
    bench_history_cost(&mut c, &rt, &fixture);
    c.final_summary();

    println!("\nratio = materialized view / plain DataFusion (lower is better)");
    let rows_group = format!("refresh_{rows}_rows");
    let grouped_rows_group = format!("refresh_{rows}_rows_grouped");
    let open_group = format!("open_{views}_views");
    let planning_group = format!("rewrite_planning_{views}_views");
    let pairs = [
        (
            "after_append_filtered",
            "matview_refresh",
            "full_refresh",
            "target <= 0.05 (20x faster)",
        ),
        (
            "after_append_grouped",
            "matview_refresh",
            "full_refresh",
            "target <= 0.10 (10x faster)",
        ),
        (
            "after_append_grouped_by_name",
            "matview_refresh",
            "full_refresh",
            "target <= 0.10 (10x faster)",
        ),
        (
            "unchanged",
            "matview_refresh",
            "full_refresh",
            "target <= 0.01",
        ),
        (
            "history_cost",
            "with_history",
            "without_history",
            "target <= 1.02 (the history adds at most 2%)",
        ),
        (
            "after_rewrite_filtered",
            "matview_refresh",
            "full_refresh",
            "no target: 1 of 100 files rewritten",
        ),
        (
            "after_rewrite_grouped",
            "matview_refresh",
            "full_refresh",
            "target <= 0.10 (10x faster): 1 of 100 files rewritten",
        ),
        (
            "after_rewrite_grouped_by_name",
            "matview_refresh",
            "full_refresh",
            "target <= 0.20 (5x faster): 1 of 100 files rewritten",
        ),
        (
            rows_group.as_str(),
            "matview_refresh",
            "datafusion_copy",
            "target <= 1.10",
        ),
        (
            grouped_rows_group.as_str(),
            "matview_refresh",
            "datafusion_copy",
            "target <= 1.10 (with partial aggregates)",
        ),
        (
            "scan_filter",
            "matview",
            "datafusion_external_table",
            "target <= 1.05",
        ),
        (
            "scan_aggregate",
            "matview",
            "datafusion_external_table",
            "target <= 1.05",
        ),
        (
            "rewrite_rollup",
            "matview_rewritten",
            "datafusion_query",
            "target <= 0.05 (20x faster): 10 groups rolled up from the 1,000-group view",
        ),
        (
            "rewrite_after_append",
            "matview_union",
            "datafusion_query",
            "target <= 0.10 (10x faster): the view's groups and the appended 1%, aggregated again",
        ),
        (
            "rewrite_after_file_rewritten",
            "matview_partials",
            "datafusion_query",
            "no target: the view's partials, one group recomputed, after 1 of 100 files was rewritten",
        ),
        (
            planning_group.as_str(),
            "matview_rewrite_on",
            "datafusion_query",
            "planning, physical plan included; the rewrite's own cost is on - off",
        ),
        (
            planning_group.as_str(),
            "matview_rewrite_off",
            "datafusion_query",
            "planning with the rewrite off",
        ),
        (
            open_group.as_str(),
            "matview_open_catalog",
            "datafusion_create_external_tables",
            "target <= 0.20 (5x faster)",
        ),
    ];
    for (group, ours, theirs, target) in pairs {
        match (mean_ns(&out, group, ours), mean_ns(&out, group, theirs)) {
            (Some(a), Some(b)) => println!(
                "{group:<28} {:>10.2} ms vs {:>10.2} ms  ratio {:.3}  ({target})",
                a / 1e6,
                b / 1e6,
                a / b
            ),
            _ => println!("{group:<28} not measured in this run"),
        }
    }
}
