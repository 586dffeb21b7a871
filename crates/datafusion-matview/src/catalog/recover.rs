//! Rebuilding a lost or corrupt manifest log from the snapshot markers.

use super::*;

impl Catalog {
    /// `path` of the catalog's store as a URL (`file:///tmp/c/...`,
    /// `s3://bucket/...`), as messages show it.
    fn url_of(&self, path: &Path) -> String {
        format!("{}{path}", self.store_url.as_str())
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
        // Start from the newest readable index: it also knows views with
        // no data yet, and the remembered tables and views.
        let versions = self.index_log.list_versions().await?;
        if versions.is_empty() && markers.is_empty() {
            return Err(Error::NoCatalogData {
                location: self.location.clone(),
            });
        }
        let loaded = match self.reload_whole().await {
            Ok(index) if index.version > 0 => Some((*index).clone()),
            _ => None,
        };
        let base = match loaded {
            Some(index) => Some(index),
            None => {
                let mut found = None;
                for (version, _) in versions.iter().rev() {
                    // One whose views all parse.
                    if let Ok((loaded, legacy)) = self.read_from_base(*version, None).await
                        && loaded.views.parse_all().is_none()
                    {
                        found = Some((*loaded).clone());
                        self.install(loaded, legacy);
                        break;
                    }
                }
                found
            }
        };
        // Each view of the base as its log has it (a log that cannot be
        // read counts as data that is gone).
        let mut base_views = vec![];
        let mut unreadable = vec![];
        if let Some(index) = &base {
            for entry in index.views.values() {
                match self.view(&entry.name).await {
                    Ok(Some(state)) => base_views.push(state.view.clone()),
                    _ => unreadable.push(entry.name.clone()),
                }
            }
        }
        let complete = |view: &ViewEntry| {
            view.snapshot.as_ref().is_none_or(|s| {
                s.stored_files()
                    .all(|f| sizes.get(&f.path) == Some(&f.size))
            })
        };
        let contiguous = versions.windows(2).all(|w| w[1].0 == w[0].0 + 1);
        match &base {
            Some(latest)
                if Some(latest.version) == versions.last().map(|(v, _)| *v)
                    && contiguous
                    && unreadable.is_empty()
                    && base_views.iter().all(complete) =>
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
        let mut incomplete = unreadable;
        for view in base_views {
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
                    report
                        .skipped
                        .push(format!("{}: unreadable: {e}", self.url_of(&path)));
                    continue;
                }
            };
            if let Some(missing) = marker
                .snapshot
                .stored_files()
                .find(|f| sizes.get(&f.path) != Some(&f.size))
            {
                report.skipped.push(format!(
                    "{}: data file {} is missing or changed",
                    self.url_of(&path),
                    missing.path
                ));
                continue;
            }
            // A snapshot written before the base version was committed, of a
            // view the base does not have (as that definition), was dropped
            // or replaced: do not bring it back.
            // Known: the base index has this definition of the view (its
            // log alone may be what was lost), or a newer marker of it.
            let known = base
                .views
                .get(&marker.view.name)
                .is_some_and(|v| v.id == marker.view.id)
                || newest
                    .get(&marker.view.name)
                    .is_some_and(|v| v.id == marker.view.id);
            if !known && marker.snapshot.refreshed_at <= base_time {
                report.skipped.push(format!(
                    "{}: superseded before the last readable version",
                    self.url_of(&path)
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
                report.views_lost.push(name);
            }
        }
        // Every view gets a new log; the old logs are left for the sweep
        // of orphan logs (their data may be what the new ones reference).
        let mut index = Index {
            relations: base.relations,
            ..Index::default()
        };
        for view in newest.values() {
            let slot = self.create_view_log(view).await?;
            index
                .views
                .insert(view.name.clone(), index_entry(view, slot));
        }
        let commit_id = crate::spec::new_id();
        index.version = versions.last().map_or(1, |(v, _)| v + 1);
        index.committed_at = Utc::now();
        index.commit_id = commit_id.clone();
        let record = IndexVersion {
            format_version: MANIFEST_FORMAT,
            version: index.version,
            committed_at: index.committed_at,
            commit_id: commit_id.clone(),
            base: Some(Box::new(index.clone())),
            actions: vec![],
        };
        let json = index::encode("an index version", &record)?;
        self.store
            .put_opts(
                &self.index_log.version_path(index.version),
                PutPayload::from(json),
                create_only(),
            )
            .await?;
        // Readers start from the pointer: it must be past any gap the log
        // still has before this statement returns.
        self.index_log.write_pointer(journal::LatestPointer {
            version: index.version,
            checkpoint: None,
        });
        self.index_log.settle_pointer().await;
        *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.set_base_version(index.version);
        report.version = index.version;
        report.views = newest
            .values()
            .map(|v| {
                let rows = v.snapshot.as_ref().map_or(0, |s| s.row_count);
                format!("{} ({rows} rows)", v.name)
            })
            .collect();
        self.install(Arc::new(index), None);
        Ok(report)
    }
}
