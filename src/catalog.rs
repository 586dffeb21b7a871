//! The catalog: a log of immutable manifest versions in an object store.
//!
//! ```text
//! <root>/_matview/log/00000000000000000042.json   manifest versions
//! <root>/<schema>/<view>/<snapshot-id>/*.parquet   data, never overwritten
//! ```
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
//! load latest version N ──► apply change to a copy ──► put N+1 with PutMode::Create
//!        ▲                   (checks preconditions)           │
//!        └──────────── AlreadyExists: another writer won ◄────┘
//! ```
//!
//! A reader holding version N keeps reading its files while N+1 is written.
//! Files no live version references are deleted only after the retention
//! window (see [`Catalog::cleanup`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::execution::object_store::ObjectStoreUrl;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Error, Result};
use crate::spec::{
    MANIFEST_FORMAT, META_SNAPSHOT, Manifest, QualifiedName, RetiredSnapshot, SNAPSHOT_MARKER,
    SnapshotMarker, ViewEntry, is_snapshot_file_name, is_snapshot_id,
};

/// How many versions the latest-version pointer may lag before a reader
/// that notices rewrites it.
const POINTER_LAG: u64 = 4;

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
    current: RwLock<Arc<Manifest>>,
    /// When `current` was last known to be the latest version.
    confirmed: Mutex<Option<Instant>>,
    /// Retired entries whose files a cleanup deleted after a commit; the
    /// next commit drops them from the manifest (see [`Catalog::cleanup`]).
    forgotten: Mutex<Vec<RetiredSnapshot>>,
    /// When a manifest version may next be old enough to delete: after a
    /// commit, a cleanup lists the log only from then on.
    next_log_sweep: Mutex<Option<DateTime<Utc>>>,
    /// The latest-version pointer write in flight, finished by the next
    /// [`Catalog::reload`].
    pointer_write: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
}

/// What a cleanup removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanupReport {
    /// Manifest versions removed.
    pub manifests_deleted: usize,
    /// Data files removed.
    pub files_deleted: usize,
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
        catalog.reload().await?;
        Ok(catalog)
    }

    /// A catalog handle that has read nothing yet (for [`Self::recover`],
    /// which must work when the log cannot be read).
    pub fn unloaded(
        location: impl Into<String>,
        store_url: ObjectStoreUrl,
        store: Arc<dyn ObjectStore>,
        root: Path,
        retention: Duration,
    ) -> Self {
        Self {
            location: location.into(),
            store_url,
            store,
            root,
            retention,
            current: RwLock::new(Arc::new(Manifest::default())),
            confirmed: Mutex::new(None),
            forgotten: Mutex::new(vec![]),
            next_log_sweep: Mutex::new(None),
            pointer_write: Mutex::new(None),
        }
    }

    /// Rebuilds the catalog from its data when the manifest log is lost or
    /// unreadable: every complete snapshot leaves a `_snapshot.json` marker
    /// with its view's definition and files; the newest complete snapshot
    /// of each view (all its files present with their recorded sizes)
    /// becomes that view's data in a new manifest version, committed after
    /// every existing one. Remembered tables and views are taken from the
    /// newest readable version, if any.
    ///
    /// It changes nothing when there is nothing to recover (the latest
    /// version reads, the log has no gap, and every view's data files are
    /// there: [`Error::NothingToRecover`]) or nothing to recover from (no
    /// log and no marker: [`Error::NoCatalogData`]).
    pub async fn recover(&self) -> Result<RecoveryReport> {
        let log = self.path("_matview");
        let objects: Vec<_> = self.store.list(Some(&self.root)).try_collect().await?;
        let mut sizes = HashMap::new();
        let mut markers = vec![];
        for meta in objects {
            if meta.location.prefix_match(&log).is_some() {
                continue;
            }
            let Some(relative) = self.relative(&meta.location) else {
                continue;
            };
            if relative.ends_with(&format!("/{SNAPSHOT_MARKER}")) {
                markers.push(meta.location.clone());
            }
            sizes.insert(relative, meta.size);
        }
        let mut report = RecoveryReport::default();
        // Start from the newest readable version: it also knows views with
        // no data yet, and the remembered tables and views.
        let versions = self.list_versions().await?;
        if versions.is_empty() && markers.is_empty() {
            return Err(Error::NoCatalogData {
                location: self.location.clone(),
            });
        }
        let mut base = None;
        for (version, _) in versions.iter().rev() {
            if let Ok(m) = self.read_version(*version).await {
                base = Some(m);
                break;
            }
        }
        let complete = |view: &ViewEntry| {
            view.snapshot
                .as_ref()
                .is_none_or(|s| s.files.iter().all(|f| sizes.get(&f.path) == Some(&f.size)))
        };
        let contiguous = versions.windows(2).all(|w| w[1].0 == w[0].0 + 1);
        match &base {
            Some(latest)
                if Some(latest.version) == versions.last().map(|(v, _)| *v)
                    && contiguous
                    && latest.views.iter().all(complete) =>
            {
                return Err(Error::NothingToRecover {
                    catalog: self.location.clone(),
                    version: latest.version,
                });
            }
            Some(_) => {}
            None => report.lost.push(
                "the tables and views the catalog remembered: no version of the log is readable; \
                 create them again (views dropped within the retention window may also come back)"
                    .into(),
            ),
        }
        let base = base.unwrap_or_default();
        let base_time = base.committed_at;
        let mut newest: BTreeMap<QualifiedName, ViewEntry> = BTreeMap::new();
        let mut incomplete = vec![];
        for view in base.views {
            if complete(&view) {
                newest.insert(view.name.clone(), view);
            } else {
                incomplete.push(view.name.clone());
            }
        }
        for path in markers {
            let bytes = self.store.get(&path).await?.bytes().await?;
            let marker: SnapshotMarker = match serde_json::from_slice(&bytes) {
                Ok(m) => m,
                Err(e) => {
                    report.skipped.push(format!("{path}: unreadable: {e}"));
                    continue;
                }
            };
            if let Some(missing) = marker
                .snapshot
                .files
                .iter()
                .find(|f| sizes.get(&f.path) != Some(&f.size))
            {
                report.skipped.push(format!(
                    "{path}: data file {} is missing or changed",
                    missing.path
                ));
                continue;
            }
            // A snapshot written before the base version was committed, of a
            // view the base does not have (as that definition), was dropped
            // or replaced: do not bring it back.
            let known = newest
                .get(&marker.view.name)
                .is_some_and(|v| v.id == marker.view.id);
            if !known && marker.snapshot.refreshed_at <= base_time {
                report.skipped.push(format!(
                    "{path}: superseded before the last readable version"
                ));
                continue;
            }
            let newer = newest.get(&marker.view.name).is_none_or(|v| {
                v.snapshot
                    .as_ref()
                    .is_none_or(|s| s.refreshed_at < marker.snapshot.refreshed_at)
            });
            if newer {
                let entry = ViewEntry {
                    snapshot: Some(marker.snapshot),
                    ..marker.view
                };
                newest.insert(entry.name.clone(), entry);
            }
        }
        for name in incomplete {
            if !newest.contains_key(&name) {
                report.lost.push(format!(
                    "materialized view {name}: data files are missing and no complete snapshot of it is left"
                ));
            }
        }
        let relations = base.relations;
        let manifest = Manifest {
            format_version: MANIFEST_FORMAT,
            version: versions.last().map_or(1, |(v, _)| v + 1),
            committed_at: Utc::now(),
            commit_id: crate::spec::new_id(),
            views: newest.into_values().collect(),
            retired: vec![],
            relations,
        };
        let json = serde_json::to_vec(&manifest).map_err(|e| Error::Encoding {
            what: "a manifest",
            reason: e.to_string(),
        })?;
        let opts = create_only();
        self.store
            .put_opts(
                &self.version_path(manifest.version),
                PutPayload::from(json),
                opts,
            )
            .await?;
        // Readers start from the pointer: it must be past any gap the log
        // still has before this statement returns.
        self.write_pointer(manifest.version);
        self.settle_pointer().await;
        report.version = manifest.version;
        report.views = manifest
            .views
            .iter()
            .map(|v| {
                let rows = v.snapshot.as_ref().map_or(0, |s| s.row_count);
                format!("{} ({rows} rows)", v.name)
            })
            .collect();
        self.install(Arc::new(manifest));
        Ok(report)
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

    /// The most recently loaded or committed version.
    pub fn current(&self) -> Arc<Manifest> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Object path of a file given relative to the catalog root.
    pub fn path(&self, relative: &str) -> Path {
        let mut parts: Vec<_> = self.root.parts().collect();
        parts.extend(
            Path::from(relative)
                .parts()
                .map(|p| p.as_ref().to_owned().into()),
        );
        Path::from_iter(parts)
    }

    /// A path relative to the catalog root, for a full object path under it.
    pub fn relative(&self, path: &Path) -> Option<String> {
        path.prefix_match(&self.root)
            .map(|parts| Path::from_iter(parts).to_string())
    }

    /// URL of a directory relative to the root, for DataFusion's writers.
    pub fn url_of_dir(&self, relative: &str) -> String {
        format!("{}{}/", self.store_url.as_str(), self.path(relative))
    }

    fn log_dir(&self) -> Path {
        self.path("_matview/log")
    }

    fn version_path(&self, version: u64) -> Path {
        self.log_dir().join(format!("{version:020}.json").as_str())
    }

    /// Lists manifest versions with their commit times, oldest first.
    async fn list_versions(&self) -> Result<Vec<(u64, DateTime<Utc>)>> {
        let mut versions: Vec<(u64, DateTime<Utc>)> = self
            .store
            .list(Some(&self.log_dir()))
            .try_filter_map(|meta| async move {
                let version = meta
                    .location
                    .filename()
                    .and_then(|f| f.strip_suffix(".json"))
                    .and_then(|v| v.parse::<u64>().ok());
                Ok(version.map(|v| (v, meta.last_modified)))
            })
            .try_collect()
            .await?;
        versions.sort();
        Ok(versions)
    }

    async fn read_version(&self, version: u64) -> Result<Manifest> {
        let path = self.version_path(version);
        let bytes = self.store.get(&path).await?.bytes().await?;
        parse_manifest(&self.display_path(&path), &bytes, version)
    }

    /// Whether `error` is this catalog's store refusing a request under
    /// the catalog's root for lack of rights. A refusal elsewhere (a
    /// source the user may not read) is not the catalog's.
    pub fn refused(&self, error: &Error) -> bool {
        let root = self.root.as_ref();
        let under_root = |path: &str| {
            let path = path.trim_start_matches('/');
            root.is_empty() || path == root || path.starts_with(&format!("{root}/"))
        };
        let text = error.to_string();
        error.refusals().iter().any(|refusal| match refusal {
            Some(path) => under_root(path),
            // Only a local file system's error lacks the path; its text
            // names the file.
            None => text.contains(&self.display_path(&self.root)),
        })
    }

    /// An object's path as people know it: a local file's absolute path,
    /// else its URL.
    pub fn display_path(&self, path: &Path) -> String {
        match self.store_url.as_str().strip_prefix("file://") {
            Some(_) => format!("/{path}"),
            None => format!("{}{path}", self.store_url.as_str()),
        }
    }

    /// The versions in the log after `version`, in order (one `LIST` that
    /// starts after it).
    async fn versions_after(&self, version: u64) -> Result<Vec<u64>> {
        let mut later: Vec<u64> = self
            .store
            .list_with_offset(Some(&self.log_dir()), &self.version_path(version))
            .try_filter_map(|meta| async move {
                Ok(meta
                    .location
                    .filename()
                    .and_then(|f| f.strip_suffix(".json"))
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|v| *v > version))
            })
            .try_collect()
            .await?;
        later.sort_unstable();
        Ok(later)
    }

    /// Loads the latest committed version (if newer than what is loaded)
    /// and returns it. When nothing changed this costs one `HEAD` request
    /// (of the version after the loaded one); it never lists the log unless
    /// the latest-version pointer is missing or stale. It first waits for
    /// this catalog's pointer write in flight.
    ///
    /// A missing next version proves the loaded one is the latest only
    /// while the next version cannot have been deleted yet: a cleanup
    /// deletes a version once its successor is older than the retention
    /// window, and always deletes older versions first. So once the loaded
    /// version was last confirmed more than the window ago, its own
    /// presence is checked too (one more `HEAD`); without that, a session
    /// idle for longer than the window would commit on top of a version
    /// the others have long moved past, and its commit would be lost.
    pub async fn reload(&self) -> Result<Arc<Manifest>> {
        self.settle_pointer().await;
        let current = self.current();
        let checked_at = Instant::now();
        if current.version > 0 && !self.exists(current.version + 1).await? {
            let recently = self
                .confirmed()
                .is_some_and(|t| t.elapsed() < self.retention);
            if recently || self.exists(current.version).await? {
                self.confirm(checked_at);
                return Ok(current);
            }
        }
        match self.latest_version().await? {
            Some(v) if v > current.version => {
                let manifest = Arc::new(self.read_version(v).await?);
                self.install(Arc::clone(&manifest));
                self.confirm(checked_at);
                Ok(manifest)
            }
            _ => {
                self.confirm(checked_at);
                Ok(current)
            }
        }
    }

    fn confirmed(&self) -> Option<Instant> {
        *self.confirmed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn confirm(&self, at: Instant) {
        let mut guard = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none_or(|t| t < at) {
            *guard = Some(at);
        }
    }

    fn pointer_path(&self) -> Path {
        self.path("_matview/_latest.json")
    }

    async fn exists(&self, version: u64) -> Result<bool> {
        match self.store.head(&self.version_path(version)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The latest version number: from the pointer file, then probing
    /// forward for commits it does not know yet. Falls back to listing the
    /// log when the pointer is missing, unreadable or names a removed version,
    /// and repairs a pointer found wrong or more than a few versions behind
    /// (pointer writes are best effort).
    async fn latest_version(&self) -> Result<Option<u64>> {
        let pointed = match self.store.get(&self.pointer_path()).await {
            Ok(got) => {
                let bytes = got.bytes().await?;
                serde_json::from_slice::<LatestPointer>(&bytes)
                    .ok()
                    .map(|p| p.version)
            }
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let (mut version, valid) = match pointed {
            Some(v) if self.exists(v).await? => (v, true),
            _ => match self.list_versions().await?.last() {
                Some((v, _)) => (*v, false),
                None => return Ok(None),
            },
        };
        let from = version;
        // Probe forward; a version missing before one that exists is a
        // gap in the log, which must stop the catalog (a commit on top of
        // the version before it would be hidden by the one after).
        loop {
            while self.exists(version + 1).await? {
                version += 1;
            }
            match self.versions_after(version).await?.first() {
                None => break,
                // Committed since the probe, or the probe raced a writer.
                Some(_) if self.exists(version + 1).await? => continue,
                Some(&after) => {
                    return Err(Error::LogGap {
                        missing: self.display_path(&self.version_path(version + 1)),
                        before: version,
                        after,
                    });
                }
            }
        }
        if !valid || version - from > POINTER_LAG {
            self.write_pointer(version);
        }
        Ok(Some(version))
    }

    /// Records `version` as the latest, for readers to find it without
    /// listing. Best effort: a stale pointer only costs readers a few `HEAD`
    /// requests, so failures are ignored. It is written in the background,
    /// after the previous pointer write, and the next [`Self::reload`] waits
    /// for it, so a statement does not wait for the pointer of its own
    /// commit and writes stay in order.
    fn write_pointer(&self, version: u64) {
        let json = serde_json::to_vec(&LatestPointer { version }).unwrap_or_default();
        let (store, path) = (Arc::clone(&self.store), self.pointer_path());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut pending = self.pointer_write.lock().unwrap_or_else(|e| e.into_inner());
        let previous = pending.take();
        *pending = Some(runtime.spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            let _ = store.put(&path, PutPayload::from(json)).await;
        }));
    }

    /// Waits for the pointer write in flight, if any.
    async fn settle_pointer(&self) {
        let pending = self
            .pointer_write
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(write) = pending {
            let _ = write.await;
        }
    }

    fn install(&self, manifest: Arc<Manifest>) {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        if manifest.version > guard.version {
            *guard = manifest;
        }
    }

    /// Commits a change: `change` is applied to a copy of the latest version
    /// and must check its own preconditions there (it is re-run against the
    /// newer version when another writer commits first). Returns what
    /// `change` returned and the committed version.
    ///
    /// Every commit carries a fresh identity ([`Manifest::commit_id`]).
    /// When the conditional put fails with anything but `AlreadyExists` (a
    /// timeout, a 5xx after the store kept the object), the version is
    /// read back: if it is this commit's, the commit succeeded; if another
    /// writer's, the change is re-applied on top of it; if it cannot be
    /// read, [`Error::CommitOutcomeUnknown`] says the commit may have
    /// landed. See [`Error::commit_rejected`] for what a caller may delete.
    pub async fn commit<T>(
        &self,
        mut change: impl FnMut(&mut Manifest) -> Result<T>,
    ) -> Result<(T, Arc<Manifest>)> {
        let mut base = self.reload().await?;
        let forgotten = self.forgotten.lock().map(|f| f.clone()).unwrap_or_default();
        let commit_id = crate::spec::new_id();
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let mut next = (*base).clone();
            let out = change(&mut next)?;
            // Entries whose files a cleanup already deleted.
            next.retired.retain(|r| !forgotten.contains(r));
            next.format_version = MANIFEST_FORMAT;
            next.version = base.version + 1;
            next.committed_at = Utc::now();
            next.commit_id = commit_id.clone();
            for retired in next.retired.iter_mut().filter(|r| r.retired_at.is_none()) {
                retired.retired_at = Some(next.committed_at);
            }
            let path = self.version_path(next.version);
            let json = serde_json::to_vec(&next).map_err(|e| Error::Encoding {
                what: "a manifest",
                reason: e.to_string(),
            })?;
            let opts = create_only();
            let put_at = Instant::now();
            let put = self
                .store
                .put_opts(&path, PutPayload::from(json), opts)
                .await;
            let landed = match put {
                Ok(_) => true,
                Err(e) => {
                    let lost_race = matches!(e, object_store::Error::AlreadyExists { .. });
                    match self.commit_id_of(next.version).await {
                        Ok(Some(id)) => id == commit_id,
                        // Another writer's version, or none after losing a
                        // race (it was cleaned up since): reload and retry.
                        Ok(None) if lost_race => false,
                        // Nothing there after a failed put: it did not
                        // land, and the error is the put's.
                        Ok(None) => return Err(e.into()),
                        Err(read) if lost_race => return Err(read),
                        Err(read) => {
                            log::warn!("could not read back version {}: {read}", next.version);
                            return Err(Error::CommitOutcomeUnknown {
                                catalog: self.location.clone(),
                                version: next.version,
                                source: Box::new(Error::ObjectStore(e)),
                            });
                        }
                    }
                }
            };
            if !landed {
                base = self.reload().await?;
                continue;
            }
            let next = Arc::new(next);
            self.install(Arc::clone(&next));
            self.confirm(put_at);
            if let Ok(mut pending) = self.forgotten.lock() {
                pending.retain(|r| !forgotten.contains(r));
            }
            // Its predecessor may be deleted once it is older than the window.
            self.schedule_log_sweep(self.expiry(next.committed_at));
            self.write_pointer(next.version);
            return Ok((out, next));
        }
        Err(Error::TooManyRetries {
            catalog: self.location.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }

    /// The commit identity of `version`, or `None` when it does not exist.
    async fn commit_id_of(&self, version: u64) -> Result<Option<String>> {
        match self.read_version(version).await {
            Ok(manifest) => Ok(Some(manifest.commit_id)),
            Err(Error::ObjectStore(object_store::Error::NotFound { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes the files this catalog wrote into the snapshot directory
    /// `relative` (data files and the marker, directly inside it), used to
    /// discard data of a refresh that did not commit and of an expired
    /// snapshot. Anything else found there is left alone, and so is a
    /// directory whose name is not a snapshot id.
    pub async fn delete_dir(&self, relative: &str) -> Result<usize> {
        let is_snapshot_dir = relative
            .rsplit_once('/')
            .is_some_and(|(_, id)| is_snapshot_id(id));
        if !is_snapshot_dir {
            return Ok(0);
        }
        let prefix = self.path(relative);
        let paths: Vec<Path> = self
            .store
            .list(Some(&prefix))
            .try_filter(|m| {
                let ours = m
                    .location
                    .prefix_match(&prefix)
                    .map(|rest| rest.collect::<Vec<_>>())
                    .is_some_and(|rest| {
                        matches!(rest.as_slice(), [file]
                            if is_snapshot_file_name(file.as_ref())
                                || is_staged_data_file(file.as_ref()))
                    });
                futures::future::ready(ours)
            })
            .map_ok(|m| m.location)
            .try_collect()
            .await?;
        for p in &paths {
            match self.store.delete(p).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(paths.len())
    }

    /// Files a writer that failed before committing left behind, older
    /// than `cutoff`. Only what the catalog provably wrote is a candidate:
    /// files of the shapes it writes (`<view folder>/<snapshot id>/` then a
    /// data file, the marker, or a local store's staging file of a data
    /// file) in a snapshot directory no version references, whose marker
    /// or first data file names that snapshot (the key-value metadata every
    /// data file carries). Anything else under the root, however old, is
    /// not the catalog's and is never touched.
    async fn orphans(&self, manifest: &Manifest, cutoff: DateTime<Utc>) -> Result<Vec<Path>> {
        let known = manifest.known_snapshot_dirs();
        let log = self.path("_matview");
        let objects: Vec<ObjectMeta> = self.store.list(Some(&self.root)).try_collect().await?;
        // Candidate files by snapshot directory.
        let mut dirs: BTreeMap<String, Vec<ObjectMeta>> = BTreeMap::new();
        for meta in objects {
            if meta.last_modified > cutoff || meta.location.prefix_match(&log).is_some() {
                continue;
            }
            let Some(relative) = self.relative(&meta.location) else {
                continue;
            };
            let Some((dir, file)) = relative.rsplit_once('/') else {
                continue;
            };
            let Some((view_dir, id)) = dir.rsplit_once('/') else {
                continue;
            };
            // `<schema>/<view>`, or `<catalog>/<schema>/<view>`.
            let view_depth = view_dir.split('/').count();
            if (2..=3).contains(&view_depth)
                && is_snapshot_id(id)
                && (is_snapshot_file_name(file) || is_staged_data_file(file))
                && !known.contains(dir)
            {
                dirs.entry(dir.to_owned()).or_default().push(meta);
            }
        }
        let mut orphans = vec![];
        for (dir, files) in dirs {
            let id = dir.rsplit_once('/').map_or("", |(_, id)| id);
            if self.names_snapshot(&files, id).await {
                orphans.extend(files.into_iter().map(|m| m.location));
            }
        }
        Ok(orphans)
    }

    /// Whether the marker among `files`, else the first complete data file,
    /// says it belongs to snapshot `id`.
    async fn names_snapshot(&self, files: &[ObjectMeta], id: &str) -> bool {
        let name = |m: &ObjectMeta| m.location.filename().unwrap_or_default().to_owned();
        if let Some(marker) = files.iter().find(|m| name(m) == SNAPSHOT_MARKER) {
            let Ok(got) = self.store.get(&marker.location).await else {
                return false;
            };
            let Ok(bytes) = got.bytes().await else {
                return false;
            };
            return serde_json::from_slice::<SnapshotMarker>(&bytes)
                .is_ok_and(|m| m.snapshot.id == id);
        }
        let Some(data) = files.iter().find(|m| is_snapshot_file_name(&name(m))) else {
            return false;
        };
        match DFParquetMetadata::new(self.store.as_ref(), data)
            .fetch_metadata()
            .await
        {
            Ok(footer) => footer
                .file_metadata()
                .key_value_metadata()
                .into_iter()
                .flatten()
                .any(|kv| kv.key == META_SNAPSHOT && kv.value.as_deref() == Some(id)),
            Err(_) => false,
        }
    }

    /// Removes what no reader may still need, reading only the latest
    /// manifest (its cost does not grow with the number of commits):
    ///
    /// - the files of a snapshot retired more than the retention window ago
    ///   (every version that referenced it was superseded that long ago);
    /// - a manifest version whose successor was committed more than the
    ///   retention window ago (the latest version is never removed), oldest
    ///   first, so a version that is still there proves its successor is too
    ///   (see [`Self::reload`]);
    /// - with [`Sweep::Full`], also files no version references at all (left
    ///   by a writer that failed before committing), once they are older
    ///   than the window, so a refresh still writing is never cut off; only
    ///   in the folders of views the catalog knows, and only files of the
    ///   shape it writes in snapshot directories that prove to be its own
    ///   (see [`Self::orphans`]): a catalog rooted at a folder that holds
    ///   other data never touches it.
    ///
    /// With [`Sweep::Quick`] the entries of deleted files leave the
    /// manifest with the next commit rather than with a commit of their
    /// own, and the log is listed only when a version may have expired.
    ///
    /// Safe to run concurrently with writers, readers and other cleanups.
    pub async fn cleanup(&self, sweep: Sweep) -> Result<CleanupReport> {
        let cutoff = self.cutoff();
        let latest = self.reload().await?;
        let mut report = CleanupReport::default();

        let pending = match self.forgotten.lock() {
            Ok(mut forgotten) => {
                // Another writer's commit may have dropped them already.
                forgotten.retain(|r| latest.retired.contains(r));
                forgotten.clone()
            }
            Err(_) => vec![],
        };
        let expired: Vec<RetiredSnapshot> = latest
            .retired
            .iter()
            .filter(|r| r.retired_at.is_some_and(|t| t <= cutoff) && !pending.contains(r))
            .cloned()
            .collect();
        for retired in &expired {
            if retired.files.is_empty() {
                report.files_deleted += self.delete_dir(&retired.dir).await?;
                continue;
            }
            for file in &retired.files {
                match self.store.delete(&self.path(file)).await {
                    Ok(()) => report.files_deleted += 1,
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        match sweep {
            Sweep::Quick => {
                if let Ok(mut forgotten) = self.forgotten.lock() {
                    forgotten.extend(expired);
                }
            }
            Sweep::Full => {
                // `pending`: deleted earlier, still in the manifest.
                if !expired.is_empty() || !pending.is_empty() {
                    // Forget them (and those deleted earlier); a concurrent
                    // cleanup may have done so already.
                    self.commit(|m| {
                        m.retired.retain(|r| !expired.contains(r));
                        Ok(())
                    })
                    .await?;
                }
            }
        }

        let due = self.log_sweep_due().is_none_or(|due| due <= Utc::now());
        if sweep == Sweep::Full || due {
            report.manifests_deleted = match self.sweep_log(cutoff, sweep == Sweep::Full).await {
                Ok(deleted) => deleted,
                Err(e) => {
                    // Unknown again: the next cleanup lists.
                    *self
                        .next_log_sweep
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                    return Err(e);
                }
            };
        }

        if sweep == Sweep::Full {
            let latest = self.reload().await?;
            for orphan in self.orphans(&latest, cutoff).await? {
                match self.store.delete(&orphan).await {
                    Ok(()) => report.files_deleted += 1,
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(report)
    }

    /// Deletes the manifest versions whose successor is older than
    /// `cutoff`, oldest first, and schedules the next sweep for when the
    /// oldest remaining one expires. With `repair`, also rewrites the
    /// latest-version pointer (a writer may have died before writing it).
    async fn sweep_log(&self, cutoff: DateTime<Utc>, repair: bool) -> Result<usize> {
        // Commits made while this runs schedule themselves on top.
        *self
            .next_log_sweep
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(DateTime::<Utc>::MAX_UTC);
        let versions = self.list_versions().await?;
        if repair && let Some((latest, _)) = versions.last() {
            self.write_pointer(*latest);
        }
        if repair && !versions.is_empty() {
            // Before removing versions the old pointer may name.
            self.settle_pointer().await;
        }
        let mut deleted = 0;
        let mut next = DateTime::<Utc>::MAX_UTC;
        for pair in versions.windows(2) {
            let ((version, _), (_, successor_time)) = (pair[0], pair[1]);
            if successor_time > cutoff {
                // Never past a version that stays, even if clocks disagree:
                // a version that exists proves its successor does.
                next = self.expiry(successor_time);
                break;
            }
            match self.store.delete(&self.version_path(version)).await {
                Ok(()) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.schedule_log_sweep(next);
        Ok(deleted)
    }

    /// When the next log sweep is due; `None`: unknown, now.
    fn log_sweep_due(&self) -> Option<DateTime<Utc>> {
        *self
            .next_log_sweep
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the next log sweep due no later than `at` (an unknown time
    /// stays unknown: the next sweep lists anyway).
    fn schedule_log_sweep(&self, at: DateTime<Utc>) {
        let mut guard = self
            .next_log_sweep
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(due) = guard.as_mut() {
            *due = (*due).min(at);
        }
    }

    /// When something superseded at `at` becomes old enough to delete.
    fn expiry(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        chrono::Duration::from_std(self.retention)
            .ok()
            .and_then(|r| at.checked_add_signed(r))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    fn cutoff(&self) -> DateTime<Utc> {
        let retention = chrono::Duration::from_std(self.retention).unwrap_or(chrono::Duration::MAX);
        Utc::now()
            .checked_sub_signed(retention)
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }
}

/// Whether `name` is the staging file a local store writes a data file
/// through (`part-00000.parquet#3`), left behind when the writer dies.
fn is_staged_data_file(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(file, n)| {
        is_snapshot_file_name(file)
            && file != SNAPSHOT_MARKER
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Content of `_matview/_latest.json`.
#[derive(serde::Serialize, serde::Deserialize)]
struct LatestPointer {
    version: u64,
}

/// Put options that write an object only if none exists at its path:
/// every file this crate writes is new, never an overwrite.
pub(crate) fn create_only() -> PutOptions {
    PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    }
}

/// A condition on the latest manifest that a commit needs (the shape of
/// iceberg's `TableRequirement`): checked against every version the commit
/// is tried on, so a change made by another writer in between is noticed
/// and reported as what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// No view of this name (CREATE).
    ViewAbsent(QualifiedName),
    /// The view exists with this definition id (CREATE OR REPLACE, REFRESH).
    ViewIs {
        /// The view.
        name: QualifiedName,
        /// Its [`crate::spec::ViewEntry::id`].
        id: String,
    },
    /// The view's committed snapshot is this one; `None`: unpopulated
    /// (REFRESH: what it was planned against).
    SnapshotIs {
        /// The view.
        name: QualifiedName,
        /// The snapshot id.
        id: Option<String>,
    },
}

impl Requirement {
    /// `Ok` when `manifest` meets every requirement; else the error for
    /// the first it does not, naming the view as `display`.
    pub fn check_all(
        requirements: &[Requirement],
        manifest: &Manifest,
        display: &str,
    ) -> Result<()> {
        for requirement in requirements {
            requirement.check(manifest, display)?;
        }
        Ok(())
    }

    /// `Ok` when `manifest` meets this requirement; else `AlreadyExists`
    /// or `CommitConflict` saying what another session did.
    pub fn check(&self, manifest: &Manifest, display: &str) -> Result<()> {
        let conflict = |reason: &str| {
            Err(Error::CommitConflict {
                name: display.to_string(),
                reason: reason.into(),
            })
        };
        match self {
            Requirement::ViewAbsent(name) => match manifest.view(name) {
                None => Ok(()),
                Some(_) => Err(Error::AlreadyExists {
                    name: display.to_string(),
                }),
            },
            Requirement::ViewIs { name, id } => match manifest.view(name) {
                None => conflict("it was dropped by another session"),
                Some(view) if &view.id != id => conflict("it was replaced by another session"),
                Some(_) => Ok(()),
            },
            Requirement::SnapshotIs { name, id } => {
                let current = manifest
                    .view(name)
                    .and_then(|v| v.snapshot.as_ref())
                    .map(|s| &s.id);
                if current == id.as_ref() {
                    Ok(())
                } else {
                    conflict("it was refreshed by another session")
                }
            }
        }
    }
}

/// Parses and checks one manifest file (`path` names it in errors): a
/// newer format than this build reads, bytes that are not a manifest, and a
/// version that is not the one its name says are typed errors.
pub fn parse_manifest(path: &str, bytes: &[u8], expected_version: u64) -> Result<Manifest> {
    #[derive(serde::Deserialize)]
    struct FormatOnly {
        format_version: u32,
    }
    let corrupt = |reason: String| Error::CorruptManifest {
        path: path.to_string(),
        reason,
    };
    let format: FormatOnly = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if format.format_version > MANIFEST_FORMAT {
        return Err(Error::UnsupportedFormat {
            path: path.to_string(),
            found: format.format_version,
            supported: MANIFEST_FORMAT,
        });
    }
    let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if manifest.version != expected_version {
        return Err(corrupt(format!(
            "it says version {}, its name says {expected_version}",
            manifest.version
        )));
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    async fn catalog(store: Arc<dyn ObjectStore>, retention: Duration) -> Catalog {
        Catalog::open(
            "memory:///cat",
            ObjectStoreUrl::parse("memory://").unwrap(),
            store,
            Path::from("cat"),
            retention,
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn commits_are_numbered_and_visible_to_a_second_reader() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let a = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
        let b = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
        assert_eq!(a.current().version, 0);
        let ((), m) = a.commit(|_| Ok(())).await.unwrap();
        assert_eq!(m.version, 1);
        // b is behind; its commit must land on top of a's, not beside it.
        let ((), m) = b.commit(|_| Ok(())).await.unwrap();
        assert_eq!(m.version, 2);
        assert_eq!(a.reload().await.unwrap().version, 2);
    }

    #[tokio::test]
    async fn a_commit_whose_put_failed_after_landing_is_known_as_its_own() {
        use crate::testing::{Fault, FaultAction, InstrumentedStore};
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let store = Arc::new(InstrumentedStore::new(Arc::clone(&memory)));
        let c = catalog(
            Arc::clone(&store) as Arc<dyn ObjectStore>,
            DEFAULT_RETENTION,
        )
        .await;
        c.commit(|_| Ok(())).await.unwrap();
        c.settle_pointer().await;
        // The put of version 2 reaches the store, then reports an error (a
        // timeout after S3 kept the object): read back, it is this commit's.
        store.set_fault(Some(Fault {
            at_write: 1,
            after: true,
            action: FaultAction::Error,
        }));
        let (runs, m) = c.commit(|_| Ok(1)).await.unwrap();
        assert_eq!((runs, m.version), (1, 2));
        let reader = catalog(Arc::clone(&memory), DEFAULT_RETENTION).await;
        assert_eq!(reader.current().commit_id, m.commit_id);
        assert_eq!(reader.current().version, 2);
        c.settle_pointer().await;
        // A put that fails before reaching the store: the error is the
        // put's, and it does not prove the commit was rejected (the caller
        // keeps its files for the orphan sweep).
        store.set_fault(Some(Fault {
            at_write: 1,
            after: false,
            action: FaultAction::Error,
        }));
        let err = c.commit(|_| Ok(())).await.unwrap_err();
        assert!(err.to_string().contains("injected failure"), "{err}");
        assert!(!err.commit_rejected());
        assert_eq!(reader.reload().await.unwrap().version, 2);
        // A precondition that fails does prove it.
        store.set_fault(None);
        let err = c
            .commit(|_| -> Result<()> {
                Err(Error::CommitConflict {
                    name: "v".into(),
                    reason: "test".into(),
                })
            })
            .await
            .unwrap_err();
        assert!(err.commit_rejected());
    }

    #[tokio::test]
    async fn a_conflicting_commit_reruns_the_change_on_the_winner() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let a = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
        let b = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
        a.commit(|_| Ok(())).await.unwrap();
        let mut seen = vec![];
        // b still believes version 0 is the latest until its put fails.
        *b.current.write().unwrap() = Arc::new(Manifest::default());
        b.commit(|m| {
            seen.push(m.version);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(seen, vec![1]);
    }

    #[tokio::test]
    async fn an_idle_writer_commits_after_versions_cleaned_up_under_it() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let idle = catalog(Arc::clone(&store), Duration::ZERO).await;
        idle.commit(|_| Ok(())).await.unwrap();
        let busy = catalog(Arc::clone(&store), Duration::ZERO).await;
        busy.commit(|_| Ok(())).await.unwrap();
        busy.commit(|_| Ok(())).await.unwrap();
        // Versions 1 and 2 are gone: version 2 no longer exists to tell the
        // idle writer that version 1 was superseded.
        let report = busy.cleanup(Sweep::Full).await.unwrap();
        assert_eq!(report.manifests_deleted, 2);
        let ((), m) = idle.commit(|_| Ok(())).await.unwrap();
        assert_eq!(m.version, 4, "lands on top of version 3, not beside it");
        assert_eq!(busy.reload().await.unwrap().version, 4);
    }

    #[tokio::test]
    async fn a_reader_repairs_a_pointer_left_far_behind() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let c = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
        for _ in 0..6 {
            c.commit(|_| Ok(())).await.unwrap();
        }
        c.reload().await.unwrap();
        let pointer = || async {
            let bytes = store
                .get(&c.pointer_path())
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            serde_json::from_slice::<LatestPointer>(&bytes)
                .unwrap()
                .version
        };
        assert_eq!(pointer().await, 6, "commits keep it current");
        // As if the pointer writes of five commits had been lost.
        store
            .put(&c.pointer_path(), PutPayload::from(r#"{"version":1}"#))
            .await
            .unwrap();
        let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
        assert_eq!(reader.current().version, 6);
        reader.reload().await.unwrap();
        assert_eq!(pointer().await, 6, "repaired by the reader");
    }

    #[tokio::test]
    async fn versions_are_deleted_once_expired_without_listing_each_commit() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let c = catalog(Arc::clone(&store), Duration::from_millis(300)).await;
        c.commit(|_| Ok(())).await.unwrap();
        c.commit(|_| Ok(())).await.unwrap();
        assert_eq!(c.cleanup(Sweep::Quick).await.unwrap().manifests_deleted, 0);
        let due = c.log_sweep_due().expect("scheduled after listing");
        assert!(due > Utc::now(), "not due before version 2 expires");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(c.cleanup(Sweep::Quick).await.unwrap().manifests_deleted, 1);
        assert_eq!(c.list_versions().await.unwrap().len(), 1);
        // Nothing else can expire until the next commit.
        assert_eq!(c.log_sweep_due(), Some(DateTime::<Utc>::MAX_UTC));
        c.commit(|_| Ok(())).await.unwrap();
        assert!(c.log_sweep_due() < Some(DateTime::<Utc>::MAX_UTC));
    }

    #[tokio::test]
    async fn unreadable_and_newer_manifests_are_named() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        store
            .put(
                &Path::from("cat/_matview/log/00000000000000000001.json"),
                PutPayload::from("{not json"),
            )
            .await
            .unwrap();
        let err = Catalog::open(
            "m",
            ObjectStoreUrl::parse("memory://").unwrap(),
            Arc::clone(&store),
            Path::from("cat"),
            DEFAULT_RETENTION,
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("cat/_matview/log/00000000000000000001.json is unreadable"),
            "{err}"
        );
        store
            .put(
                &Path::from("cat/_matview/log/00000000000000000002.json"),
                PutPayload::from(r#"{"format_version": 99}"#),
            )
            .await
            .unwrap();
        let err = Catalog::open(
            "m",
            ObjectStoreUrl::parse("memory://").unwrap(),
            store,
            Path::from("cat"),
            DEFAULT_RETENTION,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedFormat { found: 99, .. }),
            "{err}"
        );
    }

    /// A one-row Parquet file whose key-value metadata names `snapshot`,
    /// as the catalog's writers leave it.
    fn parquet_of_snapshot(snapshot: &str) -> Vec<u8> {
        use datafusion::arrow::array::{Int64Array, RecordBatch};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::file::metadata::KeyValue;
        use datafusion::parquet::file::properties::WriterProperties;
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_key_value_metadata(Some(vec![KeyValue::new(
                META_SNAPSHOT.to_owned(),
                snapshot.to_owned(),
            )]))
            .build();
        let mut bytes = vec![];
        let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        bytes
    }

    #[tokio::test]
    async fn cleanup_keeps_the_latest_version_and_live_files() {
        const S1: &str = "11111111111111111111111111111111";
        const S2: &str = "22222222222222222222222222222222";
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let c = catalog(Arc::clone(&store), Duration::ZERO).await;
        store
            .put(
                &c.path("public/v/11111111111111111111111111111111/a.parquet"),
                PutPayload::from("x"),
            )
            .await
            .unwrap();
        store
            .put(
                &c.path("public/v/22222222222222222222222222222222/b.parquet"),
                PutPayload::from("y"),
            )
            .await
            .unwrap();
        let name = crate::spec::QualifiedName::new("datafusion", "public", "v");
        let entry = |snap: &str, file: &str| crate::spec::ViewEntry {
            name: name.clone(),
            id: "id".into(),
            dir: "public/v".into(),
            definition: crate::spec::Definition {
                format: 1,
                sql: "SELECT 1".into(),
                column_names: vec![],
                default_catalog: "datafusion".into(),
                default_schema: "public".into(),
                schema: datafusion::arrow::datatypes::Schema::empty(),
                sources: vec![],
                not_reproducible: None,
            },
            created_at: Utc::now(),
            snapshot: Some(crate::spec::Snapshot {
                id: snap.into(),
                files: vec![crate::spec::DataFile {
                    path: file.into(),
                    size: 1,
                    rows: 1,
                    columns: vec![],
                    lineage: None,
                }],
                row_count: 1,
                size_bytes: 1,
                refreshed_at: Utc::now(),
                sources: vec![],
                state_columns: vec![],
            }),
        };
        c.commit(|m| {
            m.upsert(entry(
                S1,
                "public/v/11111111111111111111111111111111/a.parquet",
            ));
            Ok(())
        })
        .await
        .unwrap();
        c.commit(|m| {
            m.upsert(entry(
                S2,
                "public/v/22222222222222222222222222222222/b.parquet",
            ));
            Ok(())
        })
        .await
        .unwrap();
        // What the catalog did not write, inside and around a view's
        // folder: never deleted, however old.
        let strangers = [
            "other/data.txt",
            "public/stranger/x.parquet",
            "public/stranger/99999999999999999999999999999999/part-00000.parquet",
            "public/v/notes.txt",
            "public/v/x.parquet",
            "public/v/not-a-snapshot/part-00000.parquet",
            "public/v/99999999999999999999999999999999/notes.txt",
            "public/v/99999999999999999999999999999999/sub/part-00000.parquet",
            "_matview/notes.txt",
        ];
        for stranger in strangers {
            store
                .put(&c.path(stranger), PutPayload::from("mine"))
                .await
                .unwrap();
        }
        // A file no version references, as a crashed writer leaves it: its
        // footer names its snapshot.
        store
            .put(
                &c.path("public/v/99999999999999999999999999999999/orphan.parquet"),
                PutPayload::from(parquet_of_snapshot("99999999999999999999999999999999")),
            )
            .await
            .unwrap();
        // A Parquet file of the right shape that is not the catalog's.
        store
            .put(
                &c.path("public/v/88888888888888888888888888888888/part-00000.parquet"),
                PutPayload::from(parquet_of_snapshot("someone else's")),
            )
            .await
            .unwrap();
        let report = c.cleanup(Sweep::Quick).await.unwrap();
        // s1 was retired by version 2, which superseded version 1.
        assert_eq!(
            report,
            CleanupReport {
                manifests_deleted: 1,
                files_deleted: 1
            }
        );
        assert!(
            store
                .head(&c.path("public/v/22222222222222222222222222222222/b.parquet"))
                .await
                .is_ok()
        );
        assert!(
            store
                .head(&c.path("public/v/11111111111111111111111111111111/a.parquet"))
                .await
                .is_err()
        );
        // The entry of the deleted files leaves with the next commit; a
        // second cleanup does not delete them again.
        assert_eq!(c.current().retired.len(), 1);
        assert_eq!(
            c.cleanup(Sweep::Quick).await.unwrap(),
            CleanupReport::default()
        );
        c.commit(|_| Ok(())).await.unwrap();
        assert!(c.current().retired.is_empty());
        // The catalog still opens at the latest version.
        let again = catalog(Arc::clone(&store), Duration::ZERO).await;
        assert_eq!(again.current().version, 3);
        assert!(
            store
                .head(&c.path("public/v/99999999999999999999999999999999/orphan.parquet"))
                .await
                .is_ok()
        );
        // The full sweep finds the orphan and version 2, and nothing else.
        assert_eq!(
            c.cleanup(Sweep::Full).await.unwrap(),
            CleanupReport {
                manifests_deleted: 1,
                files_deleted: 1
            }
        );
        assert!(
            store
                .head(&c.path("public/v/22222222222222222222222222222222/b.parquet"))
                .await
                .is_ok()
        );
        assert_eq!(
            c.cleanup(Sweep::Full).await.unwrap(),
            CleanupReport::default()
        );
        for stranger in strangers
            .iter()
            .chain(&["public/v/88888888888888888888888888888888/part-00000.parquet"])
        {
            assert!(store.head(&c.path(stranger)).await.is_ok(), "{stranger}");
        }
    }
}
