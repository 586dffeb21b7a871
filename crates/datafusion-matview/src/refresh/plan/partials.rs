//! Partial aggregates: what an aggregate view keeps per group of the files
//! of the listing table its lineage follows (its only one, or the large
//! table of a join; see [`Snapshot::partials`]), so that removed
//! and rewritten files recompute only the groups they touched. A full
//! refresh writes them ([`full_partials`]); an incremental one recomputes,
//! drops or adds some and merges them all ([`from_partials`]).

use super::*;

/// The partial aggregates a refresh keeps and writes. The new ones are
/// written first; with `merge`, the view's data is then their merge with
/// other files, and the write's own `parts` are not used.
#[derive(Debug, Default)]
pub(crate) struct Partials {
    /// Partials of the current snapshot the new one keeps.
    pub keep: Vec<DataFile>,
    /// One part per group of source files, each with its lineage.
    pub parts: Vec<Part>,
    /// How the view's data is made from the partials written.
    pub merge: Option<Box<MergeInto>>,
}

/// The view's new data: the new partials merged with `with`: the kept
/// partials, or the view's current data when nothing was taken away.
#[derive(Debug)]
pub(crate) struct MergeInto {
    with: Vec<DataFile>,
    aggregation: shape::Aggregation,
    catalog: Arc<Catalog>,
}

impl MergeInto {
    /// The new partials merged with `with` into `aggregation`'s data.
    pub(super) fn new(
        with: Vec<DataFile>,
        aggregation: &shape::Aggregation,
        catalog: &Arc<Catalog>,
    ) -> Self {
        MergeInto {
            with,
            aggregation: aggregation.clone(),
            catalog: Arc::clone(catalog),
        }
    }

    /// How many stored files the new partials are merged with.
    pub(crate) fn merged_with(&self) -> usize {
        self.with.len()
    }

    /// The plan of the view's data, once the new partials are `written`.
    pub(crate) fn plan(&self, written: &[DataFile]) -> Result<LogicalPlan> {
        let files = self.with.iter().chain(written).cloned().collect();
        self.aggregation.merge_partials(self.stored(files))
    }

    /// The pieces the view's data is merged from, with the new partials
    /// computed by `new` instead of written (see [`Write::pieces`]).
    fn pieces(&self, mut new: Vec<LogicalPlan>) -> Result<Vec<LogicalPlan>> {
        if !self.with.is_empty() {
            let scan = LogicalPlanBuilder::scan(
                "__dfmv_partials",
                provider_as_source(self.stored(self.with.clone())),
                None,
            )?
            .build()?;
            new.insert(0, scan);
        }
        Ok(new)
    }

    /// `files` (partials, or the view's data) read with the view's
    /// columns and state columns.
    fn stored(&self, files: Vec<DataFile>) -> Arc<dyn TableProvider> {
        let pieces = Snapshot {
            id: String::new(),
            row_count: files.iter().map(|f| f.rows).sum(),
            size_bytes: files.iter().map(|f| f.size).sum(),
            files,
            refreshed_at: chrono::Utc::now(),
            sources: vec![],
            state_columns: self.aggregation.state_columns.clone(),
            partials: vec![],
            lineage_of: None,
        };
        let schema = Arc::new(self.aggregation.plan.schema().as_arrow().clone());
        Arc::new(SnapshotTable::new(
            Arc::clone(&self.catalog),
            pieces,
            schema,
        ))
    }
}

impl Write {
    /// Whether [`Self::pieces`] gives the view's data itself, as the
    /// refresh would write it (one row per group for a grouped view):
    /// always, but where the write merges kept partial aggregates for a
    /// view that does not compute over its aggregate, whose pieces are
    /// left unmerged.
    pub(crate) fn pieces_merged(&self) -> bool {
        self.partials
            .merge
            .as_ref()
            .is_none_or(|merge| merge.aggregation.computes_over_aggregate())
    }

    /// The view's data this write would leave, computed instead of
    /// written, before a grouped view's pieces are merged: what a query of
    /// a stale view is answered from (see [`crate::rewrite`]). For a
    /// row-wise view, its rows; for a grouped view, rows of its groups
    /// that, grouped by its keys and merged (sums and counts added,
    /// minimums and maximums compared), are its data. The rewrite
    /// aggregates such rows again anyway, so merging them first would be
    /// one aggregate too many. (A view that computes over its aggregate
    /// keeps partials of the aggregate's own columns: those are merged,
    /// and the view's part above the aggregate applied, as its refresh
    /// does; read as the view's columns they would be other values.)
    ///
    /// `kept` scans the files of the current snapshot the write keeps
    /// ([`Write::keep`]); the result has the view's `columns` (state
    /// columns dropped), by position. The parts must be pinned.
    pub(crate) fn pieces(
        &self,
        kept: Option<LogicalPlan>,
        columns: &datafusion::arrow::datatypes::Schema,
    ) -> Result<LogicalPlan> {
        let inputs = match &self.partials.merge {
            Some(merge) => {
                let pieces =
                    merge.pieces(self.partials.parts.iter().map(|p| p.plan.clone()).collect())?;
                if merge.aggregation.computes_over_aggregate() {
                    vec![merge.aggregation.merge_rows(union_all(pieces)?)?]
                } else {
                    pieces
                }
            }
            None => kept
                .into_iter()
                .chain(self.parts.iter().map(|p| p.plan.clone()))
                .collect(),
        };
        let inputs = inputs
            .into_iter()
            .map(|input| {
                let schema = Arc::clone(input.schema());
                if schema.fields().len() < columns.fields().len() {
                    return Err(datafusion::error::DataFusionError::Internal(format!(
                        "a part has {} columns, the view {}",
                        schema.fields().len(),
                        columns.fields().len()
                    ))
                    .into());
                }
                let exprs = columns.fields().iter().enumerate().map(|(i, field)| {
                    let column = Expr::Column(Column::from(schema.qualified_field(i)));
                    let column = if schema.field(i).data_type() == field.data_type() {
                        column
                    } else {
                        cast(column, field.data_type().clone())
                    };
                    column.alias(field.name())
                });
                Ok(LogicalPlanBuilder::from(input).project(exprs)?.build()?)
            })
            .collect::<Result<Vec<_>>>()?;
        union_all(inputs)
    }
}

/// `inputs` one after the other (`UNION ALL`); at least one.
fn union_all(inputs: Vec<LogicalPlan>) -> Result<LogicalPlan> {
    let mut inputs = inputs.into_iter();
    let first = inputs.next().ok_or_else(|| {
        datafusion::error::DataFusionError::Internal(
            "nothing to compute the view's data from".into(),
        )
    })?;
    let mut plan = LogicalPlanBuilder::from(first);
    for input in inputs {
        plan = plan.union(input)?;
    }
    Ok(plan.build()?)
}

/// Most partial aggregates a snapshot keeps: appends add one each, and
/// merging them all costs more with every one; beyond this a full refresh
/// regroups them.
pub(super) const MAX_PARTIALS: usize = 4 * LINEAGE_GROUPS;

/// Partial aggregates this small are always kept: writing them costs
/// little next to any query worth materializing.
const SMALL_PARTIALS: u64 = 8 << 20;

/// Whether partial aggregates are worth keeping for a view: when what they
/// would hold is small, or at most a quarter of the source's bytes. A view
/// with about as many groups as its source has rows would store every row
/// again per group of files; for those, removals recompute the view
/// instead. `previous` tells the size: its partials, or its data once per
/// group.
fn partials_worth_keeping(previous: &Snapshot, source_bytes: u64) -> bool {
    let partial_bytes = if previous.partials.is_empty() {
        previous.size_bytes * LINEAGE_GROUPS as u64
    } else {
        previous.partials.iter().map(|f| f.size).sum()
    };
    partial_bytes <= SMALL_PARTIALS || partial_bytes * 4 <= source_bytes
}

/// The partial aggregates a full refresh of an aggregate view writes, one
/// per group of the files of its one source (a listing table or
/// materialized view it reads row-wise), merged into the view's data;
/// `None` when there are fewer than two groups or
/// [`partials_worth_keeping`] says no.
pub(super) fn full_partials(
    aggregation: &shape::Aggregation,
    single: Option<LineageSource<'_>>,
    previous: Option<&Snapshot>,
    catalog: &Arc<Catalog>,
    runtime: Option<&Arc<RuntimeEnv>>,
) -> Result<Option<Partials>> {
    let Some((provider, name, files, most)) = single else {
        return Ok(None);
    };
    let name = name.to_string();
    let Ok(listing) = Files::of(provider, &name, catalog, runtime) else {
        return Ok(None);
    };
    if linear(&aggregation.input, provider, &name) != Ok(true) {
        return Ok(None);
    }
    let groups = groups(files, most);
    let source_bytes = non_empty(files).map(|f| f.size).sum();
    if groups.len() < 2 || previous.is_some_and(|p| !partials_worth_keeping(p, source_bytes)) {
        return Ok(None);
    }
    let parts = per_group(&aggregation.plan, provider, &listing, groups)?;
    Ok(Some(Partials {
        keep: vec![],
        parts,
        merge: Some(Box::new(MergeInto {
            with: vec![],
            aggregation: aggregation.clone(),
            catalog: Arc::clone(catalog),
        })),
    }))
}

/// How one table's files changed, as [`choose`] found it.
pub(super) struct Delta<'a> {
    /// In words (`t: 1 file(s) removed`).
    pub(super) what: String,
    /// Files that were there before and were removed or rewritten.
    pub(super) changed: &'a BTreeSet<&'a str>,
    /// Files that are new.
    pub(super) added: &'a [&'a str],
    /// The table's files now.
    pub(super) after: &'a BTreeMap<&'a str, &'a FileFingerprint>,
    pub(super) only_source: bool,
    /// The table, which the partials' lineage lists files of.
    pub(super) table: &'a QualifiedName,
    /// Skip the cost rule (`REFRESH ... INCREMENTAL`).
    pub(super) force: bool,
}

/// The groups of source files `partials` were computed from, each once:
/// one partial may be in several files, each with the partial's lineage
/// (every partial has one: [`from_partials`] checks that first).
pub(super) fn lineages<'a>(
    partials: impl IntoIterator<Item = &'a DataFile>,
) -> BTreeSet<&'a [String]> {
    partials
        .into_iter()
        .map(|f| f.lineage.as_deref().unwrap_or_default())
        .collect()
}

/// What a change to the files of the table partials follow does to them:
/// the partials computed from removed or rewritten files are evicted, the
/// others kept; the groups of files to aggregate again are each evicted
/// group's files that are left, then (last) the new files with the
/// rewritten ones no partial covered: a group of files whose aggregate
/// had no rows left no partial behind (nothing was written), so what they
/// hold now is all new.
pub(super) struct Regroup<'s> {
    pub evicted: Vec<&'s DataFile>,
    pub kept: Vec<&'s DataFile>,
    pub groups: Vec<Vec<String>>,
    /// How many groups of files the evicted partials were computed from.
    pub evicted_groups: usize,
    /// How many of those are recomputed (the others' files are all gone:
    /// they are dropped).
    pub recomputed: usize,
    /// How many files the last group, of new files, holds (0: none).
    pub new_files: usize,
}

impl<'s> Regroup<'s> {
    pub(super) fn of(
        partials: &'s [DataFile],
        changed: &BTreeSet<&str>,
        added: &[&str],
        after: &BTreeMap<&str, &FileFingerprint>,
    ) -> Self {
        let (evicted, kept) = computed_from(partials, changed);
        // Each group of source files is recomputed once.
        let evicted_lineages = lineages(evicted.iter().copied());
        let mut groups: Vec<Vec<String>> = evicted_lineages
            .iter()
            .map(|group| {
                group
                    .iter()
                    .filter(|p| after.contains_key(p.as_str()))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .filter(|group| !group.is_empty())
            .collect();
        let recomputed = groups.len();
        let covered: BTreeSet<&str> = evicted
            .iter()
            .flat_map(|f| f.lineage.iter().flatten().map(String::as_str))
            .collect();
        let fresh: Vec<String> = added
            .iter()
            .copied()
            .chain(
                changed
                    .iter()
                    .copied()
                    .filter(|p| !covered.contains(p) && after.contains_key(p)),
            )
            .map(str::to_owned)
            .collect();
        let new_files = fresh.len();
        if !fresh.is_empty() {
            groups.push(fresh);
        }
        Regroup {
            evicted,
            kept,
            groups,
            evicted_groups: evicted_lineages.len(),
            recomputed,
            new_files,
        }
    }
}

/// The full refresh an aggregate takes instead of merging `kept`
/// partials with `new` ones computed now, when it cannot: there is none
/// (every file is gone: nothing to merge, and an aggregate without
/// `GROUP BY` still has its one row, which a full refresh gives), or
/// there are more than [`MAX_PARTIALS`].
pub(super) fn unmergeable(kept: usize, new: usize, change: &str) -> Option<Strategy> {
    let change = change.to_owned();
    if kept + new == 0 {
        return Some(Strategy::Full(FullReason::NothingLeft { change }));
    }
    (kept + new > MAX_PARTIALS).then(|| {
        Strategy::Full(FullReason::PartialsFragmented {
            change,
            pieces: kept + new,
        })
    })
}

/// `recomputed` and `dropped` partial aggregates, in words.
pub(super) fn done(recomputed: usize, dropped: usize) -> String {
    match (recomputed, dropped) {
        (r, 0) => format!("recomputed {r}"),
        (0, d) => format!("dropped {d}"),
        (r, d) => format!("recomputed {r} and dropped {d}"),
    }
}

/// Refreshes an aggregate view that keeps partial aggregates: the partials
/// computed from removed or rewritten files are recomputed from what is
/// left of their files, the appended files make one more, and the view's
/// data is all of them merged (or, when only files were appended, the new
/// partial merged into the current data).
pub(super) fn from_partials(
    aggregation: &shape::Aggregation,
    snapshot: &Snapshot,
    readable: &Files,
    provider: &Arc<dyn TableProvider>,
    catalog: &Arc<Catalog>,
    delta: &Delta<'_>,
) -> Result<Strategy> {
    let what = delta.what.clone();
    if snapshot.partials.iter().any(|f| f.lineage.is_none()) {
        return Ok(Strategy::Full(FullReason::NoLineage { change: what }));
    }
    let Regroup {
        evicted,
        kept,
        groups,
        evicted_groups,
        recomputed,
        ..
    } = Regroup::of(&snapshot.partials, delta.changed, delta.added, delta.after);
    if let Some(full) = unmergeable(kept.len(), groups.len(), &what) {
        return Ok(full);
    }
    let read_bytes: u64 = groups
        .iter()
        .flatten()
        .filter_map(|p| delta.after.get(p.as_str()))
        .map(|f| f.size)
        .sum();
    let total = delta.after.values().map(|f| f.size).sum();
    // Only appended: the current data already merges every kept partial,
    // unless the view computes over its aggregate (its data has lost
    // what HAVING filtered out, and the aggregates' own values).
    let into_current = evicted.is_empty() && !aggregation.computes_over_aggregate();
    // Recomputed partials cost about their share of all partials; the
    // merge then reads what it merges with and writes the whole view.
    let with_bytes: u64 = if into_current {
        snapshot.size_bytes
    } else {
        kept.iter().map(|f| f.size).sum()
    };
    let partial_bytes: u64 = snapshot.partials.iter().map(|f| f.size).sum();
    let estimate = Estimate {
        read: read_bytes,
        merged: with_bytes,
        written: snapshot.size_bytes + Estimate::share_of(partial_bytes, read_bytes, total),
        total,
        view: snapshot.size_bytes,
    };
    if let Some(refused) = refused(estimate, delta.force, &what) {
        return Ok(refused);
    }
    let parts = per_group(&aggregation.plan, provider, readable, groups)?;
    let kept: Vec<DataFile> = kept.into_iter().cloned().collect();
    let (with, detail) = if into_current {
        (
            snapshot.files.clone(),
            format!("{what}; merged into the existing groups"),
        )
    } else if evicted.is_empty() {
        (
            kept.clone(),
            format!("{what}; merged with the {} kept partial(s)", kept.len()),
        )
    } else {
        let detail = format!(
            "{what}; {} of {} partial aggregate(s), merged with the others",
            done(recomputed, evicted_groups - recomputed),
            lineages(&snapshot.partials).len()
        );
        (kept.clone(), detail)
    };
    Ok(Strategy::Incremental {
        write: Box::new(Write {
            parts: vec![],
            keep: vec![],
            state_columns: aggregation.state_columns.clone(),
            input_bytes: delta.only_source.then_some(read_bytes + with_bytes),
            partials: Partials {
                keep: kept,
                parts,
                merge: Some(Box::new(MergeInto {
                    with,
                    aggregation: aggregation.clone(),
                    catalog: Arc::clone(catalog),
                })),
            },
            lineage_of: Some(delta.table.clone()),
        }),
        detail,
        estimate,
    })
}
