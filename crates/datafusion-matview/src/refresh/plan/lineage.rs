//! A row-wise view over several tables, whose lineage follows one of them
//! (`A`, see [`lineage_table`]), after the others gained files.
//!
//! Its data files each hold the query over a group `G` of `A`'s files
//! with the other tables whole, and record `G` as their lineage; groups
//! are disjoint. After `A` changed in any way and the others `B₁…Bₙ` only
//! gained files:
//!
//! - the data files computed from changed files of `A` are evicted, and
//!   the query runs over what their groups still hold plus `A`'s new and
//!   rewritten files, with the other tables as they are now (one part,
//!   with those files as its lineage);
//! - every kept group `G` gains its rows over the new files: by the delta
//!   rule with `A` held to `G`, one term per `Bᵢ` that gained files (its
//!   new files, the tables before it as they are now, those after it as
//!   they were), each with `G` as its lineage.
//!
//! The view is then the query over `A` as it is (kept groups and what was
//! read again are its files, each once) and the others as they are, and
//! every data file still has lineage, so a later removal or rewrite in
//! `A` evicts only its groups. Without this, a dimension table that
//! gained a row left data files without lineage, and the next change to
//! the fact table recomputed the view.

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

/// How to refresh a row-wise view whose lineage follows `followed` after
/// `others` changed (and perhaps `followed` too), or `None` when this does
/// not apply: the query is not row-wise in every changed table, a data
/// file has no lineage, a table other than `followed` lost or rewrote
/// files, or two of them are the same relation. The caller then decides
/// as before.
#[allow(clippy::too_many_arguments)]
pub(crate) fn by_lineage(
    plan: &LogicalPlan,
    snapshot: &Snapshot,
    followed: &Followed<'_>,
    others: &[Changed<'_>],
    catalog: &Arc<Catalog>,
    runtime: Option<&Arc<RuntimeEnv>>,
    force: bool,
) -> Result<Option<Strategy>> {
    if others.is_empty() || snapshot.files.iter().any(|f| f.lineage.is_none()) {
        return Ok(None);
    }
    let providers: Vec<&Arc<dyn TableProvider>> = std::iter::once(&followed.provider)
        .chain(others.iter().map(|c| &c.provider))
        .collect();
    for (i, a) in providers.iter().enumerate() {
        if providers[i + 1..].iter().any(|b| same_relation(a, b)) {
            return Ok(None);
        }
        let name = if i == 0 {
            &followed.source
        } else {
            &others[i - 1].source
        };
        if !matches!(linear(plan, a, name), Ok(true)) {
            return Ok(None);
        }
    }
    let mut readable = Vec::with_capacity(others.len());
    let mut files = Vec::with_capacity(others.len());
    for c in others {
        let f = FileChanges::of(c.change);
        if !f.changed.is_empty() {
            return Ok(None);
        }
        match Files::of(&c.provider, &c.source, catalog, runtime) {
            Ok(r) => readable.push(r),
            Err(why) => return Ok(Some(Strategy::Full(why))),
        }
        files.push(f);
    }
    let followed_files = match Files::of(&followed.provider, &followed.source, catalog, runtime) {
        Ok(r) => r,
        Err(why) => return Ok(Some(Strategy::Full(why))),
    };

    // `A`: its files now, and what changed.
    let (after, changed, added): (BTreeMap<&str, &FileFingerprint>, BTreeSet<&str>, Vec<&str>) =
        match followed.change {
            Some(change) => {
                let f = FileChanges::of(change);
                (f.after, f.changed, f.added)
            }
            None => (
                non_empty(followed.files)
                    .map(|f| (f.path.as_str(), f))
                    .collect(),
                BTreeSet::new(),
                vec![],
            ),
        };
    let a_bytes = |paths: &mut dyn Iterator<Item = &str>| -> u64 {
        paths.filter_map(|p| after.get(p)).map(|f| f.size).sum()
    };
    let (mut evicted, kept) = computed_from(&snapshot.files, &changed);
    // The kept data files by group, smallest last; past the most groups a
    // full refresh writes, the smallest are evicted and read again with
    // the rest, so that the terms per group stay few.
    let mut groups: BTreeMap<BTreeSet<&str>, Vec<&DataFile>> = BTreeMap::new();
    for file in kept {
        let group = file.lineage.iter().flatten().map(String::as_str).collect();
        groups.entry(group).or_default().push(file);
    }
    let mut groups: Vec<(BTreeSet<&str>, Vec<&DataFile>)> = groups.into_iter().collect();
    groups.sort_by_key(|(g, _)| std::cmp::Reverse(a_bytes(&mut g.iter().copied())));
    while groups.len() > LINEAGE_GROUPS {
        let (_, files) = groups.pop().expect("more groups than the most");
        evicted.extend(files);
    }
    let reread: BTreeSet<&str> = evicted
        .iter()
        .flat_map(|f| f.lineage.iter().flatten().map(String::as_str))
        .chain(changed.iter().copied())
        .filter(|p| after.contains_key(p))
        .chain(added.iter().copied())
        .collect();
    // A's files no data file records: those whose rows the query left
    // out (no data file is written for no rows). Over the others' new
    // files they may give rows, so they are a group of their own.
    let covered: BTreeSet<&str> = groups
        .iter()
        .flat_map(|(g, _)| g.iter().copied())
        .chain(reread.iter().copied())
        .collect();
    let uncovered: BTreeSet<&str> = after
        .keys()
        .copied()
        .filter(|p| !covered.contains(p))
        .collect();
    if !uncovered.is_empty() {
        groups.push((uncovered, vec![]));
    }
    let reread: Vec<String> = reread.into_iter().map(str::to_owned).collect();

    let b_bytes = |i: usize, paths: &mut dyn Iterator<Item = &str>| -> u64 {
        paths
            .filter_map(|p| files[i].after.get(p))
            .map(|f| f.size)
            .sum()
    };
    let now: Vec<Vec<String>> = files
        .iter()
        .map(|f| f.after.keys().map(|p| p.to_string()).collect())
        .collect();
    let then: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            f.after
                .keys()
                .filter(|p| !f.added.contains(p))
                .map(|p| p.to_string())
                .collect()
        })
        .collect();
    let others_now: u64 = (0..files.len())
        .map(|i| b_bytes(i, &mut now[i].iter().map(String::as_str)))
        .sum();

    let mut parts = vec![];
    let mut read = 0;
    if !reread.is_empty() {
        read += a_bytes(&mut reread.iter().map(String::as_str)) + others_now;
        parts.push(Part {
            plan: over_files(plan, &followed.provider, &followed_files, &reread)?,
            lineage: Some(reread.clone()),
        });
    }
    let mut terms = 0;
    for (group, _) in &groups {
        let group: Vec<String> = group.iter().map(|p| p.to_string()).collect();
        let held = over_files(plan, &followed.provider, &followed_files, &group)?;
        for (i, f) in files.iter().enumerate() {
            if f.added.is_empty() {
                continue;
            }
            read += a_bytes(&mut group.iter().map(String::as_str));
            let mut term = held.clone();
            for (j, c) in others.iter().enumerate() {
                let paths: Vec<String> = match j.cmp(&i) {
                    std::cmp::Ordering::Less => now[j].clone(),
                    std::cmp::Ordering::Equal => f.added.iter().map(|p| p.to_string()).collect(),
                    std::cmp::Ordering::Greater => then[j].clone(),
                };
                read += b_bytes(j, &mut paths.iter().map(String::as_str));
                term = over_files(&term, &c.provider, &readable[j], &paths)?;
            }
            terms += 1;
            parts.push(Part {
                plan: term,
                lineage: Some(group.clone()),
            });
        }
    }

    let a_total = a_bytes(&mut after.keys().copied());
    let view = snapshot.size_bytes;
    let written = Estimate::share_of(
        view,
        a_bytes(&mut reread.iter().map(String::as_str)),
        a_total,
    ) + (0..files.len())
        .map(|i| {
            Estimate::share_of(
                view,
                b_bytes(i, &mut files[i].added.iter().copied()),
                b_bytes(i, &mut now[i].iter().map(String::as_str)),
            )
        })
        .sum::<u64>();
    let estimate = Estimate {
        read,
        merged: 0,
        written: written.min(view),
        total: a_total + others_now,
        view,
    };

    // What changed, table by table in name order, as the other paths say.
    let mut what = vec![];
    if followed.change.is_some() {
        let removed = changed.iter().filter(|p| !after.contains_key(*p)).count();
        for (n, verb) in [
            (added.len(), "appended"),
            (removed, "removed"),
            (changed.len() - removed, "rewritten"),
        ] {
            if n > 0 {
                what.push(format!("{}: {n} file(s) {verb}", followed.source));
            }
        }
    }
    for (c, f) in others.iter().zip(&files) {
        if !f.added.is_empty() {
            what.push(format!("{}: {} file(s) appended", c.source, f.added.len()));
        }
    }
    if what.is_empty() {
        // Only empty files came or went: the same rows as last time.
        return Ok(Some(Strategy::Incremental {
            write: Box::new(Write {
                keep: snapshot.files.clone(),
                input_bytes: Some(0),
                lineage_of: snapshot.lineage_of.clone(),
                ..Default::default()
            }),
            detail: "only empty files changed; nothing to recompute".into(),
            estimate,
        }));
    }
    what.sort_by(|a: &String, b: &String| a.split(": ").next().cmp(&b.split(": ").next()));
    let what = what.join(", ");
    if !force && !estimate.incremental_wins() {
        return Ok(Some(Strategy::Full(FullReason::NotCheaper {
            change: what,
            estimate,
        })));
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
            followed.source
        ));
    }
    if terms > 0 {
        how.push(format!(
            "{terms} term(s) of the delta rule, over each of {} lineage group(s) of {}",
            groups.len(),
            followed.source
        ));
    }
    let evicted: BTreeSet<&str> = evicted.iter().map(|f| f.path.as_str()).collect();
    Ok(Some(Strategy::Incremental {
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
    }))
}
