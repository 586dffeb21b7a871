//! Differential test of refresh: random sequences of changes to a
//! file-backed source (append a file, delete one, rewrite one, add an empty
//! one, change nothing) and of definitions (the plain view redefined, the
//! external table re-created with other options, or with another column
//! type that some views cannot take); after every step each view is
//! refreshed (in whatever mode REFRESH picks: no_op, incremental or full)
//! and compared, as a multiset, with its query run from scratch in a new
//! `SessionContext` that shares no cache with the session (floating-point
//! values within a relative 1e-9). A refresh that fails must fail because
//! the query fails or no longer gives the view's columns, name the view,
//! and leave its data as it was.
//!
//! A third of the refreshes ask for `INCREMENTAL` (and all after src and the
//! joined `dim` both gained files), so plans the cost rule turns down are
//! checked too. `cargo test --test it incremental::` runs 60 sequences of 8
//! steps; `DFMV_DIFF_SEQUENCES` and `DFMV_DIFF_STEPS` set how many. The long
//! version, as the README reports it:
//! `DFMV_DIFF_SEQUENCES=10000 DFMV_DIFF_STEPS=10 cargo test --release --test it incremental:: -- --nocapture`.
//! A failure prints the seed and steps; `DFMV_DIFF_SEED=<seed>` (with the
//! same `DFMV_DIFF_STEPS`) replays that sequence,
//! and `DFMV_DIFF_TRACE=1` (with `--nocapture`) prints every refresh's mode
//! and detail.

use std::collections::BTreeMap;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::SessionContext;
use datafusion_matview::MatviewSession;
use futures::StreamExt;

/// The view shapes: (name, query). Later ones may read earlier ones.
const VIEWS: &[(&str, &str)] = &[
    ("identity", "SELECT * FROM src"),
    ("filtered", "SELECT id, val FROM src WHERE val > 50"),
    (
        "computed",
        "SELECT id, val * 2 + 1 AS v2, upper(tags) AS t, length(tags) AS n FROM src WHERE id % 3 <> 0",
    ),
    (
        "unnested",
        "SELECT id, unnest(string_to_array(tags, '|')) AS tag FROM src",
    ),
    (
        "grouped",
        "SELECT grp, count(*) AS c, sum(val) AS s, min(val) AS lo, max(val) AS hi, avg(val) AS a FROM src GROUP BY grp",
    ),
    (
        "grouped_expr",
        "SELECT id % 4 AS k, count(val) FILTER (WHERE val > 20) AS c, max(tags) AS t, avg(id) AS a FROM src GROUP BY id % 4",
    ),
    (
        "totals",
        "SELECT count(*) AS n, sum(id) AS s, avg(val) AS a FROM src",
    ),
    (
        "having",
        "SELECT grp, count(*) AS c, max(val) AS hi FROM src GROUP BY grp HAVING count(*) > 3 AND min(val) < 60",
    ),
    (
        "over_aggregates",
        "SELECT id % 3 AS k, sum(val) / count(*) AS mean, max(val) - min(val) AS spread, avg(val) + 1 AS a1 FROM src GROUP BY id % 3, grp",
    ),
    (
        "nested",
        "SELECT max(c) AS most, count(*) AS groups, sum(s) AS total FROM (SELECT grp, count(*) AS c, sum(val) AS s FROM src GROUP BY grp)",
    ),
    (
        "distinct_count",
        "SELECT grp, count(DISTINCT tags) AS d FROM src GROUP BY grp",
    ),
    (
        "distinct_rows",
        "SELECT DISTINCT grp, val % 10 AS v FROM src",
    ),
    (
        "union_all",
        "SELECT id, val FROM src WHERE val > 80 UNION ALL SELECT id, val + 1000 AS val FROM src WHERE val < 20",
    ),
    (
        "union_other",
        "SELECT CAST(id AS VARCHAR) AS k FROM src WHERE val > 90 UNION ALL SELECT label AS k FROM dim UNION ALL SELECT 'fixed' AS k",
    ),
    (
        "joined",
        "SELECT s.id, d.label FROM src s JOIN dim d ON s.grp = d.grp",
    ),
    (
        "left_joined",
        "SELECT s.id, s.val, d.label FROM src s LEFT JOIN dim d ON s.grp = d.grp WHERE s.val > 10",
    ),
    (
        "joined_grouped",
        "SELECT d.label, count(*) AS c, sum(s.val) AS s FROM src s JOIN dim d ON s.grp = d.grp GROUP BY d.label",
    ),
    (
        "through_view",
        "SELECT id, upper(tags) AS t FROM plain WHERE val < 70",
    ),
    (
        "over_view",
        "SELECT count(*) AS n, sum(val) AS s FROM filtered",
    ),
    (
        "rows_over_view",
        "SELECT id, val * 2 AS v2 FROM filtered WHERE id % 2 = 0",
    ),
    (
        "clocked",
        "SELECT id, val FROM src WHERE now() > TIMESTAMP '2000-01-01 00:00:00'",
    ),
];

/// Views over the Hive partition column `shard`, chosen only when the
/// table is partitioned: windows by it recompute the partitions a change
/// touched.
const PARTITIONED_VIEWS: &[(&str, &str)] = &[(
    "windowed",
    "SELECT shard, id, sum(val) OVER (PARTITION BY shard ORDER BY id) AS running, row_number() OVER (PARTITION BY shard ORDER BY id DESC) AS back FROM src WHERE val > 10",
)];

/// What the relations under the views are defined as, at one step.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Definitions {
    /// The plain view keeps rows whose `id` is a multiple of this.
    plain_modulus: u64,
    /// The table reads a lone `t0` tag as NULL.
    null_t0: bool,
    /// The table reads `grp` as text rather than a number.
    grp_as_text: bool,
    /// The table is Hive-partitioned by `shard` (its files are in
    /// `shard=s0/`, `shard=s1/` and `shard=s2/`); fixed per sequence.
    partitioned: bool,
}

impl Definitions {
    fn src_sql(&self, dir: &std::path::Path) -> String {
        format!(
            "CREATE OR REPLACE EXTERNAL TABLE src (id BIGINT, grp {}, val DOUBLE, tags VARCHAR{}) STORED AS CSV {}LOCATION '{}/' OPTIONS ('format.has_header' 'true'{})",
            if self.grp_as_text {
                "VARCHAR"
            } else {
                "BIGINT"
            },
            if self.partitioned {
                ", shard VARCHAR"
            } else {
                ""
            },
            if self.partitioned {
                "PARTITIONED BY (shard) "
            } else {
                ""
            },
            dir.display(),
            if self.null_t0 {
                ", 'format.null_regex' '^t0$'"
            } else {
                ""
            }
        )
    }

    fn plain_sql(&self) -> String {
        format!(
            "CREATE OR REPLACE VIEW plain AS SELECT * FROM src WHERE id % {} = 0",
            self.plain_modulus
        )
    }
}

fn dim_sql(dir: &std::path::Path) -> String {
    format!(
        "CREATE EXTERNAL TABLE dim (grp BIGINT, label VARCHAR) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
        dir.join("dim").display()
    )
}

/// `view`'s query run from scratch in a new context, with the sources as
/// `definitions` say: the oracle.
async fn oracle(
    dir: &std::path::Path,
    definitions: Definitions,
    view: &str,
) -> datafusion::error::Result<Vec<RecordBatch>> {
    let ctx = SessionContext::new();
    ctx.sql(&definitions.src_sql(&dir.join("src"))).await?;
    ctx.sql(&dim_sql(dir)).await?;
    ctx.sql(&definitions.plain_sql()).await?;
    ctx.sql(&from_scratch(view, definitions))
        .await?
        .collect()
        .await
}

/// The query of `view` over the sources only (views inlined), to run from scratch.
fn from_scratch(view: &str, definitions: Definitions) -> String {
    match view {
        "over_view" => {
            "SELECT count(*) AS n, sum(val) AS s FROM (SELECT id, val FROM src WHERE val > 50)"
                .into()
        }
        "rows_over_view" => {
            "SELECT id, val * 2 AS v2 FROM (SELECT id, val FROM src WHERE val > 50) \
                             WHERE id % 2 = 0"
                .into()
        }
        "through_view" => format!(
            "SELECT id, upper(tags) AS t FROM (SELECT * FROM src WHERE id % {} = 0) WHERE val < 70",
            definitions.plain_modulus
        ),
        other => VIEWS
            .iter()
            .chain(PARTITIONED_VIEWS)
            .find(|(n, _)| *n == other)
            .unwrap()
            .1
            .to_string(),
    }
}

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Rows as text, sorted by their text with floating-point values rounded
/// to 6 decimals; each row keeps its exact cells for [`same_rows`].
pub(crate) fn multiset(batches: &[RecordBatch]) -> Vec<(String, Vec<String>)> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = vec![];
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            let key: Vec<String> = cells
                .iter()
                .map(|text| match text.parse::<f64>() {
                    Ok(x) if text.contains('.') => format!("{x:.6}"),
                    _ => text.clone(),
                })
                .collect();
            rows.push((key.join("|"), cells));
        }
    }
    rows.sort();
    rows
}

/// Whether two multisets hold the same rows, floating-point values equal
/// within a relative 1e-9 (sums and averages may be added up in another
/// order, so their last bits differ).
pub(crate) fn same_rows(a: &[(String, Vec<String>)], b: &[(String, Vec<String>)]) -> bool {
    let same_cell = |x: &String, y: &String| match (x.parse::<f64>(), y.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => x == y,
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|((_, x), (_, y))| {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_cell(x, y))
        })
}

pub(crate) fn csv(rng: &mut Rng, first_id: u64, rows: u64) -> String {
    let mut text = String::from("id,grp,val,tags\n");
    for id in first_id..first_id + rows {
        let tags: Vec<String> = (0..rng.below(3) + 1)
            .map(|_| format!("t{}", rng.below(4)))
            .collect();
        text.push_str(&format!(
            "{id},{},{}.{},{}\n",
            rng.below(5),
            rng.below(100),
            rng.below(100),
            tags.join("|")
        ));
    }
    text
}

/// How often each refresh mode was chosen.
type ModeCounts = BTreeMap<String, usize>;

/// One sequence; returns how often each mode was chosen.
async fn sequence(seed: u64, steps: usize) -> Result<ModeCounts, String> {
    let mut modes = BTreeMap::new();
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut files: Vec<String> = vec![];
    let mut next_id = 0;
    let mut next_file = 0;
    let partitioned = rng.below(3) == 0;
    let file_name = |n: u64| {
        if partitioned {
            format!("shard=s{}/f{n:04}.csv", n % 3)
        } else {
            format!("f{n:04}.csv")
        }
    };
    let put = |name: &str, text: String| {
        let path = src.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    for _ in 0..2 {
        let name = file_name(next_file);
        let rows = 20 + rng.below(20);
        put(&name, csv(&mut rng, next_id, rows));
        next_id += rows;
        next_file += 1;
        files.push(name);
    }
    let s = MatviewSession::open(
        SessionContext::new(),
        &dir.path().join("catalog").display().to_string(),
    )
    .await
    .unwrap();
    let mut definitions = Definitions {
        plain_modulus: 2,
        null_t0: false,
        grp_as_text: false,
        partitioned,
    };
    s.sql(&definitions.src_sql(&src)).await.unwrap();
    // A file-backed table that gains files now and then, alone or with
    // src: joins with it are incremental when only it, or only src, gains
    // rows, and by the delta rule when both do.
    let dim = dir.path().join("dim");
    std::fs::create_dir_all(&dim).unwrap();
    std::fs::write(
        dim.join("d0000.csv"),
        "grp,label\n0,zero\n1,one\n2,two\n4,four\n",
    )
    .unwrap();
    let mut next_dim = 1;
    let mut dim_rows = |rng: &mut Rng| {
        let mut text = String::from("grp,label\n");
        for _ in 0..1 + rng.below(3) {
            let grp = rng.below(7);
            text.push_str(&format!(
                "{grp},{}\n",
                ["new", "more", "again"][rng.below(3) as usize]
            ));
        }
        let name = format!("d{next_dim:04}.csv");
        next_dim += 1;
        std::fs::write(dim.join(&name), text).unwrap();
        name
    };
    s.sql(&dim_sql(dir.path())).await.unwrap();
    s.sql(&definitions.plain_sql()).await.unwrap();
    // A few shapes per sequence, chosen by the seed; the views over a view
    // need filtered.
    let mut chosen: Vec<&str> = VIEWS
        .iter()
        .map(|(n, _)| *n)
        .filter(|_| rng.below(2) == 0)
        .collect();
    if (chosen.contains(&"over_view") || chosen.contains(&"rows_over_view"))
        && !chosen.contains(&"filtered")
    {
        chosen.insert(0, "filtered");
    }
    if chosen.is_empty() {
        chosen.push("filtered");
    }
    if partitioned {
        chosen.extend(
            PARTITIONED_VIEWS
                .iter()
                .map(|(n, _)| *n)
                .filter(|_| rng.below(2) == 0),
        );
    }
    for name in &chosen {
        let query = VIEWS
            .iter()
            .chain(PARTITIONED_VIEWS)
            .find(|(n, _)| n == name)
            .unwrap()
            .1;
        s.sql(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    // What each view held after its last successful refresh, and the
    // definitions it was computed under.
    let mut held: BTreeMap<&str, Vec<(String, Vec<String>)>> = BTreeMap::new();
    let mut computed_under: BTreeMap<&str, Definitions> =
        chosen.iter().map(|name| (*name, definitions)).collect();
    for step in 0..steps {
        let choice = rng.below(11);
        let change = match choice {
            // 9: dim gains a file too.
            0 | 1 | 9 => {
                let name = file_name(next_file);
                let rows = 1 + rng.below(8);
                put(&name, csv(&mut rng, next_id, rows));
                next_id += rows;
                next_file += 1;
                files.push(name.clone());
                if choice == 9 {
                    format!("append {name} and dim/{}", dim_rows(&mut rng))
                } else {
                    format!("append {name}")
                }
            }
            2 if files.len() > 1 => {
                let name = files.remove(rng.below(files.len() as u64) as usize);
                std::fs::remove_file(src.join(&name)).unwrap();
                // Now and then dim gains a file at the same time.
                if rng.below(3) == 0 {
                    format!("delete {name} and dim/{}", dim_rows(&mut rng))
                } else {
                    format!("delete {name}")
                }
            }
            3 if !files.is_empty() => {
                let name = files[rng.below(files.len() as u64) as usize].clone();
                let rows = 1 + rng.below(30);
                put(&name, csv(&mut rng, next_id, rows));
                next_id += rows;
                if rng.below(3) == 0 {
                    format!("rewrite {name} and dim/{}", dim_rows(&mut rng))
                } else {
                    format!("rewrite {name}")
                }
            }
            4 => {
                let name = file_name(next_file);
                // A header alone, or zero bytes (a file created before it
                // is written; a later rewrite is then an append).
                let header = if rng.below(2) == 0 {
                    ""
                } else {
                    "id,grp,val,tags\n"
                };
                put(&name, header.to_owned());
                next_file += 1;
                files.push(name.clone());
                format!("empty {name}")
            }
            5 => {
                definitions.plain_modulus = 5 - definitions.plain_modulus;
                s.sql(&definitions.plain_sql()).await.unwrap();
                format!("plain redefined: id % {}", definitions.plain_modulus)
            }
            6 => {
                definitions.null_t0 = !definitions.null_t0;
                s.sql(&definitions.src_sql(&src)).await.unwrap();
                // CREATE OR REPLACE of the table leaves the plain view planned
                // against the old one: re-create it too, as a user would.
                s.sql(&definitions.plain_sql()).await.unwrap();
                format!("src re-created, null_regex {}", definitions.null_t0)
            }
            7 => {
                definitions.grp_as_text = !definitions.grp_as_text;
                s.sql(&definitions.src_sql(&src)).await.unwrap();
                s.sql(&definitions.plain_sql()).await.unwrap();
                format!("src re-created, grp as text {}", definitions.grp_as_text)
            }
            8 => format!("append dim/{}", dim_rows(&mut rng)),
            _ => "nothing".to_string(),
        };
        for name in &chosen {
            let expected = oracle(dir.path(), definitions, name).await;
            // A third of the refreshes, and all after src and dim both
            // gained files, ask for INCREMENTAL whatever the cost rule
            // says, so that the incremental plans it turns down over these
            // small tables are checked too; where the shape or the change
            // rules it out, a plain REFRESH follows.
            let forced = rng.below(3) == 0 || change.contains(" and dim/");
            let mut refreshed = if forced {
                s.sql(&format!("REFRESH MATERIALIZED VIEW {name} INCREMENTAL"))
                    .await
            } else {
                s.sql(&format!("REFRESH MATERIALIZED VIEW {name}")).await
            };
            if forced
                && let Err(e) = &refreshed
                && e.to_string().contains("cannot be refreshed incrementally")
            {
                refreshed = s.sql(&format!("REFRESH MATERIALIZED VIEW {name}")).await;
            }
            let refreshed = match refreshed {
                Ok(df) => df.collect().await.unwrap(),
                Err(e) => {
                    // Only a query that fails, or no longer gives the view's
                    // columns, may fail a refresh; the view keeps its data.
                    let message = e.to_string();
                    if !message.contains(&format!("\"{name}\"")) {
                        return Err(format!(
                            "step {step} ({change}): refresh {name} failed without naming it: {message}"
                        ));
                    }
                    let view_df = s.sql(&format!("SELECT * FROM {name}")).await.unwrap();
                    let columns = |fields: &datafusion::arrow::datatypes::Fields| -> Vec<String> {
                        fields
                            .iter()
                            .map(|f| format!("{} {}", f.name(), f.data_type()))
                            .collect()
                    };
                    if let Ok(batches) = &expected
                        && let Some(batch) = batches.first()
                        && columns(batch.schema().fields())
                            == columns(view_df.schema().inner().fields())
                    {
                        return Err(format!(
                            "step {step} ({change}): refresh {name} failed though its query runs: {message}"
                        ));
                    }
                    let now = multiset(&view_df.collect().await.unwrap());
                    if held.get(*name).is_some_and(|before| *before != now) {
                        return Err(format!(
                            "step {step} ({change}): a failed refresh changed {name}"
                        ));
                    }
                    *modes.entry(format!("{name}:error")).or_default() += 1;
                    continue;
                }
            };
            let text = |column: &str| {
                let array = refreshed[0].column_by_name(column).unwrap();
                ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())
                    .unwrap()
                    .value(0)
                    .to_string()
            };
            let mode = text("mode");
            if std::env::var("DFMV_DIFF_TRACE").is_ok() {
                eprintln!("step {step} ({change}) {name}: {mode}: {}", text("detail"));
            }
            // Computing only what changed is never right across a
            // redefinition of what the view reads since it was computed,
            // nor when a query depends on the clock.
            let then = computed_under[name];
            let src_redefined =
                (then.null_t0, then.grp_as_text) != (definitions.null_t0, definitions.grp_as_text);
            let reads_redefined = match *name {
                "through_view" => src_redefined || then.plain_modulus != definitions.plain_modulus,
                "over_view" | "rows_over_view" => false,
                _ => src_redefined,
            };
            if (reads_redefined || *name == "clocked") && mode != "full" {
                return Err(format!(
                    "step {step} ({change}): view {name} refreshed {mode}: {}",
                    text("detail")
                ));
            }
            // Incremental refreshes that evicted data files, or recomputed
            // partial aggregates, are counted apart.
            let detail = text("detail");
            let kind = if mode == "incremental" && detail.contains("evicted") {
                "evicting".to_string()
            } else if mode == "incremental" && detail.contains("partial aggregate") {
                "regrouping".to_string()
            } else if mode == "incremental" && detail.contains("delta rule") {
                "delta".to_string()
            } else {
                mode.clone()
            };
            *modes.entry(format!("{name}:{kind}")).or_default() += 1;
            // src lost or rewrote a file while dim gained one: evicting
            // (or recomputing partials) by src's lineage, with dim's new
            // rows added per lineage group.
            if (kind == "evicting" || kind == "regrouping") && change.contains(" and dim/") {
                *modes.entry(format!("{name}:{kind}_with_dim")).or_default() += 1;
            }
            if detail.contains("has no lineage") {
                *modes.entry(format!("{name}:lineage_lost")).or_default() += 1;
            }
            if partitioned {
                *modes.entry(format!("partitioned:{kind}")).or_default() += 1;
            }
            let view = multiset(
                &s.sql(&format!("SELECT * FROM {name}"))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap(),
            );
            let expected = match expected {
                Ok(batches) => multiset(&batches),
                Err(e) => {
                    return Err(format!(
                        "step {step} ({change}): view {name} refreshed {mode}, but its query fails: {e}"
                    ));
                }
            };
            if !same_rows(&view, &expected) {
                return Err(format!(
                    "step {step} ({change}): view {name} refreshed {mode} holds {:?}, its query gives {:?}",
                    view.iter().map(|r| &r.1).collect::<Vec<_>>(),
                    expected.iter().map(|r| &r.1).collect::<Vec<_>>()
                ));
            }
            held.insert(name, view);
            computed_under.insert(name, definitions);
        }
    }
    Ok(modes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_always_equals_the_query_run_from_scratch() {
    let sequences: u64 = std::env::var("DFMV_DIFF_SEQUENCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(60);
    let steps: usize = std::env::var("DFMV_DIFF_STEPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8);
    let seeds: Vec<u64> = match std::env::var("DFMV_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => {
            let base = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            (0..sequences)
                .map(|i| base.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                .collect()
        }
    };
    // Two sequences at a time: each has its own folder and catalog. The
    // first failure stops the run; a long run reports its progress.
    let mut results = futures::stream::iter(seeds.clone())
        .map(|seed| async move { (seed, tokio::spawn(sequence(seed, steps)).await.unwrap()) })
        .buffer_unordered(2);
    let mut modes: BTreeMap<String, usize> = BTreeMap::new();
    let started = std::time::Instant::now();
    let mut done = 0;
    while let Some((seed, result)) = results.next().await {
        match result {
            Ok(counts) => {
                for (mode, n) in counts {
                    *modes.entry(mode).or_default() += n;
                }
            }
            Err(e) => panic!("DFMV_DIFF_SEED={seed} DFMV_DIFF_STEPS={steps}: {e}"),
        }
        done += 1;
        if done % 500 == 0 {
            println!(
                "{done} of {} sequences passed in {:.0?}",
                seeds.len(),
                started.elapsed()
            );
        }
    }
    println!(
        "{} sequences of {steps} steps; refreshes per view and mode: {modes:?}",
        seeds.len()
    );
    if seeds.len() >= 50 {
        let count = |key: &str| modes.get(key).copied().unwrap_or(0);
        let all = |mode: &str| -> usize {
            modes
                .iter()
                .filter(|(k, _)| k.ends_with(&format!(":{mode}")))
                .map(|(_, n)| n)
                .sum()
        };
        for mode in ["full", "incremental", "no_op", "evicting", "regrouping"] {
            // Also over a Hive-partitioned source (about a third of them).
            assert!(
                count(&format!("partitioned:{mode}")) > 0,
                "no {mode} refresh over a partitioned source in {modes:?}"
            );
            assert!(all(mode) > 0, "no {mode} refresh in {modes:?}");
        }
        // Each shape that can be refreshed incrementally was, at least once.
        for (view, _) in VIEWS {
            let incremental = count(&format!("{view}:incremental"));
            match *view {
                // A UNION ALL branch that does not read src would be
                // added again over the new files alone.
                "clocked" | "union_other" => {
                    assert_eq!(incremental, 0, "{view}")
                }
                _ => assert!(incremental > 0, "{view} never incremental: {modes:?}"),
            }
        }
        // Removals and rewrites evict by lineage in row-wise views over one
        // table (a materialized view too, whose evictions remove its data
        // files), and over a join with the small dim (lineage follows src).
        for view in [
            "rows_over_view",
            "identity",
            "filtered",
            "computed",
            "unnested",
            "through_view",
            "union_all",
            "joined",
            "left_joined",
            // Appends, removals and rewrites in a partition: that
            // partition recomputed.
            "windowed",
        ] {
            assert!(
                count(&format!("{view}:evicting")) > 0,
                "{view} never evicted: {modes:?}"
            );
        }
        // A removal or rewrite in src while dim gained a file: src's
        // lineage evicts, and dim's new rows join each kept group. (The
        // left join's dim side is not row-wise: its appends recompute.)
        for view in [
            "joined:evicting_with_dim",
            "joined_grouped:regrouping_with_dim",
        ] {
            assert!(count(view) > 0, "no {view} in {modes:?}");
        }
        // Nor does an append to dim, alone or with src, leave data files
        // without lineage that a later change to src would have to
        // recompute the view for. (An aggregate without partials says
        // "rows cannot be taken back out" also when it never had them:
        // its source then made fewer than two groups of files.)
        assert_eq!(count("joined:lineage_lost"), 0, "{modes:?}");
        // Appends to both src and dim, joined: the delta rule.
        for view in ["joined", "joined_grouped"] {
            assert!(
                count(&format!("{view}:delta")) > 0,
                "{view} never refreshed by the delta rule: {modes:?}"
            );
        }
        // Removals and rewrites under an aggregate over one table (or over
        // src joined with dim, or over the materialized view `filtered`,
        // whose evictions remove its data files) recompute only the partial
        // aggregates of the files they touched.
        for view in [
            "over_view",
            "grouped",
            "grouped_expr",
            "totals",
            "distinct_rows",
            "having",
            "over_aggregates",
            "nested",
            "distinct_count",
            "joined_grouped",
        ] {
            assert!(
                count(&format!("{view}:regrouping")) > 0,
                "{view} never recomputed partial aggregates: {modes:?}"
            );
        }
    }
}
