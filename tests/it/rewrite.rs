//! Queries answered from materialized views (`matview.rewrite`).
//!
//! The differential test: random grouped, filtered and joined queries over
//! a file-backed table while its files are appended, rewritten and
//! deleted and the views are refreshed or left stale; each query's answer
//! through a `MatviewSession` (rewrite on, `fresh`) must equal the query
//! run in a new plain `SessionContext` (floating-point values within a
//! relative 1e-9). It also counts how many were answered from a view.
//! `cargo test --test it rewrite::` runs 8 sequences; a longer run:
//! `DFMV_REWRITE_SEQUENCES=100 cargo test --test it rewrite::rewritten -- --nocapture`.
//! A failure prints the seed; `DFMV_REWRITE_SEED=<seed>` replays it.

use datafusion::arrow::array::{Array, RecordBatch, StringArray};
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;
use datafusion_matview::MatviewSession;

use super::incremental::{Rng, csv, multiset, same_rows};

/// The views every sequence creates.
const VIEWS: &[(&str, &str)] = &[
    (
        "v_grp",
        "SELECT grp, count(*) AS c, count(val) AS cv, sum(val) AS s, min(val) AS lo, max(val) AS hi FROM src GROUP BY grp",
    ),
    (
        "v_grp_tags",
        "SELECT grp, tags, count(*) AS c, count(val) AS cv, sum(val) AS s, min(val) AS lo, max(val) AS hi, min(id) AS ilo, max(id) AS ihi FROM src GROUP BY grp, tags",
    ),
    (
        "v_rows",
        "SELECT id, grp, val, tags FROM src WHERE val > 20",
    ),
    (
        "v_join",
        "SELECT d.label, s.grp, count(*) AS c, sum(s.val) AS s, count(s.val) AS cv, min(s.val) AS lo, max(s.val) AS hi FROM src s JOIN dim d ON s.grp = d.grp GROUP BY d.label, s.grp",
    ),
    (
        "v_even",
        "SELECT grp, tags, sum(val) AS s, count(*) AS c FROM src WHERE id % 2 = 0 GROUP BY grp, tags",
    ),
    (
        "v_pairs",
        "SELECT DISTINCT grp, tags FROM src WHERE val > 10",
    ),
    // Groups filtered: it answers only queries that filter them alike.
    (
        "v_having",
        "SELECT grp, count(*) AS c, sum(val) AS s, max(val) AS hi FROM src GROUP BY grp HAVING count(*) > 2",
    ),
    // A view that rolls `v_grp_tags` up: one aggregate of `src`.
    (
        "v_tags_roll",
        "SELECT tags, sum(c) AS c, sum(cv) AS cv, sum(s) AS s, min(lo) AS lo, max(hi) AS hi, max(grp) AS gmax FROM v_grp_tags GROUP BY tags",
    ),
    // A view over a view: it answers queries over `src` read through
    // `v_rows`'s definition, while `v_rows` is fresh.
    (
        "v_over_rows",
        "SELECT grp, tags, count(*) AS c, sum(val) AS s, max(id) AS ihi FROM v_rows GROUP BY grp, tags",
    ),
];

const AGGREGATES: &[&str] = &[
    "count(*)",
    "sum(val)",
    "min(val)",
    "max(val)",
    "avg(val)",
    "count(val)",
    "min(id)",
    "max(id)",
    "count(DISTINCT tags)",
    "max(tags)",
    "count(DISTINCT grp)",
];

fn predicate(rng: &mut Rng) -> String {
    let k = rng.below(5);
    let x = rng.below(100);
    match rng.below(10) {
        // `v_rows`'s own filter.
        8 => "val > 20".into(),
        0 => format!("grp = {k}"),
        1 => format!("grp >= {k}"),
        2 => format!("grp < {k}"),
        3 => format!("val > {x}"),
        4 => format!("val <= {x}"),
        5 => "id % 2 = 0".into(),
        6 => format!("tags = 't{}'", rng.below(4)),
        7 => format!("grp IN ({k}, {})", (k + 2) % 5),
        _ => format!("{k} < grp"),
    }
}

fn pick<'a>(rng: &mut Rng, from: &[&'a str], at_most: u64) -> Vec<&'a str> {
    let n = 1 + rng.below(at_most);
    let mut out = vec![];
    for _ in 0..n {
        let item = from[rng.below(from.len() as u64) as usize];
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn predicates(rng: &mut Rng, qualify: &str) -> String {
    let n = rng.below(3);
    let conjuncts: Vec<String> = (0..n)
        .map(|_| {
            predicate(rng)
                .replace("grp", &format!("{qualify}grp"))
                .replace("val", &format!("{qualify}val"))
                .replace("id %", &format!("{qualify}id %"))
                .replace("tags", &format!("{qualify}tags"))
        })
        .collect();
    if conjuncts.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conjuncts.join(" AND "))
    }
}

/// A random query over `src` (and `dim`).
fn query(rng: &mut Rng) -> String {
    match rng.below(6) {
        0..=2 => {
            let keys = match rng.below(4) {
                0 => vec![],
                1 => vec!["grp"],
                2 => vec!["tags"],
                _ => vec!["grp", "tags"],
            };
            let having = !keys.is_empty() && rng.below(3) == 0;
            // With `v_having`'s filter of its groups, mostly what it has.
            let aggregates = if having && rng.below(2) == 0 {
                pick(rng, &["count(*)", "sum(val)", "max(val)"], 2)
            } else {
                pick(rng, AGGREGATES, 3)
            };
            let select: Vec<&str> = keys.iter().copied().chain(aggregates).collect();
            let group = if keys.is_empty() {
                String::new()
            } else if having {
                format!(" GROUP BY {} HAVING count(*) > 2", keys.join(", "))
            } else {
                format!(" GROUP BY {}", keys.join(", "))
            };
            format!(
                "SELECT {} FROM src{}{group}",
                select.join(", "),
                predicates(rng, "")
            )
        }
        3 => format!("SELECT id, grp, val FROM src{}", predicates(rng, "")),
        4 => {
            let columns = match rng.below(4) {
                0 => "grp",
                1 => "tags",
                2 => "grp, tags",
                // DISTINCT over an aggregate.
                _ => {
                    let aggregate = pick(rng, &AGGREGATES[..6], 1)[0];
                    return format!(
                        "SELECT DISTINCT grp, {aggregate} FROM src{} GROUP BY grp",
                        predicates(rng, "")
                    );
                }
            };
            format!("SELECT DISTINCT {columns} FROM src{}", predicates(rng, ""))
        }
        _ => {
            let aggregates: Vec<String> = pick(rng, &AGGREGATES[..6], 2)
                .into_iter()
                .map(|a| a.replace("val", "s.val"))
                .collect();
            let keys = if rng.below(2) == 0 {
                "d.label"
            } else {
                "d.label, s.grp"
            };
            format!(
                "SELECT {keys}, {} FROM src s JOIN dim d ON s.grp = d.grp{} GROUP BY {keys}",
                aggregates.join(", "),
                predicates(rng, "s.")
            )
        }
    }
}

fn src_sql(dir: &std::path::Path) -> String {
    format!(
        "CREATE EXTERNAL TABLE src (id BIGINT, grp BIGINT, val DOUBLE, tags VARCHAR) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
        dir.join("src").display()
    )
}

fn dim_sql(dir: &std::path::Path) -> String {
    format!(
        "CREATE EXTERNAL TABLE dim (grp BIGINT, label VARCHAR) STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
        dir.join("dim.csv").display()
    )
}

/// A temporary folder whose `src/` holds `files` CSV files of `rows`
/// random rows each (ids going up), with an empty `dim.csv`; and `src`.
fn folder(rng: &mut Rng, files: u64, rows: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..files {
        std::fs::write(src.join(format!("f{i}.csv")), csv(rng, i * rows, rows)).unwrap();
    }
    std::fs::write(dir.path().join("dim.csv"), "grp,label\n").unwrap();
    (dir, src)
}

/// A session over the catalog in `dir`, with `src` (and `dim`) defined.
async fn session(dir: &std::path::Path) -> MatviewSession {
    session_with(dir, &[src_sql(dir), dim_sql(dir)]).await
}

/// A session over the catalog in `dir`, after `statements` (tables and
/// views to define).
async fn session_with(dir: &std::path::Path, statements: &[String]) -> MatviewSession {
    let s = MatviewSession::open(
        SessionContext::new(),
        &dir.join("catalog").display().to_string(),
    )
    .await
    .unwrap();
    for sql in statements {
        s.sql(sql).await.unwrap();
    }
    s
}

/// The `MatviewRewrite` lines `EXPLAIN sql` shows: the views answering
/// part of it, each with why it may (`fresh`, or the change its data was
/// computed past).
async fn rewritten(s: &MatviewSession, sql: &str) -> Vec<String> {
    explained(s, &format!("EXPLAIN {sql}"))
        .await
        .lines()
        .filter(|l| l.contains("MatviewRewrite"))
        .map(str::to_owned)
        .collect()
}

/// What a sequence counted.
#[derive(Default)]
struct Counts {
    asked: usize,
    /// Answered from a view.
    answered: usize,
    /// Answered from a view stale by files removed or rewritten, its data
    /// computed from what it keeps.
    past_removals: usize,
    /// Answered from the view over a view's rows.
    over_a_view: usize,
    /// Answered from the view that rolls another up.
    rolled_up: usize,
    /// Answered from the view with `HAVING`.
    having: usize,
    /// Answered from the view with `HAVING` while stale, its data computed
    /// past the change (its partials merged, and `HAVING` applied).
    stale_having: usize,
}

/// What `EXPLAIN VERBOSE sql` prints, its rows one after the other.
async fn explain_verbose(s: &MatviewSession, sql: &str) -> String {
    explained(s, &format!("EXPLAIN VERBOSE {sql}")).await
}

/// The plans an `EXPLAIN` statement prints, one after the other.
async fn explained(s: &MatviewSession, explain: &str) -> String {
    plans(&s.sql(explain).await.unwrap().collect().await.unwrap())
}

fn plans(batches: &[RecordBatch]) -> String {
    let mut text = String::new();
    for batch in batches {
        let plans = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        for i in 0..plans.len() {
            text.push_str(plans.value(i));
            text.push('\n');
        }
    }
    text
}

/// One sequence.
async fn sequence(seed: u64, steps: usize, queries: usize) -> Result<Counts, String> {
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        dir.path().join("dim.csv"),
        "grp,label\n0,zero\n1,one\n2,two\n4,four\n",
    )
    .unwrap();
    let mut files: Vec<String> = vec![];
    // Ids go up across every file written.
    let next_id = std::cell::Cell::new(0);
    let write = |rng: &mut Rng, name: &str, rows: u64| {
        std::fs::write(src.join(name), csv(rng, next_id.get(), rows)).unwrap();
        next_id.set(next_id.get() + rows);
    };
    // Two files, then one more at each append.
    let mut next_file = 0;
    let mut append = |rng: &mut Rng, rows: u64, files: &mut Vec<String>| {
        let name = format!("f{next_file:04}.csv");
        write(rng, &name, rows);
        next_file += 1;
        files.push(name);
    };
    for _ in 0..2 {
        let rows = 20 + rng.below(20);
        append(&mut rng, rows, &mut files);
    }
    let s = session(dir.path()).await;
    for (name, sql) in VIEWS {
        s.sql(&format!("CREATE MATERIALIZED VIEW {name} AS {sql}"))
            .await
            .unwrap();
    }
    let mut counts = Counts::default();
    for step in 0..steps {
        if step > 0 {
            // Change the table, then refresh some views.
            match rng.below(4) {
                0 => {
                    let rows = 1 + rng.below(15);
                    append(&mut rng, rows, &mut files);
                }
                1 if files.len() > 1 => {
                    let i = rng.below(files.len() as u64) as usize;
                    std::fs::remove_file(src.join(files.remove(i))).unwrap();
                }
                2 => {
                    let i = rng.below(files.len() as u64) as usize;
                    let rows = 1 + rng.below(20);
                    write(&mut rng, &files[i], rows);
                }
                _ => {}
            }
            for (name, _) in VIEWS {
                if rng.below(10) < 6 {
                    run(&s, &format!("REFRESH MATERIALIZED VIEW {name}")).await;
                }
            }
        }
        let oracle = SessionContext::new();
        oracle.sql(&src_sql(dir.path())).await.unwrap();
        oracle.sql(&dim_sql(dir.path())).await.unwrap();
        for _ in 0..queries {
            let sql = query(&mut rng);
            let expected = oracle.sql(&sql).await.unwrap().collect().await.unwrap();
            let got = s
                .sql(&sql)
                .await
                .map_err(|e| format!("seed {seed} step {step}: {sql}: {e}"))?
                .collect()
                .await
                .map_err(|e| format!("seed {seed} step {step}: {sql}: {e}"))?;
            let (expected, got) = (multiset(&expected), multiset(&got));
            if !same_rows(&expected, &got) {
                let explain = explained(&s, &format!("EXPLAIN {sql}")).await;
                return Err(format!(
                    "seed {seed} step {step}: {sql}\nexpected {:?}\n     got {:?}\n{explain}",
                    expected.iter().map(|r| &r.0).collect::<Vec<_>>(),
                    got.iter().map(|r| &r.0).collect::<Vec<_>>(),
                ));
            }
            counts.asked += 1;
            let used = rewritten(&s, &sql).await;
            if !used.is_empty() {
                counts.answered += 1;
            }
            if used
                .iter()
                .any(|l| l.contains("removed") || l.contains("rewritten"))
            {
                counts.past_removals += 1;
            }
            if used.iter().any(|l| l.contains("v_tags_roll")) {
                counts.rolled_up += 1;
            }
            if used.iter().any(|l| l.contains("v_over_rows")) {
                counts.over_a_view += 1;
            }
            if used.iter().any(|l| l.contains("v_having")) {
                counts.having += 1;
            }
            if used.iter().any(|l| l.contains("v_having (stale")) {
                counts.stale_having += 1;
            }
        }
    }
    Ok(counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewritten_queries_equal_the_query_run_from_scratch() {
    let seeds: Vec<u64> = match std::env::var("DFMV_REWRITE_SEED") {
        Ok(seed) => vec![seed.parse().unwrap()],
        Err(_) => {
            let n: u64 = std::env::var("DFMV_REWRITE_SEQUENCES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(8);
            (1..=n)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect()
        }
    };
    let (mut asked, mut answered, mut past_removals, mut over_a_view, mut having) = (0, 0, 0, 0, 0);
    let (mut rolled_up, mut stale_having) = (0, 0);
    let several = seeds.len() > 1;
    for seed in seeds {
        let counts = sequence(seed, 6, 8).await.unwrap_or_else(|e| panic!("{e}"));
        asked += counts.asked;
        answered += counts.answered;
        past_removals += counts.past_removals;
        over_a_view += counts.over_a_view;
        having += counts.having;
        rolled_up += counts.rolled_up;
        stale_having += counts.stale_having;
    }
    println!(
        "{answered} of {asked} queries answered from a view, {past_removals} of them \
         from a view stale by files removed or rewritten, {over_a_view} from the view \
         over a view's rows, {rolled_up} from the view that rolls another up, {having} \
         from the view with HAVING ({stale_having} of them while it was stale)"
    );
    // Queries over `src` that `v_rows`'s filter and grouping answer are
    // answered from the view over it.
    assert!(
        over_a_view > 0 || !several,
        "no query was answered from the view over a view"
    );
    assert!(
        rolled_up > 0 || !several,
        "no query was answered from the view that rolls another up"
    );
    assert!(
        having > 0 || !several,
        "no query was answered from the view with HAVING"
    );
    assert!(
        stale_having > 0 || !several,
        "no query was answered from the view with HAVING while it was stale"
    );
    // The generator's shapes are mostly ones a fresh view can answer.
    assert!(
        answered * 4 >= asked,
        "only {answered} of {asked} queries were answered from a view"
    );
    // Removals and rewrites the views keep lineage for are compensated.
    assert!(
        past_removals > 0 || !several,
        "no query was answered from a view stale by files removed or rewritten"
    );
}

/// The answer of `sql` in `s`, as sorted rows.
async fn answer(s: &MatviewSession, sql: &str) -> Vec<(String, Vec<String>)> {
    multiset(&s.sql(sql).await.unwrap().collect().await.unwrap())
}

/// The answer of `sql` run in a new plain context over the table.
async fn from_scratch(dir: &std::path::Path, sql: &str) -> Vec<(String, Vec<String>)> {
    plain_answer(&[src_sql(dir)], sql).await
}

/// The answer of `sql` run in a new plain context with `tables` defined.
async fn plain_answer(tables: &[String], sql: &str) -> Vec<(String, Vec<String>)> {
    let ctx = SessionContext::new();
    for table in tables {
        ctx.sql(table).await.unwrap();
    }
    multiset(&ctx.sql(sql).await.unwrap().collect().await.unwrap())
}

/// Another session (its own `SessionContext`, as another process has)
/// replaces and refreshes the view: this session answers from the view
/// as it is now, never from the shape it planned before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_replaced_or_refreshed_elsewhere_answers_as_it_is_now() {
    let mut rng = Rng(7);
    let (dir, src) = folder(&mut rng, 1, 40);
    let (a, b) = (session(dir.path()).await, session(dir.path()).await);
    a.sql("CREATE MATERIALIZED VIEW v AS SELECT grp, sum(val) AS s FROM src GROUP BY grp")
        .await
        .unwrap();
    let sums = "SELECT grp, sum(val) FROM src GROUP BY grp";
    let maxes = "SELECT grp, max(val) FROM src GROUP BY grp";
    assert!(!rewritten(&a, sums).await.is_empty());
    assert_eq!(answer(&a, sums).await, from_scratch(dir.path(), sums).await);
    // Replaced elsewhere with a column of the same name and type.
    b.sql(
        "CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT grp, max(val) AS s FROM src GROUP BY grp",
    )
    .await
    .unwrap();
    assert!(
        rewritten(&a, sums).await.is_empty(),
        "the sums are no longer in v"
    );
    assert_eq!(answer(&a, sums).await, from_scratch(dir.path(), sums).await);
    assert!(!rewritten(&a, maxes).await.is_empty());
    assert_eq!(
        answer(&a, maxes).await,
        from_scratch(dir.path(), maxes).await
    );
    // A new file: stale, but answered with the view's rows and the new
    // file's; a file the view read, rewritten: not used; refreshed
    // elsewhere: used again.
    std::fs::write(src.join("f1.csv"), csv(&mut rng, 40, 10)).unwrap();
    assert!(!rewritten(&a, maxes).await.is_empty());
    assert_eq!(
        answer(&a, maxes).await,
        from_scratch(dir.path(), maxes).await
    );
    std::fs::write(src.join("f0.csv"), csv(&mut rng, 50, 30)).unwrap();
    assert!(rewritten(&a, maxes).await.is_empty());
    assert_eq!(
        answer(&a, maxes).await,
        from_scratch(dir.path(), maxes).await
    );
    run(&b, "REFRESH MATERIALIZED VIEW v").await;
    assert!(!rewritten(&a, maxes).await.is_empty());
    assert_eq!(
        answer(&a, maxes).await,
        from_scratch(dir.path(), maxes).await
    );
}

/// Runs `sql` in `s` to the end.
async fn run(s: &MatviewSession, sql: &str) {
    s.sql(sql).await.unwrap().collect().await.unwrap();
}

/// Asserts that `sql` answers in `s` as run from scratch over the table
/// in `dir` (floating-point values within a relative 1e-9).
async fn answers_as_from_scratch(s: &MatviewSession, dir: &std::path::Path, sql: &str) {
    let (got, expected) = (answer(s, sql).await, from_scratch(dir, sql).await);
    assert!(same_rows(&expected, &got), "{sql}: {got:?} != {expected:?}");
}

/// A view over a materialized view answers queries over the base table
/// only while the view under it holds what its query gives now; another
/// session (as another process) changing the view under it is seen at the
/// next query, and `EXPLAIN VERBOSE` says why the view over it was not
/// used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_over_a_view_answers_while_the_view_under_it_is_fresh() {
    let mut rng = Rng(11);
    let (dir, src) = folder(&mut rng, 2, 30);
    let (a, b) = (session(dir.path()).await, session(dir.path()).await);
    for sql in [
        "CREATE MATERIALIZED VIEW layer AS SELECT id, grp, val FROM src WHERE val > 20",
        "CREATE MATERIALIZED VIEW top AS SELECT grp, sum(val) AS s, count(*) AS c FROM layer GROUP BY grp",
    ] {
        a.sql(sql).await.unwrap();
    }
    let query = "SELECT grp, sum(val), count(*) FROM src WHERE val > 20 GROUP BY grp";
    let check = |used: Vec<String>, view: &str| {
        assert_eq!(used.len(), 1, "{used:?}");
        assert!(
            used[0].contains(&format!("MatviewRewrite: {view} (")),
            "{used:?}"
        );
    };
    check(rewritten(&a, query).await, "top");
    answers_as_from_scratch(&a, dir.path(), query).await;
    // A file rewritten under the layer: the layer answers past it from
    // what it keeps; `top` is not used, and says why.
    std::fs::write(src.join("f0.csv"), csv(&mut rng, 100, 25)).unwrap();
    check(rewritten(&a, query).await, "layer");
    answers_as_from_scratch(&a, dir.path(), query).await;
    let verbose = explain_verbose(&a, query).await;
    assert!(
        verbose.contains(
            "not used top: it reads layer, whose data must be what its query gives now: \
             stale: src changed since its last refresh"
        ),
        "{verbose}"
    );
    // The layer refreshed elsewhere: `top` answers past the layer's change
    // (it keeps no partials over a materialized view that lost files, so
    // the layer answers); once `top` is refreshed elsewhere too, `top`.
    run(&b, "REFRESH MATERIALIZED VIEW layer").await;
    answers_as_from_scratch(&a, dir.path(), query).await;
    run(&b, "REFRESH MATERIALIZED VIEW top").await;
    check(rewritten(&a, query).await, "top");
    answers_as_from_scratch(&a, dir.path(), query).await;
    // The layer replaced elsewhere with another filter: `top` was computed
    // from the old one and is not used, even once the new layer is fresh.
    b.sql(
        "CREATE OR REPLACE MATERIALIZED VIEW layer AS SELECT id, grp, val FROM src WHERE val > 30",
    )
    .await
    .unwrap();
    assert!(
        rewritten(&a, query)
            .await
            .iter()
            .all(|l| !l.contains("MatviewRewrite: top")),
        "top was computed from the layer's old definition"
    );
    answers_as_from_scratch(&a, dir.path(), query).await;
    // Refreshed over the new layer, `top` answers what it now computes.
    run(&b, "REFRESH MATERIALIZED VIEW top").await;
    let narrower = "SELECT grp, sum(val) FROM src WHERE val > 30 GROUP BY grp";
    check(rewritten(&a, narrower).await, "top");
    answers_as_from_scratch(&a, dir.path(), narrower).await;
    assert!(
        rewritten(&a, query)
            .await
            .iter()
            .all(|l| !l.contains("MatviewRewrite: top")),
        "top no longer holds the rows of val > 20"
    );
}

/// `EXPLAIN VERBOSE` names each candidate view and why it did not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_verbose_says_why_a_view_was_not_used() {
    let (dir, src) = folder(&mut Rng(3), 1, 20);
    let s = session(dir.path()).await;
    for sql in [
        "CREATE MATERIALIZED VIEW big AS SELECT id, val FROM src WHERE val > 50",
        "CREATE MATERIALIZED VIEW by_grp AS SELECT grp, sum(val) AS s FROM src GROUP BY grp",
        "CREATE MATERIALIZED VIEW empty AS SELECT id FROM src WITH NO DATA",
        "CREATE MATERIALIZED VIEW mine WITH (rewrite = false) AS SELECT id, val FROM src",
    ] {
        s.sql(sql).await.unwrap();
    }
    let verbose = explain_verbose(&s, "SELECT id, val FROM src WHERE val > 10").await;
    let start = verbose.find("not used").expect("the rewrite's row");
    let rewrite_row: Vec<&str> = verbose[start..]
        .lines()
        .take_while(|l| l.starts_with("not used"))
        .collect();
    assert_eq!(
        rewrite_row,
        [
            "not used empty: it has not been populated",
            "not used mine: its rewrite setting is false",
            "not used big: the query admits values of datafusion.public.src.val the view left out",
            "not used by_grp: the view is grouped and the query is not",
        ]
    );
    // The one file rewritten: an incremental refresh would read all of
    // it, so the view does not answer, and says why.
    std::fs::write(src.join("f0.csv"), csv(&mut Rng(4), 0, 20)).unwrap();
    let verbose = explain_verbose(&s, "SELECT id, val FROM src WHERE val > 60").await;
    assert!(
        verbose.contains("not used big: stale: src changed since its last refresh, and its data is not computed past the change as an incremental refresh would: "),
        "{verbose}"
    );
}

/// A Hive-partitioned table: a view stale by files appended to one
/// partition and rewritten in another answers as its incremental refresh
/// would compute it (the table read as only the changed files), equal to
/// the query run from scratch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_tables_are_answered_past_appends_and_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("psrc");
    let mut rng = Rng(11);
    let mut next_id = 0;
    let mut write = |rng: &mut Rng, path: &str, rows: u64| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, csv(rng, next_id, rows)).unwrap();
        next_id += rows;
    };
    for (i, shard) in ["a", "a", "b", "b", "c", "c"].iter().enumerate() {
        write(&mut rng, &format!("shard={shard}/f{i}.csv"), 30);
    }
    let table = format!(
        "CREATE EXTERNAL TABLE psrc (id BIGINT, grp BIGINT, val DOUBLE, tags VARCHAR, shard VARCHAR) \
         STORED AS CSV PARTITIONED BY (shard) LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
        root.display()
    );
    let s = session_with(
        dir.path(),
        &[
            table.clone(),
            "CREATE MATERIALIZED VIEW p_sums AS SELECT shard, grp, sum(val) AS s, count(*) AS c FROM psrc GROUP BY shard, grp".into(),
            "CREATE MATERIALIZED VIEW p_rows AS SELECT id, shard, val FROM psrc WHERE val > 30".into(),
        ],
    )
    .await;
    let queries = [
        (
            "p_sums",
            "SELECT shard, sum(val), count(*) FROM psrc GROUP BY shard",
        ),
        ("p_rows", "SELECT id, shard, val FROM psrc WHERE val > 50"),
    ];
    let tables = [table];
    let check = |changed: &'static str| {
        let (s, tables) = (&s, &tables);
        async move {
            for (view, sql) in queries {
                let used = rewritten(s, sql).await;
                assert!(
                    used.len() == 1
                        && used[0].contains(&format!("MatviewRewrite: {view} (stale: psrc: "))
                        && used[0].contains(changed),
                    "{view} after {changed}: {used:?}"
                );
                let (expected, got) = (plain_answer(tables, sql).await, answer(s, sql).await);
                assert!(same_rows(&expected, &got), "{sql}: {expected:?} vs {got:?}");
            }
        }
    };
    write(&mut rng, "shard=d/g0.csv", 5);
    check("1 file(s) appended").await;
    write(&mut rng, "shard=b/f2.csv", 12);
    check("1 file(s) rewritten").await;
}

/// Both tables of a join gained files. The delta rule would join each
/// table's new files with the other table whole, reading about what the
/// query reads, so the refresh's cost rule turns it down and the views do
/// not answer: they say why, and the answer is the query's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_whose_tables_both_gained_files_are_not_answered_at_full_cost() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dim) = (dir.path().join("src"), dir.path().join("dims"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&dim).unwrap();
    let mut rng = Rng(13);
    for (i, first) in [0, 40, 80, 120].into_iter().enumerate() {
        std::fs::write(src.join(format!("f{i}.csv")), csv(&mut rng, first, 40)).unwrap();
    }
    std::fs::write(dim.join("d0.csv"), "grp,label\n0,zero\n1,one\n2,two\n").unwrap();
    let tables = [
        src_sql(dir.path()),
        format!(
            "CREATE EXTERNAL TABLE dims (grp BIGINT, label VARCHAR) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
            dim.display()
        ),
    ];
    let mut statements = tables.to_vec();
    statements.extend([
        "CREATE MATERIALIZED VIEW j_sums AS SELECT d.label, s.grp, sum(s.val) AS total, count(*) AS c FROM src s JOIN dims d ON s.grp = d.grp GROUP BY d.label, s.grp".to_owned(),
        "CREATE MATERIALIZED VIEW j_rows AS SELECT s.id, s.val, d.label FROM src s JOIN dims d ON s.grp = d.grp".to_owned(),
    ]);
    let s = session_with(dir.path(), &statements).await;
    // A new file in each table: new rows of src meet old and new labels,
    // and the new labels meet old rows of src.
    std::fs::write(src.join("f4.csv"), csv(&mut rng, 160, 10)).unwrap();
    std::fs::write(dim.join("d1.csv"), "grp,label\n3,three\n4,four\n1,uno\n").unwrap();
    for (view, sql) in [
        (
            "j_sums",
            "SELECT d.label, sum(s.val), count(*) FROM src s JOIN dims d ON s.grp = d.grp GROUP BY d.label",
        ),
        (
            "j_rows",
            "SELECT s.id, d.label FROM src s JOIN dims d ON s.grp = d.grp",
        ),
    ] {
        assert!(rewritten(&s, sql).await.is_empty(), "{view} answered");
        let verbose = explain_verbose(&s, sql).await;
        assert!(
            verbose.contains(&format!(
                "not used {view}: stale: dims, src changed since its last refresh, and its data \
                 is not computed past the change as an incremental refresh would: dims: 1 \
                 file(s) appended, src: 1 file(s) appended; computing only that would cost"
            )),
            "{verbose}"
        );
        let expected = plain_answer(&tables, sql).await;
        let got = answer(&s, sql).await;
        assert!(same_rows(&expected, &got), "{sql}: {expected:?} vs {got:?}");
    }
}

/// A query with parameters is answered from views once their values are
/// bound: through [`MatviewSession::with_param_values`] (what the Flight
/// SQL server does for a prepared statement) and SQL `EXECUTE`, fresh,
/// past an append, and after another session replaced the view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_with_parameters_are_answered_once_bound() {
    let mut rng = Rng(11);
    let (dir, src) = folder(&mut rng, 1, 40);
    let (a, b) = (session(dir.path()).await, session(dir.path()).await);
    a.sql("CREATE MATERIALIZED VIEW v AS SELECT grp, sum(val) AS s FROM src GROUP BY grp")
        .await
        .unwrap();
    let with_parameter = "SELECT grp, sum(val) FROM src WHERE grp > $1 GROUP BY grp";
    let with_value = "SELECT grp, sum(val) FROM src WHERE grp > 2 GROUP BY grp";
    let same_answer = |got: Vec<(String, Vec<String>)>, expected: Vec<(String, Vec<String>)>| {
        assert!(same_rows(&expected, &got), "{expected:?} vs {got:?}");
    };
    let views = |df: &datafusion::dataframe::DataFrame| -> Vec<String> {
        df.logical_plan()
            .display_indent()
            .to_string()
            .lines()
            .filter(|l| l.contains("MatviewRewrite"))
            .map(|l| l.trim().to_owned())
            .collect()
    };

    // The library: planned with the parameter, then bound.
    let planned = a.sql(with_parameter).await.unwrap();
    assert!(views(&planned).is_empty(), "not answered before binding");
    let bound = a
        .with_param_values(planned, vec![ScalarValue::Int64(Some(2))])
        .await
        .unwrap();
    assert_eq!(views(&bound), ["MatviewRewrite: v (fresh)"]);
    same_answer(
        multiset(&bound.collect().await.unwrap()),
        from_scratch(dir.path(), with_value).await,
    );

    // SQL: PREPARE, then EXECUTE, fresh and past an appended file.
    a.sql(&format!("PREPARE above(BIGINT) AS {with_parameter}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let executed = a.sql("EXECUTE above(2)").await.unwrap();
    assert_eq!(views(&executed), ["MatviewRewrite: v (fresh)"]);
    same_answer(
        multiset(&executed.collect().await.unwrap()),
        from_scratch(dir.path(), with_value).await,
    );
    std::fs::write(src.join("f1.csv"), csv(&mut rng, 40, 10)).unwrap();
    let executed = a.sql("EXECUTE above(2)").await.unwrap();
    assert_eq!(
        views(&executed),
        ["MatviewRewrite: v (stale: src: 1 file(s) appended; merged into the existing groups)"]
    );
    same_answer(
        multiset(&executed.collect().await.unwrap()),
        from_scratch(dir.path(), with_value).await,
    );

    // Another session gives v other sums: the prepared statement is no
    // longer answered from it, and its answer is still the query's.
    b.sql(
        "CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT grp, max(val) AS s FROM src GROUP BY grp",
    )
    .await
    .unwrap();
    let executed = a.sql("EXECUTE above(2)").await.unwrap();
    assert!(views(&executed).is_empty(), "{:?}", views(&executed));
    same_answer(
        multiset(&executed.collect().await.unwrap()),
        from_scratch(dir.path(), with_value).await,
    );
    // Parameters DataFusion refuses are refused as it refuses them.
    let error = a.sql("EXECUTE above(2, 3)").await.unwrap_err().to_string();
    assert!(
        error.contains("Prepared statement 'above' expects 1 parameters, but 2 provided"),
        "{error}"
    );
}

/// A grouped view that computes over its aggregate (a column computed
/// from aggregates, its key not first) keeps partials of the aggregate's
/// own columns: stale by a rewritten file, it answers from them merged
/// and computed as its refresh would, never from those columns read as
/// its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_computed_over_its_aggregate_answers_past_a_rewrite_in_its_own_columns() {
    let mut rng = Rng(5);
    let (dir, src) = folder(&mut rng, 4, 30);
    let s = session(dir.path()).await;
    s.sql("CREATE MATERIALIZED VIEW v_mean AS SELECT sum(val) / count(*) AS mean, grp, count(*) AS c FROM src GROUP BY grp")
        .await
        .unwrap();
    std::fs::write(src.join("f1.csv"), csv(&mut rng, 200, 10)).unwrap();
    for sql in [
        "SELECT grp, count(*) FROM src GROUP BY grp",
        "SELECT DISTINCT grp FROM src",
        "SELECT count(*), max(grp) FROM src",
    ] {
        let used = rewritten(&s, sql).await;
        assert!(
            used.len() == 1
                && used[0].contains("MatviewRewrite: v_mean (stale: src: 1 file(s) rewritten"),
            "{sql}: {used:?}"
        );
        let (expected, got) = (from_scratch(dir.path(), sql).await, answer(&s, sql).await);
        assert!(same_rows(&expected, &got), "{sql}: {expected:?} vs {got:?}");
    }
}
