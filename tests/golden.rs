//! The manifest format, pinned by checked-in files.
//!
//! `tests/data/manifest-format1.json` is a manifest this crate wrote (from a
//! dfmv session: an external table and a plain view remembered, the first
//! with a withheld secret option; a GROUP BY view with aggregate state
//! refreshed incrementally, one with column names over a plain view, one
//! over another materialized view, one over an in-memory table, one using
//! `now()`, one never populated; retired snapshots; per-file statistics and
//! lineage). Reading it must give exactly these values, and writing them
//! back must give exactly that JSON: renaming, dropping or re-encoding a
//! field (ours, or the Arrow schema's serde form) fails here before it can
//! strand a catalog (format 1 is what catalogs written before format 2 hold;
//! this build reads and migrates them). `manifest-format4.json` stands for
//! a newer build's file: refused by name, never half read. The index
//! actions of format 3 are pinned here too; `tests/data/format2-catalog`
//! (read by `tests/migration.rs`) pins what format 2 wrote.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion_matview::Error;
use datafusion_matview::catalog::parse_manifest;
use datafusion_matview::spec::{Fingerprint, Manifest, QualifiedName, RelationKind};

const FORMAT1: &str = include_str!("data/manifest-format1.json");
const FORMAT4: &str = include_str!("data/manifest-format4.json");

fn read() -> Manifest {
    parse_manifest("tests/data/manifest-format1.json", FORMAT1.as_bytes(), 11).unwrap()
}

fn name(n: &str) -> QualifiedName {
    QualifiedName::new("datafusion", "public", n)
}

#[test]
fn format_1_writes_back_exactly_as_checked_in() {
    let written = serde_json::to_value(read()).unwrap();
    let golden: serde_json::Value = serde_json::from_str(FORMAT1).unwrap();
    assert_eq!(written, golden);
}

#[test]
fn format_1_reads_every_kind_of_entry() {
    let m = read();
    assert_eq!((m.format_version, m.version), (1, 11));
    assert_eq!(m.commit_id, "7a9644aa333d412b967150b0868f939c");

    // Remembered relations, one with a withheld secret.
    let sales = m
        .relations
        .iter()
        .find(|r| r.name == name("sales"))
        .unwrap();
    assert_eq!(sales.kind, RelationKind::ExternalTable);
    assert_eq!(sales.withheld_options, ["aws.secret_access_key"]);
    let big = m.relations.iter().find(|r| r.name == name("big")).unwrap();
    assert_eq!(big.kind, RelationKind::View);
    assert_eq!(
        big.sql,
        "CREATE VIEW big AS SELECT * FROM sales WHERE amount > 10"
    );

    // Aggregate state of an incrementally refreshed GROUP BY view, and a
    // files fingerprint with a definition digest.
    let by_grp = m.view(&name("by_grp")).unwrap();
    let snapshot = by_grp.snapshot.as_ref().unwrap();
    assert_eq!(snapshot.state_columns, ["__dfmv_sum_2", "__dfmv_count_2"]);
    assert_eq!(snapshot.row_count, 2);
    let Fingerprint::Files { files, definition } = &snapshot.sources[0].fingerprint else {
        panic!("files fingerprint expected");
    };
    assert_eq!(files.len(), 2);
    assert_eq!(definition.len(), 32);

    // Column names, and a plain view's fingerprint (definition + sources).
    let picked = m.view(&name("picked")).unwrap();
    assert_eq!(picked.definition.column_names, ["k", "amt"]);
    let Fingerprint::View {
        sources,
        definition,
    } = &picked.snapshot.as_ref().unwrap().sources[0].fingerprint
    else {
        panic!("view fingerprint expected");
    };
    assert_eq!(sources[0].name, name("sales"));
    assert!(!definition.is_empty());

    // A view over a materialized view: its snapshot id, files and id.
    let over = m.view(&name("over_mv")).unwrap();
    let Fingerprint::Snapshot {
        id,
        files,
        definition,
    } = &over.snapshot.as_ref().unwrap().sources[0].fingerprint
    else {
        panic!("snapshot fingerprint expected");
    };
    assert_eq!(id.as_deref(), Some(snapshot.id.as_str()));
    assert_eq!(files.len(), snapshot.files.len());
    assert_eq!(definition, &by_grp.id);

    // An in-memory source cannot be fingerprinted.
    let from_mem = m.view(&name("from_mem")).unwrap();
    assert!(
        from_mem.snapshot.as_ref().unwrap().sources[0]
            .fingerprint
            .is_unknown()
    );

    // A clock-dependent view: why, the Arrow type, per-file lineage and
    // statistics with and without min/max.
    let clocked = m.view(&name("clocked")).unwrap();
    assert_eq!(
        clocked.definition.not_reproducible.as_deref(),
        Some("depends on when it runs: now()")
    );
    assert_eq!(
        clocked.definition.schema.field(1).data_type(),
        &DataType::Timestamp(TimeUnit::Nanosecond, None)
    );
    let file = &clocked.snapshot.as_ref().unwrap().files[0];
    assert_eq!(
        file.lineage.as_deref(),
        Some(&["file:///tmp/golden/data/part-1.csv".to_string()][..])
    );
    assert_eq!(file.columns[0].min.as_deref(), Some("1"));
    assert_eq!(file.columns[1].min, None);

    // Never populated; retired snapshots with their retirement time.
    assert!(m.view(&name("later")).unwrap().snapshot.is_none());
    assert_eq!(m.retired.len(), 2);
    assert!(m.retired.iter().all(|r| r.retired_at.is_some()));
}

#[test]
fn a_newer_format_is_refused_by_name() {
    let err = parse_manifest("cat/_matview/log/12.json", FORMAT4.as_bytes(), 12).unwrap_err();
    assert!(matches!(
        err,
        Error::UnsupportedFormat {
            found: 4,
            supported: 3,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "manifest cat/_matview/log/12.json has format version 4, but this build reads up to 3\n\
         HINT: Upgrade datafusion-matview to use this catalog."
    );
}

/// A remembered table's resolved form (issue 36), pinned: the JSON the
/// index keeps for it. Renaming or re-encoding a field fails here, as
/// other processes and older catalogs depend on it; an entry without it
/// (what catalogs before it hold) still reads.
#[test]
fn a_resolved_table_is_written_as_pinned() {
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion_matview::spec::{RelationEntry, ResolvedLocation, ResolvedTable};
    let entry = RelationEntry {
        name: name("t"),
        kind: RelationKind::ExternalTable,
        sql: "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/data/t/'".into(),
        default_catalog: "datafusion".into(),
        default_schema: "public".into(),
        withheld_options: vec![],
        resolved: Some(ResolvedTable {
            schema: Schema::new(vec![
                Field::new("k", DataType::Int64, false),
                Field::new(
                    "day",
                    DataType::Dictionary(Box::new(DataType::UInt16), Box::new(DataType::Utf8)),
                    false,
                ),
            ]),
            partition_columns: vec!["day".into()],
            locations: vec![ResolvedLocation {
                url: "file:///data/t/".into(),
                glob: Some("*.parquet".into()),
            }],
            file_extension: String::new(),
        }),
    };
    let pinned = r#"{"name":{"catalog":"datafusion","schema":"public","name":"t"},"kind":"external_table","sql":"CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/data/t/'","default_catalog":"datafusion","default_schema":"public","resolved":{"schema":{"fields":[{"name":"k","data_type":"Int64","nullable":false,"dict_id":0,"dict_is_ordered":false,"metadata":{}},{"name":"day","data_type":{"Dictionary":["UInt16","Utf8"]},"nullable":false,"dict_id":0,"dict_is_ordered":false,"metadata":{}}],"metadata":{}},"partition_columns":["day"],"locations":[{"url":"file:///data/t/","glob":"*.parquet"}],"file_extension":""}}"#;
    assert_eq!(serde_json::to_string(&entry).unwrap(), pinned);
    assert_eq!(
        serde_json::from_str::<RelationEntry>(pinned).unwrap(),
        entry
    );
    // Written before it was kept: no `resolved`, inferred when built.
    let before = r#"{"name":{"catalog":"datafusion","schema":"public","name":"t"},"kind":"external_table","sql":"CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/data/t/'","default_catalog":"datafusion","default_schema":"public"}"#;
    let old: RelationEntry = serde_json::from_str(before).unwrap();
    assert_eq!(old.resolved, None);
    assert_eq!(serde_json::to_string(&old).unwrap(), before);
}

/// Format 3's per-relation index actions, pinned: an index version that
/// remembers, replaces or forgets one relation names only that one.
#[test]
fn relation_changes_are_written_as_pinned() {
    use datafusion_matview::spec::{IndexAction, RelationEntry};
    let entry = RelationEntry {
        name: name("t"),
        kind: RelationKind::View,
        sql: "CREATE VIEW t AS SELECT 1 AS x".into(),
        default_catalog: "datafusion".into(),
        default_schema: "public".into(),
        withheld_options: vec![],
        resolved: None,
    };
    let put = r#"{"put_relation":{"name":{"catalog":"datafusion","schema":"public","name":"t"},"kind":"view","sql":"CREATE VIEW t AS SELECT 1 AS x","default_catalog":"datafusion","default_schema":"public"}}"#;
    let remove = r#"{"remove_relation":{"catalog":"datafusion","schema":"public","name":"t"}}"#;
    for (action, json) in [
        (IndexAction::PutRelation(entry), put),
        (IndexAction::RemoveRelation(name("t")), remove),
    ] {
        assert_eq!(serde_json::to_string(&action).unwrap(), json);
        assert_eq!(serde_json::from_str::<IndexAction>(json).unwrap(), action);
    }
}
