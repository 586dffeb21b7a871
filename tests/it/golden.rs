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
//! this build reads and migrates them). `manifest-format8.json` stands for
//! a newer build's file: refused by name, never half read. Every object
//! of formats 2 to 4 (index version, checkpoint, view version, snapshot
//! marker) is pinned too, from `tests/data/format2-catalog` (also read
//! whole by `tests/it/migration.rs`), `tests/data/format3-objects` and
//! `tests/data/format4-objects` (a checkpoint of 100 views in two blocks)
//! and `tests/data/format5-objects` (a checkpoint with its readers).

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion_matview::Error;
use datafusion_matview::catalog::parse_manifest;
use datafusion_matview::spec::{Fingerprint, Manifest, QualifiedName, RelationKind};

const FORMAT1: &str = include_str!("../data/manifest-format1.json");
const FORMAT8: &str = include_str!("../data/manifest-format8.json");

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
    let err = parse_manifest("cat/_matview/log/12.json", FORMAT8.as_bytes(), 12).unwrap_err();
    assert!(matches!(
        err,
        Error::UnsupportedFormat {
            found: 8,
            supported: 7,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "manifest cat/_matview/log/12.json has format version 8, but this build reads up to 7\n\
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

/// Reads `text` as a `T` and writes it back: it must give `text` exactly.
/// Returns what was read.
fn writes_back<T: serde::Serialize + serde::de::DeserializeOwned>(path: &str, text: &str) -> T {
    let value: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(serde_json::to_string(&value).unwrap(), text, "{path}");
    value
}

/// The checked-in files under `dir` whose path (relative to it) `keep`
/// accepts, with their text.
fn files(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut found = vec![];
    let mut stack = vec![root.clone()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            let relative = p.strip_prefix(&root).unwrap().display().to_string();
            if keep(&relative) {
                found.push((relative, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    found.sort();
    found
}

/// Every metadata object format 2 wrote (`tests/data/format2-catalog`, a
/// catalog the format 2 build made), format 3 wrote
/// (`tests/data/format3-objects`: index versions with a view and with a
/// relation, a checkpoint of 64 versions, a view's version, a snapshot
/// marker), format 4 wrote (`tests/data/format4-objects`: a checkpoint
/// in blocks) and format 5 writes (`tests/data/format5-objects`: a
/// checkpoint with its readers) reads back and writes back byte for byte:
/// renaming, dropping or re-encoding a field fails here.
#[test]
fn format_2_to_5_objects_write_back_exactly_as_checked_in() {
    use datafusion_matview::spec::{
        CheckpointHeader, IndexEntry, IndexVersion, SnapshotMarker, SourceReaders, ViewVersion,
    };
    let index_versions = files("tests/data/format2-catalog", |p| {
        p.starts_with("_matview/log/")
    });
    assert_eq!(index_versions.len(), 10);
    for (path, text) in &index_versions {
        let version: IndexVersion = writes_back(path, text);
        assert_eq!(version.format_version, 2, "{path}");
    }
    let view_versions = files("tests/data/format2-catalog", |p| {
        p.starts_with("_matview/views/") && !p.ends_with("_latest.json")
    });
    assert_eq!(view_versions.len(), 3);
    for (path, text) in &view_versions {
        writes_back::<ViewVersion>(path, text);
    }
    let markers = files("tests/data/format2-catalog", |p| {
        p.ends_with("/_snapshot.json")
    });
    assert_eq!(markers.len(), 3);
    for (path, text) in &markers {
        writes_back::<SnapshotMarker>(path, text);
    }

    let objects = |name: &str| {
        let path = format!("tests/data/format3-objects/{name}");
        let text =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(&path))
                .unwrap();
        (path, text)
    };
    for name in ["index-version-1.json", "index-version-64.json"] {
        let (path, text) = objects(name);
        let version: IndexVersion = writes_back(&path, &text);
        assert_eq!(version.format_version, 3, "{path}");
    }
    let (path, text) = objects("view-version-1.json");
    writes_back::<ViewVersion>(&path, &text);
    let (path, text) = objects("snapshot-marker.json");
    writes_back::<SnapshotMarker>(&path, &text);
    // A checkpoint: its header, a newline, then its views.
    let (path, text) = objects("checkpoint-64.json");
    let (header, views) = text.split_once('\n').unwrap();
    let header: CheckpointHeader = writes_back(&path, header);
    assert_eq!(header.views_bytes, views.len() as u64);
    assert_eq!(header.index.relations.len(), 63);
    let views: Vec<IndexEntry> = writes_back(&path, views);
    assert_eq!(views.len(), 1);

    // Format 4's checkpoint: its header, then one line per block of views
    // in name order, each as long as the header says.
    let path = "tests/data/format4-objects/checkpoint-64.json";
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap();
    let (header, views) = text.split_once('\n').unwrap();
    let header: CheckpointHeader = writes_back(path, header);
    assert_eq!(header.format_version, 4);
    assert_eq!(header.views_bytes, views.len() as u64);
    assert_eq!(header.blocks.len(), 2);
    let mut all: Vec<IndexEntry> = vec![];
    for (block, line) in header.blocks.iter().zip(views.split('\n')) {
        assert_eq!(block.bytes, line.len() as u64);
        let entries: Vec<IndexEntry> = writes_back(path, line);
        assert_eq!(entries[0].name, block.first);
        all.extend(entries);
    }
    assert_eq!(all.len(), 100);
    assert!(all.windows(2).all(|w| w[0].name < w[1].name));

    // Format 5's checkpoint (`dfmv -f` of 40 views, 10 joining two of
    // them, 30 more): its views' line, then its readers' line, which
    // names the views reading each relation some view reads.
    let path = "tests/data/format5-objects/checkpoint-64.json";
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap();
    let lines: Vec<&str> = text.split('\n').collect();
    let header: CheckpointHeader = writes_back(path, lines[0]);
    assert_eq!(header.format_version, 5);
    assert_eq!((header.blocks.len(), header.readers.len()), (1, 1));
    assert_eq!(header.views_bytes, lines[1].len() as u64);
    assert_eq!(header.readers_bytes, lines[2].len() as u64);
    assert_eq!(lines.len(), 3);
    let views: Vec<IndexEntry> = writes_back(path, lines[1]);
    assert_eq!(views.len(), 64);
    let readers: Vec<SourceReaders> = writes_back(path, lines[2]);
    assert_eq!(readers[0].source, header.readers[0].first);
    assert!(readers.windows(2).all(|w| w[0].source < w[1].source));
    // Exactly what the views' sources say.
    let mut expected: Vec<(QualifiedName, QualifiedName)> = views
        .iter()
        .flat_map(|v| v.sources.iter().map(|s| (s.clone(), v.name.clone())))
        .collect();
    expected.sort();
    let found: Vec<(QualifiedName, QualifiedName)> = readers
        .iter()
        .flat_map(|r| r.readers.iter().map(|v| (r.source.clone(), v.clone())))
        .collect();
    assert_eq!(found, expected);
    assert_eq!(found.len(), 20);
}
