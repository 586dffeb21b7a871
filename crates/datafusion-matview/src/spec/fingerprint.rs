//! Fingerprints: what a view's sources looked like when it was refreshed,
//! enough to tell whether they changed without reading their data.

use super::*;

/// A source of a view and its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFingerprint {
    /// The source.
    pub name: QualifiedName,
    /// What it looked like.
    pub fingerprint: Fingerprint,
}

/// What a source looks like, cheaply: enough to tell whether it changed
/// without reading its data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fingerprint {
    /// A file-backed table: its files as a listing shows them.
    Files {
        /// Sorted by path.
        files: Vec<FileFingerprint>,
        /// Digest of the table's definition (format and its options,
        /// locations, schema, partition columns, sort order): re-creating
        /// the table over the same files with other options is a change.
        /// Empty in fingerprints recorded before it was kept, which
        /// therefore never match a current one.
        #[serde(default)]
        definition: String,
    },
    /// A materialized view: its committed snapshot.
    Snapshot {
        /// Snapshot id; `None` when unpopulated.
        id: Option<String>,
        /// The snapshot's data files (path relative to the catalog root,
        /// size), so a view over it can tell which files an incremental
        /// refresh of it added or evicted.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<FileFingerprint>,
        /// The materialized view's definition id ([`ViewEntry::id`]),
        /// new on every CREATE (OR REPLACE).
        #[serde(default)]
        definition: String,
    },
    /// A plain view: its definition and what it reads.
    View {
        /// Its sources.
        sources: Vec<SourceFingerprint>,
        /// Digest of the view's plan: redefining it over the same sources
        /// is a change. Empty in fingerprints recorded before it was kept.
        #[serde(default)]
        definition: String,
    },
    /// A source whose changes cannot be seen without reading it (an
    /// in-memory table, a custom provider).
    Unknown,
}

impl Fingerprint {
    /// Whether this, or anything it is made of, is [`Fingerprint::Unknown`].
    pub fn is_unknown(&self) -> bool {
        match self {
            Fingerprint::Unknown => true,
            Fingerprint::View { sources, .. } => sources.iter().any(|s| s.fingerprint.is_unknown()),
            // A file whose version the store does not show may have been
            // rewritten with the same size.
            Fingerprint::Files { files, .. } => files.iter().any(|f| f.version.is_empty()),
            Fingerprint::Snapshot { .. } => false,
        }
    }

    /// The definition digest or id this fingerprint carries, if any.
    pub fn definition(&self) -> Option<&str> {
        match self {
            Fingerprint::Files { definition, .. }
            | Fingerprint::Snapshot { definition, .. }
            | Fingerprint::View { definition, .. } => Some(definition),
            Fingerprint::Unknown => None,
        }
    }
}

/// One file of a file-backed source.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileFingerprint {
    /// Object-store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// E-tag where the store gives one, else the last-modified time; for
    /// local files also the status change time (`ctime`). Empty when the
    /// store shows no version: the file's content cannot be told
    /// unchanged, and the table's fingerprint is unknown.
    pub version: String,
}
