//! One log of numbered, immutable JSON versions in a folder, with a
//! best-effort pointer to the latest: the index log and every view's log
//! are one of these. Versions are written with [`PutMode::Create`], so two
//! writers never both write the same version.

use super::*;

/// Content of a log's `_latest.json`.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LatestPointer {
    pub(super) version: u64,
    /// The newest checkpoint of the index log, if any (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) checkpoint: Option<u64>,
}

/// What a conditional put of a version came to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Put {
    /// The version is this commit's.
    Landed,
    /// Another writer's version is there: reload and try again.
    Lost,
}

/// A folder of versions `{version:020}.json` and its pointer.
#[derive(Debug)]
pub(super) struct Log {
    store: Arc<dyn ObjectStore>,
    dir: Path,
    pointer: Path,
    /// The catalog's location, for errors.
    location: String,
    /// How `Path`s are shown in errors (a local file's absolute path, else
    /// the store's URL before it).
    display_prefix: String,
    /// How long after its successor a version may be deleted, at least
    /// (zero: any time).
    window: Duration,
    /// When the loaded version was last known to be the latest.
    confirmed: Mutex<Option<Instant>>,
    /// The pointer write in flight, finished by the next load.
    pointer_write: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Log {
    pub(super) fn new(
        store: Arc<dyn ObjectStore>,
        dir: Path,
        pointer: Path,
        location: String,
        display_prefix: String,
        window: Duration,
    ) -> Self {
        Self {
            store,
            dir,
            pointer,
            location,
            display_prefix,
            window,
            confirmed: Mutex::new(None),
            pointer_write: Mutex::new(None),
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(super) fn version_path(&self, version: u64) -> Path {
        self.dir
            .clone()
            .join(format!("{version:020}.json").as_str())
    }

    pub(super) fn display(&self, path: &Path) -> String {
        format!("{}{path}", self.display_prefix)
    }

    /// The bytes of `version`, or `None` when it does not exist.
    pub(super) async fn get(&self, version: u64) -> Result<Option<Vec<u8>>> {
        match self.store.get(&self.version_path(version)).await {
            Ok(got) => Ok(Some(got.bytes().await?.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether version `version` is there: a `HEAD`, or on the local file
    /// system one `stat` (see [`crate::freshness::file_exists`]).
    pub(super) async fn exists(&self, version: u64) -> Result<bool> {
        let path = self.version_path(version);
        if let Some(there) = crate::freshness::file_exists(self.store.as_ref(), &path) {
            return Ok(there);
        }
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The versions with their commit times, oldest first (a `LIST`).
    pub(super) async fn list_versions(&self) -> Result<Vec<(u64, DateTime<Utc>)>> {
        let mut versions: Vec<(u64, DateTime<Utc>)> = self
            .store
            .list(Some(&self.dir))
            .try_filter_map(|meta| async move {
                Ok(version_of(&meta.location).map(|v| (v, meta.last_modified)))
            })
            .try_collect()
            .await?;
        versions.sort();
        Ok(versions)
    }

    /// The versions after `version`, in order (one `LIST` that starts
    /// after it).
    pub(super) async fn versions_after(&self, version: u64) -> Result<Vec<u64>> {
        let mut later: Vec<u64> = self
            .store
            .list_with_offset(Some(&self.dir), &self.version_path(version))
            .try_filter_map(|meta| async move {
                Ok(version_of(&meta.location).filter(|v| *v > version))
            })
            .try_collect()
            .await?;
        later.sort_unstable();
        Ok(later)
    }

    pub(super) fn confirm(&self, at: Instant) {
        let mut guard = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none_or(|t| t < at) {
            *guard = Some(at);
        }
    }

    /// Whether `version` (loaded, more than 0) is still the latest: one
    /// `HEAD` of the next version when nothing changed.
    ///
    /// A missing next version proves the loaded one is the latest only
    /// while the next version cannot have been deleted yet. Versions are
    /// always deleted oldest first, so the loaded version's own presence
    /// proves it: it is checked too (one more `HEAD`) unless the log
    /// deletes a version only once its successor is older than `window`
    /// (a view's log) and the loaded version was confirmed less than that
    /// ago. Without it, a session idle for longer would commit on top of a
    /// version the others have long moved past, and its commit would be
    /// lost.
    pub(super) async fn still_latest(&self, version: u64) -> Result<bool> {
        self.settle_pointer().await;
        let checked_at = Instant::now();
        if self.exists(version + 1).await? {
            return Ok(false);
        }
        let recently = self
            .confirmed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| t.elapsed() < self.window);
        if recently || self.exists(version).await? {
            self.confirm(checked_at);
            return Ok(true);
        }
        Ok(false)
    }

    /// The pointer's content, if it is there and readable.
    pub(super) async fn read_pointer(&self) -> Result<Option<LatestPointer>> {
        match self.store.get(&self.pointer).await {
            Ok(got) => {
                let bytes = got.bytes().await?;
                Ok(serde_json::from_slice::<LatestPointer>(&bytes).ok())
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The latest version and the pointer read on the way: from the
    /// pointer, then probing forward for commits it does not know yet.
    /// Falls back to listing the log when the pointer is missing,
    /// unreadable or names a removed version, and repairs a pointer found
    /// wrong or more than a few versions behind (pointer writes are best
    /// effort). A version missing before one that exists is a gap in the
    /// log, which stops the catalog: a commit on top of the version before
    /// it would be hidden by the one after.
    pub(super) async fn latest_version(&self) -> Result<(Option<u64>, Option<LatestPointer>)> {
        self.settle_pointer().await;
        let checked_at = Instant::now();
        let pointer = self.read_pointer().await?;
        let (mut version, valid) = match pointer {
            Some(p) if self.exists(p.version).await? => (p.version, true),
            _ => match self.list_versions().await?.last() {
                Some((v, _)) => (*v, false),
                None => return Ok((None, pointer)),
            },
        };
        let from = version;
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
                        missing: self.display(&self.version_path(version + 1)),
                        before: version,
                        after,
                    });
                }
            }
        }
        if !valid || version - from > POINTER_LAG {
            let checkpoint = pointer.and_then(|p| p.checkpoint);
            self.write_pointer(LatestPointer {
                version,
                checkpoint,
            });
        }
        self.confirm(checked_at);
        Ok((Some(version), pointer))
    }

    /// Writes `bytes` as `version` if no version of that number exists.
    /// When the put fails with anything but `AlreadyExists` (a timeout, a
    /// 5xx after the store kept the object), the version is read back and
    /// `commit_id_of` says whose it is: this commit's is [`Put::Landed`],
    /// another writer's [`Put::Lost`]; if it cannot be read,
    /// [`Error::CommitOutcomeUnknown`] says the commit may have landed.
    pub(super) async fn put(
        &self,
        version: u64,
        bytes: Vec<u8>,
        commit_id: &str,
        commit_id_of: impl Fn(&[u8]) -> Result<String>,
    ) -> Result<Put> {
        let put_at = Instant::now();
        let put = self
            .store
            .put_opts(
                &self.version_path(version),
                PutPayload::from(bytes),
                create_only(),
            )
            .await;
        let error = match put {
            Ok(_) => {
                self.confirm(put_at);
                return Ok(Put::Landed);
            }
            Err(e) => e,
        };
        let lost_race = matches!(error, object_store::Error::AlreadyExists { .. });
        let read_back = match self.get(version).await {
            Ok(Some(bytes)) => commit_id_of(&bytes).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        match read_back {
            Ok(Some(id)) if id == commit_id => {
                self.confirm(put_at);
                Ok(Put::Landed)
            }
            Ok(Some(_)) => Ok(Put::Lost),
            // None after losing a race: cleaned up since; reload and retry.
            Ok(None) if lost_race => Ok(Put::Lost),
            // Nothing there after a put the store refused, or after a
            // local put (which is over when it returns): it did not land,
            // and the error is the put's.
            Ok(None) if self.put_is_over(&error) => Err(error.into()),
            // Nothing there yet after a timeout or a 5xx: the request may
            // still be in flight and land later. Unknown; the next reader
            // of the log settles it.
            Ok(None) => Err(Error::CommitOutcomeUnknown {
                catalog: self.location.clone(),
                version,
                source: Box::new(Error::ObjectStore(error)),
            }),
            Err(read) if lost_race => Err(read),
            Err(read) => {
                log::warn!("could not read back version {version}: {read}");
                Err(Error::CommitOutcomeUnknown {
                    catalog: self.location.clone(),
                    version,
                    source: Box::new(Error::ObjectStore(error)),
                })
            }
        }
    }

    /// Whether a put that failed with `error` can no longer land: the
    /// store refused it outright, or the store is local (its put is over
    /// when it returns). A remote store's timeout or 5xx proves nothing:
    /// the request may still be applied.
    fn put_is_over(&self, error: &object_store::Error) -> bool {
        use object_store::Error as E;
        let local = self.display_prefix == "/" || self.display_prefix.starts_with("memory:");
        local
            || matches!(
                error,
                E::PermissionDenied { .. }
                    | E::Unauthenticated { .. }
                    | E::NotSupported { .. }
                    | E::NotImplemented { .. }
                    | E::InvalidPath { .. }
                    | E::Precondition { .. }
            )
    }

    /// Records the latest version, for readers to find it without listing.
    /// Best effort: a stale pointer only costs readers a few `HEAD`
    /// requests, so failures are ignored. It is written in the background,
    /// after the previous pointer write, and the next load waits for it,
    /// so a statement does not wait for the pointer of its own commit and
    /// writes stay in order.
    pub(super) fn write_pointer(&self, pointer: LatestPointer) {
        let json = serde_json::to_vec(&pointer).unwrap_or_default();
        let (store, path) = (Arc::clone(&self.store), self.pointer.clone());
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
    pub(super) async fn settle_pointer(&self) {
        let pending = self
            .pointer_write
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(write) = pending {
            let _ = write.await;
        }
    }

    /// Deletes the versions whose successor is older than `cutoff`, oldest
    /// first, but none from `keep_from` on; returns how many it deleted and
    /// when the oldest remaining one may expire. With `repair`, also
    /// rewrites the pointer (a writer may have died before writing it).
    pub(super) async fn sweep(
        &self,
        cutoff: DateTime<Utc>,
        keep_from: u64,
        repair: Option<Option<u64>>,
    ) -> Result<(usize, Option<DateTime<Utc>>)> {
        let versions = self.list_versions().await?;
        self.sweep_listed(&versions, cutoff, keep_from, repair)
            .await
    }

    /// [`Self::sweep`] over `versions`, as [`Self::list_versions`] gave them.
    pub(super) async fn sweep_listed(
        &self,
        versions: &[(u64, DateTime<Utc>)],
        cutoff: DateTime<Utc>,
        keep_from: u64,
        repair: Option<Option<u64>>,
    ) -> Result<(usize, Option<DateTime<Utc>>)> {
        if let (Some(checkpoint), Some((latest, _))) = (repair, versions.last()) {
            self.write_pointer(LatestPointer {
                version: *latest,
                checkpoint,
            });
            // Before removing versions the old pointer may name.
            self.settle_pointer().await;
        }
        let mut deleted = 0;
        let mut next = None;
        for pair in versions.windows(2) {
            let ((version, _), (_, successor_time)) = (pair[0], pair[1]);
            if successor_time > cutoff || version >= keep_from {
                // Never past a version that stays, even if clocks disagree:
                // a version that exists proves its successor does.
                next = Some(successor_time);
                break;
            }
            match self.store.delete(&self.version_path(version)).await {
                Ok(()) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok((deleted, next))
    }

    /// Deletes the versions before `version`, oldest first (the versions a
    /// checkpoint covers); returns how many.
    pub(super) async fn delete_before(&self, version: u64) -> Result<usize> {
        let mut deleted = 0;
        for (old, _) in self.list_versions().await? {
            if old >= version {
                break;
            }
            match self.store.delete(&self.version_path(old)).await {
                Ok(()) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    /// Deletes every version and the pointer (a retired view's log, once
    /// expired).
    pub(super) async fn delete_all(&self) -> Result<usize> {
        // This process's pointer write must not land after the deletion.
        self.settle_pointer().await;
        let mut deleted = 0;
        for (version, _) in self.list_versions().await? {
            match self.store.delete(&self.version_path(version)).await {
                Ok(()) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match self.store.delete(&self.pointer).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(deleted)
    }
}

/// Waits before the next attempt of a commit that lost `attempt` races in
/// a row: a random time up to 2^attempt ms (at most 256 ms), so writers
/// that keep colliding spread out instead of colliding again.
pub(super) async fn back_off(attempt: usize) {
    let cap = 1u64 << attempt.min(8);
    let jitter = (uuid::Uuid::new_v4().as_u128() % u128::from(cap)) as u64;
    tokio::time::sleep(Duration::from_millis(jitter)).await;
}

/// The version a log file's name says, if it is one.
pub(super) fn version_of(path: &Path) -> Option<u64> {
    path.filename()
        .and_then(|f| f.strip_suffix(".json"))
        .and_then(|v| v.parse::<u64>().ok())
}
