//! Writes in progress, visible to cleanup.
//!
//! A refresh or CREATE writes its data files before it commits, and until
//! it commits nothing references them: to [`Catalog::cleanup`] they look
//! like what a writer that died left behind, and a cleanup with a retention
//! window shorter than the write (in this process or any other) would
//! delete them. So a write first puts a lease,
//! `_matview/leases/<snapshot id>.json`, naming the snapshot directory and
//! the view log it will create, and renews it while it runs; cleanup
//! leaves alone whatever an unexpired lease names. Before it commits, the
//! writer checks that every file it wrote is still there, as written.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use serde::{Deserialize, Serialize};

use super::*;
use crate::spec::Snapshot;

/// How long a lease holds without renewal, by default. A writer renews it
/// four times per period, so only a process stalled this long loses it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// What a lease file holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LeaseRecord {
    /// Snapshot directory being written, relative to the root.
    dir: String,
    /// View log the write will create, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slot: Option<SlotId>,
    /// Until when cleanup must leave them alone.
    expires_at: DateTime<Utc>,
    /// Which process holds it (for people reading the folder).
    owner: String,
}

/// What the unexpired leases of a catalog protect.
#[derive(Debug, Default)]
pub(super) struct Leased {
    /// Snapshot ids (a lease file is named after its snapshot id).
    pub snapshots: BTreeSet<String>,
    /// View logs.
    pub slots: BTreeSet<SlotId>,
}

/// A write in progress: its snapshot id and directory, and the lease that
/// keeps cleanup away from them. Renewed in the background until it is
/// released or dropped; dropping it also deletes the lease file (in the
/// background), [`Lease::keep`] leaves the file to expire.
#[derive(Debug)]
pub struct Lease {
    store: Arc<dyn ObjectStore>,
    path: Path,
    /// The snapshot id the write uses.
    pub(crate) snapshot_id: String,
    /// Its directory, relative to the root.
    pub(crate) dir: String,
    /// The view log it will create, if any.
    pub(crate) slot: Option<SlotId>,
    record: LeaseRecord,
    ttl: Duration,
    /// Unix milliseconds until which the last renewal that reached the
    /// store holds.
    held_until: Arc<AtomicI64>,
    renewer: Option<tokio::task::JoinHandle<()>>,
    /// Tells the renewer to stop once a renewal in flight has landed.
    stop: Arc<tokio::sync::Notify>,
    /// Whether dropping it should leave the file.
    keep: AtomicBool,
}

impl Catalog {
    /// How long a lease holds without renewal.
    pub(crate) fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms.load(Ordering::Relaxed))
    }

    /// Sets how long the leases this handle takes hold without renewal
    /// (see [`DEFAULT_LEASE_TTL`]); for tests of long writes.
    #[doc(hidden)]
    pub fn set_lease_ttl(&self, ttl: Duration) {
        self.lease_ttl_ms
            .store(ttl.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    fn lease_dir(&self) -> Path {
        self.path("_matview/leases")
    }

    /// Takes a lease for a new snapshot of `view` (and, with `new_log`,
    /// for the view log a CREATE writes), before anything is written.
    pub(crate) async fn lease(&self, view: &ViewEntry, new_log: bool) -> Result<Lease> {
        let snapshot_id = crate::spec::new_id();
        let dir = view.snapshot_dir_of(&snapshot_id);
        let slot = new_log.then(crate::spec::new_id);
        let ttl = self.lease_ttl();
        let path = join(&self.lease_dir(), &format!("{snapshot_id}.json"));
        let record = LeaseRecord {
            dir: dir.clone(),
            slot: slot.clone(),
            expires_at: Utc::now(),
            owner: format!(
                "{} pid {}",
                hostname().unwrap_or_else(|| "?".into()),
                std::process::id()
            ),
        };
        let held_until = Arc::new(AtomicI64::new(0));
        put_lease(self.store(), &path, &record, ttl, &held_until).await?;
        let stop = Arc::new(tokio::sync::Notify::new());
        let renewer = {
            let (store, path, held_until, stop) = (
                Arc::clone(self.store()),
                path.clone(),
                Arc::clone(&held_until),
                Arc::clone(&stop),
            );
            let record = record.clone();
            tokio::spawn(async move {
                let period = ttl / 4;
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(period) => {}
                        _ = stop.notified() => return,
                    }
                    if let Err(e) = put_lease(&store, &path, &record, ttl, &held_until).await {
                        log::warn!("could not renew the lease {path}: {e}");
                    }
                }
            })
        };
        Ok(Lease {
            store: Arc::clone(self.store()),
            path,
            snapshot_id,
            dir,
            slot,
            record,
            ttl,
            held_until,
            renewer: Some(renewer),
            stop,
            keep: AtomicBool::new(false),
        })
    }

    /// What the unexpired leases protect now, and the lease files expired
    /// for longer than the window (`cutoff`). A lease that cannot be read
    /// still protects its snapshot (named by its file) until it is older
    /// than the window.
    pub(super) async fn leased(&self, cutoff: DateTime<Utc>) -> Result<(Leased, Vec<Path>)> {
        let now = Utc::now();
        let mut leased = Leased::default();
        let mut expired = vec![];
        let metas: Vec<ObjectMeta> = self
            .store
            .list(Some(&self.lease_dir()))
            .try_collect()
            .await?;
        for meta in metas {
            let record = match self.store.get(&meta.location).await {
                Ok(got) => got
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<LeaseRecord>(&b).ok()),
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let id = meta
                .location
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
                .unwrap_or_default()
                .to_owned();
            match record {
                Some(r) if r.expires_at > now => {
                    leased.snapshots.insert(id);
                    leased.slots.extend(r.slot);
                }
                // Expired longer than the window ago: the writer is gone.
                Some(r) if r.expires_at <= cutoff => expired.push(meta.location),
                Some(_) => {}
                None if meta.last_modified <= cutoff => expired.push(meta.location),
                None => {
                    leased.snapshots.insert(id);
                }
            }
        }
        Ok((leased, expired))
    }
}

impl Leased {
    /// Whether the snapshot directory `dir` is protected.
    pub(crate) fn covers_dir(&self, dir: &str) -> bool {
        dir.rsplit_once('/')
            .is_some_and(|(_, id)| self.snapshots.contains(id))
    }
}

async fn put_lease(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    record: &LeaseRecord,
    ttl: Duration,
    held_until: &AtomicI64,
) -> Result<()> {
    let started = Utc::now();
    let until = started + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
    let record = LeaseRecord {
        expires_at: until,
        ..record.clone()
    };
    let json = serde_json::to_vec(&record).map_err(|e| Error::Encoding {
        what: "a lease",
        reason: e.to_string(),
    })?;
    store.put(path, PutPayload::from(json)).await?;
    // Counted from before the put: a cleanup may have read it at once.
    held_until.fetch_max(until.timestamp_millis(), Ordering::SeqCst);
    Ok(())
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

impl Lease {
    /// Checks, right before the commit, that the write still holds: every
    /// file of `snapshot` (data and partials) under the lease's directory
    /// (and the snapshot marker) is there with the size it was written
    /// with, and the lease has not lapsed (a cleanup may be deleting them
    /// now). A lapsed lease is renewed first, then the files are checked.
    pub(crate) async fn confirm(&self, catalog: &Catalog, snapshot: &Snapshot) -> Result<()> {
        let margin = (self.ttl / 4).as_millis() as i64;
        if self.held_until.load(Ordering::SeqCst) - margin < Utc::now().timestamp_millis() {
            put_lease(
                &self.store,
                &self.path,
                &self.record,
                self.ttl,
                &self.held_until,
            )
            .await?;
        }
        let prefix = format!("{}/", self.dir);
        let ours = snapshot
            .stored_files()
            .filter(|f| f.path.starts_with(&prefix));
        let checks = ours
            .map(|f| (f.path.clone(), Some(f.size)))
            .chain(std::iter::once((
                format!("{}/{SNAPSHOT_MARKER}", self.dir),
                None,
            )))
            .map(|(path, size)| async move {
                let found = match catalog.store.head(&catalog.path(&path)).await {
                    Ok(meta) => Some(meta.size),
                    Err(object_store::Error::NotFound { .. }) => None,
                    Err(e) => return Err(Error::from(e)),
                };
                Ok((path, size, found))
            });
        let checked: Vec<_> = futures::future::try_join_all(checks).await?;
        for (path, size, found) in checked {
            let problem = match (size, found) {
                (_, None) => "it is gone".to_owned(),
                (Some(size), Some(found)) if size != found => {
                    format!("it holds {found} bytes instead of the {size} written")
                }
                _ => continue,
            };
            return Err(Error::WriteLost {
                file: catalog.display_path(&catalog.path(&path)),
                problem,
            });
        }
        Ok(())
    }

    /// Leaves the lease file to expire by itself (the commit's outcome is
    /// unknown: a delayed put may still make the files live).
    pub(crate) fn keep(self) {
        self.keep.store(true, Ordering::SeqCst);
    }

    /// Deletes the lease file now, after the renewer has stopped: a
    /// renewal cancelled mid-put could still write the file (a local
    /// store writes from a blocking thread a cancel does not stop) after
    /// the delete, and leave it behind.
    pub(crate) async fn release(mut self) {
        self.stop.notify_one();
        self.keep.store(true, Ordering::SeqCst);
        delete_after(self.renewer.take(), &self.store, &self.path).await;
    }
}

/// Waits for a stopped renewer's last renewal, then deletes the lease file.
async fn delete_after(
    renewer: Option<tokio::task::JoinHandle<()>>,
    store: &Arc<dyn ObjectStore>,
    path: &Path,
) {
    if let Some(renewer) = renewer {
        let _ = renewer.await;
    }
    match store.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => log::warn!("could not delete the lease {path}: {e}"),
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.notify_one();
        let renewer = self.renewer.take();
        if self.keep.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (store, path) = (Arc::clone(&self.store), self.path.clone());
            runtime.spawn(async move { delete_after(renewer, &store, &path).await });
        }
    }
}
