//! The views' own logs: reading a view's latest state on demand, and
//! committing a change to one view (a refresh) without touching the index
//! or any other view.

use std::collections::BTreeSet;

use super::*;

/// A version of a view's log that can still be read with its data
/// ([`Catalog::retained_versions`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RetainedVersion {
    /// The version of the view's log.
    pub version: u64,
    /// When it was committed.
    pub committed_at: DateTime<Utc>,
    /// When its snapshot's data was computed.
    pub refreshed_at: DateTime<Utc>,
    /// Rows of its snapshot.
    pub row_count: u64,
}

/// One view log and what this process last read of it.
#[derive(Debug)]
pub(super) struct ViewLog {
    pub(super) log: journal::Log,
    state: RwLock<Option<Arc<ViewVersion>>>,
    /// Retired entries whose files a cleanup deleted; the view's next
    /// version drops them.
    pub(super) forgotten: Mutex<Vec<RetiredSnapshot>>,
    /// When something of this log may next have expired; `None`: unknown.
    sweep_due: Mutex<Option<DateTime<Utc>>>,
}

impl ViewLog {
    /// The latest state of the log this process has read, if any.
    pub(super) fn state(&self) -> Option<Arc<ViewVersion>> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn sweep_due(&self) -> Option<DateTime<Utc>> {
        *self.sweep_due.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set_sweep_due(&self, at: DateTime<Utc>) {
        *self.sweep_due.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    /// Makes the next sweep due no later than `at` (unknown stays unknown).
    fn schedule_sweep(&self, at: DateTime<Utc>) {
        if let Some(due) = self
            .sweep_due
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            *due = (*due).min(at);
        }
    }
}

/// The data files of `state`'s current snapshot.
fn current_files(state: &ViewVersion) -> BTreeSet<&str> {
    state
        .view
        .snapshot
        .iter()
        .flat_map(|s| s.files.iter().map(|f| f.path.as_str()))
        .collect()
}

pub(super) fn parse_view_version(path: &str, bytes: &[u8], expected: u64) -> Result<ViewVersion> {
    let corrupt = |reason: String| Error::CorruptManifest {
        path: path.to_string(),
        reason,
    };
    versions::format_of(path, bytes)?;
    let version: ViewVersion = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if version.version != expected {
        return Err(corrupt(format!(
            "it says version {}, its name says {expected}",
            version.version
        )));
    }
    Ok(version)
}

impl Catalog {
    /// The log of view log `slot` (one handle per slot per catalog).
    pub(super) fn view_log(&self, slot: &str) -> Arc<ViewLog> {
        let mut logs = self.view_logs.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(logs.entry(slot.to_owned()).or_insert_with(|| {
            let dir = self.path(&format!("_matview/views/{slot}"));
            let pointer = dir.clone().join("_latest.json");
            Arc::new(ViewLog {
                log: journal::Log::new(
                    Arc::clone(&self.store),
                    dir,
                    pointer,
                    self.location.clone(),
                    self.display_prefix(),
                    self.retention,
                ),
                state: RwLock::new(None),
                forgotten: Mutex::new(vec![]),
                sweep_due: Mutex::new(None),
            })
        }))
    }

    /// Writes the first version of a new view log holding `view`, for an
    /// index commit to reference (until then nothing does, like data files
    /// not yet committed). Returns the log's slot.
    pub(crate) async fn create_view_log(&self, view: &ViewEntry) -> Result<SlotId> {
        self.create_view_log_in(view, crate::spec::new_id()).await
    }

    /// [`Self::create_view_log`] in a slot chosen beforehand (one a
    /// [`super::Lease`] names, so cleanup leaves it alone until the index
    /// commit names it).
    pub(crate) async fn create_view_log_in(
        &self,
        view: &ViewEntry,
        slot: SlotId,
    ) -> Result<SlotId> {
        let record = ViewVersion {
            format_version: MANIFEST_FORMAT,
            version: 1,
            committed_at: Utc::now(),
            commit_id: crate::spec::new_id(),
            view: view.clone(),
            retired: vec![],
        };
        let log = self.view_log(&slot);
        let bytes = index::encode("a view version", &record)?;
        match log
            .log
            .put(1, bytes, &record.commit_id, commit_id_in)
            .await?
        {
            journal::Put::Landed => {}
            journal::Put::Lost => {
                return Err(Error::CorruptManifest {
                    path: log.log.display(&log.log.version_path(1)),
                    reason: "a new view log already has a first version".into(),
                });
            }
        }
        log.log.write_pointer(journal::LatestPointer {
            version: 1,
            checkpoint: None,
        });
        *log.state.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(record));
        Ok(slot)
    }

    /// Deletes a view log no index version references (a CREATE whose
    /// commit was rejected).
    pub(crate) async fn discard_view_log(&self, slot: &str) -> Result<()> {
        self.view_log(slot).log.delete_all().await?;
        self.view_logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(slot);
        Ok(())
    }

    /// The latest state of view log `slot`: one `HEAD` when this process
    /// has read it before and nothing changed.
    pub(super) async fn load_view_log(&self, slot: &str) -> Result<Arc<ViewVersion>> {
        let log = self.view_log(slot);
        let cached = log.state.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(state) = &cached
            && log.log.still_latest(state.version).await?
        {
            return Ok(Arc::clone(state));
        }
        let (latest, _) = log.log.latest_version().await?;
        let Some(latest) = latest else {
            return Err(Error::CorruptManifest {
                path: log.log.display(log.log.dir()),
                reason: "the view's log has no version; run `dfmv recover` (MatviewSession::recover) to rebuild it from the view's data".into(),
            });
        };
        if let Some(state) = cached.filter(|s| s.version >= latest) {
            return Ok(state);
        }
        let path = log.log.version_path(latest);
        let bytes = self.store.get(&path).await?.bytes().await?;
        let state = Arc::new(parse_view_version(&log.log.display(&path), &bytes, latest)?);
        Ok(install_view(&log, state))
    }

    /// The latest state of the view named `name` in the loaded index (see
    /// [`Self::reload`]), read from its log on demand; `None`: no such view.
    pub async fn view(&self, name: &QualifiedName) -> Result<Option<Arc<ViewVersion>>> {
        self.view_in(&self.index(), name).await
    }

    /// The latest state of the view named `name` in `index` (a statement's
    /// base state), read from its log; `None`: no such view there.
    pub(crate) async fn view_in(
        &self,
        index: &Index,
        name: &QualifiedName,
    ) -> Result<Option<Arc<ViewVersion>>> {
        let Some(entry) = index.view(name) else {
            // Not there, or its block of the checkpoint does not parse.
            self.check_poisoned()?;
            return Ok(None);
        };
        if entry.slot.is_empty() {
            // A format 1 entry: the view is in the format 1 manifest,
            // unless a commit since `index` was loaded moved the catalog to
            // format 2 (the first refresh of a CASCADE can); then the
            // loaded index names its log.
            if let Some(state) = self.legacy_view(name) {
                return Ok(Some(state));
            }
            return match self.index().view(name) {
                Some(entry) if !entry.slot.is_empty() => {
                    self.load_view_log(&entry.slot).await.map(Some)
                }
                _ => Ok(None),
            };
        }
        self.load_view_log(&entry.slot).await.map(Some)
    }

    /// View `name` as version `version` of its log left it, for a refresh
    /// that reads it there rather than at its latest state. Fails with
    /// [`Error::SourceVersionUnavailable`] unless that version was
    /// committed, had data, and its files are still retained: each one is
    /// in the latest snapshot or retired less than the retention window
    /// ago (and present).
    pub async fn view_at(
        &self,
        name: &QualifiedName,
        display: &str,
        version: u64,
    ) -> Result<Arc<ViewVersion>> {
        let (latest, state) = self.view_version(name, display, version).await?;
        let unavailable = |reason: String| Error::SourceVersionUnavailable {
            name: display.to_owned(),
            version,
            reason,
        };
        let Some(snapshot) = &state.view.snapshot else {
            return Err(unavailable("it had not been populated then".into()));
        };
        let paths: Vec<&str> = snapshot.files.iter().map(|f| f.path.as_str()).collect();
        self.check_retained(&latest, &paths, display, version)
            .await?;
        Ok(state)
    }

    /// View `name`'s latest state and its state at `version` of its log
    /// (read from the log unless it is the latest), whatever its data;
    /// [`Error::SourceVersionUnavailable`] when the log has no such
    /// version (any more).
    pub(crate) async fn view_version(
        &self,
        name: &QualifiedName,
        display: &str,
        version: u64,
    ) -> Result<(Arc<ViewVersion>, Arc<ViewVersion>)> {
        let unavailable = |reason: String| Error::SourceVersionUnavailable {
            name: display.to_owned(),
            version,
            reason,
        };
        let Some(latest) = self.view(name).await? else {
            return Err(Error::NotFound {
                name: display.to_owned(),
            });
        };
        if self.index().view(name).is_some_and(|e| e.slot.is_empty()) {
            return Err(unavailable(
                "the catalog is in format 1, which keeps no per-view versions; its next commit moves it to format 2".into(),
            ));
        }
        if version == 0 || version > latest.version {
            return Err(unavailable(format!(
                "its versions are 1 to {}",
                latest.version
            )));
        }
        if version == latest.version {
            return Ok((Arc::clone(&latest), latest));
        }
        let log = self.view_log(&self.slot_of(name));
        let Some(bytes) = log.log.get(version).await? else {
            return Err(unavailable(
                "that version is older than the retention window and was removed".into(),
            ));
        };
        let state = Arc::new(parse_view_version(
            &log.log.display(&log.log.version_path(version)),
            &bytes,
            version,
        )?);
        Ok((latest, state))
    }

    /// The log slot of view `name` in the loaded index (empty: none).
    fn slot_of(&self, name: &QualifiedName) -> String {
        self.index()
            .view(name)
            .map(|e| e.slot.clone())
            .unwrap_or_default()
    }

    /// Fails with [`Error::SourceVersionUnavailable`] (for `version` of
    /// view `display`) unless each of the data files `paths` is in the
    /// view's `latest` snapshot, or was retired less than the retention
    /// window ago and is still present (one `HEAD` each).
    pub(crate) async fn check_retained(
        &self,
        latest: &ViewVersion,
        paths: &[&str],
        display: &str,
        version: u64,
    ) -> Result<()> {
        let unavailable = |reason: String| Error::SourceVersionUnavailable {
            name: display.to_owned(),
            version,
            reason,
        };
        let current = current_files(latest);
        let now = Utc::now();
        let mut older = vec![];
        for path in paths.iter().filter(|p| !current.contains(**p)) {
            match self.retired_at(latest, path) {
                Some(at) if self.expiry(at) > now => older.push(path.to_string()),
                _ => {
                    return Err(unavailable(format!(
                        "its data file {path} is past the retention window ({}s)",
                        self.retention.as_secs()
                    )));
                }
            }
        }
        let heads = older.into_iter().map(|path| async move {
            match self.store.head(&self.path(&path)).await {
                Ok(_) => Ok(None),
                Err(object_store::Error::NotFound { .. }) => Ok(Some(path)),
                Err(e) => Err(Error::from(e)),
            }
        });
        let missing: Vec<Option<String>> = futures::stream::iter(heads)
            .buffered(16)
            .try_collect()
            .await?;
        if let Some(path) = missing.into_iter().flatten().next() {
            return Err(unavailable(format!("its data file {path} was removed")));
        }
        Ok(())
    }

    /// When the view whose latest state is `latest` stopped using data
    /// file `path`, if its log says.
    fn retired_at(&self, latest: &ViewVersion, path: &str) -> Option<DateTime<Utc>> {
        let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
        latest
            .retired
            .iter()
            .filter(|r| r.dir == dir && (r.files.is_empty() || r.files.iter().any(|f| f == path)))
            .filter_map(|r| r.retired_at)
            .min()
    }

    /// The versions of view `name`'s log that can still be read with
    /// their data, oldest first: each listed in its log (one `LIST`, then
    /// one `GET` per version), populated, and with every data file current
    /// or retired less than the retention window ago.
    pub async fn retained_versions(&self, name: &QualifiedName) -> Result<Vec<RetainedVersion>> {
        let Some(latest) = self.view(name).await? else {
            return Ok(vec![]);
        };
        let slot = self.slot_of(name);
        if slot.is_empty() {
            return Ok(vec![]);
        }
        let log = self.view_log(&slot);
        let listed: Vec<u64> = log
            .log
            .list_versions()
            .await?
            .into_iter()
            .map(|(v, _)| v)
            .filter(|v| *v < latest.version)
            .collect();
        let log = &log;
        let reads = listed.into_iter().map(|version| async move {
            let Some(bytes) = log.log.get(version).await? else {
                return Ok(None);
            };
            parse_view_version(
                &log.log.display(&log.log.version_path(version)),
                &bytes,
                version,
            )
            .map(|v| Some(Arc::new(v)))
        });
        let mut states: Vec<Arc<ViewVersion>> = futures::stream::iter(reads)
            .buffered(16)
            .try_filter_map(|v| futures::future::ready(Ok(v)))
            .try_collect()
            .await?;
        states.push(Arc::clone(&latest));
        let current = current_files(&latest);
        let now = Utc::now();
        Ok(states
            .iter()
            .filter_map(|state| {
                let snapshot = state.view.snapshot.as_ref()?;
                let retained = snapshot.files.iter().all(|f| {
                    current.contains(f.path.as_str())
                        || self
                            .retired_at(&latest, &f.path)
                            .is_some_and(|at| self.expiry(at) > now)
                });
                retained.then(|| RetainedVersion {
                    version: state.version,
                    committed_at: state.committed_at,
                    refreshed_at: snapshot.refreshed_at,
                    row_count: snapshot.row_count,
                })
            })
            .collect())
    }

    /// [`Self::view`]'s entry alone.
    pub async fn entry(&self, name: &QualifiedName) -> Result<Option<ViewEntry>> {
        Ok(self.view(name).await?.map(|v| v.view.clone()))
    }

    /// Every view of the loaded index, sorted by name (reads each view's
    /// log; for listings).
    pub async fn views(&self) -> Result<Vec<Arc<ViewVersion>>> {
        let reads: Vec<BoxFuture<'_, Result<Option<Arc<ViewVersion>>>>> = self
            .view_names()?
            .into_iter()
            .map(|name| Box::pin(async move { self.view(&name).await }) as BoxFuture<'_, _>)
            .collect();
        futures::stream::iter(reads)
            .buffered(32)
            .try_filter_map(|v| futures::future::ready(Ok(v)))
            .try_collect()
            .await
    }

    /// The name of every view of the loaded index, in order; fails when a
    /// block of its checkpoint does not parse rather than leave its views
    /// out.
    pub fn view_names(&self) -> Result<Vec<QualifiedName>> {
        let names = self.index().views.keys().cloned().collect();
        self.check_poisoned()?;
        Ok(names)
    }

    /// Every view of the loaded index with its latest state, or why it
    /// cannot be read: one broken log does not hide the other views.
    pub(crate) async fn views_each(&self) -> Result<Vec<(QualifiedName, ViewRead)>> {
        self.index().views.read_all().await;
        let reads: Vec<BoxFuture<'_, (QualifiedName, ViewRead)>> = self
            .view_names()?
            .into_iter()
            .map(|name| {
                Box::pin(async move {
                    let read = self.view(&name).await;
                    (name, read)
                }) as BoxFuture<'_, _>
            })
            .collect();
        Ok(futures::stream::iter(reads).buffered(32).collect().await)
    }

    /// A format 1 view as a view version.
    fn legacy_view(&self, name: &QualifiedName) -> Option<Arc<ViewVersion>> {
        let manifest = self.legacy()?;
        let view = manifest.view(name)?.clone();
        let dirs = view.data_dirs();
        Some(Arc::new(ViewVersion {
            format_version: manifest.format_version,
            version: manifest.version,
            committed_at: manifest.committed_at,
            commit_id: manifest.commit_id.clone(),
            retired: manifest
                .retired
                .iter()
                .filter(|r| dirs.contains(&r.dir))
                .cloned()
                .collect(),
            view,
        }))
    }

    /// Commits `commit` to view `name`'s log: its requirements are
    /// checked against the latest index and view version, then its change
    /// applied to the view; when another writer changed the view first,
    /// both happen again on the newer version. One new version of the
    /// view's log is written; refreshes of different views never touch the
    /// same file. Returns the committed state, or how the commit failed
    /// (see [`CommitFailure`]).
    pub(crate) async fn commit_view(
        &self,
        name: &QualifiedName,
        display: &str,
        commit: &ViewCommit,
    ) -> Result<Arc<ViewVersion>, CommitFailure> {
        let ((), view) = self
            .commit_view_change(name, display, |index, view| {
                commit.apply(index, view, display)
            })
            .await?;
        Ok(view)
    }

    /// The commit loop of a view's log: `change` gets the latest index and
    /// a copy of the view's latest state (again the newer ones when another
    /// writer changed the view first); a put that fails even after reading
    /// back is the one [`CommitFailure::Unknown`].
    pub(crate) async fn commit_view_change<T>(
        &self,
        name: &QualifiedName,
        display: &str,
        mut change: impl FnMut(&Index, &mut ViewVersion) -> Result<T>,
    ) -> Result<(T, Arc<ViewVersion>), CommitFailure> {
        let mut index = self.reload().await?;
        if self.is_format_1() {
            self.migrate().await?;
            index = self.reload().await?;
        }
        let commit_id = crate::spec::new_id();
        let mut retries = Retries::new(&self.location);
        loop {
            let Some(entry) = index.view(name) else {
                return Err(CommitFailure::Rejected(Error::CommitConflict {
                    name: display.to_string(),
                    reason: "it was dropped by another session".into(),
                }));
            };
            let log = self.view_log(&entry.slot);
            let base = self.load_view_log(&entry.slot).await?;
            let forgotten = log.forgotten.lock().map(|f| f.clone()).unwrap_or_default();
            let mut next = (*base).clone();
            let out = change(&index, &mut next)?;
            next.retired.retain(|r| !forgotten.contains(r));
            next.format_version = MANIFEST_FORMAT;
            next.version = base.version + 1;
            next.committed_at = Utc::now();
            next.commit_id = commit_id.clone();
            for retired in next.retired.iter_mut().filter(|r| r.retired_at.is_none()) {
                retired.retired_at = Some(next.committed_at);
            }
            let bytes = index::encode("a view version", &next)?;
            match log
                .log
                .put(next.version, bytes, &commit_id, commit_id_in)
                .await
                .map_err(CommitFailure::Unknown)?
            {
                journal::Put::Lost => {
                    retries.lost().await?;
                    index = self.reload().await?;
                    continue;
                }
                journal::Put::Landed => {}
            }
            if let Ok(mut pending) = log.forgotten.lock() {
                pending.retain(|r| !forgotten.contains(r));
            }
            log.log.write_pointer(journal::LatestPointer {
                version: next.version,
                checkpoint: None,
            });
            log.schedule_sweep(self.expiry(next.committed_at));
            let next = install_view(&log, Arc::new(next));
            return Ok((out, next));
        }
    }
}

fn install_view(log: &ViewLog, state: Arc<ViewVersion>) -> Arc<ViewVersion> {
    let mut guard = log.state.write().unwrap_or_else(|e| e.into_inner());
    match &*guard {
        Some(current) if current.version >= state.version => Arc::clone(current),
        _ => {
            *guard = Some(Arc::clone(&state));
            state
        }
    }
}

pub(super) fn commit_id_in(bytes: &[u8]) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        #[serde(default)]
        commit_id: String,
    }
    serde_json::from_slice::<Id>(bytes)
        .map(|id| id.commit_id)
        .map_err(|e| Error::CorruptManifest {
            path: "a version read back".into(),
            reason: e.to_string(),
        })
}

/// A view's latest state as read from its log (`None`: no such view), or
/// why it cannot be read.
pub type ViewRead = Result<Option<Arc<ViewVersion>>>;
