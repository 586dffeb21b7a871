//! The second stage of a refresh: what it computes. A [`Write`] is the
//! plans a refresh runs and the files of the current snapshot it keeps:
//! for a full refresh, the view's query (in groups of source files when
//! it can keep lineage); for an incremental one, the query over what
//! changed, merged or added to what is kept. Every plan is pinned to the
//! source files that were fingerprinted ([`Write::pin`]).
//!
//! A stale view is refreshed incrementally when one of the tables it
//! reads (through plain views too) changed, that table is file-backed
//! (a listing table, Hive-partitioned or not, or a materialized view: its
//! data files), and the query's shape allows it:
//!
//! - **Row-wise** queries (projection, filter, `UNNEST`, scalar functions,
//!   `UNION ALL` of branches that all read the changed table row-wise, and joins where the changed table is
//!   on a side whose rows are kept
//!   one by one: either side of an inner join, the preserved side of an
//!   outer, semi or anti join): every output row comes from one row of the
//!   changed table, so the query over the new files alone gives exactly the
//!   new output rows, which are added as new files. Each data file records
//!   its *lineage*, the source files it was computed from, of one listing
//!   table: the view's only one, or over a join the largest, beside small
//!   others ([`lineage_table`], recorded as [`Snapshot::lineage_of`]);
//!   removed or rewritten files of that table evict the data files
//!   computed from them, and the source files those data files also
//!   covered are read again with the new and rewritten ones.
//! - **Aggregates** (`GROUP BY`, or none; `SELECT DISTINCT` is a GROUP BY
//!   of every column) whose outputs are the group keys
//!   and `count`, `sum`, `min`, `max` and `avg` over a row-wise input, after
//!   appends: the query over the new files gives partial aggregates, merged
//!   with the stored groups (counts and sums add up, minimums and maximums
//!   compare; `avg` is kept as a hidden sum and count beside the view's
//!   columns). Over the listing table lineage follows, a full refresh also
//!   keeps a partial aggregate per group of its files ([`Partials`]); removed
//!   or rewritten files then recompute only the partials of their groups,
//!   and the view is the merge of all partials. Without partials, removals
//!   cannot be taken back out of an aggregate, so they recompute the view.
//!   A view that filters or computes over its aggregate (`HAVING`,
//!   `sum(a) / count(*)`, a key it does not output, an aggregate over it,
//!   `count(DISTINCT x)` split into one) keeps the lowest aggregate in its
//!   partials and applies the rest to their merge, on every change;
//!   without partials it is recomputed.
//!
//! - **Windows by a partition of the files**: windows that all partition
//!   by a Hive partition column of the table, over it row-wise: the
//!   partitions a change touched are recomputed whole ([`windows`]).
//!
//! When several tables only gained files, a query multilinear in them
//! (row-wise in each) is refreshed by the delta rule ([`several`]). A
//! view whose lineage follows one table (row-wise, or an aggregate with
//! partials) keeps it when other tables gained files, whatever that
//! table's change: eviction for it, and the delta rule over each of its
//! lineage groups ([`lineage`]).
//!
//! Everything else recomputes the view, with the reason: other shapes
//! (sort, limit, distinct, other windows, set operations, subqueries over the
//! changed table, a table joined with itself), files removed or rewritten
//! in several changed tables or in one lineage does not follow, tables
//! that are not file-backed, and
//! changes the cost rule of [`super::decide`] finds no cheaper than a full
//! refresh.
//!
//! A full refresh of a view row-wise in the table lineage follows writes
//! its data in groups of that table's files, one data file per group, so
//! that later removals evict only the groups they touch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::empty::EmptyTable;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{Column, DFSchemaRef};
use datafusion::datasource::listing::{ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::datasource::{TableProvider, provider_as_source, source_as_provider};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::expr_fn::{max, min, sum};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    Aggregate, Distinct, Expr, ExprSchemable, JoinType, LogicalPlan, LogicalPlanBuilder, TableScan,
    cast,
};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::freshness::{leaves_under, listing_definition};
use crate::spec::{
    DataFile, FileFingerprint, Fingerprint, QualifiedName, Snapshot, SourceFingerprint,
};
use crate::table::{MaterializedViewTable, SnapshotTable};

mod definition;
mod files;
mod groups;
mod lineage;
mod partials;
mod pinned;
mod several;
mod shape;
mod windows;

use super::decide::{Change, Estimate};
use super::reason::{FullReason, NotIncremental};
pub(crate) use definition::{
    forget_listings, plan_definition, rename_columns, result_settings, state_for, with_defaults,
};
use files::*;
pub(crate) use groups::lineage_table;
use groups::*;
pub(crate) use lineage::{Followed, by_lineage};
pub(crate) use partials::Partials;
use partials::{Delta, from_partials, full_partials};
pub(crate) use several::{Changed, choose_several};
pub(crate) use shape::Shape;

/// One query of a refresh; its output becomes new data files.
#[derive(Debug)]
pub(crate) struct Part {
    /// What to compute.
    pub plan: LogicalPlan,
    /// The source files it reads, when the view has one file-backed source.
    pub lineage: Option<Vec<String>>,
}

/// What a refresh writes: the new snapshot is `keep` plus the output of
/// every part (or, when `partials` merges, the merge's output), with the
/// partials `partials` keeps and writes.
#[derive(Debug, Default)]
pub(crate) struct Write {
    /// Run concurrently; each writes its own files.
    pub parts: Vec<Part>,
    /// Files of the current snapshot the new one keeps.
    pub keep: Vec<DataFile>,
    /// Columns the files hold after the view's (see [`Snapshot::state_columns`]).
    pub state_columns: Vec<String>,
    /// How many bytes the parts read in all, when known (an incremental
    /// write over one table): a small write runs on one partition.
    pub input_bytes: Option<u64>,
    /// The partial aggregates of the new snapshot (see
    /// [`Snapshot::partials`]).
    pub partials: Partials,
    /// The table the lineage of its files lists files of (see
    /// [`Snapshot::lineage_of`]).
    pub lineage_of: Option<QualifiedName>,
}

/// How a stale view is brought up to date.
#[derive(Debug)]
pub(crate) enum Strategy {
    /// Less than a full recomputation; the detail says what, the
    /// estimate what the cost rule compared.
    Incremental {
        write: Box<Write>,
        detail: String,
        estimate: Estimate,
    },
    /// Recompute everything, for this reason.
    Full(FullReason),
}

/// Files that hold something: a file of zero bytes has no rows in any
/// format (a refresh neither reads it nor counts it as data it has seen).
fn non_empty(files: &[FileFingerprint]) -> impl Iterator<Item = &FileFingerprint> {
    files.iter().filter(|f| f.size > 0)
}

/// A file-backed table a refresh reads, held to the files it had when its
/// fingerprint was taken.
pub(crate) struct Pin {
    provider: Arc<dyn TableProvider>,
    files: Files,
    paths: Vec<String>,
}

impl Pin {
    /// `provider` (named `name`) held to `paths`; `None` for a table whose
    /// files cannot be read apart (a custom table).
    pub(crate) fn new(
        provider: Arc<dyn TableProvider>,
        name: &str,
        catalog: &Arc<Catalog>,
        runtime: Option<&Arc<RuntimeEnv>>,
        paths: Vec<String>,
    ) -> Option<Pin> {
        let files = Files::of(&provider, name, catalog, runtime).ok()?;
        Some(Pin {
            provider,
            files,
            paths,
        })
    }
}

/// The file-backed tables under `sources` (plain views expanded), each
/// with the files that held rows when the fingerprints were taken.
pub(crate) fn fingerprinted_files(
    sources: &[SourceFingerprint],
) -> Vec<(&QualifiedName, Vec<String>)> {
    let mut tables = BTreeMap::new();
    leaves_under(sources, &mut tables);
    tables
        .into_iter()
        .filter_map(|(name, fingerprint)| match fingerprint {
            Fingerprint::Files { files, .. }
            | Fingerprint::Snapshot {
                id: Some(_), files, ..
            } => Some((name, non_empty(files).map(|f| f.path.clone()).collect())),
            _ => None,
        })
        .collect()
}

impl Write {
    /// The plan of each part, in order: partials first.
    pub(crate) fn plans(&self) -> Vec<LogicalPlan> {
        self.partials
            .parts
            .iter()
            .chain(&self.parts)
            .map(|p| p.plan.clone())
            .collect()
    }

    /// Makes every part read each pinned table as exactly its pinned files
    /// (subqueries included), whatever lands in it meanwhile: what a refresh
    /// reads is then what its fingerprints say it read, so a file added
    /// while it runs is seen as new by the next refresh, and read once.
    pub(crate) fn pin(mut self, pins: &[Pin]) -> Result<Write> {
        for part in self.parts.iter_mut().chain(&mut self.partials.parts) {
            for pin in pins {
                part.plan = over_files(&part.plan, &pin.provider, &pin.files, &pin.paths)?;
            }
        }
        Ok(self)
    }
}

/// Checks that every output row of `plan` comes from exactly one row of
/// `provider` (combined with rows of unchanged tables): then `plan` over
/// new rows of `provider` gives exactly the new output rows. Returns
/// whether `plan` reads `provider` at all; `Err` says why not row-wise.
pub(crate) fn linear(
    plan: &LogicalPlan,
    provider: &Arc<dyn TableProvider>,
    name: &str,
) -> std::result::Result<bool, NotIncremental> {
    if !reads_anywhere(plan, provider) {
        // Unchanged: any shape.
        return Ok(false);
    }
    let mut subquery = false;
    let _ = plan.apply_subqueries(|_| {
        subquery = true;
        Ok(TreeNodeRecursion::Stop)
    });
    if subquery {
        return Err(NotIncremental::Subquery {
            source: name.to_owned(),
        });
    }
    match plan {
        LogicalPlan::TableScan(_) => Ok(true),
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Unnest(_) => {
            linear(plan.inputs()[0], provider, name)?;
            Ok(true)
        }
        // UNION ALL: every output row is one row of one branch. Each
        // branch must read the changed table (row-wise): one that does not
        // would give all its rows again over the new files alone.
        LogicalPlan::Union(_) => {
            for input in plan.inputs() {
                if !linear(input, provider, name)? {
                    return Err(NotIncremental::UnionBranch {
                        source: name.to_owned(),
                    });
                }
            }
            Ok(true)
        }
        LogicalPlan::Join(join) => {
            let left = linear(&join.left, provider, name)?;
            let right = linear(&join.right, provider, name)?;
            let allowed = match (left, right) {
                (true, true) => {
                    return Err(NotIncremental::SelfJoin {
                        source: name.to_owned(),
                    });
                }
                (true, false) => matches!(
                    join.join_type,
                    JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti
                ),
                _ => matches!(
                    join.join_type,
                    JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
                ),
            };
            if allowed {
                Ok(true)
            } else {
                Err(NotIncremental::Join {
                    join: join.join_type.to_string().to_lowercase(),
                    source: name.to_owned(),
                })
            }
        }
        node => {
            let text = node.display().to_string();
            let kind = text.split(':').next().unwrap_or(&text).trim();
            Err(NotIncremental::Node {
                kind: kind.to_owned(),
            })
        }
    }
}

/// What a full refresh of a view with this `plan` and `shape` writes.
/// `single`: the listing table lineage is kept for (see
/// [`lineage_table`]), with its files as fingerprinted now; a view
/// row-wise in it is written in groups of those files, each with its
/// lineage, and an aggregate over such a view keeps partial aggregates
/// per group (see [`full_partials`]). `previous`: the view's current
/// data, if any.
pub(crate) fn full(
    plan: LogicalPlan,
    shape: &Shape,
    single: Option<LineageSource<'_>>,
    previous: Option<&Snapshot>,
    catalog: &Arc<Catalog>,
    runtime: Option<&Arc<RuntimeEnv>>,
) -> Result<Write> {
    match shape {
        Shape::Aggregate(aggregation) => {
            if let Some(partials) = full_partials(aggregation, single, previous, catalog, runtime)?
            {
                return Ok(Write {
                    state_columns: aggregation.state_columns.clone(),
                    partials,
                    lineage_of: single.map(|(_, name, _, _)| name.clone()),
                    ..Default::default()
                });
            }
            // Without partials, a view that computes over its aggregate
            // is its query, and a later refresh recomputes it.
            let plan = if aggregation.computes_over_aggregate() {
                plan
            } else {
                aggregation.plan.clone()
            };
            return Ok(Write {
                parts: vec![Part {
                    plan,
                    lineage: None,
                }],
                state_columns: aggregation.state_columns.clone(),
                ..Default::default()
            });
        }
        Shape::Rows => {
            if let Some((provider, table, files, most)) = single {
                let name = table.to_string();
                if let Ok(listing) = Files::of(provider, &name, catalog, runtime) {
                    // Row-wise: any groups; windows by partition: groups
                    // of whole partitions.
                    let groups = match linear(&plan, provider, &name) {
                        Ok(true) => Some(groups(files, most)),
                        _ => windows::window_keys(&plan, provider)
                            .and_then(|keys| windows::partition_groups(files, most, &keys)),
                    };
                    if let Some(groups) = groups {
                        let parts = per_group(&plan, provider, &listing, groups)?;
                        return Ok(Write {
                            parts,
                            lineage_of: Some(table.clone()),
                            ..Default::default()
                        });
                    }
                }
            }
        }
        Shape::Other(_) => {}
    }
    Ok(Write {
        parts: vec![Part {
            plan,
            lineage: None,
        }],
        ..Default::default()
    })
}

/// How the changed table's files differ between its fingerprints (an
/// empty file holds no rows: it is as if it were not there).
pub(crate) struct FileChanges<'a> {
    /// The files that hold rows now, by path.
    pub after: BTreeMap<&'a str, &'a FileFingerprint>,
    /// Files that held rows then, removed or rewritten since.
    pub changed: BTreeSet<&'a str>,
    /// Files that hold rows now and were not there then.
    pub added: Vec<&'a str>,
}

impl<'a> FileChanges<'a> {
    pub(crate) fn of(change: &Change<'a>) -> Self {
        let before: BTreeMap<&str, &FileFingerprint> = non_empty(change.before)
            .map(|f| (f.path.as_str(), f))
            .collect();
        let after: BTreeMap<&str, &FileFingerprint> = non_empty(change.after)
            .map(|f| (f.path.as_str(), f))
            .collect();
        let changed = before
            .iter()
            .filter(|(path, f)| after.get(*path) != Some(*f))
            .map(|(path, _)| *path)
            .collect();
        let added = after
            .keys()
            .filter(|p| !before.contains_key(*p))
            .copied()
            .collect();
        FileChanges {
            after,
            changed,
            added,
        }
    }

    /// The paths of the files that hold rows now.
    pub(crate) fn now(&self) -> Vec<String> {
        self.after.keys().map(|p| p.to_string()).collect()
    }

    /// The paths of the files that held rows then, when files were only
    /// appended: those now less the new ones.
    pub(crate) fn then(&self) -> Vec<String> {
        self.after
            .keys()
            .filter(|p| !self.added.contains(p))
            .map(|p| p.to_string())
            .collect()
    }
}

/// Only empty files came or went in `tables` (of `total` bytes): the same
/// rows as last time, so a view that can be refreshed incrementally keeps
/// its data and partials as they are.
fn unchanged(snapshot: &Snapshot, tables: &str, total: u64) -> Strategy {
    Strategy::Incremental {
        write: Box::new(Write {
            keep: snapshot.files.clone(),
            state_columns: snapshot.state_columns.clone(),
            input_bytes: Some(0),
            partials: Partials {
                keep: snapshot.partials.clone(),
                ..Default::default()
            },
            lineage_of: snapshot.lineage_of.clone(),
            ..Default::default()
        }),
        detail: format!("{tables}: only empty files changed; nothing to recompute"),
        estimate: Estimate {
            total,
            view: snapshot.size_bytes,
            ..Default::default()
        },
    }
}

/// The cost rule: a full refresh, with why, when computing only `change`
/// would not cost at most half of recomputing, unless `force`d (`REFRESH
/// ... INCREMENTAL`).
fn refused(estimate: Estimate, force: bool, change: &str) -> Option<Strategy> {
    (!force && !estimate.incremental_wins()).then(|| {
        Strategy::Full(FullReason::NotCheaper {
            change: change.to_owned(),
            estimate,
        })
    })
}

/// Why a refresh cannot compute only what changed in `source` when the
/// planned query has no scan that is provably `source`: reading the "new
/// files" of a scan it cannot find would read everything again.
fn not_found(source: &str) -> FullReason {
    FullReason::ScanNotFound {
        source: source.to_owned(),
    }
}

/// Chooses how to bring a view up to date after `change` to the table
/// `provider` (named `source` in messages), given the view's planned query
/// and its current `snapshot`. `force` (`REFRESH ... INCREMENTAL`) skips
/// the cost rule: incremental whenever the shape and change allow it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn choose(
    plan: &LogicalPlan,
    shape: &Shape,
    snapshot: &Snapshot,
    change: &Change<'_>,
    source: &str,
    provider: &Arc<dyn TableProvider>,
    catalog: &Arc<Catalog>,
    runtime: Option<&Arc<RuntimeEnv>>,
    force: bool,
) -> Result<Strategy> {
    let readable = match Files::of(provider, source, catalog, runtime) {
        Ok(files) => files,
        Err(why) => return Ok(Strategy::Full(why)),
    };
    let FileChanges {
        after,
        changed,
        added,
    } = FileChanges::of(change);
    let removed = changed.iter().filter(|p| !after.contains_key(*p)).count();
    let rewritten = changed.len() - removed;
    let mut what = vec![];
    for (n, verb) in [
        (added.len(), "appended"),
        (removed, "removed"),
        (rewritten, "rewritten"),
    ] {
        if n > 0 {
            what.push(format!("{n} file(s) {verb}"));
        }
    }
    let unchanged = || {
        Ok(unchanged(
            snapshot,
            source,
            after.values().map(|f| f.size).sum(),
        ))
    };
    let nothing = what.is_empty();
    let what = format!("{source}: {}", what.join(", "));
    // Whether the lineage of the view's files lists files of this table.
    let lineage_table = match &snapshot.lineage_of {
        Some(table) => *table == change.name,
        None => change.only_source,
    };
    // Why a removal or rewrite here is not one lineage can follow.
    let not_lineage = |change: String| match &snapshot.lineage_of {
        Some(table) if !lineage_table => FullReason::LineageOfAnother {
            change,
            table: table.name.clone(),
        },
        _ => FullReason::NoLineageOverSeveral { change },
    };
    let size_of = |paths: &mut dyn Iterator<Item = &str>| -> u64 {
        paths.filter_map(|p| after.get(p)).map(|f| f.size).sum()
    };
    let total = size_of(&mut after.keys().copied());
    let view = snapshot.size_bytes;

    match shape {
        Shape::Other(why) => Ok(Strategy::Full(why.clone().into())),
        Shape::Aggregate(aggregation) => {
            match linear(&aggregation.input, provider, source) {
                Ok(true) => {}
                Ok(false) => return Ok(Strategy::Full(not_found(source))),
                Err(why) => return Ok(Strategy::Full(why.into())),
            }
            if nothing {
                return unchanged();
            }
            if snapshot.state_columns != aggregation.state_columns {
                return Ok(Strategy::Full(FullReason::NoStateToMerge));
            }
            if !snapshot.partials.is_empty() {
                if !lineage_table {
                    // Partials cannot tell what another table's change
                    // did to each; the view's data has lost what it
                    // filtered or computed.
                    if !changed.is_empty() || aggregation.computes_over_aggregate() {
                        return Ok(Strategy::Full(not_lineage(what)));
                    }
                } else {
                    return from_partials(
                        aggregation,
                        snapshot,
                        &readable,
                        provider,
                        catalog,
                        &Delta {
                            what,
                            changed: &changed,
                            added: &added,
                            after: &after,
                            only_source: change.only_source,
                            table: &change.name,
                            force,
                        },
                    );
                }
            }
            if aggregation.computes_over_aggregate() {
                return Ok(Strategy::Full(FullReason::NoPartials { change: what }));
            }
            if !changed.is_empty() {
                return Ok(Strategy::Full(FullReason::RowsRemovedFromAggregate {
                    change: what,
                }));
            }
            if added.is_empty() {
                return Ok(Strategy::Full(FullReason::SourceChanged {
                    source: source.to_owned(),
                }));
            }
            let added_bytes = size_of(&mut added.iter().copied());
            // The merge reads the view's groups and writes them all again.
            let estimate = Estimate {
                read: added_bytes,
                merged: view,
                written: view,
                total,
                view,
            };
            if let Some(refused) = refused(estimate, force, &what) {
                return Ok(refused);
            }
            let read = added_bytes + snapshot.size_bytes;
            let added: Vec<String> = added.iter().map(|p| p.to_string()).collect();
            let delta = over_files(&aggregation.plan, provider, &readable, &added)?;
            let schema = Arc::new(aggregation.plan.schema().as_arrow().clone());
            let current = Arc::new(SnapshotTable::new(
                Arc::clone(catalog),
                snapshot.clone(),
                schema,
            ));
            Ok(Strategy::Incremental {
                write: Box::new(Write {
                    parts: vec![Part {
                        plan: aggregation.merge(current, delta)?,
                        lineage: None,
                    }],
                    keep: vec![],
                    state_columns: aggregation.state_columns.clone(),
                    input_bytes: change.only_source.then_some(read),
                    partials: Partials::default(),
                    lineage_of: None,
                }),
                detail: format!("{what}; merged into the existing groups"),
                estimate,
            })
        }
        Shape::Rows => {
            // Row-wise, or windows by a partition column (see [`windows`]).
            let by_partition = match linear(plan, provider, source) {
                Ok(true) => None,
                Ok(false) => return Ok(Strategy::Full(not_found(source))),
                Err(why) => match windows::window_keys(plan, provider) {
                    Some(keys) => Some(keys),
                    None => return Ok(Strategy::Full(why.into())),
                },
            };
            if nothing {
                return unchanged();
            }
            // An append to a partition recomputes it too.
            if !changed.is_empty() || by_partition.is_some() {
                if !lineage_table {
                    return Ok(Strategy::Full(not_lineage(what)));
                }
                if snapshot.files.iter().any(|f| f.lineage.is_none()) {
                    return Ok(Strategy::Full(FullReason::NoLineage { change: what }));
                }
            }
            let (evicted, keep, read, partitions) = match &by_partition {
                None => {
                    // Evict what was computed from changed files; read
                    // again what those data files also covered, and the
                    // new files.
                    let (evicted, keep) = computed_from(&snapshot.files, &changed);
                    let read: BTreeSet<&str> = evicted
                        .iter()
                        .flat_map(|f| f.lineage.iter().flatten().map(String::as_str))
                        .chain(changed.iter().copied())
                        .filter(|p| after.contains_key(p))
                        .chain(added.iter().copied())
                        .collect();
                    let read: Vec<String> = read.into_iter().map(str::to_owned).collect();
                    (evicted, keep, read, None)
                }
                Some(keys) => {
                    match windows::recomputed(&snapshot.files, keys, &changed, &added, &after) {
                        Some((evicted, keep, read, n)) => (evicted, keep, read, Some((keys, n))),
                        None => {
                            return Ok(Strategy::Full(FullReason::PartitionNotInPath {
                                change: what,
                                columns: keys.join(", "),
                            }));
                        }
                    }
                }
            };
            let read_bytes = size_of(&mut read.iter().map(String::as_str));
            // Row-wise: the rows written are those of what is read.
            let estimate = Estimate {
                read: read_bytes,
                merged: 0,
                written: Estimate::share_of(view, read_bytes, total),
                total,
                view,
            };
            if let Some(refused) = refused(estimate, force, &what) {
                return Ok(refused);
            }
            let parts = if read.is_empty() {
                vec![]
            } else {
                vec![Part {
                    plan: over_files(plan, provider, &readable, &read)?,
                    lineage: lineage_table.then(|| read.clone()),
                }]
            };
            let evicted_rows: u64 = evicted.iter().map(|f| f.rows).sum();
            let detail = if let Some((keys, n)) = partitions {
                format!(
                    "{what}; recomputed {n} partition(s) of {}: evicted {} data file(s) \
                     ({evicted_rows} rows), read {} source file(s)",
                    keys.join(", "),
                    evicted.len(),
                    read.len()
                )
            } else if evicted.is_empty() {
                format!("{what}; read the new files alone")
            } else {
                format!(
                    "{what}; evicted {} data file(s) ({evicted_rows} rows), read {} source file(s)",
                    evicted.len(),
                    read.len()
                )
            };
            Ok(Strategy::Incremental {
                write: Box::new(Write {
                    parts,
                    keep: keep.into_iter().cloned().collect(),
                    state_columns: vec![],
                    input_bytes: change.only_source.then_some(read_bytes),
                    partials: Partials::default(),
                    lineage_of: match &snapshot.lineage_of {
                        None if lineage_table => Some(change.name.clone()),
                        other => other.clone(),
                    },
                }),
                detail,
                estimate,
            })
        }
    }
}

#[cfg(test)]
mod tests;
