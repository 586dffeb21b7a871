//! Cleanup: expired versions and retired snapshots, and the sweep of
//! files left by writers that died (only what this catalog provably wrote).

use super::*;

/// Whether `name` is the staging file a local store writes a data file
/// through (`part-00000.parquet#3`), left behind when the writer dies.
pub(super) fn is_staged_data_file(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(file, n)| {
        is_snapshot_file_name(file)
            && file != SNAPSHOT_MARKER
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
    })
}

impl Catalog {
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
    pub(super) async fn orphans(
        &self,
        manifest: &Manifest,
        cutoff: DateTime<Utc>,
    ) -> Result<Vec<Path>> {
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
    pub(super) async fn names_snapshot(&self, files: &[ObjectMeta], id: &str) -> bool {
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
    pub(super) async fn sweep_log(&self, cutoff: DateTime<Utc>, repair: bool) -> Result<usize> {
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
    pub(super) fn log_sweep_due(&self) -> Option<DateTime<Utc>> {
        *self
            .next_log_sweep
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the next log sweep due no later than `at` (an unknown time
    /// stays unknown: the next sweep lists anyway).
    pub(super) fn schedule_log_sweep(&self, at: DateTime<Utc>) {
        let mut guard = self
            .next_log_sweep
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(due) = guard.as_mut() {
            *due = (*due).min(at);
        }
    }

    /// When something superseded at `at` becomes old enough to delete.
    pub(super) fn expiry(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        chrono::Duration::from_std(self.retention)
            .ok()
            .and_then(|r| at.checked_add_signed(r))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    pub(super) fn cutoff(&self) -> DateTime<Utc> {
        let retention = chrono::Duration::from_std(self.retention).unwrap_or(chrono::Duration::MAX);
        Utc::now()
            .checked_sub_signed(retention)
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }
}
