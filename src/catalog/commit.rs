//! What a commit needs: its preconditions as [`Requirement`] values, and
//! the put options that write only new files.

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
