//! Reading the manifest log: versions, the `_latest.json` pointer, gaps,
//! and parsing one manifest file.

use super::*;

/// Content of `_matview/_latest.json`.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct LatestPointer {
    pub(super) version: u64,
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

impl Catalog {
    /// Lists manifest versions with their commit times, oldest first.
    pub(super) async fn list_versions(&self) -> Result<Vec<(u64, DateTime<Utc>)>> {
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

    pub(super) async fn read_version(&self, version: u64) -> Result<Manifest> {
        let path = self.version_path(version);
        let bytes = self.store.get(&path).await?.bytes().await?;
        parse_manifest(&self.display_path(&path), &bytes, version)
    }

    /// The versions in the log after `version`, in order (one `LIST` that
    /// starts after it).
    pub(super) async fn versions_after(&self, version: u64) -> Result<Vec<u64>> {
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

    pub(super) fn confirmed(&self) -> Option<Instant> {
        *self.confirmed.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn confirm(&self, at: Instant) {
        let mut guard = self.confirmed.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none_or(|t| t < at) {
            *guard = Some(at);
        }
    }

    pub(super) fn pointer_path(&self) -> Path {
        self.path("_matview/_latest.json")
    }

    pub(super) async fn exists(&self, version: u64) -> Result<bool> {
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
    pub(super) async fn latest_version(&self) -> Result<Option<u64>> {
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
    pub(super) fn write_pointer(&self, version: u64) {
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

    pub(super) fn install(&self, manifest: Arc<Manifest>) {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        if manifest.version > guard.version {
            *guard = manifest;
        }
    }
}
