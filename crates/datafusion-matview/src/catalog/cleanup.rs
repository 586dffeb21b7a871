//! Cleanup: expired versions and retired snapshots, and the sweep of
//! files left by writers that died (only what this catalog provably wrote).

use std::collections::BTreeSet;

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
    pub(crate) async fn delete_dir(&self, relative: &str) -> Result<usize> {
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
    /// file) in a snapshot directory no version references and no
    /// unexpired lease names (a write in progress), whose marker or first
    /// data file names that snapshot (the key-value metadata every
    /// data file carries). Anything else under the root, however old, is
    /// not the catalog's and is never touched.
    pub(super) async fn orphans(
        &self,
        known: &BTreeSet<String>,
        leased: &lease::Leased,
        cutoff: DateTime<Utc>,
    ) -> Result<Vec<Path>> {
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
                && !leased.covers_dir(dir)
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

    /// Removes what no reader may still need:
    ///
    /// - the files of a snapshot retired more than the retention window ago
    ///   (every version that referenced it was superseded that long ago),
    ///   and the log and data of a view dropped or replaced that long ago;
    /// - a version whose successor was committed more than the retention
    ///   window ago (the latest version of a log is never removed, nor an
    ///   index version the newest checkpoint does not cover), oldest first,
    ///   so a version that is still there proves its successor is too (see
    ///   [`Self::reload`]); index checkpoints but the newest two;
    /// - with [`Sweep::Full`], also files no version references at all (left
    ///   by a writer that failed before committing), once they are older
    ///   than the window, so a refresh still writing is never cut off; only
    ///   files of the shape the catalog writes in snapshot directories that
    ///   prove to be its own (see [`Self::orphans`]), and view logs no index
    ///   version names: a catalog rooted at a folder that holds other data
    ///   never touches it.
    ///
    /// [`Sweep::Quick`] looks at the index and at the view logs this
    /// process has read, and only when something of theirs may have
    /// expired; what it deleted leaves the index or the view's log with
    /// the next commit rather than with a commit of its own. [`Sweep::Full`]
    /// reads every view's log.
    ///
    /// Safe to run concurrently with writers, readers and other cleanups.
    pub async fn cleanup(&self, sweep: Sweep) -> Result<CleanupReport> {
        let cutoff = self.cutoff();
        let index = self.reload().await?;
        let mut report = CleanupReport::default();
        let full = sweep == Sweep::Full;

        // The index's own retired entries.
        let pending = match self.forgotten.lock() {
            Ok(mut forgotten) => {
                // Another writer's commit may have dropped them already.
                forgotten
                    .slots
                    .retain(|s| index.retired_slots.iter().any(|r| &r.slot == s));
                forgotten.retired.retain(|r| index.retired.contains(r));
                forgotten.clone()
            }
            Err(_) => Forgotten::default(),
        };
        let expired = |at: &Option<DateTime<Utc>>| at.is_some_and(|t| t <= cutoff);
        let mut deleted = Forgotten::default();
        for retired in &index.retired_slots {
            if expired(&retired.retired_at) && !pending.slots.contains(&retired.slot) {
                report.files_deleted += self.delete_view_log(&retired.slot).await?;
                deleted.slots.push(retired.slot.clone());
            }
        }
        for retired in &index.retired {
            if expired(&retired.retired_at) && !pending.retired.contains(retired) {
                report.files_deleted += self.delete_retired(retired).await?;
                deleted.retired.push(retired.clone());
            }
        }
        let nothing_deleted = deleted.slots.is_empty() && deleted.retired.is_empty();
        if let Ok(mut forgotten) = self.forgotten.lock() {
            forgotten.slots.extend(deleted.slots);
            forgotten.retired.extend(deleted.retired);
        }
        if full && !(nothing_deleted && pending.slots.is_empty() && pending.retired.is_empty()) {
            // Forget them now (a concurrent cleanup may have done so).
            self.commit(&IndexCommit::default()).await?;
        }

        // The views' logs: those this process has read, or all of them.
        let slots: Vec<SlotId> = if full {
            self.reload_whole()
                .await?
                .views
                .values()
                .filter(|e| !e.slot.is_empty())
                .map(|e| e.slot.clone())
                .collect()
        } else {
            // A log is live when its view's entry names it (found by name:
            // listing every view would cost what the catalog holds).
            let live = |slot: &str, log: &views::ViewLog| {
                log.state().is_some_and(|state| {
                    index
                        .views
                        .get(&state.view.name)
                        .is_some_and(|e| e.slot == slot)
                })
            };
            self.view_logs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(slot, log)| {
                    log.sweep_due().is_none_or(|due| due <= Utc::now()) && live(slot, log)
                })
                .map(|(slot, _)| slot.clone())
                .collect()
        };
        for slot in slots {
            let (files, versions) = self.cleanup_view_log(&slot, cutoff, full).await?;
            report.files_deleted += files;
            report.manifests_deleted += versions;
        }

        let due = self.log_sweep_due().is_none_or(|due| due <= Utc::now());
        if full || due {
            report.manifests_deleted += match self.sweep_index_log(cutoff, full).await {
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

        if full {
            // Leases first: a write that commits (and releases its lease)
            // after this point is in the index read next.
            let (leased, expired_leases) = self.leased(cutoff).await?;
            let index = self.reload_whole().await?;
            let mut known: BTreeSet<String> = index.retired.iter().map(|r| r.dir.clone()).collect();
            let mut slots: BTreeSet<SlotId> = BTreeSet::new();
            for entry in index.views.values() {
                slots.insert(entry.slot.clone());
            }
            for retired in &index.retired_slots {
                slots.insert(retired.slot.clone());
            }
            if let Some(legacy) = self.legacy() {
                known.extend(legacy.known_snapshot_dirs());
            }
            for slot in slots.iter().filter(|s| !s.is_empty()) {
                if let Some(state) = self.latest_view_state(slot).await? {
                    known.extend(state.known_snapshot_dirs());
                }
            }
            for orphan in self.orphans(&known, &leased, cutoff).await? {
                match self.store.delete(&orphan).await {
                    Ok(()) => report.files_deleted += 1,
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            slots.extend(leased.slots.iter().cloned());
            report.manifests_deleted += self.orphan_view_logs(&slots, cutoff).await?;
            for lease in expired_leases {
                match self.store.delete(&lease).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(report)
    }

    /// Deletes the files of one retired entry; returns how many.
    async fn delete_retired(&self, retired: &RetiredSnapshot) -> Result<usize> {
        if retired.files.is_empty() {
            return self.delete_dir(&retired.dir).await;
        }
        let mut deleted = 0;
        for file in &retired.files {
            match self.store.delete(&self.path(file)).await {
                Ok(()) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    /// The latest state of a view log, `None` when it has no version left.
    async fn latest_view_state(&self, slot: &str) -> Result<Option<Arc<ViewVersion>>> {
        match self.load_view_log(slot).await {
            Ok(state) => Ok(Some(state)),
            Err(Error::CorruptManifest { .. }) if self.view_log_is_empty(slot).await? => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn view_log_is_empty(&self, slot: &str) -> Result<bool> {
        Ok(self.view_log(slot).log.list_versions().await?.is_empty())
    }

    /// Deletes a retired view log with all the data its latest state
    /// references or keeps; returns how many data files it deleted.
    async fn delete_view_log(&self, slot: &str) -> Result<usize> {
        let mut deleted = 0;
        if let Some(state) = self.latest_view_state(slot).await? {
            for dir in state.view.data_dirs() {
                deleted += self.delete_dir(&dir).await?;
            }
            for retired in &state.retired {
                deleted += self.delete_retired(retired).await?;
            }
        }
        // The log goes last: until then a cleanup that failed half way
        // finds what is left through it.
        self.view_log(slot).log.delete_all().await?;
        self.view_logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(slot);
        Ok(deleted)
    }

    /// One live view log's expired snapshots and versions; with `commit`,
    /// the deleted entries are forgotten by a commit of their own. Returns
    /// the data files and versions deleted.
    async fn cleanup_view_log(
        &self,
        slot: &str,
        cutoff: DateTime<Utc>,
        commit: bool,
    ) -> Result<(usize, usize)> {
        let log = self.view_log(slot);
        let Some(state) = self.latest_view_state(slot).await? else {
            return Ok((0, 0));
        };
        let pending = match log.forgotten.lock() {
            Ok(mut forgotten) => {
                forgotten.retain(|r| state.retired.contains(r));
                forgotten.clone()
            }
            Err(_) => vec![],
        };
        let mut files = 0;
        let mut deleted = vec![];
        let mut next_due: Option<DateTime<Utc>> = None;
        for retired in &state.retired {
            match retired.retired_at {
                Some(t) if t <= cutoff && !pending.contains(retired) => {
                    files += self.delete_retired(retired).await?;
                    deleted.push(retired.clone());
                }
                Some(t) if t <= cutoff => {}
                Some(t) => {
                    let due = self.expiry(t);
                    next_due = Some(next_due.map_or(due, |d| d.min(due)));
                }
                None => {}
            }
        }
        if let Ok(mut forgotten) = log.forgotten.lock() {
            forgotten.extend(deleted.iter().cloned());
        }
        if commit && !(deleted.is_empty() && pending.is_empty()) {
            let name = state.view.name.clone();
            let display = name.to_string();
            match self.commit_view(&name, &display, &ViewCommit::new()).await {
                // Dropped or replaced meanwhile: the index's cleanup takes it.
                Ok(_) | Err(CommitFailure::Rejected(Error::CommitConflict { .. })) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let (versions, oldest) = log.log.sweep(cutoff, state.version, None).await?;
        if let Some(t) = oldest {
            let due = self.expiry(t);
            next_due = Some(next_due.map_or(due, |d| d.min(due)));
        }
        log.set_sweep_due(next_due.unwrap_or(DateTime::<Utc>::MAX_UTC));
        Ok((files, versions))
    }

    /// Deletes view logs older than `cutoff` that no index version names
    /// (a CREATE that failed between writing its log and committing);
    /// returns how many versions it deleted.
    async fn orphan_view_logs(
        &self,
        named: &BTreeSet<SlotId>,
        cutoff: DateTime<Utc>,
    ) -> Result<usize> {
        let views = self.path("_matview/views");
        let objects: Vec<ObjectMeta> = self.store.list(Some(&views)).try_collect().await?;
        let mut by_slot: BTreeMap<String, (bool, Vec<Path>)> = BTreeMap::new();
        for meta in objects {
            let Some(rest) = meta.location.prefix_match(&views) else {
                continue;
            };
            let rest: Vec<String> = rest.map(|p| p.as_ref().to_owned()).collect();
            let [slot, file] = rest.as_slice() else {
                continue;
            };
            if !is_snapshot_id(slot) || named.contains(slot) {
                continue;
            }
            let ours = file == "_latest.json" || journal::version_of(&meta.location).is_some();
            let entry = by_slot.entry(slot.clone()).or_default();
            entry.0 |= meta.last_modified > cutoff || !ours;
            if ours {
                entry.1.push(meta.location);
            }
        }
        // An index version written since the listing may name a log that
        // was just created: only logs older than the window go.
        let index = self.reload_whole().await?;
        let named_now: BTreeSet<&str> = index
            .views
            .values()
            .map(|e| e.slot.as_str())
            .chain(index.retired_slots.iter().map(|r| r.slot.as_str()))
            .collect();
        let mut deleted = 0;
        for (slot, (young, paths)) in by_slot {
            if young || named_now.contains(slot.as_str()) {
                continue;
            }
            for path in paths {
                match self.store.delete(&path).await {
                    Ok(()) => deleted += 1,
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(deleted)
    }

    /// Deletes the index versions whose successor is older than `cutoff`
    /// and that the newest checkpoint covers, and checkpoints but the
    /// newest two; schedules the next sweep for when the oldest remaining
    /// version expires. With `repair`, also rewrites the pointer (a writer
    /// may have died before writing it).
    pub(super) async fn sweep_index_log(
        &self,
        cutoff: DateTime<Utc>,
        repair: bool,
    ) -> Result<usize> {
        // Commits made while this runs schedule themselves on top.
        *self
            .next_log_sweep
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(DateTime::<Utc>::MAX_UTC);
        // Versions are deleted only below a checkpoint, which reading the
        // index starts from instead: when versions have expired that the
        // newest checkpoint known does not cover, one of the loaded index
        // is written first.
        let versions = self.index_log.list_versions().await?;
        let expired_below = versions
            .windows(2)
            .take_while(|pair| pair[1].1 <= cutoff)
            .map(|pair| pair[0].0)
            .last();
        let index = self.index();
        let mut newest = *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        let floor = newest.max(self.base_version()).unwrap_or(0);
        if expired_below.is_some_and(|v| v >= floor)
            && index.version > floor
            && self.write_checkpoint(&index).await
        {
            newest = Some(index.version);
            *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = newest;
        }
        let keep_from = newest.max(self.base_version()).unwrap_or(0);
        let (mut deleted, oldest) = self
            .index_log
            .sweep_listed(&versions, cutoff, keep_from, repair.then_some(newest))
            .await?;
        if repair {
            let checkpoints = self.list_checkpoints().await?;
            let keep = checkpoints.len().saturating_sub(2);
            for c in &checkpoints[..keep] {
                match self.store.delete(&self.checkpoint_path(*c)).await {
                    Ok(()) => deleted += 1,
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        } else if newest.is_some() {
            self.index_log.write_pointer(journal::LatestPointer {
                version: index.version,
                checkpoint: newest,
            });
        }
        self.schedule_log_sweep(oldest.map_or(DateTime::<Utc>::MAX_UTC, |t| self.expiry(t)));
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
    pub(crate) fn expiry(&self, at: DateTime<Utc>) -> DateTime<Utc> {
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
