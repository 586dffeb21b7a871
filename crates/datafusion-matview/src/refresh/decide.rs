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
    let names = diff.changed_tables();
    if names.len() > 1 && diff.redefinition().is_none() {
        let tables = names.into_iter().map(&display).collect();
        return Err(FullReason::SeveralChanged { tables });
    }
    Ok(changed_tables(diff, &display)?.remove(0))
}

/// The tables that changed since the last snapshot (see [`Diff`]), at
/// least one, each file-backed, under unchanged definitions; or why not.
pub(crate) fn changed_tables<'a>(
    diff: &Diff<'a>,
    display: impl Fn(&QualifiedName) -> String,
) -> std::result::Result<Vec<Change<'a>>, FullReason> {
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
    let names = diff.changed_tables();
    if names.is_empty() {
        return Err(FullReason::SourcesReplaced);
    }
    let only_source = diff.table_count() == 1;
    names
        .into_iter()
        .map(|name| match diff.table(name) {
            (
                Some(Fingerprint::Files { files: before, .. }),
                Some(Fingerprint::Files { files: after, .. }),
            )
            | (
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
        })
        .collect()
}

/// What an incremental refresh would cost against a full one, in bytes
/// read and written: the numbers the cost rule compares, which `EXPLAIN
/// REFRESH` shows. Both run the same query engine over the same kind of
/// files, so a byte costs about the same in either; what differs is how
/// many. An incremental refresh reads what changed of the changed table
/// (the groups of files it touched), reads the stored data it merges
/// with (the view's groups, or its partial aggregates) and writes its
/// output; a full one reads the whole table and writes the whole view.
/// A view as large as its source (many groups) makes merging cost what
/// recomputing does, and the rule then picks full.
///
/// A byte written counts [`WRITE_WEIGHT`] times a byte read: it is the
/// query's output, encoded, compressed and sealed, and the full refreshes
/// of `benches/change_rate.rs` spend about three times as long producing
/// a filter view as reading its source and aggregating it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Estimate {
    /// Bytes of the changed table's files an incremental refresh reads.
    pub read: u64,
    /// Bytes of stored data (the view's, or its partials) it reads to
    /// merge with.
    pub merged: u64,
    /// Bytes it writes (estimated from the view's size).
    pub written: u64,
    /// Bytes of all the changed table's files, which a full refresh reads.
    pub total: u64,
    /// Bytes of the view's data now: about what a full refresh writes.
    pub view: u64,
}

/// A view this small costs little to merge or write next to reading its
/// sources; its bytes (mostly Parquet's fixed overhead when it is tiny)
/// are left out of both costs, which then compare bytes read.
const SMALL_VIEW: u64 = 1 << 20;

/// How many bytes read one byte written costs (see [`Estimate`]).
const WRITE_WEIGHT: u64 = 3;

impl Estimate {
    /// Whether the view's size counts (see [`SMALL_VIEW`]).
    fn counts_view(&self) -> bool {
        self.view > SMALL_VIEW
    }

    /// What an incremental refresh costs, in bytes read and written.
    pub(crate) fn incremental(&self) -> u64 {
        if self.counts_view() {
            self.read + self.merged + WRITE_WEIGHT * self.written
        } else {
            self.read
        }
    }

    /// What a full refresh costs, in bytes read and written.
    pub(crate) fn full(&self) -> u64 {
        if self.counts_view() {
            self.total + WRITE_WEIGHT * self.view
        } else {
            self.total
        }
    }

    /// `bytes` of a view of `view` bytes computed from `read` of `total`
    /// source bytes: the share of the view that much of the source makes,
    /// assuming rows spread evenly.
    pub(crate) fn share_of(view: u64, read: u64, total: u64) -> u64 {
        if total == 0 {
            return 0;
        }
        (u128::from(view) * u128::from(read.min(total)) / u128::from(total)) as u64
    }

    /// The cost rule: incremental only when it costs at most half of a
    /// full refresh. Between half and the same cost, the estimate's
    /// errors (rows spread unevenly, merges that spill) can make the
    /// incremental refresh the slower one, and a full refresh also leaves
    /// the view in fewer, tidier files.
    pub(crate) fn incremental_wins(&self) -> bool {
        self.full() == 0 || self.incremental() * 2 <= self.full()
    }

    /// The incremental cost as a percentage of the full one.
    pub(crate) fn share(&self) -> f64 {
        if self.full() == 0 {
            0.0
        } else {
            self.incremental() as f64 * 100.0 / self.full() as f64
        }
    }

    /// In words, for `EXPLAIN REFRESH`: both costs and what makes them,
    /// the share, and which the rule picks.
    pub(crate) fn describe(&self) -> String {
        let picks = if self.incremental_wins() {
            "incremental"
        } else {
            "full"
        };
        if !self.counts_view() {
            return format!(
                "incremental reads {} bytes, full reads {} ({:.1}%); the cost rule (at most 50%) picks {picks}",
                self.read,
                self.total,
                self.share()
            );
        }
        format!(
            "incremental {} (reads {} bytes of the table, merges {} stored, writes {}), \
             full {} (reads {}, writes {}), a byte written weighing {WRITE_WEIGHT} read: \
             {:.1}%; the cost rule (at most 50%) picks {picks}",
            self.incremental(),
            self.read,
            self.merged,
            self.written,
            self.full(),
            self.total,
            self.view,
            self.share()
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
            lineage_of: None,
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
    fn the_cost_rule_stops_at_half_of_a_full_refresh() {
        let rows = |read, total| Estimate {
            read,
            total,
            ..Default::default()
        };
        assert!(rows(0, 0).incremental_wins());
        assert!(rows(50, 100).incremental_wins());
        assert!(!rows(51, 100).incremental_wins());
        const MIB: u64 = 1 << 20;
        // Appending 10% to an aggregate of 10 MiB over 1000 MiB: cheap.
        let small = Estimate {
            read: 100 * MIB,
            merged: 10 * MIB,
            written: 10 * MIB,
            total: 1000 * MIB,
            view: 10 * MIB,
        };
        assert!(small.incremental_wins());
        assert_eq!(
            small.describe(),
            "incremental 146800640 (reads 104857600 bytes of the table, merges 10485760 stored, \
             writes 10485760), full 1080033280 (reads 1048576000, writes 10485760), a byte \
             written weighing 3 read: 13.6%; the cost rule (at most 50%) picks incremental"
        );
        // A join view as large as its sources, both of which gained 1%:
        // the delta rule reads them whole, but writes a hundredth of it.
        let join = Estimate {
            read: 1000 * MIB,
            merged: 0,
            written: 10 * MIB,
            total: 1000 * MIB,
            view: 1000 * MIB,
        };
        assert!(join.incremental_wins());
        // At half of them, writing half the view as well: full.
        assert!(
            !Estimate {
                written: 500 * MIB,
                ..join
            }
            .incremental_wins()
        );
        // The same append to a view about as large as its source: merging
        // reads and writes the whole view, which costs what recomputing does.
        let large = Estimate {
            merged: 900 * MIB,
            written: 900 * MIB,
            view: 900 * MIB,
            ..small
        };
        assert!(!large.incremental_wins());
        // A view of at most 1 MiB: its bytes are left out.
        let tiny = Estimate {
            read: 1,
            merged: 5000,
            written: 5000,
            total: 8,
            view: 5000,
        };
        assert!(tiny.incremental_wins());
        assert_eq!(
            tiny.describe(),
            "incremental reads 1 bytes, full reads 8 (12.5%); the cost rule (at most 50%) picks incremental"
        );
        assert_eq!(Estimate::share_of(1000, 10, 100), 100);
        assert_eq!(Estimate::share_of(1000, 10, 0), 0);
        assert_eq!(Estimate::share_of(u64::MAX, u64::MAX, u64::MAX), u64::MAX);
    }
}
