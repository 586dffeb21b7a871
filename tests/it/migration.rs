//! A catalog written in format 1 (by the build before format 2, checked in
//! under `tests/data/format1-catalog`: an external table and a plain view
//! remembered, an aggregate view, a view with column names refreshed
//! twice, a view never populated, a view over another view, a dropped
//! view) opens with this build, reads as it is, and moves to format 2 with
//! its next commit or `migrate`, reading the same afterwards. A catalog
//! written in format 2 (`tests/data/format2-catalog`) reads as it is and
//! needs no migration: format 3 only records relation changes one by one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::prelude::SessionContext;
use datafusion_matview::{Error, MatviewOptions, MatviewSession};

use crate::common;

const FIXTURE: &str = "tests/data/format1-catalog";

/// A catalog the build before format 3 wrote, with `dfmv -f` from the
/// repository root: tables `orders` (CSV, columns given; later replaced by
/// `CREATE OR REPLACE` with one more option), `inferred` (its schema
/// inferred from a folder) and `gone` (dropped), the plain view `recent`,
/// and the materialized views `daily` (over `orders`), `on_recent` (over
/// `recent`) and `from_inferred`, all populated. Its remembered tables
/// keep absolute locations under the checkout that wrote it, so the test
/// reads the views' snapshots, not the tables' files.
const FORMAT2_FIXTURE: &str = "tests/data/format2-catalog";

/// A copy of the checked-in format 1 catalog (tests never change the
/// original).
fn copy_fixture() -> (tempfile::TempDir, PathBuf) {
    copy_of(FIXTURE)
}

fn copy_of(fixture: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog");
    common::copy_dir(Path::new(fixture), &catalog);
    (dir, catalog)
}

async fn open(catalog: &Path) -> MatviewSession {
    let options = MatviewOptions {
        remember_relations: true,
        ..Default::default()
    };
    MatviewSession::open_with_options(
        SessionContext::new(),
        &catalog.display().to_string(),
        options,
    )
    .await
    .unwrap()
}

/// The rows of `sql`, each as its values joined by `|`.
async fn rows(s: &MatviewSession, sql: &str) -> Vec<String> {
    let batches = s.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out = vec![];
    for batch in batches {
        for row in 0..batch.num_rows() {
            let values: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, row).unwrap())
                .collect();
            out.push(values.join("|"));
        }
    }
    out
}

/// What every view and the remembered plain view hold in the fixture.
async fn assert_fixture_data(s: &MatviewSession) {
    assert_eq!(
        rows(s, "SELECT * FROM daily ORDER BY day").await,
        ["2026-01-01|15|2", "2026-01-02|7|1", "2026-01-03|1|1"]
    );
    assert_eq!(
        rows(s, "SELECT d, a FROM big ORDER BY a").await,
        ["2026-01-01|5", "2026-01-02|7", "2026-01-01|10"]
    );
    assert_eq!(rows(s, "SELECT days FROM on_daily").await, ["3"]);
    assert_eq!(
        rows(s, "SELECT * FROM recent ORDER BY day").await,
        ["2026-01-02|7", "2026-01-03|1"]
    );
    assert!(matches!(
        s.sql("SELECT * FROM later").await.unwrap_err(),
        Error::NotPopulated { .. }
    ));
    assert!(s.sql("SELECT * FROM gone").await.is_err());
}

#[tokio::test]
async fn a_format_1_catalog_reads_as_it_is_and_migrates_on_its_next_commit() {
    let (_dir, catalog) = copy_fixture();
    let before = common::files_under(&catalog);
    let s = open(&catalog).await;
    assert!(s.catalog().is_format_1());
    assert_eq!(s.catalog().index().version, 9);
    let names: Vec<String> = s
        .catalog()
        .index()
        .views
        .keys()
        .map(|n| n.name.clone())
        .collect();
    assert_eq!(names, ["big", "daily", "later", "on_daily"]);
    every_relation_builds(&s).await;
    assert_fixture_data(&s).await;
    let listed = rows(
        &s,
        "SELECT table_name, populated FROM materialized_views() ORDER BY table_name",
    )
    .await;
    assert_eq!(
        listed,
        ["big|true", "daily|true", "later|false", "on_daily|true"]
    );
    // Reading wrote nothing.
    assert_eq!(common::files_under(&catalog), before);

    // The next commit moves the catalog: one index version with the whole
    // index as its base, and one log per view; the format 1 versions stay
    // (for their retention window, as any superseded version).
    let refreshed = s
        .sql("REFRESH MATERIALIZED VIEW on_daily FULL")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(refreshed[0].column(1).as_string::<i32>().value(0), "full");
    assert!(!s.catalog().is_format_1());
    let index = s.catalog().index();
    assert_eq!(index.version, 10);
    assert!(index.views.values().all(|e| !e.slot.is_empty()));
    let latest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(catalog.join("_matview/log/00000000000000000010.json")).unwrap(),
    )
    .unwrap();
    // Builds before format 2 read `format_version` first and refuse
    // anything above 1 by name (tests/it/golden.rs pins that message).
    assert_eq!(
        latest["format_version"],
        datafusion_matview::spec::MANIFEST_FORMAT
    );
    assert_eq!(latest["base"]["views"].as_array().unwrap().len(), 4);
    let after = common::files_under(&catalog);
    // The format 1 versions stay for their retention window, as any
    // superseded version. (The fixture's retired snapshots may be deleted
    // here: they were retired when the fixture was made, over an hour ago.)
    let format1_log: Vec<&String> = before
        .iter()
        .filter(|f| f.starts_with("_matview/log/"))
        .collect();
    assert_eq!(format1_log.len(), 9);
    assert!(
        format1_log.iter().all(|f| after.contains(*f)),
        "a format 1 version was deleted"
    );
    let view_logs = after
        .iter()
        .filter(|f| f.starts_with("_matview/views/") && f.ends_with("1.json"))
        .count();
    assert_eq!(view_logs, 4, "{after:?}");
    // The refresh itself went to on_daily's own log.
    let on_daily = s
        .catalog()
        .view(&datafusion_matview::spec::QualifiedName::new(
            "datafusion",
            "public",
            "on_daily",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(on_daily.version, 2);
    assert_fixture_data(&s).await;

    // A new process reads format 2, with the same data, and refreshes.
    drop(s);
    let s = open(&catalog).await;
    assert!(!s.catalog().is_format_1());
    let before = s.catalog().index().version;
    every_relation_builds(&s).await;
    assert_fixture_data(&s).await;
    // Building the fixture's tables, inferred (format 1 kept no schema),
    // kept what was inferred: one commit per table.
    let tables = s
        .catalog()
        .relations()
        .iter()
        .filter(|r| r.kind == datafusion_matview::spec::RelationKind::ExternalTable)
        .count() as u64;
    assert!(tables > 0);
    assert_eq!(s.catalog().index().version, before + tables);
    assert!(
        s.catalog().relations().iter().all(|r| r.resolved.is_some()
            || r.kind != datafusion_matview::spec::RelationKind::ExternalTable)
    );
    let version = s.catalog().index().version;
    let outcome = s
        .sql("REFRESH MATERIALIZED VIEW later")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(outcome[0].column(2).as_primitive::<Int64Type>().value(0), 4);
    assert_eq!(rows(&s, "SELECT count(*) FROM later").await, ["4"]);
    assert_eq!(
        s.catalog().index().version,
        version,
        "a refresh leaves the index"
    );
}

/// A CASCADE whose first refresh commits moves the catalog to format 2
/// while the statement runs: the views refreshed after it are still found
/// (the statement's base index, loaded once, is format 1).
#[tokio::test]
async fn a_cascade_that_migrates_a_format_1_catalog_refreshes_every_view() {
    let (_dir, catalog) = copy_fixture();
    let s = open(&catalog).await;
    assert!(s.catalog().is_format_1());
    let refreshed = s
        .sql("REFRESH MATERIALIZED VIEW on_daily FULL CASCADE")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let views: Vec<String> = refreshed
        .iter()
        .flat_map(|b| {
            let names = b.column(0).as_string::<i32>();
            (0..b.num_rows()).map(move |i| names.value(i).to_owned())
        })
        .collect();
    assert_eq!(views, ["daily", "on_daily"]);
    assert!(!s.catalog().is_format_1());
    assert_fixture_data(&s).await;
}

#[tokio::test]
async fn migrate_moves_a_format_1_catalog_once() {
    let (_dir, catalog) = copy_fixture();
    let s = open(&catalog).await;
    assert!(s.migrate().await.unwrap());
    assert!(!s.catalog().is_format_1());
    assert_eq!(s.catalog().index().version, 10);
    assert!(!s.migrate().await.unwrap(), "already format 2");
    assert_eq!(s.catalog().index().version, 10);
    assert_fixture_data(&s).await;
}

#[tokio::test]
async fn two_processes_migrating_at_once_make_one_format_2_catalog() {
    let (_dir, catalog) = copy_fixture();
    let (a, b) = (open(&catalog).await, open(&catalog).await);
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra || rb, "one of them migrated");
    // One base version; the logs of the migration that lost are gone.
    let after = common::files_under(&catalog);
    let logs: BTreeSet<&str> = after
        .iter()
        .filter_map(|f| f.strip_prefix("_matview/views/"))
        .filter_map(|f| f.split('/').next())
        .collect();
    assert_eq!(logs.len(), 4, "{after:?}");
    assert!(!after.contains("_matview/log/00000000000000000011.json"));
    for s in [&a, &b] {
        s.catalog().reload().await.unwrap();
        assert_fixture_data(s).await;
    }
    // Both write on top of it.
    a.sql("REFRESH MATERIALIZED VIEW daily FULL").await.unwrap();
    b.sql("CREATE MATERIALIZED VIEW more AS SELECT 1 AS x")
        .await
        .unwrap();
    let c = open(&catalog).await;
    assert_eq!(c.catalog().index().views.len(), 5);
    assert_eq!(rows(&c, "SELECT x FROM more").await, ["1"]);
}

#[test]
fn the_fixture_is_format_1() {
    let text =
        std::fs::read_to_string(Path::new(FIXTURE).join("_matview/log/00000000000000000009.json"))
            .unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["format_version"], 1);
    assert_eq!(value["views"].as_array().unwrap().len(), 4);
    let retired = value["retired"].as_array().unwrap();
    assert!(
        !retired.is_empty(),
        "a dropped view and a refresh retired data"
    );
}

/// Every remembered relation can be built (they are built where first
/// used, so this names each).
async fn every_relation_builds(s: &MatviewSession) {
    for relation in s.catalog().relations() {
        let name = &relation.name;
        s.sql(&format!(
            "SELECT * FROM {}.{}.{} LIMIT 0",
            name.catalog, name.schema, name.name
        ))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .collect()
        .await
        .unwrap();
    }
}

/// The remembered relations' names, in creation order.
fn relation_names(s: &MatviewSession) -> Vec<String> {
    s.catalog()
        .relations()
        .iter()
        .map(|r| r.name.name.clone())
        .collect()
}

/// Index version `version` of `catalog`, as JSON.
fn index_version(catalog: &Path, version: u64) -> serde_json::Value {
    let path = catalog.join(format!("_matview/log/{version:020}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[tokio::test]
async fn a_format_2_catalog_reads_as_it_is_and_records_relation_changes_one_by_one() {
    let (dir, catalog) = copy_of(FORMAT2_FIXTURE);
    assert_eq!(index_version(&catalog, 10)["format_version"], 2);
    let before = common::files_under(&catalog);
    let s = open(&catalog).await;
    assert!(!s.catalog().is_format_1());
    assert_eq!(s.catalog().index().version, 10);
    assert_eq!(relation_names(&s), ["orders", "inferred", "recent"]);
    let orders = &s.catalog().relations()[0];
    assert!(
        orders.sql.contains("'format.delimiter' ','"),
        "replaced in its place"
    );
    assert!(
        s.catalog()
            .relations()
            .iter()
            .filter(|r| r.name.name != "recent")
            .all(|r| r.resolved.is_some())
    );
    let expect_views = async |s: &MatviewSession| {
        assert_eq!(
            rows(s, "SELECT * FROM daily ORDER BY day").await,
            ["2026-01-01|15|2", "2026-01-02|7|1", "2026-01-03|1|1"]
        );
        assert_eq!(rows(s, "SELECT * FROM on_recent").await, ["2|8"]);
        assert_eq!(rows(s, "SELECT * FROM from_inferred").await, ["4"]);
    };
    expect_views(&s).await;
    assert_eq!(
        common::files_under(&catalog),
        before,
        "reading wrote nothing"
    );

    // A relation remembered, then forgotten: each index version names
    // that one relation alone, in format 3.
    let csv = dir.path().join("more.csv");
    std::fs::write(&csv, "x\n1\n").unwrap();
    s.sql(&format!(
        "CREATE EXTERNAL TABLE more STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
        csv.display()
    ))
    .await
    .unwrap();
    let created = index_version(&catalog, 11);
    assert_eq!(
        created["format_version"],
        datafusion_matview::spec::MANIFEST_FORMAT
    );
    let actions = created["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["put_relation"]["name"]["name"], "more");
    assert_eq!(relation_names(&s), ["orders", "inferred", "recent", "more"]);

    // Another process reads format 2 and format 3 versions together.
    let other = open(&catalog).await;
    assert_eq!(
        relation_names(&other),
        ["orders", "inferred", "recent", "more"]
    );
    assert_eq!(rows(&other, "SELECT x FROM more").await, ["1"]);
    other.sql("DROP TABLE more").await.unwrap();
    let dropped = index_version(&catalog, 12);
    for v in 11..15 {
        if let Ok(b) = std::fs::read(catalog.join(format!("_matview/log/{v:020}.json"))) {
            eprintln!("{v}: {}", String::from_utf8_lossy(&b));
        }
    }
    assert_eq!(
        dropped["format_version"],
        datafusion_matview::spec::MANIFEST_FORMAT
    );
    assert_eq!(
        dropped["actions"],
        serde_json::json!([{"remove_relation": {"catalog": "datafusion", "schema": "public", "name": "more"}}])
    );
    let third = open(&catalog).await;
    assert_eq!(relation_names(&third), ["orders", "inferred", "recent"]);
    expect_views(&third).await;
    // The first process catches up with the other's change.
    s.catalog().reload().await.unwrap();
    assert_eq!(relation_names(&s), ["orders", "inferred", "recent"]);
}

#[test]
fn the_format_2_fixture_repeats_every_relation_in_each_version() {
    for version in 1..=10u64 {
        let value = index_version(Path::new(FORMAT2_FIXTURE), version);
        assert_eq!(value["format_version"], 2, "version {version}");
        let text = value.to_string();
        assert!(!text.contains("put_relation") && !text.contains("remove_relation"));
    }
}
