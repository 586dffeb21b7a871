//! The catalog: a small index log naming the views, one log per view,
//! and the views' data, in an object store.
//!
//! ```text
//! <root>/_matview/log/00000000000000000042.json         index versions (changes only)
//! <root>/_matview/checkpoint/00000000000000000040.json  the index at a version
//! <root>/_matview/views/<slot>/00000000000000000007.json  one view's states
//! <root>/_matview/leases/<snapshot-id>.json             writes in progress
//! <root>/<schema>/<view>/<snapshot-id>/*.parquet         data, never overwritten
//! ```
//!
//! (A format 1 catalog has only `_matview/log/`, each version the whole
//! catalog; it is read as it is and moved to format 2 by its next commit,
//! see [`Catalog::migrate`].)
//!
//! # What storage must guarantee
//!
//! Only that `put` with [`PutMode::Create`] fails with `AlreadyExists` when
//! the object exists (local files, memory, S3, GCS and Azure all do).
//!
//! # Commit stages
//!
//! ```text
//! write data files under a fresh snapshot id   (invisible: nothing references them)
//!        │
//!        ▼
//! load the latest version N of the log ──► apply change to a copy ──► put N+1 with PutMode::Create
//!        ▲                                 (checks preconditions)           │
//!        └─────────────────── AlreadyExists: another writer won ◄───────────┘
//! ```
//!
//! A refresh commits to its view's log; CREATE writes the new definition's
//! log first (invisible) and then commits to the index; DROP and the
//! remembered relations commit to the index. Each commit is one
//! conditional put whose size does not depend on how many views exist.
//! A reader holding a version keeps reading its files while the next is
//! written. Files no live version references are deleted only after the
//! retention window (see [`Catalog::cleanup`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::execution::object_store::ObjectStoreUrl;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Error, Result};
use crate::spec::{
    BlockReader, CheckpointHeader, CheckpointRead, CheckpointViews, Index, IndexEntry,
    IndexVersion, MANIFEST_FORMAT, META_SNAPSHOT, Manifest, QualifiedName, RetiredSnapshot,
    SNAPSHOT_MARKER, SlotId, SnapshotMarker, ViewEntry, ViewVersion, Views, is_snapshot_file_name,
    is_snapshot_id,
};

mod cleanup;
mod commit;
mod index;
mod journal;
mod lease;
mod recover;
mod versions;
mod views;

use commit::Retries;
pub(crate) use commit::create_only;
pub use commit::{CommitFailure, Requirement};
pub(crate) use commit::{IndexCommit, IndexUpdate, ViewCommit};
pub use index::index_entry;
pub(crate) use index::wait_for;
pub use lease::DEFAULT_LEASE_TTL;
pub(crate) use lease::Lease;
pub use versions::parse_manifest;
pub use views::RetainedVersion;

/// How many versions the latest-version pointer may lag before a reader
/// that notices rewrites it.
const POINTER_LAG: u64 = 4;

/// An index checkpoint is written every this many index versions, so a
/// reader that opens the catalog reads at most this many versions after it.
pub const CHECKPOINT_INTERVAL: u64 = 64;

/// How many times a commit reloads and retries after losing a race.
pub const MAX_COMMIT_ATTEMPTS: usize = 20;

/// Default retention window: one hour. Long enough for any query that
/// planned against an old snapshot to finish reading it, short enough that
/// frequently refreshed views do not pile up old files.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

/// A catalog of materialized views at one object-store location.
#[derive(Debug)]
pub struct Catalog {
    location: String,
    store_url: ObjectStoreUrl,
    store: Arc<dyn ObjectStore>,
    root: Path,
    retention: Duration,
    index_log: journal::Log,
    index: RwLock<Arc<Index>>,
    /// The format 1 manifest the loaded index was read from, until the
    /// catalog moves to format 2.
    legacy: RwLock<Option<Arc<Manifest>>>,
    /// The newest index checkpoint known.
    checkpoint: Mutex<Option<u64>>,
    /// The newest format 2 base version known (see [`Catalog::migrate`]).
    base_version: Mutex<Option<u64>>,
    /// The view logs this process has read or written.
    view_logs: Mutex<HashMap<SlotId, Arc<views::ViewLog>>>,
    /// Retired entries of the index whose files a cleanup deleted; the
    /// next index commit drops them (see [`Catalog::cleanup`]).
    forgotten: Mutex<Forgotten>,
    /// When a version may next be old enough to delete: after a commit, a
    /// cleanup lists the logs only from then on.
    next_log_sweep: Mutex<Option<DateTime<Utc>>>,
    /// How long the leases of this handle's writes hold without renewal,
    /// in milliseconds (see [`lease`]).
    lease_ttl_ms: std::sync::atomic::AtomicU64,
}

/// What a cleanup deleted that the index still lists.
#[derive(Debug, Default, Clone)]
struct Forgotten {
    slots: Vec<SlotId>,
    retired: Vec<RetiredSnapshot>,
}

/// How much a [`Catalog::cleanup`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// The cheap pass run with every change: deletes the files of expired
    /// retired entries (which leave the manifest with the next commit,
    /// rather than with a commit of their own), and lists the manifest log
    /// only when a version may have expired.
    Quick,
    /// Everything: also forgets deleted entries in a commit of its own,
    /// repairs the latest-version pointer, and deletes files no version
    /// references (left by writers that failed before committing). This
    /// lists every data file of the catalog.
    Full,
}

/// What [`Catalog::recover`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The manifest version it committed.
    pub version: u64,
    /// Each recovered view with its row count.
    pub views: Vec<String>,
    /// Snapshot markers not used, and why.
    pub skipped: Vec<String>,
    /// What could not be rebuilt, and why (a view whose data is gone with
    /// no complete snapshot to fall back to; the remembered tables and
    /// views when no version of the log is readable).
    pub lost: Vec<String>,
    /// The materialized views of the catalog that could not be rebuilt
    /// (their data is gone): those of [`Self::lost`] that were views.
    pub views_lost: Vec<QualifiedName>,
}

/// What a cleanup removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanupReport {
    /// Manifest versions removed.
    pub manifests_deleted: usize,
    /// Data files removed.
    pub files_deleted: usize,
    /// Refresh history records removed (see [`crate::history`]): beyond
    /// the number kept per view, and of views dropped longer ago than the
    /// retention window.
    pub history_deleted: usize,
}

impl Catalog {
    /// Opens the catalog under `root` of `store`, loading its latest version.
    /// A location with no log is an empty catalog (nothing is written until
    /// the first commit).
    pub async fn open(
        location: impl Into<String>,
        store_url: ObjectStoreUrl,
        store: Arc<dyn ObjectStore>,
        root: Path,
        retention: Duration,
    ) -> Result<Self> {
        let catalog = Self::unloaded(location, store_url, store, root, retention);
        catalog.load_latest().await?;
        Ok(catalog)
    }

    /// A catalog handle that has read nothing yet (for [`Self::recover`],
    /// which must work when the log cannot be read).
    pub(crate) fn unloaded(
        location: impl Into<String>,
        store_url: ObjectStoreUrl,
        store: Arc<dyn ObjectStore>,
        root: Path,
        retention: Duration,
    ) -> Self {
        let location = location.into();
        let display_prefix = display_prefix(&store_url);
        // Index versions a checkpoint covers are deleted without waiting
        // for the retention window (see `Catalog::after_index_commit`), so a
        // missing next version proves nothing by itself: no window.
        let index_log = journal::Log::new(
            Arc::clone(&store),
            join(&root, "_matview/log"),
            join(&root, "_matview/_latest.json"),
            location.clone(),
            display_prefix,
            Duration::ZERO,
        );
        Self {
            location,
            store_url,
            store,
            root,
            retention,
            index_log,
            index: RwLock::new(Arc::new(Index::default())),
            legacy: RwLock::new(None),
            checkpoint: Mutex::new(None),
            base_version: Mutex::new(None),
            view_logs: Mutex::new(HashMap::new()),
            forgotten: Mutex::new(Forgotten::default()),
            next_log_sweep: Mutex::new(None),
            lease_ttl_ms: std::sync::atomic::AtomicU64::new(
                lease::DEFAULT_LEASE_TTL.as_millis() as u64
            ),
        }
    }

    /// The location the catalog was opened at.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The object store holding the catalog.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// URL of the object store, as registered in the session.
    pub fn store_url(&self) -> &ObjectStoreUrl {
        &self.store_url
    }

    /// Retention window for superseded versions and unreferenced files.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The most recently loaded or committed index. The views of a
    /// checkpoint read at opening are parsed as they are needed: finding
    /// one ([`Index::view`]) parses its block, listing them parses all.
    pub fn index(&self) -> Arc<Index> {
        Arc::clone(&self.index.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Object path of a file given relative to the catalog root.
    pub fn path(&self, relative: &str) -> Path {
        join(&self.root, relative)
    }

    /// A path relative to the catalog root, for a full object path under it.
    pub(crate) fn relative(&self, path: &Path) -> Option<String> {
        path.prefix_match(&self.root)
            .map(|parts| Path::from_iter(parts).to_string())
    }

    /// URL of a directory relative to the root, for DataFusion's writers.
    pub(crate) fn url_of_dir(&self, relative: &str) -> String {
        format!("{}{}/", self.store_url.as_str(), self.path(relative))
    }

    /// URL of a file relative to the root, for DataFusion's readers.
    pub fn url_of_file(&self, relative: &str) -> String {
        format!("{}{}", self.store_url.as_str(), self.path(relative))
    }

    /// Whether `error` is this catalog's store refusing a request under
    /// the catalog's root for lack of rights. A refusal elsewhere (a
    /// source the user may not read) is not the catalog's.
    pub(crate) fn refused(&self, error: &Error) -> bool {
        let root = self.root.as_ref();
        let under_root = |path: &str| {
            let path = path.trim_start_matches('/');
            root.is_empty() || path == root || path.starts_with(&format!("{root}/"))
        };
        let text = error.to_string();
        // The root's own path, not a longer name it begins (`/data/cat`
        // is not under `/data/ca`).
        let names_root = || {
            let root = self.display_path(&self.root);
            text.match_indices(&root).any(|(at, _)| {
                text[at + root.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !(c.is_alphanumeric() || "-_.".contains(c)))
            })
        };
        error.refusals().iter().any(|refusal| match refusal {
            Some(path) => under_root(path),
            // Only a local file system's error lacks the path; its text
            // names the file.
            None => names_root(),
        })
    }

    /// An object's path as people know it: a local file's absolute path,
    /// else its URL.
    pub(crate) fn display_path(&self, path: &Path) -> String {
        format!("{}{path}", self.display_prefix())
    }

    fn display_prefix(&self) -> String {
        display_prefix(&self.store_url)
    }
}

/// What goes before an object's path to show it: `/` for a local file,
/// else the store's URL.
fn display_prefix(store_url: &ObjectStoreUrl) -> String {
    match store_url.as_str().strip_prefix("file://") {
        Some(_) => "/".to_owned(),
        None => store_url.as_str().to_owned(),
    }
}

/// `relative` under `root`.
fn join(root: &Path, relative: &str) -> Path {
    let mut parts: Vec<_> = root.parts().collect();
    parts.extend(
        Path::from(relative)
            .parts()
            .map(|p| p.as_ref().to_owned().into()),
    );
    Path::from_iter(parts)
}

#[cfg(test)]
mod tests;
