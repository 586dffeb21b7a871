//! The fourth stage of a refresh: committing a written snapshot as the
//! view's next version, under the requirements that the view is still the
//! one the refresh planned (not dropped or replaced) and its data is still
//! the snapshot the refresh started from (no other refresh landed first).
//!
//! What was written is deleted only when the commit provably did not land
//! ([`CommitFailure::Rejected`](crate::catalog::CommitFailure)); one whose
//! outcome is unknown keeps its lease until it expires, so cleanup cannot
//! remove files a landed version references.

use crate::catalog::{Catalog, Lease, Requirement, ViewCommit};
use crate::error::Result;
use crate::spec::{QualifiedName, Snapshot, ViewEntry};

use super::failed;

/// Commits `snapshot` (written under `lease`) as the next version of view
/// `name` (shown as `display`), whose entry `entry` the refresh planned
/// against. Returns the version committed.
pub(crate) async fn commit_snapshot(
    catalog: &Catalog,
    name: &QualifiedName,
    display: &str,
    entry: &ViewEntry,
    snapshot: &Snapshot,
    lease: Lease,
) -> Result<u64> {
    if let Err(e) = lease.confirm(catalog, snapshot).await {
        let _ = catalog.delete_dir(&entry.snapshot_dir(snapshot)).await;
        return Err(failed(display, e));
    }
    let still_this_view = Requirement::ViewIs {
        name: name.clone(),
        id: entry.id.clone(),
    };
    let commit = ViewCommit::new()
        .require([
            still_this_view.clone(),
            Requirement::SnapshotIs {
                name: name.clone(),
                id: entry.snapshot.as_ref().map(|s| s.id.clone()),
            },
        ])
        .set_snapshot(snapshot.clone());
    match catalog.commit_view(name, display, &commit).await {
        Ok(view) => {
            lease.release().await;
            // A view log is committed apart from the index: a DROP (or
            // CREATE OR REPLACE) that committed to the index after the
            // commit checked it leaves this version in a log nothing
            // reads. Say so rather than report a refresh of a view that
            // is gone. Apart from the commit's own, this is the one read
            // of the index after the statement's base state, and it must
            // come after the commit. (An index that cannot be read now says nothing against a
            // commit that landed.)
            if let Ok(index) = catalog.reload().await {
                still_this_view.check(&index, None, display)?;
            }
            Ok(view.version)
        }
        Err(failure) => {
            // Only what provably did not land is ours to delete; what may
            // still land keeps its lease until it expires.
            if failure.is_rejected() {
                let _ = catalog.delete_dir(&entry.snapshot_dir(snapshot)).await;
                lease.release().await;
            } else {
                lease.keep();
            }
            Err(failure.into())
        }
    }
}
