//! Refreshing a view, in four stages, each in its own module:
//!
//! 1. [`decide`]: from the fingerprints recorded with the view's snapshot
//!    and today's, whether anything changed, what did, and whether the
//!    view must be recomputed whole (first refresh, FULL, a query whose
//!    rows differ from run to run, sources that cannot be fingerprinted);
//!    and the cost rule an incremental plan must pass.
//! 2. [`plan`]: what to compute, as a [`plan::Write`]: the view's stored
//!    definition planned as it was defined, then either its whole query or
//!    only what changed (per shape: row-wise, aggregate), pinned to the
//!    source files that were fingerprinted.
//! 3. [`write`]: running the write's plans into a new snapshot of Parquet
//!    files, with progress.
//! 4. [`commit`]: committing the snapshot as the view's next version, or
//!    deleting it when the commit provably did not land.
//!
//! The REFRESH statement (`session/refresh.rs`) runs them in order for
//! each view (CASCADE: the views it reads first), against one base state
//! of the catalog: the index version loaded when the statement started.
//! CREATE uses stages 2 to 3 for its first data; `dfmv adopt` imports
//! files through [`write::import_snapshot`].

use crate::error::Error;

pub(crate) mod commit;
pub(crate) mod decide;
pub(crate) mod plan;
mod reason;
pub(crate) mod write;

pub(crate) use reason::FullReason;
pub use write::ProgressListener;

/// Wraps what made a refresh of `view` fail, naming the view; conflicts
/// and definition changes already do.
pub(crate) fn failed(view: &str, e: Error) -> Error {
    match e {
        e @ (Error::DefinitionChanged { .. } | Error::CommitConflict { .. }) => e,
        e => Error::RefreshFailed {
            name: view.to_owned(),
            source: Box::new(e),
        },
    }
}
