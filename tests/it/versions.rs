//! Reading views at retained versions (`materialized_view_at`, `VERSION AS
//! OF`) and the rows versions changed (`materialized_view_changes`): in
//! another process's session, past the retention window, and against the
//! versions themselves after random source changes.

use std::collections::BTreeMap;
use std::time::Duration;

use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::physical_plan::displayable;
use datafusion::prelude::SessionContext;
use datafusion_matview::{Error, MatviewOptions, MatviewSession};

/// A CSV-backed source table `src (id BIGINT, grp VARCHAR, amount
/// BIGINT)` in a folder of its own.
struct Source {
    dir: tempfile::TempDir,
}

impl Source {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, file: &str, rows: &[(i64, &str, i64)]) {
        let mut text = String::from("id,grp,amount\n");
        for (id, grp, amount) in rows {
            text.push_str(&format!("{id},{grp},{amount}\n"));
        }
        std::fs::write(self.dir.path().join(file), text).unwrap();
    }

    fn remove(&self, file: &str) {
        std::fs::remove_file(self.dir.path().join(file)).unwrap();
    }

    fn register_sql(&self) -> String {
        format!(
            "CREATE EXTERNAL TABLE src (id BIGINT, grp VARCHAR, amount BIGINT) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
            self.dir.path().display()
        )
    }
}

async fn open(catalog: &std::path::Path, retention: Duration) -> MatviewSession {
    MatviewSession::open_with_options(
        SessionContext::new(),
        &catalog.display().to_string(),
        MatviewOptions {
            retention,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// The rows of `sql` as a multiset of text rows.
async fn multiset(s: &MatviewSession, sql: &str) -> BTreeMap<String, i64> {
    let batches = s.sql(sql).await.unwrap().collect().await.unwrap();
    let mut rows = BTreeMap::new();
    let options = FormatOptions::default().with_null("NULL");
    for batch in batches {
        let columns: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let text: Vec<String> = columns.iter().map(|c| c.value(row).to_string()).collect();
            *rows.entry(text.join("|")).or_insert(0) += 1;
        }
    }
    rows
}

async fn refresh(s: &MatviewSession, sql: &str) -> (String, u64) {
    let batches = s.sql(sql).await.unwrap().collect().await.unwrap();
    let mode = ArrayFormatter::try_new(batches[0].column(1).as_ref(), &FormatOptions::default())
        .unwrap()
        .value(0)
        .to_string();
    let version = ArrayFormatter::try_new(batches[0].column(3).as_ref(), &FormatOptions::default())
        .unwrap()
        .value(0)
        .to_string();
    (mode, version.parse().unwrap())
}

/// Another process (a session over a new DataFusion context) reads the
/// versions and changes the first one committed, and a version whose
/// replaced files are past the retention window is an error naming the
/// oldest version still retained.
#[tokio::test]
async fn versions_read_in_another_process_and_expire_with_retention() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    let source = Source::new();
    source.write("a.csv", &[(1, "x", 10), (2, "y", 20)]);
    let writer = open(&catalog, Duration::ZERO).await;
    writer.sql(&source.register_sql()).await.unwrap();
    writer
        .sql("CREATE MATERIALIZED VIEW v AS SELECT id, amount FROM src")
        .await
        .unwrap();
    source.write("a.csv", &[(1, "x", 10), (2, "y", 21)]);
    assert_eq!(
        refresh(&writer, "REFRESH MATERIALIZED VIEW v FULL").await,
        ("full".to_owned(), 2)
    );

    // A new process, with its own retention window.
    let reader = open(&catalog, Duration::from_secs(3600)).await;
    let at = |v: u64| format!("SELECT id, amount FROM materialized_view_at('v', {v})");
    assert_eq!(
        multiset(&reader, &at(1)).await,
        BTreeMap::from([("1|10".into(), 1), ("2|20".into(), 1)])
    );
    assert_eq!(
        multiset(
            &reader,
            "SELECT id, amount, _change_type, _version FROM materialized_view_changes('v', 1)"
        )
        .await,
        BTreeMap::from([("2|20|delete|2".into(), 1), ("2|21|insert|2".into(), 1)])
    );

    // The writer's cleanup (retention zero) removes version 1's files and
    // log entry; both processes then get the same error.
    writer.cleanup().await.unwrap();
    for s in [&writer, &reader] {
        let error = s.sql(&at(1)).await.unwrap_err();
        assert!(
            matches!(
                &error,
                Error::VersionNotRetained {
                    version: 1,
                    oldest: Some(2),
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "cannot read materialized view \"v\" at version 1: that version is older than the retention window and was removed\nHINT: The oldest version it retains is 2; versions are kept for the retention window after a refresh replaces them."
        );
    }
    assert_eq!(
        multiset(&reader, &at(2)).await,
        BTreeMap::from([("1|10".into(), 1), ("2|21".into(), 1)])
    );
}

/// After an append, the changes read the appended data file alone: the
/// scan of `materialized_view_changes` names only the new snapshot's
/// files.
#[tokio::test]
async fn changes_after_an_append_read_only_the_appended_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("cat"), Duration::from_secs(3600)).await;
    let source = Source::new();
    source.write("a.csv", &[(1, "x", 10), (2, "y", 20)]);
    s.sql(&source.register_sql()).await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT id, amount FROM src WHERE amount > 0")
        .await
        .unwrap();
    let first = crate::common::view(&s, "v").await;
    let old_file = first.view.snapshot.as_ref().unwrap().files[0].path.clone();
    source.write("b.csv", &[(3, "x", 30)]);
    assert_eq!(
        refresh(&s, "REFRESH MATERIALIZED VIEW v").await,
        ("incremental".to_owned(), 2)
    );
    let latest = crate::common::view(&s, "v").await;
    let new_files: Vec<String> = latest
        .view
        .snapshot
        .as_ref()
        .unwrap()
        .files
        .iter()
        .map(|f| f.path.clone())
        .filter(|p| *p != old_file)
        .collect();
    assert_eq!(new_files.len(), 1);
    let df = s
        .sql("SELECT * FROM materialized_view_changes('v', 1, 2)")
        .await
        .unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    let shown = displayable(plan.as_ref()).indent(true).to_string();
    let file_name = |p: &str| p.rsplit('/').next().unwrap().to_owned();
    assert!(shown.contains(&file_name(&new_files[0])), "{shown}");
    assert!(!shown.contains(&file_name(&old_file)), "{shown}");
    assert!(!shown.contains("AggregateExec"), "{shown}");
    assert_eq!(
        multiset(&s, "SELECT * FROM materialized_view_changes('v', 1, 2)").await,
        BTreeMap::from([("3|30|insert|2".into(), 1)])
    );
}

/// After each of many random source changes and refreshes (appends,
/// removals, rewrites; row-wise and aggregate views; duplicate rows),
/// applying `materialized_view_changes(v, a, b)` to version `a` gives
/// version `b` exactly, for the step just made and for the whole range;
/// and every version read back equals what the query returned when that
/// version was committed.
#[tokio::test]
async fn changes_take_each_version_to_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("cat"), Duration::from_secs(3600)).await;
    let source = Source::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let random_rows = |next: &mut dyn FnMut(u64) -> u64| -> Vec<(i64, &'static str, i64)> {
        (0..1 + next(4))
            .map(|_| {
                (
                    next(3) as i64,
                    ["x", "y", "z"][next(3) as usize],
                    next(4) as i64 * 10,
                )
            })
            .collect()
    };
    source.write("f0.csv", &random_rows(&mut next));
    s.sql(&source.register_sql()).await.unwrap();
    let views = [
        (
            "rowwise",
            "SELECT id, grp, amount FROM src WHERE amount >= 10",
        ),
        (
            "grouped",
            "SELECT grp, sum(amount) AS total, count(*) AS n FROM src GROUP BY grp",
        ),
        ("dedup", "SELECT DISTINCT grp, amount FROM src"),
    ];
    // What each version held when it was committed.
    let mut expected: BTreeMap<(&str, u64), BTreeMap<String, i64>> = BTreeMap::new();
    for (view, query) in views {
        s.sql(&format!("CREATE MATERIALIZED VIEW {view} AS {query}"))
            .await
            .unwrap();
        expected.insert((view, 1), multiset(&s, query).await);
    }
    let mut files = vec!["f0.csv".to_owned()];
    for step in 1..=12 {
        match next(3) {
            0 => {
                let file = format!("f{step}.csv");
                source.write(&file, &random_rows(&mut next));
                files.push(file);
            }
            1 if files.len() > 1 => {
                let file = files.remove(next(files.len() as u64) as usize);
                source.remove(&file);
            }
            _ => {
                let file = &files[next(files.len() as u64) as usize];
                source.write(file, &random_rows(&mut next));
            }
        }
        for (view, query) in views {
            let (_, version) = refresh(&s, &format!("REFRESH MATERIALIZED VIEW {view}")).await;
            expected.insert((view, version), multiset(&s, query).await);
        }
    }
    for ((view, version), rows) in &expected {
        let at = multiset(
            &s,
            &format!("SELECT * FROM materialized_view_at('{view}', {version})"),
        )
        .await;
        assert_eq!(&at, rows, "{view} at version {version}");
    }
    for (view, _) in views {
        let versions: Vec<u64> = expected
            .keys()
            .filter(|(v, _)| *v == view)
            .map(|(_, n)| *n)
            .collect();
        let last = *versions.last().unwrap();
        for from in &versions {
            for to in [from + 1, last] {
                if to > last || to <= *from {
                    continue;
                }
                let mut rows = expected[&(view, *from)].clone();
                let changes = multiset(
                    &s,
                    &format!("SELECT * FROM materialized_view_changes('{view}', {from}, {to})"),
                )
                .await;
                for (row, count) in changes {
                    let mut parts: Vec<&str> = row.split('|').collect();
                    let version: u64 = parts.pop().unwrap().parse().unwrap();
                    assert!(version > *from && version <= to, "{row}");
                    let change = parts.pop().unwrap();
                    let entry = rows.entry(parts.join("|")).or_insert(0);
                    match change {
                        "insert" => *entry += count,
                        "delete" => *entry -= count,
                        other => panic!("change type {other}"),
                    }
                }
                rows.retain(|_, n| *n != 0);
                assert!(
                    rows.values().all(|n| *n > 0),
                    "{view} {from}..{to}: {rows:?}"
                );
                assert_eq!(rows, expected[&(view, to)], "{view} from {from} to {to}");
            }
        }
    }
}

/// Planned on the session's `SessionContext` directly, on a
/// single-threaded runtime, the functions refuse with a clear error
/// instead of stalling the runtime their reads may wait for; through the
/// session the same statement works.
#[tokio::test]
async fn outside_the_session_a_single_threaded_runtime_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("cat"), Duration::from_secs(3600)).await;
    s.sql("CREATE TABLE t AS VALUES (1)").await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT column1 AS x FROM t")
        .await
        .unwrap();
    let sql = "SELECT x FROM materialized_view_at('v', 1)";
    let error = s.context().sql(sql).await.unwrap_err().to_string();
    assert!(
        error.contains("need a multi-threaded Tokio runtime"),
        "{error}"
    );
    assert_eq!(multiset(&s, sql).await, BTreeMap::from([("1".into(), 1)]));
}
