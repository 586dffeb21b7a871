//! Several tables changed, each only by appended files: the delta rule.
//!
//! A query that keeps the rows of each changed table one by one (inner
//! joins, the preserved sides of outer joins, filters and projections
//! over them; see [`linear`]) is multilinear in them: over `A ∪ ΔA` and
//! `B ∪ ΔB` it gives its rows over `A` and `B`, plus those over `ΔA` and
//! `B ∪ ΔB`, plus those over `A` and `ΔB`. So the new rows are one term
//! per changed table: that table's new files, the tables before it as they
//! are now, the tables after it as they were. A row-wise view adds the
//! terms' rows; an aggregate merges their groups into its own.
//!
//! Each term reads the other tables whole, so what it saves is writing:
//! a row-wise view writes only its new rows, and the cost rule picks it
//! when that outweighs reading the sources again; an aggregate is written
//! whole either way. `REFRESH ... INCREMENTAL` asks for it whatever the
//! estimate.

use super::*;

/// One changed table, as [`choose_several`] takes it.
pub(crate) struct Changed<'a> {
    pub change: &'a Change<'a>,
    /// Its name, as messages show it.
    pub source: String,
    pub provider: Arc<dyn TableProvider>,
}

/// Chooses how to bring a view up to date after several tables changed:
/// incremental by the delta rule when every change only appended files,
/// the query is multilinear in the changed tables and the cost rule (or
/// `force`) agrees; full otherwise, with the reason.
#[allow(clippy::too_many_arguments)]
pub(crate) fn choose_several(
    plan: &LogicalPlan,
    shape: &Shape,
    snapshot: &Snapshot,
    changed: &[Changed<'_>],
    catalog: &Arc<Catalog>,
    runtime: Option<&Arc<RuntimeEnv>>,
    force: bool,
) -> Result<Strategy> {
    let tables: Vec<String> = changed.iter().map(|c| c.source.clone()).collect();
    let several = || FullReason::SeveralChanged {
        tables: tables.clone(),
    };
    // The same relation under two names would be joined with itself.
    for (i, a) in changed.iter().enumerate() {
        if changed[i + 1..]
            .iter()
            .any(|b| same_relation(&a.provider, &b.provider))
        {
            return Ok(Strategy::Full(several()));
        }
    }
    let (query, input) = match shape {
        Shape::Rows => (plan, plan),
        Shape::Aggregate(aggregation) if !aggregation.computes_over_aggregate() => {
            (&aggregation.plan, aggregation.input.as_ref())
        }
        Shape::Aggregate(_) => {
            return Ok(Strategy::Full(FullReason::NoPartials {
                change: tables.join(" and ") + " changed",
            }));
        }
        Shape::Other(why) => return Ok(Strategy::Full(why.clone().into())),
    };
    let mut readable = Vec::with_capacity(changed.len());
    let mut files = Vec::with_capacity(changed.len());
    let mut what = vec![];
    for c in changed {
        match linear(input, &c.provider, &c.source) {
            Ok(true) => {}
            Ok(false) => return Ok(Strategy::Full(not_found(&c.source))),
            Err(why) => return Ok(Strategy::Full(why.into())),
        }
        match Files::of(&c.provider, &c.source, catalog, runtime) {
            Ok(f) => readable.push(f),
            Err(why) => return Ok(Strategy::Full(why)),
        }
        let f = FileChanges::of(c.change);
        if !f.changed.is_empty() {
            return Ok(Strategy::Full(FullReason::SeveralNotAppended {
                tables: tables.clone(),
            }));
        }
        if !f.added.is_empty() {
            what.push(format!("{}: {} file(s) appended", c.source, f.added.len()));
        }
        files.push(f);
    }
    let aggregation = match shape {
        Shape::Aggregate(aggregation) => {
            if snapshot.state_columns != aggregation.state_columns {
                return Ok(Strategy::Full(FullReason::NoStateToMerge));
            }
            Some(aggregation)
        }
        _ => None,
    };
    let bytes = |f: &FileChanges<'_>, paths: &mut dyn Iterator<Item = &str>| -> u64 {
        paths.filter_map(|p| f.after.get(p)).map(|f| f.size).sum()
    };
    // What each table's files were and are (only appends: the files then
    // are those now less the added ones).
    let now: Vec<Vec<String>> = files.iter().map(FileChanges::now).collect();
    let then: Vec<Vec<String>> = files.iter().map(FileChanges::then).collect();
    let mut terms = vec![];
    let mut read = 0;
    for (i, f) in files.iter().enumerate() {
        if f.added.is_empty() {
            continue;
        }
        let mut term = query.clone();
        for (j, c) in changed.iter().enumerate() {
            let paths: Vec<String> = match j.cmp(&i) {
                std::cmp::Ordering::Less => now[j].clone(),
                std::cmp::Ordering::Equal => f.added.iter().map(|p| p.to_string()).collect(),
                std::cmp::Ordering::Greater => then[j].clone(),
            };
            read += bytes(&files[j], &mut paths.iter().map(String::as_str));
            term = over_files(&term, &c.provider, &readable[j], &paths)?;
        }
        terms.push(term);
    }
    let total: u64 = files
        .iter()
        .map(|f| bytes(f, &mut f.after.keys().copied()))
        .sum();
    let added: u64 = files
        .iter()
        .map(|f| bytes(f, &mut f.added.iter().copied()))
        .sum();
    let view = snapshot.size_bytes;
    if terms.is_empty() {
        return Ok(unchanged(snapshot, &tables.join(" and "), total));
    }
    let estimate = match aggregation {
        Some(_) => Estimate {
            read,
            merged: view,
            written: view,
            total,
            view,
        },
        None => Estimate {
            read,
            merged: 0,
            written: Estimate::share_of(view, added, total),
            total,
            view,
        },
    };
    let what = what.join(", ");
    if let Some(refused) = refused(estimate, force, &what) {
        return Ok(refused);
    }
    let how = format!("{} term(s) of the delta rule", terms.len());
    let (parts, keep, detail) = match aggregation {
        Some(aggregation) => {
            let mut terms = terms.into_iter();
            let first = terms.next().expect("at least one term");
            let delta =
                terms.try_fold(first, |a, b| LogicalPlanBuilder::from(a).union(b)?.build())?;
            let schema = Arc::new(aggregation.plan.schema().as_arrow().clone());
            let current = Arc::new(SnapshotTable::new(
                Arc::clone(catalog),
                snapshot.clone(),
                schema,
            ));
            (
                vec![Part {
                    plan: aggregation.merge(current, delta)?,
                    lineage: None,
                }],
                vec![],
                format!("{what}; {how}, merged into the existing groups"),
            )
        }
        None => (
            terms
                .into_iter()
                .map(|plan| Part {
                    plan,
                    lineage: None,
                })
                .collect(),
            snapshot.files.clone(),
            format!("{what}; {how}, each table's new files with the others"),
        ),
    };
    Ok(Strategy::Incremental {
        write: Box::new(Write {
            parts,
            keep,
            state_columns: aggregation
                .map(|a| a.state_columns.clone())
                .unwrap_or_default(),
            input_bytes: None,
            partials: Partials::default(),
            // Kept data files keep their lineage; the terms' have none,
            // so a later removal recomputes the view.
            lineage_of: aggregation
                .is_none()
                .then(|| snapshot.lineage_of.clone())
                .flatten(),
        }),
        detail,
        estimate,
    })
}
