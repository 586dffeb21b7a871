//! A view over several tables whose lineage follows one of them (`A`, see
//! [`lineage_table`]), after the others gained files.
//!
//! Its stored pieces (a row-wise view's data files, or an aggregate's
//! partial aggregates, see [`partials`]) each hold the query over a group
//! `G` of `A`'s files with the other tables whole, and record `G` as their
//! lineage; groups are disjoint. After `A` changed in any way and the
//! others `B₁…Bₙ` only gained files:
//!
//! - the pieces computed from changed files of `A` are evicted, and the
//!   query runs again over what their groups still hold and over `A`'s new
//!   and rewritten files, with the other tables as they are now (a
//!   row-wise view reads them all in one part, an aggregate recomputes
//!   each group's partial);
//! - every kept group `G` gains what the other tables' new files add to
//!   it: by the delta rule with `A` held to `G`, one term per `Bᵢ` that
//!   gained files (its new files, the tables before it as they are now,
//!   those after it as they were), each with `G` as its lineage. `A`'s
//!   files no piece records (the query left all their rows out, and no
//!   piece is written for no rows) are a group of their own here: the new
//!   files may give them rows.
//!
//! The view is then the query over `A` as it is (kept groups and what was
//! read again are its files, each once) and the others as they are; an
//! aggregate merges its partials as [`from_partials`] does. Every piece
//! still has lineage, so a later removal or rewrite in `A` evicts only its
//! groups. Before, the rows a dimension table's new file added had no
//! lineage (an aggregate lost its partials), and the next change to the
//! fact table recomputed the view.
//!
//! Each term reads its group of `A`, so the terms read `A` whole, as a
//! full refresh does: what this saves is writing, and the cost rule picks
//! it for a large view after small appends; `REFRESH ... INCREMENTAL` runs
//! it anyway.

use super::partials::{MergeInto, Regroup, done, lineages, unmergeable};
use super::*;

/// The table lineage follows, as a refresh reads it.
pub(crate) struct Followed<'a> {
    /// Its name, as messages show it.
    pub source: String,
    pub provider: Arc<dyn TableProvider>,
    /// How its files changed, if they did.
    pub change: Option<&'a Change<'a>>,
    /// Its files now, as fingerprinted for this refresh.
    pub files: &'a [FileFingerprint],
}

/// The other changed tables, which only gained files, as the delta rule
/// reads them.
struct Appended<'a, 'b> {
    tables: &'b [Changed<'a>],
    readable: Vec<Files>,
    files: Vec<FileChanges<'a>>,
    /// Each table's files now, and before its new ones.
    now: Vec<Vec<String>>,
    then: Vec<Vec<String>>,
}

impl<'a, 'b> Appended<'a, 'b> {
    /// `None` when a table lost or rewrote files; why not, when one cannot
    /// be read a file at a time.
    fn of(
        tables: &'b [Changed<'a>],
        catalog: &Arc<Catalog>,
        runtime: Option<&Arc<RuntimeEnv>>,
    ) -> std::result::Result<Option<Self>, FullReason> {
        let mut readable = Vec::with_capacity(tables.len());
        let mut files = Vec::with_capacity(tables.len());
        for c in tables {
            let f = FileChanges::of(c.change);
            if !f.changed.is_empty() {
                return Ok(None);
            }
            readable.push(Files::of(&c.provider, &c.source, catalog, runtime)?);
            files.push(f);
        }
        let now = files.iter().map(FileChanges::now).collect();
        let then = files.iter().map(FileChanges::then).collect();
        Ok(Some(Appended {
            tables,
            readable,
            files,
            now,
            then,
        }))
    }

    /// Bytes of `paths` of table `i`.
    fn bytes(&self, i: usize, paths: &mut dyn Iterator<Item = &str>) -> u64 {
        paths
            .filter_map(|p| self.files[i].after.get(p))
            .map(|f| f.size)
            .sum()
    }

    /// Bytes of all the tables now.
    fn bytes_now(&self) -> u64 {
        (0..self.files.len())
            .map(|i| self.bytes(i, &mut self.now[i].iter().map(String::as_str)))
            .sum()
    }

    /// The delta rule's terms of `held` (a plan whose scans of `A` read
    /// one group): one per table that gained files; and the bytes of the
    /// other tables they read.
    fn terms(&self, held: &LogicalPlan) -> Result<(Vec<LogicalPlan>, u64)> {
        let mut terms = vec![];
        let mut read = 0;
        for (i, f) in self.files.iter().enumerate() {
            if f.added.is_empty() {
                continue;
            }
            let mut term = held.clone();
            for (j, c) in self.tables.iter().enumerate() {
                let paths: Vec<String> = match j.cmp(&i) {
                    std::cmp::Ordering::Less => self.now[j].clone(),
                    std::cmp::Ordering::Equal => f.added.iter().map(|p| p.to_string()).collect(),
                    std::cmp::Ordering::Greater => self.then[j].clone(),
                };
                read += self.bytes(j, &mut paths.iter().map(String::as_str));
                term = over_files(&term, &c.provider, &self.readable[j], &paths)?;
            }
            terms.push(term);
        }
        Ok((terms, read))
    }

    /// The share of a view of `view` bytes the new files make.
    fn written(&self, view: u64) -> u64 {
        (0..self.files.len())
            .map(|i| {
                Estimate::share_of(
                    view,
                    self.bytes(i, &mut self.files[i].added.iter().copied()),
                    self.bytes(i, &mut self.now[i].iter().map(String::as_str)),
                )
            })
            .sum()
    }
}

/// How `A`'s files changed: its files now, those removed or rewritten,
/// those new.
struct FollowedChange<'a> {
    after: BTreeMap<&'a str, &'a FileFingerprint>,
    changed: BTreeSet<&'a str>,
    added: Vec<&'a str>,
}

impl<'a> FollowedChange<'a> {
    fn of(followed: &Followed<'a>) -> Self {
        match followed.change {
            Some(change) => {
                let f = FileChanges::of(change);
                FollowedChange {
                    after: f.after,
                    changed: f.changed,
                    added: f.added,
                }
            }
            None => FollowedChange {
                after: non_empty(followed.files)
                    .map(|f| (f.path.as_str(), f))
                    .collect(),
                changed: BTreeSet::new(),
                added: vec![],
            },
        }
    }

    fn bytes(&self, paths: &mut dyn Iterator<Item = &str>) -> u64 {
        paths
            .filter_map(|p| self.after.get(p))
            .map(|f| f.size)
            .sum()
    }

    /// `A`'s files no group of `groups` holds and `elsewhere` does not
    /// read: those no stored piece records.
    fn uncovered<'g>(
        &self,
        groups: impl Iterator<Item = &'g str>,
        elsewhere: impl Iterator<Item = &'g str>,
    ) -> Vec<String> {
        let covered: BTreeSet<&str> = groups.chain(elsewhere).collect();
        self.after
            .keys()
            .filter(|p| !covered.contains(*p))
            .map(|p| p.to_string())
            .collect()
    }
}

/// How to refresh a view whose lineage follows `followed` after `others`
/// changed (and perhaps `followed` too), or `None` when this does not
/// apply: the view is not row-wise, nor an aggregate that keeps partials,
/// over every changed table; a piece has no lineage; a table other than
/// `followed` lost or rewrote files; or two of them are the same relation.
/// The caller then decides as before.
#[allow(clippy::too_many_arguments)]
pub(crate) fn by_lineage(
    plan: &LogicalPlan,
    shape: &Shape,
    snapshot: &Snapshot,
    followed: &Followed<'_>,
    others: &[Changed<'_>],
    catalog: &Arc<Catalog>,
    runtime: Option<&Arc<RuntimeEnv>>,
    force: bool,
) -> Result<Option<Strategy>> {
    let (input, pieces) = match shape {
        Shape::Rows => (plan, &snapshot.files),
        Shape::Aggregate(aggregation)
            if !snapshot.partials.is_empty()
                && snapshot.state_columns == aggregation.state_columns =>
        {
            (aggregation.input.as_ref(), &snapshot.partials)
        }
        _ => return Ok(None),
    };
    if others.is_empty() || pieces.iter().any(|f| f.lineage.is_none()) {
        return Ok(None);
    }
    let providers: Vec<(&Arc<dyn TableProvider>, &str)> =
        std::iter::once((&followed.provider, followed.source.as_str()))
            .chain(others.iter().map(|c| (&c.provider, c.source.as_str())))
            .collect();
    for (i, (a, name)) in providers.iter().enumerate() {
        if providers[i + 1..].iter().any(|(b, _)| same_relation(a, b)) {
            return Ok(None);
        }
        if !matches!(linear(input, a, name), Ok(true)) {
            return Ok(None);
        }
    }
    let appended = match Appended::of(others, catalog, runtime) {
        Ok(Some(appended)) => appended,
        Ok(None) => return Ok(None),
        Err(why) => return Ok(Some(Strategy::Full(why))),
    };
    let readable = match Files::of(&followed.provider, &followed.source, catalog, runtime) {
        Ok(r) => r,
        Err(why) => return Ok(Some(Strategy::Full(why))),
    };
    let a = FollowedChange::of(followed);

    // What changed, table by table in name order, as the other paths say.
    let mut what = vec![];
    if followed.change.is_some() {
        let removed = a
            .changed
            .iter()
            .filter(|p| !a.after.contains_key(*p))
            .count();
        for (n, verb) in [
            (a.added.len(), "appended"),
            (removed, "removed"),
            (a.changed.len() - removed, "rewritten"),
        ] {
            if n > 0 {
                what.push(format!("{}: {n} file(s) {verb}", followed.source));
            }
        }
    }
    for (c, f) in others.iter().zip(&appended.files) {
        if !f.added.is_empty() {
            what.push(format!("{}: {} file(s) appended", c.source, f.added.len()));
        }
    }
    if what.is_empty() {
        let tables: Vec<&str> = providers.iter().map(|(_, name)| *name).collect();
        return Ok(Some(unchanged(
            snapshot,
            &tables.join(" and "),
            a.bytes(&mut a.after.keys().copied()) + appended.bytes_now(),
        )));
    }
    what.sort_by(|x, y| x.split(": ").next().cmp(&y.split(": ").next()));
    let what = what.join(", ");
    let held = Held {
        followed,
        readable: &readable,
        a: &a,
        appended: &appended,
    };
    let strategy = match shape {
        Shape::Aggregate(aggregation) => {
            held.grouped(aggregation, snapshot, catalog, what, force)?
        }
        _ => held.rows(plan, snapshot, what, force)?,
    };
    Ok(Some(strategy))
}

/// What both shapes read: `A` and how it changed, and the other tables.
struct Held<'h, 'a, 'b> {
    followed: &'h Followed<'a>,
    readable: &'h Files,
    a: &'h FollowedChange<'a>,
    appended: &'h Appended<'a, 'b>,
}

impl Held<'_, '_, '_> {
    /// The delta rule's terms of `plan` with `A` held to `group`, each a
    /// part with `group` as its lineage; and the bytes they read.
    fn terms_over(&self, plan: &LogicalPlan, group: &[String]) -> Result<(Vec<Part>, u64)> {
        let held = over_files(plan, &self.followed.provider, self.readable, group)?;
        let (terms, read) = self.appended.terms(&held)?;
        let group_bytes = self.a.bytes(&mut group.iter().map(String::as_str));
        let read = read + group_bytes * terms.len() as u64;
        let parts = terms
            .into_iter()
            .map(|plan| Part {
                plan,
                lineage: Some(group.to_vec()),
            })
            .collect();
        Ok((parts, read))
    }

    /// `terms` of the delta rule over `groups` groups, in words.
    fn terms_done(&self, terms: usize, groups: usize) -> Option<String> {
        (terms > 0).then(|| {
            format!(
                "{terms} term(s) of the delta rule, over each of {groups} lineage group(s) of {}",
                self.followed.source
            )
        })
    }

    /// A row-wise view: the data files computed from changed files of `A`
    /// evicted and their files read again with `A`'s new ones, in one
    /// part; the delta rule over each kept group.
    fn rows(
        &self,
        plan: &LogicalPlan,
        snapshot: &Snapshot,
        what: String,
        force: bool,
    ) -> Result<Strategy> {
        let a = self.a;
        let (mut evicted, kept) = computed_from(&snapshot.files, &a.changed);
        // The kept data files by group, largest first; past the most groups
        // a full refresh writes, the smallest are evicted and read again
        // with the rest, so that the terms stay few.
        let mut groups: BTreeMap<Vec<String>, Vec<&DataFile>> = BTreeMap::new();
        for file in kept {
            let mut group = file.lineage.clone().unwrap_or_default();
            group.sort();
            groups.entry(group).or_default().push(file);
        }
        let mut groups: Vec<(Vec<String>, Vec<&DataFile>)> = groups.into_iter().collect();
        groups.sort_by_key(|(g, _)| std::cmp::Reverse(a.bytes(&mut g.iter().map(String::as_str))));
        while groups.len() > LINEAGE_GROUPS {
            let (_, files) = groups.pop().expect("more groups than the most");
            evicted.extend(files);
        }
        let reread: BTreeSet<&str> = evicted
            .iter()
            .flat_map(|f| f.lineage.iter().flatten().map(String::as_str))
            .chain(a.changed.iter().copied())
            .filter(|p| a.after.contains_key(p))
            .chain(a.added.iter().copied())
            .collect();
        let mut groups: Vec<Vec<String>> = groups.into_iter().map(|(g, _)| g).collect();
        let uncovered = a.uncovered(
            groups.iter().flatten().map(String::as_str),
            reread.iter().copied(),
        );
        if !uncovered.is_empty() {
            groups.push(uncovered);
        }
        let reread: Vec<String> = reread.into_iter().map(str::to_owned).collect();

        let mut parts = vec![];
        let mut read = 0;
        if !reread.is_empty() {
            read += a.bytes(&mut reread.iter().map(String::as_str)) + self.appended.bytes_now();
            parts.push(Part {
                plan: over_files(plan, &self.followed.provider, self.readable, &reread)?,
                lineage: Some(reread.clone()),
            });
        }
        let mut terms = 0;
        for group in &groups {
            let (more, bytes) = self.terms_over(plan, group)?;
            terms += more.len();
            read += bytes;
            parts.extend(more);
        }
        let a_total = a.bytes(&mut a.after.keys().copied());
        let view = snapshot.size_bytes;
        let written = Estimate::share_of(
            view,
            a.bytes(&mut reread.iter().map(String::as_str)),
            a_total,
        ) + self.appended.written(view);
        let estimate = Estimate {
            read,
            merged: 0,
            written: written.min(view),
            total: a_total + self.appended.bytes_now(),
            view,
        };
        if let Some(refused) = refused(estimate, force, &what) {
            return Ok(refused);
        }
        let mut how = vec![];
        if !evicted.is_empty() {
            let rows: u64 = evicted.iter().map(|f| f.rows).sum();
            how.push(format!(
                "evicted {} data file(s) ({rows} rows)",
                evicted.len()
            ));
        }
        if !reread.is_empty() {
            how.push(format!(
                "read {} source file(s) of {} with the others whole",
                reread.len(),
                self.followed.source
            ));
        }
        how.extend(self.terms_done(terms, groups.len()));
        if how.is_empty() {
            how.push(format!(
                "no file of {} holds rows to join them with",
                self.followed.source
            ));
        }
        let evicted: BTreeSet<&str> = evicted.iter().map(|f| f.path.as_str()).collect();
        Ok(Strategy::Incremental {
            write: Box::new(Write {
                parts,
                keep: snapshot
                    .files
                    .iter()
                    .filter(|f| !evicted.contains(f.path.as_str()))
                    .cloned()
                    .collect(),
                input_bytes: None,
                lineage_of: snapshot.lineage_of.clone(),
                ..Default::default()
            }),
            detail: format!("{what}; {}", how.join("; ")),
            estimate,
        })
    }

    /// An aggregate that keeps partials: the partials computed from
    /// changed files of `A` recomputed from what their groups still hold
    /// (or dropped), one more for `A`'s new files, and the delta rule's
    /// terms over each kept group as more partials of that group; the
    /// view is their merge (see [`from_partials`]).
    fn grouped(
        &self,
        aggregation: &shape::Aggregation,
        snapshot: &Snapshot,
        catalog: &Arc<Catalog>,
        what: String,
        force: bool,
    ) -> Result<Strategy> {
        let a = self.a;
        let plan = &aggregation.plan;
        let Regroup {
            evicted,
            kept,
            groups: recompute,
            evicted_groups,
            recomputed,
            new_files,
        } = Regroup::of(&snapshot.partials, &a.changed, &a.added, &a.after);
        let mut groups: Vec<Vec<String>> = lineages(kept.iter().copied())
            .into_iter()
            .map(|g| g.to_vec())
            .collect();
        let uncovered = a.uncovered(
            groups.iter().flatten().map(String::as_str),
            recompute.iter().flatten().map(String::as_str),
        );
        if !uncovered.is_empty() {
            groups.push(uncovered);
        }

        let recomputed_bytes = a.bytes(&mut recompute.iter().flatten().map(String::as_str));
        let mut read = 0;
        if !recompute.is_empty() {
            read += recomputed_bytes + self.appended.bytes_now();
        }
        let mut parts = per_group(plan, &self.followed.provider, self.readable, recompute)?;
        let mut terms = 0;
        for group in &groups {
            let (more, bytes) = self.terms_over(plan, group)?;
            terms += more.len();
            read += bytes;
            parts.extend(more);
        }
        if let Some(full) = unmergeable(kept.len(), parts.len(), &what) {
            return Ok(full);
        }
        // Only added to: the current data already merges every kept
        // partial, unless the view computes over its aggregate.
        let into_current = evicted.is_empty() && !aggregation.computes_over_aggregate();
        let with: Vec<DataFile> = if into_current {
            snapshot.files.clone()
        } else {
            kept.iter().map(|f| (*f).clone()).collect()
        };
        let a_total = a.bytes(&mut a.after.keys().copied());
        let partial_bytes: u64 = snapshot.partials.iter().map(|f| f.size).sum();
        let estimate = Estimate {
            read,
            merged: with.iter().map(|f| f.size).sum(),
            written: snapshot.size_bytes
                + Estimate::share_of(partial_bytes, recomputed_bytes, a_total)
                + self.appended.written(partial_bytes),
            total: a_total + self.appended.bytes_now(),
            view: snapshot.size_bytes,
        };
        if let Some(refused) = refused(estimate, force, &what) {
            return Ok(refused);
        }
        let mut how = vec![];
        if !evicted.is_empty() {
            how.push(format!(
                "{} of {} partial aggregate(s)",
                done(recomputed, evicted_groups - recomputed),
                lineages(&snapshot.partials).len()
            ));
        }
        if new_files > 0 {
            how.push(format!(
                "one more partial aggregate of {new_files} new file(s) of {}",
                self.followed.source
            ));
        }
        how.extend(self.terms_done(terms, groups.len()));
        how.push(if into_current {
            "merged into the existing groups".to_owned()
        } else {
            format!("merged with the {} kept partial aggregate(s)", kept.len())
        });
        Ok(Strategy::Incremental {
            write: Box::new(Write {
                state_columns: aggregation.state_columns.clone(),
                input_bytes: None,
                partials: Partials {
                    keep: kept.into_iter().cloned().collect(),
                    parts,
                    merge: Some(Box::new(MergeInto::new(with, aggregation, catalog))),
                },
                lineage_of: snapshot.lineage_of.clone(),
                ..Default::default()
            }),
            detail: format!("{what}; {}", how.join("; ")),
            estimate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64, version: &str) -> FileFingerprint {
        FileFingerprint {
            path: path.into(),
            size,
            version: version.into(),
        }
    }

    /// The followed table's change, and its files no stored piece records:
    /// neither a kept group's nor read again, and not empty.
    #[test]
    fn files_no_piece_records_are_a_group() {
        let before = [file("a", 10, "1"), file("b", 10, "1"), file("c", 10, "1")];
        let after = [
            file("a", 10, "1"),
            file("b", 12, "2"),
            file("c", 10, "1"),
            file("d", 5, "1"),
            file("e", 0, "1"),
        ];
        let change = Change {
            name: QualifiedName::new("c", "s", "t"),
            before: &before,
            after: &after,
            only_source: false,
        };
        let followed = Followed {
            source: "t".into(),
            provider: Arc::new(EmptyTable::new(Arc::new(
                datafusion::arrow::datatypes::Schema::empty(),
            ))),
            change: Some(&change),
            files: &after,
        };
        let a = FollowedChange::of(&followed);
        assert_eq!(a.changed, BTreeSet::from(["b"]));
        assert_eq!(a.added, vec!["d"]);
        // The empty file holds no rows: it is not there.
        assert_eq!(a.after.len(), 4);
        assert_eq!(a.bytes(&mut ["a", "b", "e"].into_iter()), 22);
        // `a` is in a kept group, `b` and `d` are read again: `c` is left.
        assert_eq!(
            a.uncovered(["a"].into_iter(), ["b", "d"].into_iter()),
            vec!["c".to_owned()]
        );
        // Unchanged: its files now, nothing changed.
        let unchanged = FollowedChange::of(&Followed {
            change: None,
            ..followed
        });
        assert!(unchanged.changed.is_empty() && unchanged.added.is_empty());
        assert_eq!(
            unchanged.uncovered(["a", "b"].into_iter(), std::iter::empty()),
            vec!["c".to_owned(), "d".to_owned()]
        );
    }
}
