//! The first stage of a refresh: deciding what it must do, from the
//! fingerprints recorded with the view's snapshot and today's. Nothing is
//! planned or read here.
//!
//! - [`decide`]: `no_op` when no source changed, a full recomputation for
//!   a [`Recompute`] reason, or stale with the [`Diff`] that says what
//!   changed (the plan stage then tries to compute only that).
//! - [`changed_table`]: the one file-backed table whose files changed,
//!   when there is exactly one under unchanged definitions.
//! - [`Estimate`]: the cost rule an incremental plan must pass (unless
//!   `REFRESH ... INCREMENTAL` asks for it whatever the cost).

use crate::freshness::{Diff, Freshness, Redefinition};
use crate::spec::{FileFingerprint, Fingerprint, QualifiedName, Snapshot, SourceFingerprint};

use super::reason::FullReason;

/// What a refresh of one view must do, decided from fingerprints alone.
#[derive(Debug)]
pub(crate) enum Decision<'a> {
    /// No source changed since the last refresh.
    NoOp,
    /// Recompute the whole view, for this reason.
    Full(Recompute),
    /// These sources changed; `diff` says how.
    Stale {
        changed: Vec<QualifiedName>,
        diff: Diff<'a>,
    },
}

/// Why a refresh recomputes a view before looking at what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recompute {
    /// The view has no data yet.
    FirstRefresh,
    /// `REFRESH ... FULL`.
    Requested,
    /// The query gives different rows on each run (the words say why).
    NotReproducible(String),
    /// The snapshot recorded no fingerprints (an older build, or adopted
    /// data).
    NoFingerprints,
    /// These sources cannot be fingerprinted.
    CannotTell(Vec<QualifiedName>),
}

impl Recompute {
    /// The words of the REFRESH result's `detail` column; `names` lists
    /// relations as the session displays them.
    pub(crate) fn describe(&self, names: impl Fn(&[QualifiedName]) -> String) -> String {
        match self {
            Recompute::FirstRefresh => "first refresh".into(),
            Recompute::Requested => "FULL requested".into(),
            Recompute::NotReproducible(why) => why.clone(),
            Recompute::NoFingerprints => "no fingerprints recorded at the last refresh".into(),
            Recompute::CannotTell(sources) => {
                format!("cannot tell whether {} changed", names(sources))
            }
        }
    }
}

/// Decides what a refresh of a view must do: `snapshot` is its current
/// data (`None`: never refreshed), `now` the fingerprints of its sources
/// taken for this refresh, `full` whether FULL was asked for,
/// `not_reproducible` why its query's rows differ from run to run (if
/// they do), `has_sources` whether it reads any relation.
pub(crate) fn decide<'a>(
    snapshot: Option<&'a Snapshot>,
    now: &'a [SourceFingerprint],
    full: bool,
    not_reproducible: Option<String>,
    has_sources: bool,
) -> Decision<'a> {
    let Some(snapshot) = snapshot else {
        return Decision::Full(Recompute::FirstRefresh);
    };
    if full {
        return Decision::Full(Recompute::Requested);
    }
    if let Some(why) = not_reproducible {
        return Decision::Full(Recompute::NotReproducible(why));
    }
    let diff = Diff::new(&snapshot.sources, now, has_sources);
    match diff.freshness() {
        Freshness::Fresh => Decision::NoOp,
        Freshness::Stale(changed) => Decision::Stale { changed, diff },
        Freshness::Unknown(unknown) if unknown.is_empty() => {
            Decision::Full(Recompute::NoFingerprints)
        }
        Freshness::Unknown(unknown) => Decision::Full(Recompute::CannotTell(unknown)),
    }
}

/// The file-backed table whose files changed since the last refresh, the
/// only one that did.
#[derive(Debug)]
pub(crate) struct Change<'a> {
    /// Its name.
    pub name: QualifiedName,
    /// Its files then and now.
    pub before: &'a [FileFingerprint],
    pub after: &'a [FileFingerprint],
    /// Whether it is the only table the view reads.
    pub only_source: bool,
}

/// Which one table changed since the last snapshot (see [`Diff`]), or why
/// there is not exactly one changed file-backed table under unchanged
/// definitions.
pub(crate) fn changed_table<'a>(
    diff: &Diff<'a>,
    display: impl Fn(&QualifiedName) -> String,
) -> std::result::Result<Change<'a>, FullReason> {
    // Computing only what changed is sound only over the same definitions:
    // a redefined relation anywhere on the path changes every row.
    match diff.redefinition() {
        Some(Redefinition::NotRecorded(name)) => {
            return Err(FullReason::DefinitionNotRecorded {
                relation: display(name),
            });
        }
        Some(Redefinition::Redefined(name)) => {
            return Err(FullReason::Redefined {
                relation: display(name),
            });
        }
        None => {}
    }
    let name = match diff.changed_tables().as_slice() {
        [name] => *name,
        [] => return Err(FullReason::SourcesReplaced),
        many => {
            let tables = many.iter().map(|n| display(n)).collect();
            return Err(FullReason::SeveralChanged { tables });
        }
    };
    let only_source = diff.table_count() == 1;
    match diff.table(name) {
        (
            Some(Fingerprint::Files { files: before, .. }),
            Some(Fingerprint::Files { files: after, .. }),
        ) => Ok(Change {
            name: name.clone(),
            before,
            after,
            only_source,
        }),
        (
            Some(Fingerprint::Snapshot {
                id: Some(_),
                files: before,
                ..
            }),
            Some(Fingerprint::Snapshot {
                id: Some(_),
                files: after,
                ..
            }),
        ) => Ok(Change {
            name: name.clone(),
            before,
            after,
            only_source,
        }),
        (_, Some(Fingerprint::Snapshot { .. })) => Err(FullReason::ViewEmptiedOrPopulated {
            view: display(name),
        }),
        _ => Err(FullReason::NotFileBacked {
            relation: display(name),
        }),
    }
}

/// What an incremental refresh would read of the changed table against
/// what a full one reads: the numbers the cost rule compares, which
/// `EXPLAIN REFRESH` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// Bytes of the changed table's files an incremental refresh reads.
    pub read: u64,
    /// Bytes of all its files, which a full refresh reads.
    pub total: u64,
}

impl Estimate {
    /// The cost rule: an incremental refresh that must read `read` bytes
    /// of a table of `total` bytes is worth it only when that is at most
    /// half of the table; beyond that, reading the change and merging it
    /// costs about what recomputing does, and a full refresh also leaves
    /// tidier files.
    pub(crate) fn incremental_wins(&self) -> bool {
        self.total == 0 || self.read * 2 <= self.total
    }

    /// In words, for `EXPLAIN REFRESH`: both sizes, the share, and which
    /// the rule picks.
    pub(crate) fn describe(&self) -> String {
        let share = if self.total == 0 {
            0.0
        } else {
            self.read as f64 * 100.0 / self.total as f64
        };
        let picks = if self.incremental_wins() {
            "incremental"
        } else {
            "full"
        };
        format!(
            "incremental reads {} bytes, full reads {} ({share:.1}%); the cost rule (at most 50%) picks {picks}",
            self.read, self.total
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str, files: &[(&str, u64)]) -> SourceFingerprint {
        SourceFingerprint {
            name: QualifiedName::new("datafusion", "public", name),
            fingerprint: Fingerprint::Files {
                definition: "d".into(),
                files: files
                    .iter()
                    .map(|(path, size)| FileFingerprint {
                        path: (*path).into(),
                        size: *size,
                        version: "1".into(),
                    })
                    .collect(),
            },
        }
    }

    fn snapshot(sources: Vec<SourceFingerprint>) -> Snapshot {
        Snapshot {
            id: "s".into(),
            files: vec![],
            row_count: 0,
            size_bytes: 0,
            refreshed_at: chrono::Utc::now(),
            sources,
            state_columns: vec![],
            partials: vec![],
        }
    }

    #[test]
    fn decides_from_fingerprints_alone() {
        let then = snapshot(vec![table("t", &[("a", 1)])]);
        let same = vec![table("t", &[("a", 1)])];
        let grown = vec![table("t", &[("a", 1), ("b", 1)])];
        assert!(matches!(
            decide(None, &same, false, None, true),
            Decision::Full(Recompute::FirstRefresh)
        ));
        assert!(matches!(
            decide(Some(&then), &same, true, None, true),
            Decision::Full(Recompute::Requested)
        ));
        assert!(matches!(
            decide(Some(&then), &same, false, Some("random()".into()), true),
            Decision::Full(Recompute::NotReproducible(_))
        ));
        assert!(matches!(
            decide(Some(&then), &same, false, None, true),
            Decision::NoOp
        ));
        let Decision::Stale { changed, diff } = decide(Some(&then), &grown, false, None, true)
        else {
            panic!("a table that gained a file is stale");
        };
        assert_eq!(
            changed,
            vec![QualifiedName::new("datafusion", "public", "t")]
        );
        let change = changed_table(&diff, |n| n.to_string()).unwrap();
        assert_eq!((change.before.len(), change.after.len()), (1, 2));
        assert!(change.only_source);
        // A snapshot that recorded nothing cannot tell.
        let t = QualifiedName::new("datafusion", "public", "t");
        assert!(matches!(
            decide(Some(&snapshot(vec![])), &same, false, None, true),
            Decision::Full(Recompute::CannotTell(names)) if names == [t.clone()]
        ));
        assert!(matches!(
            decide(Some(&snapshot(vec![])), &[], false, None, true),
            Decision::Full(Recompute::NoFingerprints)
        ));
        assert_eq!(
            Recompute::CannotTell(vec![t]).describe(|n| n[0].name.clone()),
            "cannot tell whether t changed"
        );
    }

    #[test]
    fn several_changed_tables_are_recomputed() {
        let then = snapshot(vec![table("a", &[("x", 1)]), table("b", &[("y", 1)])]);
        let now = vec![table("a", &[("x", 2)]), table("b", &[("y", 2)])];
        let Decision::Stale { diff, .. } = decide(Some(&then), &now, false, None, true) else {
            panic!("stale");
        };
        assert!(matches!(
            changed_table(&diff, |n| n.to_string()),
            Err(FullReason::SeveralChanged { .. })
        ));
    }

    #[test]
    fn the_cost_rule_stops_at_half_the_table() {
        let wins = |read, total| Estimate { read, total }.incremental_wins();
        assert!(wins(0, 0));
        assert!(wins(10, 0));
        assert!(wins(50, 100));
        assert!(!wins(51, 100));
        assert_eq!(
            Estimate { read: 1, total: 8 }.describe(),
            "incremental reads 1 bytes, full reads 8 (12.5%); the cost rule (at most 50%) picks incremental"
        );
    }
}
