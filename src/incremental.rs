//! How a refresh computes a view's new data: which plans it runs, which of
//! the current snapshot's files it keeps, and why.
//!
//! A stale view is refreshed incrementally when exactly one of the tables
//! it reads (through plain views too) changed, that table is file-backed
//! (a listing table, or a materialized view: its data files), and the
//! query's shape allows it:
//!
//! - **Row-wise** queries (projection, filter, `UNNEST`, scalar functions,
//!   and joins where the changed table is on a side whose rows are kept
//!   one by one: either side of an inner join, the preserved side of an
//!   outer, semi or anti join): every output row comes from one row of the
//!   changed table, so the query over the new files alone gives exactly the
//!   new output rows, which are added as new files. For a view over one
//!   file-backed table each data file records its *lineage*, the source
//!   files it was computed from; removed or rewritten source files evict
//!   the data files computed from them, and the source files those data
//!   files also covered are read again with the new and rewritten ones.
//! - **Aggregates** (`GROUP BY`, or none) whose outputs are the group keys
//!   and `count`, `sum`, `min`, `max` and `avg` over a row-wise input, after
//!   appends: the query over the new files gives partial aggregates, merged
//!   with the stored groups (counts and sums add up, minimums and maximums
//!   compare; `avg` is kept as a hidden sum and count beside the view's
//!   columns). Removals cannot be taken back out of an aggregate without
//!   the removed rows, so they recompute the view.
//!
//! Everything else recomputes the view, with the reason: other shapes
//! (sort, limit, distinct, window, set operations, subqueries over the
//! changed table, a table joined with itself), several changed tables,
//! tables that are not file-backed, and changes that are no smaller than
//! half of the table.
//!
//! A full refresh of a row-wise view over one file-backed table writes its
//! data in groups of source files, one data file per group, so that later
//! removals evict only the groups they touch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchemaRef};
use datafusion::datasource::listing::{ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::datasource::{TableProvider, provider_as_source, source_as_provider};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::expr_fn::{max, min, sum};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    Aggregate, Expr, ExprSchemable, JoinType, LogicalPlan, LogicalPlanBuilder, TableScan, cast,
};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::spec::{
    DataFile, FileFingerprint, Fingerprint, QualifiedName, Snapshot, SourceFingerprint,
};
use crate::table::{MaterializedViewTable, SnapshotTable};

/// Most groups of source files a full refresh writes for lineage.
const LINEAGE_GROUPS: usize = 16;

/// One query of a refresh; its output becomes new data files.
#[derive(Debug)]
pub(crate) struct Part {
    /// What to compute.
    pub plan: LogicalPlan,
    /// The source files it reads, when the view has one file-backed source.
    pub lineage: Option<Vec<String>>,
}

/// What a refresh writes: the new snapshot is `keep` plus the output of
/// every part.
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
}

/// How a stale view is brought up to date.
#[derive(Debug)]
pub(crate) enum Strategy {
    /// Less than a full recomputation; the detail says what.
    Incremental { write: Write, detail: String },
    /// Recompute everything, for this reason.
    Full(String),
}

/// The shape of a view's query, as far as refreshing it is concerned.
#[derive(Debug)]
pub(crate) enum Shape {
    /// Not an aggregate at its top; whether it is row-wise in a changed
    /// table is checked per change (see [`linear`]).
    Rows,
    /// An aggregate whose outputs can be merged.
    Aggregate(Box<Aggregation>),
    /// Never incremental, for this reason.
    Other(String),
}

/// How one output column of a mergeable aggregate is merged.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Merge {
    /// A GROUP BY key.
    Key,
    /// Added up (`count`, `sum`, and the state of `avg`).
    Sum,
    Min,
    Max,
    /// Recomputed from the merged state columns at these positions.
    Avg {
        sum: usize,
        count: usize,
    },
}

/// A view whose query ends in an aggregate that can be merged.
#[derive(Debug)]
pub(crate) struct Aggregation {
    /// The view's query, also returning the state columns after its own.
    pub plan: LogicalPlan,
    /// The aggregate's input.
    input: Arc<LogicalPlan>,
    /// Per column of `plan`.
    merges: Vec<Merge>,
    /// Names of the state columns.
    pub state_columns: Vec<String>,
}

impl Shape {
    /// The shape of `plan`, a view's planned query (its columns renamed).
    pub(crate) fn of(plan: &LogicalPlan) -> Shape {
        // Down through projections and aliases to the aggregate, if any.
        let mut node = plan;
        loop {
            match node {
                LogicalPlan::Projection(p) => node = &p.input,
                LogicalPlan::SubqueryAlias(a) => node = &a.input,
                LogicalPlan::Aggregate(_) => break,
                _ => return Shape::Rows,
            }
        }
        match aggregation(plan) {
            Ok(Ok(aggregation)) => Shape::Aggregate(Box::new(aggregation)),
            Ok(Err(why)) => Shape::Other(why),
            // Planning the state columns failed: refresh it fully.
            Err(e) => Shape::Other(format!("not incremental: {e}")),
        }
    }
}

fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}

/// Analyses a plan known to end in projections over an aggregate.
fn aggregation(plan: &LogicalPlan) -> Result<std::result::Result<Aggregation, String>> {
    let width = plan.schema().fields().len();
    // Position of each output column in the current node's output.
    let mut map: Vec<usize> = (0..width).collect();
    let mut node = plan;
    let aggregate = loop {
        match node {
            LogicalPlan::Projection(p) => {
                let mut next = Vec::with_capacity(map.len());
                for &i in &map {
                    let Expr::Column(c) = unalias(&p.expr[i]) else {
                        return Ok(Err(format!(
                            "not incremental: column \"{}\" is computed from aggregates",
                            plan.schema().field(next.len()).name()
                        )));
                    };
                    next.push(p.input.schema().index_of_column(c)?);
                }
                map = next;
                node = &p.input;
            }
            LogicalPlan::SubqueryAlias(a) => node = &a.input,
            LogicalPlan::Aggregate(a) => break a,
            _ => unreachable!("Shape::of checked the plan ends in an aggregate"),
        }
    };
    if aggregate
        .group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return Ok(Err("not incremental: GROUPING SETS, ROLLUP or CUBE".into()));
    }
    let keys = aggregate.group_expr.len();
    if let Some(k) = (0..keys).find(|k| !map.contains(k)) {
        return Ok(Err(format!(
            "not incremental: GROUP BY {} is not a column of the view",
            aggregate.group_expr[k].schema_name()
        )));
    }
    let agg_schema = Arc::clone(&aggregate.schema);
    let mut merges = Vec::with_capacity(width + 2);
    let mut state_exprs = vec![];
    let mut state_columns = vec![];
    for (i, &j) in map.iter().enumerate() {
        if j < keys {
            merges.push(Merge::Key);
            continue;
        }
        let Expr::AggregateFunction(f) = unalias(&aggregate.aggr_expr[j - keys]) else {
            return Ok(Err("not incremental: an aggregate expression".into()));
        };
        let name = f.func.name().to_owned();
        if f.params.distinct {
            return Ok(Err(format!(
                "not incremental: {name}(DISTINCT ...) cannot be merged"
            )));
        }
        if !f.params.order_by.is_empty() {
            return Ok(Err(format!(
                "not incremental: {name}(... ORDER BY ...) cannot be merged"
            )));
        }
        merges.push(match name.as_str() {
            "count" | "sum" => Merge::Sum,
            "min" => Merge::Min,
            "max" => Merge::Max,
            "avg" => {
                let output = agg_schema.field(j).data_type();
                if output != &DataType::Float64 {
                    return Ok(Err(format!(
                        "not incremental: avg() returning {output} cannot be merged"
                    )));
                }
                let column = plan.schema().field(i).name();
                let (sum_name, count_name) =
                    (format!("__dfmv_sum_{i}"), format!("__dfmv_count_{i}"));
                if plan
                    .schema()
                    .fields()
                    .iter()
                    .any(|f| f.name() == &sum_name || f.name() == &count_name)
                {
                    return Ok(Err(format!(
                        "not incremental: a column is named like the state kept for \"{column}\""
                    )));
                }
                for (udaf, state) in [(sum_udaf(), &sum_name), (count_udaf(), &count_name)] {
                    state_exprs.push(
                        Expr::AggregateFunction(AggregateFunction::new_udf(
                            udaf,
                            f.params.args.clone(),
                            false,
                            f.params.filter.clone(),
                            vec![],
                            f.params.null_treatment,
                        ))
                        .alias(state),
                    );
                    state_columns.push(state.clone());
                }
                Merge::Avg {
                    sum: width + state_columns.len() - 2,
                    count: width + state_columns.len() - 1,
                }
            }
            other => {
                return Ok(Err(format!("not incremental: {other}() cannot be merged")));
            }
        });
    }
    merges.extend(std::iter::repeat_n(Merge::Sum, state_columns.len()));
    let first_state = keys + aggregate.aggr_expr.len();
    let mut aggr_expr = aggregate.aggr_expr.clone();
    aggr_expr.extend(state_exprs);
    let with_state = LogicalPlan::Aggregate(Aggregate::try_new(
        Arc::clone(&aggregate.input),
        aggregate.group_expr.clone(),
        aggr_expr,
    )?);
    let schema = Arc::clone(with_state.schema());
    let column = |j: usize| Expr::Column(Column::from(schema.qualified_field(j)));
    let exprs: Vec<Expr> = map
        .iter()
        .enumerate()
        .map(|(i, &j)| column(j).alias(plan.schema().field(i).name()))
        .chain(
            state_columns
                .iter()
                .enumerate()
                .map(|(k, name)| column(first_state + k).alias(name)),
        )
        .collect();
    let plan = LogicalPlanBuilder::from(with_state)
        .project(exprs)?
        .build()?;
    Ok(Ok(Aggregation {
        plan,
        input: Arc::clone(&aggregate.input),
        merges,
        state_columns,
    }))
}

impl Aggregation {
    /// The plan that merges `delta` (this aggregate over new rows) into
    /// the groups stored in `current` (a scan of the snapshot, state
    /// columns included): the view's new content.
    fn merge(&self, current: Arc<dyn TableProvider>, delta: LogicalPlan) -> Result<LogicalPlan> {
        let stored = LogicalPlanBuilder::scan("__dfmv_current", provider_as_source(current), None)?
            .build()?;
        let both = LogicalPlanBuilder::from(stored).union(delta)?.build()?;
        let input = Arc::clone(both.schema());
        let column = |i: usize| Expr::Column(Column::from(input.qualified_field(i)));
        let key_count = self.merges.iter().filter(|m| **m == Merge::Key).count();
        let mut keys = vec![];
        let mut aggregates = vec![];
        // Where each column's merged value is in the aggregate's output:
        // the keys first, then the aggregates (none for avg, which is
        // computed from its state columns).
        let mut at = vec![None; self.merges.len()];
        for (i, merge) in self.merges.iter().enumerate() {
            let merged = match merge {
                Merge::Key => {
                    at[i] = Some(keys.len());
                    keys.push(column(i));
                    continue;
                }
                Merge::Sum => sum(column(i)),
                Merge::Min => min(column(i)),
                Merge::Max => max(column(i)),
                Merge::Avg { .. } => continue,
            };
            at[i] = Some(key_count + aggregates.len());
            aggregates.push(merged.alias(format!("__dfmv_merged_{i}")));
        }
        let merged = LogicalPlanBuilder::from(both)
            .aggregate(keys, aggregates)?
            .build()?;
        let out: DFSchemaRef = Arc::clone(merged.schema());
        let merged_column = |i: usize| -> Expr {
            let j = at[i].expect("every column but avg has a merged value");
            Expr::Column(Column::from(out.qualified_field(j)))
        };
        let target = self.plan.schema();
        let mut exprs = Vec::with_capacity(self.merges.len());
        for (i, merge) in self.merges.iter().enumerate() {
            let field = target.field(i);
            let value = match merge {
                Merge::Avg { sum, count } => {
                    cast(merged_column(*sum), DataType::Float64)
                        / cast(merged_column(*count), DataType::Float64)
                }
                _ => merged_column(i),
            };
            let value = if value.get_type(&out)? == *field.data_type() {
                value
            } else {
                cast(value, field.data_type().clone())
            };
            exprs.push(value.alias(field.name()));
        }
        Ok(LogicalPlanBuilder::from(merged).project(exprs)?.build()?)
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

/// The tables under `sources`, plain views expanded.
fn leaves<'a>(
    sources: &'a [SourceFingerprint],
    out: &mut BTreeMap<&'a QualifiedName, &'a Fingerprint>,
) {
    for source in sources {
        match &source.fingerprint {
            Fingerprint::View { sources, .. } => leaves(sources, out),
            fingerprint => {
                out.insert(&source.name, fingerprint);
            }
        }
    }
}

/// Every relation on the paths under `sources` (plain views, what they
/// read, and so on), with its definition digest or id.
fn definitions<'a>(
    sources: &'a [SourceFingerprint],
    out: &mut BTreeMap<&'a QualifiedName, Option<&'a str>>,
) {
    for source in sources {
        out.insert(&source.name, source.fingerprint.definition());
        if let Fingerprint::View { sources, .. } = &source.fingerprint {
            definitions(sources, out);
        }
    }
}

/// The one table a view reads (through plain views too), with its files,
/// when that table is file-backed and the view reads nothing else.
pub(crate) fn only_table(
    sources: &[SourceFingerprint],
) -> Option<(&QualifiedName, &[FileFingerprint])> {
    let mut tables = BTreeMap::new();
    leaves(sources, &mut tables);
    match tables.into_iter().collect::<Vec<_>>().as_slice() {
        [(name, Fingerprint::Files { files, .. })] => Some((*name, files.as_slice())),
        _ => None,
    }
}

/// Which one table changed between the fingerprints recorded with the
/// last snapshot and those of now, or why there is not exactly one
/// changed file-backed table.
pub(crate) fn changed_table<'a>(
    recorded: &'a [SourceFingerprint],
    now: &'a [SourceFingerprint],
    display: impl Fn(&QualifiedName) -> String,
) -> std::result::Result<Change<'a>, String> {
    // Computing only what changed is sound only over the same definitions:
    // a redefined relation anywhere on the path changes every row.
    let (mut then, mut current) = (BTreeMap::new(), BTreeMap::new());
    definitions(recorded, &mut then);
    definitions(now, &mut current);
    for (name, definition) in &current {
        match then.get(name) {
            Some(Some("")) => {
                return Err(format!(
                    "the definition of {} was not recorded at the last refresh",
                    display(name)
                ));
            }
            Some(recorded) if recorded != definition => {
                return Err(format!("{} was redefined", display(name)));
            }
            _ => {}
        }
    }
    let (mut then, mut current) = (BTreeMap::new(), BTreeMap::new());
    leaves(recorded, &mut then);
    leaves(now, &mut current);
    let changed: Vec<&QualifiedName> = current
        .iter()
        .filter(|(name, f)| then.get(*name) != Some(*f))
        .map(|(name, _)| *name)
        .chain(then.keys().filter(|n| !current.contains_key(*n)).copied())
        .collect();
    let name = match changed.as_slice() {
        [name] => *name,
        [] => return Err("its sources were replaced".into()),
        many => {
            let names: Vec<String> = many.iter().map(|n| display(n)).collect();
            return Err(format!("{} changed", names.join(" and ")));
        }
    };
    match (then.get(name), current.get(name)) {
        (
            Some(Fingerprint::Files { files: before, .. }),
            Some(Fingerprint::Files { files: after, .. }),
        ) => Ok(Change {
            name: name.clone(),
            before,
            after,
            only_source: current.len() == 1,
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
            only_source: current.len() == 1,
        }),
        (_, Some(Fingerprint::Snapshot { .. })) => Err(format!(
            "{} is a materialized view that was emptied or populated",
            display(name)
        )),
        _ => Err(format!("{} is not a file-backed table", display(name))),
    }
}

/// A table whose files can be read apart from the rest: a listing table,
/// or a materialized view (whose data files are immutable).
enum Files {
    Listing(ListingTable),
    View {
        catalog: Arc<Catalog>,
        snapshot: Snapshot,
        schema: datafusion::arrow::datatypes::SchemaRef,
    },
}

impl Files {
    fn of(
        provider: &Arc<dyn TableProvider>,
        name: &str,
        catalog: &Arc<Catalog>,
    ) -> std::result::Result<Files, String> {
        if let Some(view) =
            (provider.as_ref() as &dyn std::any::Any).downcast_ref::<MaterializedViewTable>()
        {
            let snapshot = view.snapshot().map_err(|_| format!("{name} has no data"))?;
            return Ok(Files::View {
                catalog: Arc::clone(catalog),
                snapshot,
                schema: view.schema(),
            });
        }
        listing_of(provider, name).map(Files::Listing)
    }

    /// A table of the same columns over only `paths`.
    fn only(&self, paths: &[String]) -> Result<Arc<dyn TableProvider>> {
        match self {
            Files::Listing(listing) => {
                let urls = paths
                    .iter()
                    .map(ListingTableUrl::parse)
                    .collect::<datafusion::error::Result<Vec<_>>>()?;
                let config = ListingTableConfig::new_with_multi_paths(urls)
                    .with_listing_options(listing.options().clone())
                    .with_schema(TableProvider::schema(listing));
                Ok(Arc::new(ListingTable::try_new(config)?))
            }
            Files::View {
                catalog,
                snapshot,
                schema,
            } => {
                let wanted: BTreeSet<&str> = paths.iter().map(String::as_str).collect();
                let files: Vec<DataFile> = snapshot
                    .files
                    .iter()
                    .filter(|f| wanted.contains(f.path.as_str()))
                    .cloned()
                    .collect();
                if files.len() != wanted.len() {
                    return Err(datafusion::error::DataFusionError::Plan(
                        "a materialized view changed while its dependent was planned".into(),
                    )
                    .into());
                }
                let only = Snapshot {
                    row_count: files.iter().map(|f| f.rows).sum(),
                    size_bytes: files.iter().map(|f| f.size).sum(),
                    files,
                    ..snapshot.clone()
                };
                Ok(Arc::new(SnapshotTable::new(
                    Arc::clone(catalog),
                    only,
                    Arc::clone(schema),
                )))
            }
        }
    }
}

/// `provider` as a listing table without partition columns (one whose
/// files can be read alone), or why not.
fn listing_of(
    provider: &Arc<dyn TableProvider>,
    name: &str,
) -> std::result::Result<ListingTable, String> {
    let listing = (provider.as_ref() as &dyn std::any::Any)
        .downcast_ref::<ListingTable>()
        .ok_or_else(|| format!("{name} is not a file-backed table"))?;
    if !listing.options().table_partition_cols.is_empty() {
        return Err(format!("{name} is partitioned"));
    }
    Ok(listing.clone())
}

/// Whether `scan` reads `provider`.
fn reads(scan: &TableScan, provider: &Arc<dyn TableProvider>) -> bool {
    source_as_provider(&scan.source)
        .map(|p| std::ptr::addr_eq(Arc::as_ptr(&p), Arc::as_ptr(provider)))
        .unwrap_or(false)
}

/// Whether `plan` reads `provider` anywhere, subqueries included.
fn reads_anywhere(plan: &LogicalPlan, provider: &Arc<dyn TableProvider>) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && reads(scan, provider)
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Checks that every output row of `plan` comes from exactly one row of
/// `provider` (combined with rows of unchanged tables): then `plan` over
/// new rows of `provider` gives exactly the new output rows. Returns
/// whether `plan` reads `provider` at all; `Err` says why not row-wise.
pub(crate) fn linear(
    plan: &LogicalPlan,
    provider: &Arc<dyn TableProvider>,
    name: &str,
) -> std::result::Result<bool, String> {
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
        return Err(format!("not incremental: a subquery reads {name}"));
    }
    match plan {
        LogicalPlan::TableScan(_) => Ok(true),
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Unnest(_) => {
            for input in plan.inputs() {
                linear(input, provider, name)?;
            }
            Ok(true)
        }
        LogicalPlan::Join(join) => {
            let left = linear(&join.left, provider, name)?;
            let right = linear(&join.right, provider, name)?;
            let allowed = match (left, right) {
                (true, true) => {
                    return Err(format!("not incremental: {name} is joined with itself"));
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
                Err(format!(
                    "not incremental: a {} join does not keep the rows of {name} one by one",
                    join.join_type.to_string().to_lowercase()
                ))
            }
        }
        node => {
            let text = node.display().to_string();
            let kind = text.split(':').next().unwrap_or(&text).trim();
            Err(format!("not incremental: {kind}"))
        }
    }
}

/// `plan` with every scan of `provider` reading only `paths` of it instead.
fn over_files(
    plan: &LogicalPlan,
    provider: &Arc<dyn TableProvider>,
    files: &Files,
    paths: &[String],
) -> Result<LogicalPlan> {
    let only = provider_as_source(files.only(paths)?);
    Ok(plan
        .clone()
        .transform_up(|node| match node {
            LogicalPlan::TableScan(scan) if reads(&scan, provider) => {
                Ok(Transformed::yes(LogicalPlan::TableScan(TableScan {
                    source: Arc::clone(&only),
                    ..scan
                })))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// Splits `files` (sorted by path) into at most [`LINEAGE_GROUPS`] runs of
/// consecutive files of about equal size.
fn groups(files: &[FileFingerprint]) -> Vec<Vec<String>> {
    let total: u64 = files.iter().map(|f| f.size.max(1)).sum();
    let target = total.div_ceil(LINEAGE_GROUPS as u64).max(1);
    let mut out: Vec<Vec<String>> = vec![];
    let mut size = 0;
    for file in files {
        if out.is_empty() || size >= target {
            out.push(vec![]);
            size = 0;
        }
        size += file.size.max(1);
        out.last_mut()
            .expect("pushed above")
            .push(file.path.clone());
    }
    out
}

/// What a full refresh of a view with this `plan` and `shape` writes.
/// `single`: the view's one source, when it is a table, with its files as
/// fingerprinted now; a row-wise view over it is written in groups of
/// those files, each with its lineage.
pub(crate) fn full(
    plan: LogicalPlan,
    shape: &Shape,
    single: Option<(&Arc<dyn TableProvider>, &QualifiedName, &[FileFingerprint])>,
) -> Result<Write> {
    match shape {
        Shape::Aggregate(aggregation) => {
            return Ok(Write {
                parts: vec![Part {
                    plan: aggregation.plan.clone(),
                    lineage: None,
                }],
                state_columns: aggregation.state_columns.clone(),
                ..Default::default()
            });
        }
        Shape::Rows => {
            if let Some((provider, name, files)) = single {
                let name = name.to_string();
                if let Ok(listing) = listing_of(provider, &name)
                    && linear(&plan, provider, &name) == Ok(true)
                {
                    let listing = Files::Listing(listing);
                    let parts = groups(files)
                        .into_iter()
                        .map(|group| {
                            Ok(Part {
                                plan: over_files(&plan, provider, &listing, &group)?,
                                lineage: Some(group),
                            })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    return Ok(Write {
                        parts,
                        ..Default::default()
                    });
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

/// Chooses how to bring a view up to date after `change` to the table
/// `provider` (named `source` in messages), given the view's planned query
/// and its current `snapshot`.
pub(crate) fn choose(
    plan: &LogicalPlan,
    shape: &Shape,
    snapshot: &Snapshot,
    change: &Change<'_>,
    source: &str,
    provider: &Arc<dyn TableProvider>,
    catalog: &Arc<Catalog>,
) -> Result<Strategy> {
    let readable = match Files::of(provider, source, catalog) {
        Ok(files) => files,
        Err(why) => return Ok(Strategy::Full(why)),
    };
    let before: BTreeMap<&str, &FileFingerprint> =
        change.before.iter().map(|f| (f.path.as_str(), f)).collect();
    let after: BTreeMap<&str, &FileFingerprint> =
        change.after.iter().map(|f| (f.path.as_str(), f)).collect();
    let changed: BTreeSet<&str> = before
        .iter()
        .filter(|(path, f)| after.get(*path) != Some(*f))
        .map(|(path, _)| *path)
        .collect();
    let added: Vec<&str> = after
        .keys()
        .filter(|p| !before.contains_key(*p))
        .copied()
        .collect();
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
    let what = format!("{source}: {}", what.join(", "));
    let size_of = |paths: &mut dyn Iterator<Item = &str>| -> u64 {
        paths.filter_map(|p| after.get(p)).map(|f| f.size).sum()
    };
    let total = size_of(&mut after.keys().copied());
    let too_large = |read: u64| total > 0 && read * 2 > total;

    match shape {
        Shape::Other(why) => Ok(Strategy::Full(why.clone())),
        Shape::Aggregate(aggregation) => {
            if let Err(why) = linear(&aggregation.input, provider, source) {
                return Ok(Strategy::Full(why));
            }
            if !changed.is_empty() {
                return Ok(Strategy::Full(format!(
                    "{what}; rows cannot be taken back out of an aggregate"
                )));
            }
            if snapshot.state_columns != aggregation.state_columns {
                return Ok(Strategy::Full(
                    "the current data holds no state to merge into".into(),
                ));
            }
            if added.is_empty() {
                return Ok(Strategy::Full(format!("{source} changed")));
            }
            let added_bytes = size_of(&mut added.iter().copied());
            if too_large(added_bytes) {
                return Ok(Strategy::Full(format!("{what}, more than half of it")));
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
                write: Write {
                    parts: vec![Part {
                        plan: aggregation.merge(current, delta)?,
                        lineage: None,
                    }],
                    keep: vec![],
                    state_columns: aggregation.state_columns.clone(),
                    input_bytes: change.only_source.then_some(read),
                },
                detail: format!("{what}; merged into the existing groups"),
            })
        }
        Shape::Rows => {
            if let Err(why) = linear(plan, provider, source) {
                return Ok(Strategy::Full(why));
            }
            if !changed.is_empty() {
                if !change.only_source {
                    return Ok(Strategy::Full(format!(
                        "{what}; lineage is kept only for views over one table"
                    )));
                }
                if snapshot.files.iter().any(|f| f.lineage.is_none()) {
                    return Ok(Strategy::Full(format!(
                        "{what}; the current data has no lineage"
                    )));
                }
            }
            // Evict what was computed from changed files; read again
            // what those data files also covered, and the new files.
            let (evicted, keep): (Vec<&DataFile>, Vec<&DataFile>) =
                snapshot.files.iter().partition(|f| {
                    f.lineage
                        .as_ref()
                        .is_some_and(|l| l.iter().any(|p| changed.contains(p.as_str())))
                });
            let read: BTreeSet<&str> = evicted
                .iter()
                .flat_map(|f| f.lineage.iter().flatten().map(String::as_str))
                .chain(changed.iter().copied())
                .filter(|p| after.contains_key(p))
                .chain(added.iter().copied())
                .collect();
            let read_bytes = size_of(&mut read.iter().copied());
            if too_large(read_bytes) {
                return Ok(Strategy::Full(format!(
                    "{what}; recomputing would read more than half of it"
                )));
            }
            let read: Vec<String> = read.into_iter().map(str::to_owned).collect();
            let parts = if read.is_empty() {
                vec![]
            } else {
                vec![Part {
                    plan: over_files(plan, provider, &readable, &read)?,
                    lineage: change.only_source.then(|| read.clone()),
                }]
            };
            let evicted_rows: u64 = evicted.iter().map(|f| f.rows).sum();
            let detail = if evicted.is_empty() {
                format!("{what}; read the new files alone")
            } else {
                format!(
                    "{what}; evicted {} data file(s) ({evicted_rows} rows), read {} source file(s)",
                    evicted.len(),
                    read.len()
                )
            };
            Ok(Strategy::Incremental {
                write: Write {
                    parts,
                    keep: keep.into_iter().cloned().collect(),
                    state_columns: vec![],
                    input_bytes: change.only_source.then_some(read_bytes),
                },
                detail,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{CsvReadOptions, SessionContext};

    /// A session with CSV tables `t (a, b)` and `d (a, c)`.
    async fn session() -> (tempfile::TempDir, SessionContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = SessionContext::new();
        for (name, header) in [("t", "a,b"), ("d", "a,c")] {
            let path = dir.path().join(format!("{name}.csv"));
            std::fs::write(&path, format!("{header}\n1,x\n2,y\n")).unwrap();
            ctx.register_csv(name, path.to_str().unwrap(), CsvReadOptions::new())
                .await
                .unwrap();
        }
        (dir, ctx)
    }

    async fn plan(ctx: &SessionContext, sql: &str) -> LogicalPlan {
        ctx.state().create_logical_plan(sql).await.unwrap()
    }

    #[tokio::test]
    async fn row_wise_in_the_changed_table() {
        let (_dir, ctx) = session().await;
        let t = ctx.table_provider("t").await.unwrap();
        let cases: &[(&str, std::result::Result<bool, &str>)] = &[
            ("SELECT a, upper(b) FROM t WHERE a > 1", Ok(true)),
            ("SELECT unnest(make_array(a, a)) FROM t", Ok(true)),
            ("SELECT t.a, d.c FROM t JOIN d ON t.a = d.a", Ok(true)),
            ("SELECT t.a FROM t LEFT JOIN d ON t.a = d.a", Ok(true)),
            (
                "SELECT d.a FROM d LEFT SEMI JOIN t ON t.a = d.a",
                Err("not incremental: a leftsemi join does not keep the rows of t one by one"),
            ),
            (
                "SELECT t.a FROM d LEFT JOIN t ON t.a = d.a",
                Err("not incremental: a left join does not keep the rows of t one by one"),
            ),
            (
                "SELECT x.a FROM t x JOIN t y ON x.a = y.a",
                Err("not incremental: t is joined with itself"),
            ),
            ("SELECT a FROM t ORDER BY a", Err("not incremental: Sort")),
            ("SELECT DISTINCT a FROM t", Err("not incremental: Distinct")),
            (
                "SELECT a FROM d WHERE a IN (SELECT a FROM t)",
                Err("not incremental: a subquery reads t"),
            ),
            // An unchanged table may be read in any shape.
            (
                "SELECT a FROM d WHERE a IN (SELECT max(a) FROM d)",
                Ok(false),
            ),
        ];
        for (sql, expected) in cases {
            let got = linear(&plan(&ctx, sql).await, &t, "t");
            assert_eq!(got, expected.map_err(str::to_owned), "{sql}");
        }
    }

    #[tokio::test]
    async fn which_aggregates_merge() {
        let (_dir, ctx) = session().await;
        let shape = |sql: &'static str| {
            let ctx = &ctx;
            async move { Shape::of(&plan(ctx, sql).await) }
        };
        match shape("SELECT b, count(*) AS n, min(a), avg(a) AS m FROM t GROUP BY b").await {
            Shape::Aggregate(a) => {
                assert_eq!(a.state_columns, ["__dfmv_sum_3", "__dfmv_count_3"]);
                assert_eq!(
                    a.merges,
                    [
                        Merge::Key,
                        Merge::Sum,
                        Merge::Min,
                        Merge::Avg { sum: 4, count: 5 },
                        Merge::Sum,
                        Merge::Sum
                    ]
                );
                let names: Vec<&String> =
                    a.plan.schema().fields().iter().map(|f| f.name()).collect();
                assert_eq!(
                    names,
                    ["b", "n", "min(t.a)", "m", "__dfmv_sum_3", "__dfmv_count_3"]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(shape("SELECT a FROM t").await, Shape::Rows));
        for (sql, why) in [
            (
                "SELECT b, count(DISTINCT a) FROM t GROUP BY b",
                "not incremental: count(DISTINCT ...) cannot be merged",
            ),
            (
                "SELECT count(*) + 1 AS n FROM t",
                "not incremental: column \"n\" is computed from aggregates",
            ),
            (
                "SELECT count(*) AS n FROM t GROUP BY b",
                "not incremental: GROUP BY t.b is not a column of the view",
            ),
            (
                "SELECT b, median(a) FROM t GROUP BY b",
                "not incremental: median() cannot be merged",
            ),
        ] {
            match shape(sql).await {
                Shape::Other(reason) => assert_eq!(reason, why, "{sql}"),
                other => panic!("{sql}: {other:?}"),
            }
        }
    }

    fn file(path: &str, size: u64) -> FileFingerprint {
        FileFingerprint {
            path: path.into(),
            size,
            version: "1".into(),
        }
    }

    #[test]
    fn groups_are_consecutive_and_balanced() {
        let files: Vec<_> = (0..100).map(|i| file(&format!("f{i:03}"), 10)).collect();
        let g = groups(&files);
        assert!((LINEAGE_GROUPS / 2..=LINEAGE_GROUPS).contains(&g.len()));
        assert_eq!(g.iter().map(Vec::len).sum::<usize>(), 100);
        let flat: Vec<&String> = g.iter().flatten().collect();
        assert!(flat.windows(2).all(|w| w[0] < w[1]));
        assert!(groups(&[]).is_empty());
        // One huge file does not drag the rest with it.
        let skewed = [file("a", 1000), file("b", 1), file("c", 1)];
        assert_eq!(groups(&skewed), [vec!["a"], vec!["b", "c"]]);
    }

    fn source(name: &str, fingerprint: Fingerprint) -> SourceFingerprint {
        SourceFingerprint {
            name: QualifiedName::new("datafusion", "public", name),
            fingerprint,
        }
    }

    #[test]
    fn the_one_changed_table_is_found_through_plain_views() {
        let files = |n: usize| Fingerprint::Files {
            files: (0..n).map(|i| file(&format!("f{i}"), 1)).collect(),
            definition: "csv".into(),
        };
        let then = [
            source("dim", files(1)),
            source(
                "v",
                Fingerprint::View {
                    sources: vec![source("t", files(2))],
                    definition: "select".into(),
                },
            ),
        ];
        let now = [
            source("dim", files(1)),
            source(
                "v",
                Fingerprint::View {
                    sources: vec![source("t", files(3))],
                    definition: "select".into(),
                },
            ),
        ];
        let show = |n: &QualifiedName| n.name.clone();
        // Two tables: no one table to write in groups of its files.
        assert!(only_table(&now).is_none());
        let (name, t_files) = only_table(&now[1..]).unwrap();
        assert_eq!((name.name.as_str(), t_files.len()), ("t", 3));
        let change = changed_table(&then, &now, show).unwrap();
        assert_eq!(change.name.name, "t");
        assert_eq!((change.before.len(), change.after.len()), (2, 3));
        assert!(!change.only_source);

        let both = [source("dim", files(2)), now[1].clone()];
        assert_eq!(
            changed_table(&then, &both, show).unwrap_err(),
            "dim and t changed"
        );
        // A materialized view: its data files are what changed.
        let refreshed = [source(
            "m",
            Fingerprint::Snapshot {
                definition: "m1".into(),
                id: Some("b".into()),
                files: vec![file("m/a/1", 1), file("m/b/2", 1)],
            },
        )];
        let before = [source(
            "m",
            Fingerprint::Snapshot {
                definition: "m1".into(),
                id: Some("a".into()),
                files: vec![file("m/a/1", 1)],
            },
        )];
        let change = changed_table(&before, &refreshed, show).unwrap();
        assert_eq!((change.before.len(), change.after.len()), (1, 2));
        assert!(change.only_source);
        let emptied = [source(
            "m",
            Fingerprint::Snapshot {
                definition: "m1".into(),
                id: None,
                files: vec![],
            },
        )];
        assert_eq!(
            changed_table(&before, &emptied, show).unwrap_err(),
            "m is a materialized view that was emptied or populated"
        );
    }

    #[test]
    fn no_incremental_refresh_across_a_redefinition() {
        let show = |n: &QualifiedName| n.name.clone();
        let table = |files: usize, definition: &str| Fingerprint::Files {
            files: (0..files).map(|i| file(&format!("f{i}"), 1)).collect(),
            definition: definition.into(),
        };
        let view = |t: Fingerprint, definition: &str| {
            vec![source(
                "v",
                Fingerprint::View {
                    sources: vec![source("t", t)],
                    definition: definition.into(),
                },
            )]
        };
        let then = view(table(2, "csv"), "select a");
        // Appended under the same definitions: incremental is possible.
        assert!(changed_table(&then, &view(table(3, "csv"), "select a"), show).is_ok());
        // The plain view was redefined, even with the same table files.
        assert_eq!(
            changed_table(&then, &view(table(3, "csv"), "select b"), show).unwrap_err(),
            "v was redefined"
        );
        // The table was re-created with other options over the same files.
        assert_eq!(
            changed_table(&then, &view(table(3, "csv;"), "select a"), show).unwrap_err(),
            "t was redefined"
        );
        // Recorded before definitions were: never assumed unchanged.
        assert_eq!(
            changed_table(&view(table(2, ""), "select a"), &then, show).unwrap_err(),
            "the definition of t was not recorded at the last refresh"
        );
    }
}
