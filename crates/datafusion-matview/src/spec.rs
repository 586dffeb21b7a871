//! The persisted types of a catalog and their JSON form. Pure data: no I/O.
//!
//! A catalog is an index log naming its views and one log per view (format
//! 2, see [`IndexVersion`]); format 1 was one log of whole-catalog
//! [`Manifest`]s, still read and migrated.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::Schema;
use datafusion::common::{ResolvedTableReference, TableReference};
use serde::{Deserialize, Serialize};

mod auto;
mod fingerprint;
mod index;
mod layout;
mod name;
mod views;

pub use auto::{AutoRefresh, DEFAULT_TARGET_LAG, TargetLag, display_seconds, parse_seconds};
pub use fingerprint::{FileFingerprint, Fingerprint, SourceFingerprint};
pub use index::{
    CheckpointHeader, Index, IndexAction, IndexEntry, IndexVersion, RetiredSlot, SlotId,
    ViewVersion, retired_between,
};
pub use layout::{
    MAX_PATH_PART, encode_path_part, is_snapshot_file_name, is_snapshot_id, view_dir,
};
pub use name::{QualifiedName, quote_ident};
pub use views::{
    BlockReader, CHECKPOINT_BLOCK_VIEWS, CheckpointBlock, CheckpointRead, CheckpointViews,
    SourceReaders, Views, checkpoint_blocks, checkpoint_readers,
};

/// A new id for a view definition, a snapshot or a commit: 32 lowercase
/// hex digits (a random UUID), the shape [`is_snapshot_id`] expects.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Newest metadata format this build reads and the one it writes: 7 is
/// format 6 whose snapshots of views over several tables may keep lineage
/// and partial aggregates for one of them ([`Snapshot::lineage_of`]),
/// which a format 6 build would take for partials of whichever table
/// changed; 6 is format 5 whose snapshots may keep partial aggregates
/// ([`Snapshot::partials`]), files that an older build's cleanup would not
/// know the snapshot still uses; 5 is format 4 with a checkpoint's readers after its views (which views read
/// each relation, [`CheckpointHeader::readers`]), so dropping a relation
/// finds its dependents by reading one block; 4 is format 3 with a checkpoint's views in blocks of
/// [`CHECKPOINT_BLOCK_VIEWS`] in name order ([`CheckpointHeader::blocks`]),
/// so finding one view parses one block; 3 is
/// the index log with one log per view (see [`IndexVersion`]) whose
/// versions record each remembered relation that changed
/// ([`IndexAction::PutRelation`], [`IndexAction::RemoveRelation`]); 2 is
/// the same but repeats every remembered relation whenever one changes.
/// Formats 2 to 6 are read as they are; 1, a log of whole-catalog
/// [`Manifest`]s, is read and migrated.
pub const MANIFEST_FORMAT: u32 = 7;

/// Newest definition format: the definition is DataFusion SQL, planned with
/// the recorded default catalog and schema.
pub const DEFINITION_FORMAT: u32 = 1;

/// Parquet key-value metadata keys written into every data file, so a lost
/// manifest can be rebuilt from the data.
pub const META_VIEW: &str = "datafusion_matview.view";
/// See [`META_VIEW`].
pub const META_SNAPSHOT: &str = "datafusion_matview.snapshot";
/// See [`META_VIEW`].
pub const META_DEFINITION: &str = "datafusion_matview.definition";
/// Which part of a refresh's write made the file (`0`, `1`, ...): a write
/// runs one query per group of source files, and each file's lineage is
/// its part's.
pub const META_PART: &str = "datafusion_matview.part";

/// File name of the marker written into a snapshot's directory once all its
/// data files are complete (before the commit that references them).
pub const SNAPSHOT_MARKER: &str = "_snapshot.json";

/// Content of a snapshot's marker: enough to rebuild the view's manifest
/// entry if the manifest log is lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotMarker {
    /// The view as it was when the snapshot was written (its `snapshot`
    /// field is the previous one, or none).
    pub view: ViewEntry,
    /// The snapshot this directory holds.
    pub snapshot: Snapshot,
}

/// The complete state of a format 1 catalog at one version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format of this file; see [`MANIFEST_FORMAT`].
    pub format_version: u32,
    /// Version number; the file is `_matview/log/{version:020}.json`.
    pub version: u64,
    /// When this version was committed.
    pub committed_at: DateTime<Utc>,
    /// Identity of the commit that wrote this version, unique per commit
    /// call: a writer whose conditional put returned an error (a timeout,
    /// a 5xx after the store kept the object) reads the version back and
    /// knows from it whether the commit is its own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commit_id: String,
    /// Every materialized view, sorted by name.
    pub views: Vec<ViewEntry>,
    /// Snapshots no longer referenced by this version (replaced by a
    /// refresh, or of a dropped view) whose files are still kept for
    /// readers of older versions until the retention window has passed.
    #[serde(default)]
    pub retired: Vec<RetiredSnapshot>,
    /// External tables and plain views the catalog remembers (when the
    /// session is opened with `remember_relations`), in creation order.
    #[serde(default)]
    pub relations: Vec<RelationEntry>,
}

/// The kind of a remembered relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelationKind {
    /// `CREATE EXTERNAL TABLE`
    ExternalTable,
    /// `CREATE VIEW`
    View,
}

/// A remembered `CREATE EXTERNAL TABLE` or `CREATE VIEW`, replayed when the
/// catalog is opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelationEntry {
    /// Fully qualified name.
    pub name: QualifiedName,
    /// What it is.
    pub kind: RelationKind,
    /// The statement as the user wrote it, less the options that carry
    /// secrets.
    pub sql: String,
    /// Default catalog in force when it was created.
    pub default_catalog: String,
    /// Default schema in force when it was created.
    pub default_schema: String,
    /// Keys of the options left out of `sql` because they carry secrets
    /// (access keys, tokens, passwords): a catalog never stores them, so
    /// restoring takes them from the environment or the object store
    /// registered in the session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld_options: Vec<String>,
    /// For an external table read through DataFusion's listing table: the
    /// table as the creating process resolved it, so that another process
    /// restores it without inferring anything. Absent in entries written
    /// before it was kept (such a table is inferred once, then remembered
    /// with it) and for tables of other factories (re-created by them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<ResolvedTable>,
}

/// An external table as DataFusion resolved it when it was created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedTable {
    /// Its columns, the partition columns last, as its provider had them.
    pub schema: Schema,
    /// The partition columns among them (given or inferred from folders).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_columns: Vec<String>,
    /// Where it lists files: each location as a URL, with the file
    /// pattern DataFusion gave a local folder.
    pub locations: Vec<ResolvedLocation>,
    /// The extension its files must have (empty: any).
    #[serde(default)]
    pub file_extension: String,
}

/// A location of a [`ResolvedTable`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedLocation {
    /// Absolute URL (`file:///data/t/`, `s3://bucket/t/`).
    pub url: String,
    /// The pattern file names under it must match (`*.parquet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
}

/// A snapshot that only versions before `retired_at` reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredSnapshot {
    /// Directory of the snapshot relative to the catalog root.
    pub dir: String,
    /// Commit time of the version that stopped referencing it; set by the
    /// commit itself (`None` only inside an uncommitted change).
    pub retired_at: Option<DateTime<Utc>>,
    /// When not empty, only these files of `dir` (relative to the catalog
    /// root) are retired: an incremental refresh evicted them while the
    /// current snapshot still uses the directory's other files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            format_version: MANIFEST_FORMAT,
            version: 0,
            committed_at: DateTime::<Utc>::UNIX_EPOCH,
            commit_id: String::new(),
            views: vec![],
            retired: vec![],
            relations: vec![],
        }
    }
}

impl Manifest {
    /// The view of that name, if any.
    pub fn view(&self, name: &QualifiedName) -> Option<&ViewEntry> {
        self.views.iter().find(|v| &v.name == name)
    }

    /// Snapshot directories this version references or keeps for older
    /// readers, relative to the catalog root.
    pub fn known_snapshot_dirs(&self) -> BTreeSet<String> {
        self.views
            .iter()
            .flat_map(|v| v.data_dirs())
            .chain(self.retired.iter().map(|r| r.dir.clone()))
            .collect()
    }
}

/// One materialized view: what it is and which data it currently has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewEntry {
    /// Fully qualified name.
    pub name: QualifiedName,
    /// Identity of this definition; a new one on every CREATE (OR REPLACE).
    pub id: String,
    /// Storage directory of the view relative to the catalog root.
    pub dir: String,
    /// What the view computes.
    pub definition: Definition,
    /// When the definition was created.
    pub created_at: DateTime<Utc>,
    /// The committed data; `None` until the first refresh (`WITH NO DATA`).
    pub snapshot: Option<Snapshot>,
    /// Whether and how `dfmv serve` refreshes it on its own (`WITH
    /// (auto_refresh = true, target_lag = '5 minutes')`, `ALTER
    /// MATERIALIZED VIEW ... SET`). Not part of the definition: changing it
    /// commits a version of the view's log with the same data.
    #[serde(default, skip_serializing_if = "AutoRefresh::is_unset")]
    pub auto_refresh: AutoRefresh,
}

impl ViewEntry {
    /// Directory of one of this view's snapshots, relative to the catalog root.
    pub fn snapshot_dir(&self, snapshot: &Snapshot) -> String {
        self.snapshot_dir_of(&snapshot.id)
    }

    /// The directory of the snapshot with id `id`, relative to the
    /// catalog root.
    pub fn snapshot_dir_of(&self, id: &str) -> String {
        format!("{}/{id}", self.dir)
    }

    /// Every directory the current snapshot uses: its own (with its
    /// marker) and those of files it shares with earlier snapshots.
    pub fn data_dirs(&self) -> BTreeSet<String> {
        let Some(snapshot) = &self.snapshot else {
            return BTreeSet::new();
        };
        snapshot
            .stored_files()
            .filter_map(|f| f.path.rsplit_once('/').map(|(dir, _)| dir.to_owned()))
            .chain([self.snapshot_dir(snapshot)])
            .collect()
    }
}

/// The stored definition of a view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// Format of this definition; see [`DEFINITION_FORMAT`].
    pub format: u32,
    /// The canonical SQL text of the query.
    pub sql: String,
    /// Names given in the column list of CREATE (may be fewer than the columns).
    pub column_names: Vec<String>,
    /// Default catalog in force when the view was created; the query is
    /// always planned with it, so unqualified names keep their meaning.
    pub default_catalog: String,
    /// Default schema in force when the view was created.
    pub default_schema: String,
    /// Output schema of the view.
    pub schema: Schema,
    /// Fully qualified names of the tables and views the query reads directly.
    pub sources: Vec<QualifiedName>,
    /// Why the query may give other rows over unchanged sources (a
    /// volatile function, a table function); such a view is never
    /// considered fresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_reproducible: Option<String>,
    /// The session settings of [`RESULT_SETTINGS`] in force when the view
    /// was created, those that differ from DataFusion's defaults: the
    /// query is always planned and run with them (and the others at their
    /// defaults), so a refresh in any session or process computes what
    /// CREATE did. `None` for definitions written before they were
    /// recorded: those run with the refreshing session's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<BTreeMap<String, String>>,
}

/// Session settings that change the rows or values a query returns (not
/// only its speed): recorded with each definition (see
/// [`Definition::settings`]).
pub const RESULT_SETTINGS: [&str; 9] = [
    "datafusion.execution.time_zone",
    "datafusion.execution.enable_ansi_mode",
    "datafusion.sql_parser.dialect",
    "datafusion.sql_parser.parse_float_as_decimal",
    "datafusion.sql_parser.enable_ident_normalization",
    "datafusion.sql_parser.map_string_types_to_utf8view",
    "datafusion.execution.parquet.binary_as_string",
    "datafusion.execution.parquet.coerce_int96",
    "datafusion.execution.parquet.coerce_int96_tz",
];

/// One committed, immutable set of data files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Unique id; also the name of the directory holding the files.
    pub id: String,
    /// The data files.
    pub files: Vec<DataFile>,
    /// Total rows over all files.
    pub row_count: u64,
    /// Total bytes over all files.
    pub size_bytes: u64,
    /// When the refresh that produced it committed.
    pub refreshed_at: DateTime<Utc>,
    /// What each source looked like when the refresh read it (empty for
    /// snapshots written before fingerprints were recorded: freshness
    /// unknown).
    #[serde(default)]
    pub sources: Vec<SourceFingerprint>,
    /// Columns the data files hold after the view's own: the state an
    /// incremental refresh needs to merge new rows into aggregates (the
    /// sum and count behind an `avg`). Queries never see them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_columns: Vec<String>,
    /// Partial aggregates of an aggregate view over the table its lineage
    /// follows (see `lineage_of`): per group of its files, the view's groups and
    /// state computed from those files alone. Queries never read them; a
    /// refresh after files were removed or rewritten recomputes only the
    /// partials whose files changed and merges them with the others.
    /// Their columns are the view's and its state columns; for a view that
    /// filters or computes over its aggregate, the aggregate's own columns
    /// and state (see `refresh::plan::shape::Post`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partials: Vec<DataFile>,
    /// The source table whose files the lineage of the data files and
    /// partials lists: for a view over several tables (a join), the one
    /// its lineage follows; a removal in another is not one lineage can
    /// tell. `None` in snapshots written before it was recorded, whose
    /// lineage (if any) is of the view's only table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage_of: Option<QualifiedName>,
}

impl Snapshot {
    /// Every file the snapshot holds: its data files, then its partials.
    /// Whatever keeps, checks or retires a snapshot's files uses this.
    pub fn stored_files(&self) -> impl Iterator<Item = &DataFile> {
        self.files.iter().chain(&self.partials)
    }
}

/// One Parquet data file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    /// Path relative to the catalog root.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Number of rows.
    pub rows: u64,
    /// Per column of the view, from the file's footer at refresh time, so
    /// a scan can skip whole files without reading footers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<ColumnStats>,
    /// Lineage: the files of the view's one file-backed source that this
    /// file was computed from (their rows, and only theirs), so a refresh
    /// can evict it when one of them is removed or rewritten and recompute
    /// just those. `None`: unknown (computed from everything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<Vec<String>>,
}

/// Statistics of one column of one data file. Values are written as text
/// (Arrow's cast to and from `Utf8`), kept only for types where that is
/// exact.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ColumnStats {
    /// Null values, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_count: Option<u64>,
    /// Smallest value, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<String>,
    /// Largest value, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
    /// Whether min and max are exact (string statistics may be truncated).
    #[serde(default)]
    pub exact: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};

    #[test]
    fn path_parts_are_safe_and_distinct() {
        assert_eq!(encode_path_part("sales_2024"), "sales_2024");
        // A leading `_` is the catalog's: `_matview` data never mixes with its log.
        assert_eq!(encode_path_part("_matview"), "-5fmatview");
        assert_ne!(
            view_dir(&QualifiedName::new("datafusion", "_matview", "log")),
            "_matview/log"
        );
        assert_eq!(encode_path_part("My View"), "My-20View");
        assert_eq!(encode_path_part(".."), "-2e-2e");
        assert_eq!(encode_path_part("a/b"), "a-2fb");
        assert_ne!(encode_path_part("a-2fb"), encode_path_part("a/b"));
        assert_eq!(encode_path_part(""), "-");
        assert_eq!(encode_path_part("é"), "-c3-a9");
        assert_eq!(encode_path_part("a\nb"), "a-0ab");
        let long = "x".repeat(300);
        let longer = format!("{long}y");
        assert_eq!(encode_path_part(&long).len(), MAX_PATH_PART);
        assert_ne!(encode_path_part(&long), encode_path_part(&longer));
        assert_eq!(encode_path_part(&long), encode_path_part(&long.clone()));
    }

    #[test]
    fn manifest_round_trips_through_json() {
        let mut m = Manifest::default();
        let name = QualifiedName::new("datafusion", "public", "My View");
        m.views.push(ViewEntry {
            dir: view_dir(&name),
            name,
            id: "id1".into(),
            definition: Definition {
                format: DEFINITION_FORMAT,
                sql: "SELECT 1 AS x".into(),
                column_names: vec![],
                default_catalog: "datafusion".into(),
                default_schema: "public".into(),
                schema: Schema::new(vec![Field::new("x", DataType::Int64, false)]),
                sources: vec![],
                not_reproducible: None,
                settings: None,
            },
            created_at: Utc::now(),
            snapshot: Some(Snapshot {
                id: "s1".into(),
                files: vec![DataFile {
                    path: "public/My-20View/s1/a.parquet".into(),
                    size: 10,
                    rows: 1,
                    columns: vec![],
                    lineage: Some(vec!["file:///src/a.csv".into()]),
                }],
                row_count: 1,
                size_bytes: 10,
                refreshed_at: Utc::now(),
                sources: vec![],
                state_columns: vec!["__dfmv_sum_1".into()],
                partials: vec![DataFile {
                    path: "public/My-20View/s1/p.parquet".into(),
                    size: 8,
                    rows: 1,
                    columns: vec![],
                    lineage: Some(vec!["file:///src/a.csv".into()]),
                }],
                lineage_of: Some(QualifiedName::new("datafusion", "public", "src")),
            }),
            auto_refresh: Default::default(),
        });
        let json = serde_json::to_string(&m).unwrap();
        let back: Manifest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.known_snapshot_dirs().into_iter().collect::<Vec<_>>(),
            ["public/My-20View/s1"]
        );
    }

    fn empty_definition() -> Definition {
        Definition {
            format: 1,
            sql: String::new(),
            column_names: vec![],
            default_catalog: String::new(),
            default_schema: String::new(),
            schema: Schema::empty(),
            sources: vec![],
            not_reproducible: None,
            settings: None,
        }
    }

    #[test]
    fn put_view_replaces_and_retires_the_old_log() {
        let mut index = Index::default();
        let entry = |n: &str, slot: &str| IndexEntry {
            name: QualifiedName::new("datafusion", "public", n),
            id: slot.into(),
            slot: slot.into(),
            sources: vec![],
        };
        for (n, slot) in [("b", "1"), ("a", "2"), ("c", "3"), ("a", "4")] {
            index.put_view(entry(n, slot));
        }
        let names: Vec<_> = index.views.keys().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let retired: Vec<_> = index
            .retired_slots
            .iter()
            .map(|r| r.slot.as_str())
            .collect();
        assert_eq!(retired, ["2"]);
        let b = QualifiedName::new("datafusion", "public", "b");
        assert!(index.remove_view(&b).is_some());
        assert!(index.remove_view(&b).is_none());
        // The changes, as an index version stores them, give the same index.
        let mut replayed = Index::default();
        replayed.apply(&Index::default().diff(&index));
        assert_eq!(replayed.views, index.views);
        assert_eq!(replayed.retired_slots, index.retired_slots);
    }

    #[test]
    fn evicted_files_are_retired_alone_while_their_directory_is_in_use() {
        let name = QualifiedName::new("datafusion", "public", "v");
        let file = |path: &str| DataFile {
            path: path.into(),
            size: 1,
            rows: 1,
            columns: vec![],
            lineage: None,
        };
        let snapshot = |id: &str, files: Vec<DataFile>| Snapshot {
            id: id.into(),
            row_count: files.len() as u64,
            size_bytes: files.len() as u64,
            files,
            refreshed_at: Utc::now(),
            sources: vec![],
            state_columns: vec![],
            partials: vec![],
            lineage_of: None,
        };
        let mut m = ViewVersion {
            format_version: MANIFEST_FORMAT,
            version: 1,
            committed_at: Utc::now(),
            commit_id: String::new(),
            view: ViewEntry {
                dir: "public/v".into(),
                name,
                id: "id".into(),
                definition: empty_definition(),
                created_at: Utc::now(),
                snapshot: Some(snapshot(
                    "s1",
                    vec![file("public/v/s1/a.parquet"), file("public/v/s1/b.parquet")],
                )),
                auto_refresh: Default::default(),
            },
            retired: vec![],
        };
        // s2 keeps a, evicts b, adds c.
        m.set_snapshot(snapshot(
            "s2",
            vec![file("public/v/s1/a.parquet"), file("public/v/s2/c.parquet")],
        ));
        assert_eq!(
            m.retired,
            [RetiredSnapshot {
                dir: "public/v/s1".into(),
                retired_at: None,
                files: vec!["public/v/s1/b.parquet".into()],
            }]
        );
        // s3 uses none of s1 and s2: both directories go whole.
        m.set_snapshot(snapshot("s3", vec![file("public/v/s3/d.parquet")]));
        let dirs: Vec<(&str, usize)> = m
            .retired
            .iter()
            .map(|r| (r.dir.as_str(), r.files.len()))
            .collect();
        assert_eq!(
            dirs,
            [("public/v/s1", 1), ("public/v/s1", 0), ("public/v/s2", 0)]
        );
        // Partials are kept and retired like data: s4 rewrites the data,
        // keeps one partial of s3 and evicts the other.
        m.retired.clear();
        let mut s3 = snapshot("s3", vec![file("public/v/s3/d.parquet")]);
        s3.partials = vec![file("public/v/s3/p.parquet"), file("public/v/s3/q.parquet")];
        m.set_snapshot(s3);
        let mut s4 = snapshot("s4", vec![file("public/v/s4/e.parquet")]);
        s4.partials = vec![file("public/v/s3/p.parquet"), file("public/v/s4/r.parquet")];
        m.set_snapshot(s4);
        let retired: Vec<(&str, &[String])> = m
            .retired
            .iter()
            .map(|r| (r.dir.as_str(), r.files.as_slice()))
            .collect();
        assert_eq!(
            retired,
            [(
                "public/v/s3",
                &[
                    "public/v/s3/d.parquet".to_string(),
                    "public/v/s3/q.parquet".into()
                ][..]
            )]
        );
        assert!(m.view.data_dirs().contains("public/v/s3"));
    }

    #[test]
    fn short_names_drop_default_parts() {
        let n = QualifiedName::new("datafusion", "public", "v");
        assert_eq!(n.short("datafusion", "public"), "v");
        assert_eq!(n.short("datafusion", "other"), "public.v");
        assert_eq!(n.short("x", "public"), "datafusion.public.v");
    }
}
