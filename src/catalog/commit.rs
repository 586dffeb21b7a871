//! Committing: the next version written with `PutMode::Create`, retried
//! on conflict, with its preconditions as [`Requirement`] values.

use super::*;

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

impl Catalog {
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
    pub(super) async fn commit_id_of(&self, version: u64) -> Result<Option<String>> {
        match self.read_version(version).await {
            Ok(manifest) => Ok(Some(manifest.commit_id)),
            Err(Error::ObjectStore(object_store::Error::NotFound { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
