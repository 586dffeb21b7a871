//! What a commit needs: its preconditions as [`Requirement`] values, and
//! the put options that write only new files.

use super::*;
use crate::spec::{RelationEntry, Snapshot};

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
    /// No materialized view reads this relation, apart from those being
    /// dropped with it (DROP: a view created over it by another session
    /// after the dependency check must stop the drop).
    NoDependents {
        /// The relation being dropped.
        name: QualifiedName,
        /// What it is, as messages name it: `table`, `view`, `materialized view`.
        kind: String,
        /// Everything the same commit drops.
        dropping: Vec<QualifiedName>,
    },
    /// The relation is still in the catalog, as a materialized view or a
    /// remembered table or view (CREATE: what the new view reads must not
    /// have been dropped by another session meanwhile).
    SourceExists(QualifiedName),
}

impl Requirement {
    /// `Ok` when the catalog meets every requirement: `index` the latest
    /// index, `view` the latest state of the view the change is about
    /// (`None` for a change to the index alone); else the error for the
    /// first it does not, naming the view as `display`.
    pub fn check_all(
        requirements: &[Requirement],
        index: &Index,
        view: Option<&ViewVersion>,
        display: &str,
    ) -> Result<()> {
        for requirement in requirements {
            requirement.check(index, view, display)?;
        }
        Ok(())
    }

    /// `Ok` when the catalog meets this requirement; else `AlreadyExists`
    /// or `CommitConflict` saying what another session did.
    pub fn check(&self, index: &Index, view: Option<&ViewVersion>, display: &str) -> Result<()> {
        let conflict = |reason: &str| {
            Err(Error::CommitConflict {
                name: display.to_string(),
                reason: reason.into(),
            })
        };
        match self {
            Requirement::ViewAbsent(name) => match index.view(name) {
                None => Ok(()),
                Some(_) => Err(Error::AlreadyExists {
                    name: display.to_string(),
                }),
            },
            Requirement::ViewIs { name, id } => match index.view(name) {
                None => conflict("it was dropped by another session"),
                Some(entry) if &entry.id != id => conflict("it was replaced by another session"),
                Some(_) => Ok(()),
            },
            Requirement::SnapshotIs { name, id } => {
                let current = view
                    .filter(|v| &v.view.name == name)
                    .and_then(|v| v.view.snapshot.as_ref())
                    .map(|s| &s.id);
                if current == id.as_ref() {
                    Ok(())
                } else {
                    conflict("it was refreshed by another session")
                }
            }
            Requirement::NoDependents {
                name,
                kind,
                dropping,
            } => {
                let details: Vec<String> = index
                    .views
                    .readers_of(name)
                    .into_iter()
                    .filter(|reader| !dropping.contains(reader))
                    .map(|reader| {
                        format!(
                            "materialized view {} depends on {kind} {}",
                            crate::spec::quote_ident(&reader.name),
                            crate::spec::quote_ident(&name.name)
                        )
                    })
                    .collect();
                if details.is_empty() {
                    Ok(())
                } else {
                    Err(Error::DependentObjects {
                        object: Some(format!("{kind} {}", crate::spec::quote_ident(&name.name))),
                        details,
                    })
                }
            }
            Requirement::SourceExists(source) => {
                if index.view(source).is_some() || index.relations.iter().any(|r| &r.name == source)
                {
                    Ok(())
                } else {
                    conflict(&format!(
                        "{} which it reads was dropped by another session",
                        crate::spec::quote_ident(&source.name)
                    ))
                }
            }
        }
    }
}

/// A change to the index as data (the shape of iceberg's `TableCommit`):
/// what it needs of the latest index, and what it changes there. The
/// catalog checks every requirement against the index each attempt is
/// tried on, then applies the updates; no caller can skip the check.
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexCommit {
    /// What the latest index must meet.
    requirements: Vec<Requirement>,
    /// What changes, in order.
    updates: Vec<IndexUpdate>,
    /// The view the messages of unmet requirements name.
    display: String,
}

/// One change to the index.
#[derive(Debug, Clone)]
pub(crate) enum IndexUpdate {
    /// Adds a view, or replaces the one of its name (its old log retires).
    PutView(IndexEntry),
    /// Removes a view (its log retires).
    RemoveView(QualifiedName),
    /// Remembers a table or plain view, or replaces the one of its name.
    PutRelation(RelationEntry),
    /// Forgets a remembered table or plain view.
    RemoveRelation(QualifiedName),
    /// Keeps what a remembered table resolved to, when the relation is
    /// still exactly `relation`.
    KeepResolved {
        /// The relation as it was read.
        relation: RelationEntry,
        /// What it resolved to.
        resolved: crate::spec::ResolvedTable,
    },
}

impl IndexCommit {
    /// A commit naming `display` in its messages.
    pub(crate) fn new(display: impl Into<String>) -> Self {
        Self {
            display: display.into(),
            ..Self::default()
        }
    }

    /// Adds requirements.
    pub(crate) fn require(mut self, requirements: impl IntoIterator<Item = Requirement>) -> Self {
        self.requirements.extend(requirements);
        self
    }

    /// Adds an update.
    pub(crate) fn update(mut self, update: IndexUpdate) -> Self {
        self.updates.push(update);
        self
    }

    /// Adds updates.
    pub(crate) fn updates(mut self, updates: impl IntoIterator<Item = IndexUpdate>) -> Self {
        self.updates.extend(updates);
        self
    }

    /// Checks the requirements on `index`, the latest, then applies the
    /// updates to it.
    pub(super) fn apply(&self, index: &mut Index) -> Result<()> {
        Requirement::check_all(&self.requirements, index, None, &self.display)?;
        for update in &self.updates {
            match update {
                IndexUpdate::PutView(entry) => index.put_view(entry.clone()),
                IndexUpdate::RemoveView(name) => {
                    index.remove_view(name);
                }
                IndexUpdate::PutRelation(entry) => index.upsert_relation(entry.clone()),
                IndexUpdate::RemoveRelation(name) => {
                    index.remove_relation(name);
                }
                IndexUpdate::KeepResolved { relation, resolved } => {
                    match index.relations.iter_mut().find(|r| r.name == relation.name) {
                        Some(entry) if entry == relation => entry.resolved = Some(resolved.clone()),
                        _ => {
                            return Err(Error::CommitConflict {
                                name: self.display.clone(),
                                reason: "it was changed by another session".into(),
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// A change to one view's log as data: what it needs of the latest index
/// and view version, and what it changes in the view.
#[derive(Debug, Clone, Default)]
pub(crate) struct ViewCommit {
    /// What the latest index and view version must meet.
    requirements: Vec<Requirement>,
    /// The view's new snapshot, if it gets one; a commit without one only
    /// writes a version (what a cleanup does to move retired files on).
    snapshot: Option<Snapshot>,
}

impl ViewCommit {
    /// A commit that changes nothing but the view's version.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds requirements.
    pub(crate) fn require(mut self, requirements: impl IntoIterator<Item = Requirement>) -> Self {
        self.requirements.extend(requirements);
        self
    }

    /// Makes `snapshot` the view's data (the one before it retires).
    pub(crate) fn set_snapshot(mut self, snapshot: Snapshot) -> Self {
        self.snapshot = Some(snapshot);
        self
    }

    /// Checks the requirements on `index` and `view`, the latest, then
    /// applies the change to `view`.
    pub(super) fn apply(&self, index: &Index, view: &mut ViewVersion, display: &str) -> Result<()> {
        Requirement::check_all(&self.requirements, index, Some(view), display)?;
        if let Some(snapshot) = &self.snapshot {
            view.set_snapshot(snapshot.clone());
        }
        Ok(())
    }
}

/// The one retry policy of commits, for the index and for views' logs:
/// at most [`MAX_COMMIT_ATTEMPTS`] attempts, a random wait after each lost
/// race (see [`journal::back_off`]) so writers that keep colliding spread
/// out, and a rejection (nothing of it landed) when every attempt lost.
pub(super) struct Retries {
    location: String,
    lost: usize,
}

impl Retries {
    /// Before the first attempt of a commit to the catalog at `location`.
    pub(super) fn new(location: &str) -> Self {
        Self {
            location: location.to_owned(),
            lost: 0,
        }
    }

    /// After an attempt lost its race: waits before the next one, or gives
    /// the commit up when that was the last.
    pub(super) async fn lost(&mut self) -> Result<(), CommitFailure> {
        self.lost += 1;
        if self.lost >= MAX_COMMIT_ATTEMPTS {
            return Err(CommitFailure::Rejected(Error::TooManyRetries {
                catalog: self.location.clone(),
                attempts: MAX_COMMIT_ATTEMPTS,
            }));
        }
        journal::back_off(self.lost - 1).await;
        Ok(())
    }
}

/// How a commit that did not land ended; the only thing that decides
/// whether the files written for it may be deleted.
#[derive(Debug)]
pub enum CommitFailure {
    /// It provably did not land: a requirement was not met, every attempt
    /// lost its race, or it failed before a version was put. The files
    /// written for it are the writer's to delete.
    Rejected(Error),
    /// The put of its version failed, and it may have landed: the files
    /// written for it stay for the orphan sweep (their lease keeps them
    /// until it expires).
    Unknown(Error),
}

impl CommitFailure {
    /// The error, for the user.
    pub fn error(&self) -> &Error {
        match self {
            CommitFailure::Rejected(e) | CommitFailure::Unknown(e) => e,
        }
    }

    /// Whether it provably did not land.
    pub fn is_rejected(&self) -> bool {
        matches!(self, CommitFailure::Rejected(_))
    }
}

impl From<Error> for CommitFailure {
    /// An error before the version's put: nothing landed.
    fn from(e: Error) -> Self {
        CommitFailure::Rejected(e)
    }
}

impl From<CommitFailure> for Error {
    fn from(failure: CommitFailure) -> Self {
        match failure {
            CommitFailure::Rejected(e) | CommitFailure::Unknown(e) => e,
        }
    }
}

impl std::fmt::Display for CommitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error().fmt(f)
    }
}
