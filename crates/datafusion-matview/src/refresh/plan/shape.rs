//! The shape of a view's query as refresh sees it: row-wise, or an
//! aggregate whose outputs can be merged (and how).

use super::*;
use datafusion::common::TableReference;
use datafusion::common::tree_node::TreeNode;

/// The shape of a view's query, as far as refreshing it is concerned.
#[derive(Debug)]
pub(crate) enum Shape {
    /// Not an aggregate at its top; whether it is row-wise in a changed
    /// table is checked per change (see [`linear`]).
    Rows,
    /// An aggregate whose outputs can be merged.
    Aggregate(Box<Aggregation>),
    /// Never incremental, for this reason.
    Other(NotIncremental),
}

/// How one output column of a mergeable aggregate is merged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Merge {
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
///
/// Most such views output the aggregate's keys and values as they are:
/// then `plan` is the view's query returning the state columns after its
/// own, and pieces of it merge into the view's data directly. A view that
/// computes over its aggregates — `HAVING`, expressions of aggregates
/// (`sum(a) / count(*)`), keys it does not output — has a [`Post`]: then
/// `plan` returns the aggregate's own columns (named `__dfmv_p<j>`) and
/// state, which only its partial aggregates hold, and the view's data is
/// `post` applied to their merge.
#[derive(Debug, Clone)]
pub(crate) struct Aggregation {
    /// What one piece of the view computes (see above).
    pub plan: LogicalPlan,
    /// The aggregate's input.
    pub(super) input: Arc<LogicalPlan>,
    /// Per column of `plan`.
    pub(super) merges: Vec<Merge>,
    /// Names of the state columns the view's data files hold after its
    /// own (none with a [`Post`]: its state is in its partials alone).
    pub state_columns: Vec<String>,
    /// What the view computes over the merged aggregate, if anything.
    pub(super) post: Option<Post>,
}

/// The part of a view's query above its (lowest) aggregate that is more
/// than a choice of columns: filters (`HAVING`), computed columns,
/// aliases, aggregates over it (`count(DISTINCT x)` split into two). It
/// is applied to the merge of all partial aggregates, which equals the
/// aggregate over all the rows, never to a piece.
#[derive(Debug, Clone)]
pub(super) struct Post {
    /// The nodes above the aggregate, top first.
    chain: Vec<LogicalPlan>,
    /// The aggregate's output columns, which `chain` reads, by qualifier
    /// and name.
    fields: Vec<(Option<TableReference>, String)>,
}

impl Post {
    /// `chain` over `merged`, whose first columns are the aggregate's, in
    /// order (state columns may follow).
    fn apply(&self, merged: LogicalPlan) -> Result<LogicalPlan> {
        let schema = Arc::clone(merged.schema());
        let exprs: Vec<Expr> = self
            .fields
            .iter()
            .enumerate()
            .map(|(j, (qualifier, name))| {
                Expr::Column(Column::from(schema.qualified_field(j)))
                    .alias_qualified(qualifier.clone(), name)
            })
            .collect();
        let mut plan = LogicalPlanBuilder::from(merged).project(exprs)?.build()?;
        for node in self.chain.iter().rev() {
            plan = node.with_new_exprs(node.expressions(), vec![plan])?;
        }
        Ok(plan)
    }
}

impl Aggregation {
    /// Whether the view computes over its aggregate (see [`Post`]): its
    /// data can then only be made from partial aggregates.
    pub(super) fn computes_over_aggregate(&self) -> bool {
        self.post.is_some()
    }
}

impl Shape {
    /// The shape of `plan`, a view's planned query (its columns renamed).
    /// `SELECT DISTINCT` is the aggregate that groups by every column and
    /// computes nothing, and is analysed as that.
    pub(crate) fn of(plan: &LogicalPlan) -> Shape {
        // Down through projections and aliases to the aggregate, if any.
        let mut node = plan;
        loop {
            match node {
                LogicalPlan::Projection(p) => node = &p.input,
                LogicalPlan::SubqueryAlias(a) => node = &a.input,
                // HAVING, or a WHERE over a subquery that aggregates.
                LogicalPlan::Filter(f) => node = &f.input,
                LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(Distinct::All(_)) => break,
                _ => return Shape::Rows,
            }
        }
        let plan = match distinct_as_aggregate(plan).and_then(single_distinct_as_group_by) {
            Ok(plan) => plan,
            Err(e) => return Shape::Other(NotIncremental::Planning(e.to_string())),
        };
        match aggregation(&plan) {
            Ok(Ok(aggregation)) => Shape::Aggregate(Box::new(aggregation)),
            Ok(Err(why)) => Shape::Other(why),
            // Planning the state columns failed: refresh it fully.
            Err(e) => Shape::Other(NotIncremental::Planning(e.to_string())),
        }
    }
}

/// `plan` with its top `SELECT DISTINCT` (under projections and aliases)
/// replaced by the aggregate that groups by all its columns: the same rows,
/// in a shape [`aggregation`] can merge.
fn distinct_as_aggregate(plan: &LogicalPlan) -> Result<LogicalPlan> {
    let rewritten = plan.clone().transform_down(|node| match node {
        LogicalPlan::Distinct(Distinct::All(input)) => {
            let keys: Vec<Expr> = input
                .schema()
                .columns()
                .into_iter()
                .map(Expr::Column)
                .collect();
            let aggregate = LogicalPlanBuilder::from(input).aggregate(keys, Vec::<Expr>::new())?;
            Ok(Transformed::new(
                aggregate.build()?,
                true,
                TreeNodeRecursion::Stop,
            ))
        }
        LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) | LogicalPlan::Filter(_) => {
            Ok(Transformed::no(node))
        }
        // Below the top: left as it is.
        other => Ok(Transformed::new(other, false, TreeNodeRecursion::Jump)),
    })?;
    // The projections above were planned against the DISTINCT's schema,
    // which the aggregate's equals; rebuild them so they own the new input.
    Ok(rewritten.data.recompute_schema()?)
}

/// `plan` with each aggregate whose `DISTINCT` aggregates all read one
/// expression (`count(DISTINCT x)`, beside `sum`, `min`, `max`) split, as
/// DataFusion's optimizer does, into an aggregate grouped by that
/// expression too and one over it: the lower one merges (it keeps each
/// key's distinct values), and the upper one is computed over the merge.
fn single_distinct_as_group_by(plan: LogicalPlan) -> Result<LogicalPlan> {
    use datafusion::optimizer::single_distinct_to_groupby::SingleDistinctToGroupBy;
    use datafusion::optimizer::{OptimizerContext, OptimizerRule};
    let rule = SingleDistinctToGroupBy::new();
    let context = OptimizerContext::new();
    Ok(plan
        .transform_down(|node| rule.rewrite(node, &context))?
        .data)
}

pub(super) fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}

/// Where each output column of `plan` is in the output of the aggregate
/// at the end of `chain` (the nodes above it, top first), when they only
/// choose and rename columns; `None` when they compute or filter.
fn chosen_columns(plan: &LogicalPlan, chain: &[&LogicalPlan]) -> Result<Option<Vec<usize>>> {
    let mut map: Vec<usize> = (0..plan.schema().fields().len()).collect();
    for node in chain {
        match node {
            LogicalPlan::Projection(p) => {
                let mut next = Vec::with_capacity(map.len());
                for &i in &map {
                    let Expr::Column(c) = unalias(&p.expr[i]) else {
                        return Ok(None);
                    };
                    next.push(p.input.schema().index_of_column(c)?);
                }
                map = next;
            }
            LogicalPlan::SubqueryAlias(_) => {}
            _ => return Ok(None),
        }
    }
    Ok(Some(map))
}

/// Analyses a plan known to end in projections, filters and aliases over
/// an aggregate.
pub(super) fn aggregation(
    plan: &LogicalPlan,
) -> Result<std::result::Result<Aggregation, NotIncremental>> {
    // Down to the lowest aggregate under projections, filters, aliases and
    // other aggregates: the one pieces compute; the nodes above it (an
    // aggregate over it too) are computed over its merge.
    let mut above = vec![];
    let mut node = plan;
    let mut lowest = None;
    loop {
        match node {
            LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) | LogicalPlan::Filter(_) => {
            }
            LogicalPlan::Aggregate(_) => lowest = Some(above.len()),
            _ => break,
        }
        above.push(node);
        node = node.inputs()[0];
    }
    // Shape::of found an aggregate under the top's projections, filters
    // and aliases; its rewrites keep one there.
    let (at, aggregate) = match lowest.map(|at| (at, above[at])) {
        Some((at, LogicalPlan::Aggregate(aggregate))) => (at, aggregate),
        _ => {
            return Ok(Err(NotIncremental::Planning(
                "no aggregate under the query's projections".into(),
            )));
        }
    };
    let chain: Vec<&LogicalPlan> = above[..at].to_vec();
    if aggregate
        .group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return Ok(Err(NotIncremental::GroupingSets));
    }
    let keys = aggregate.group_expr.len();
    let agg_schema = Arc::clone(&aggregate.schema);
    // The view's columns are the aggregate's own (keys all there): plain.
    // Otherwise a post part computes the view from all of them.
    let (map, post) = match chosen_columns(plan, &chain)? {
        Some(map) if (0..keys).all(|k| map.contains(&k)) => (map, None),
        _ => {
            let mut subquery = false;
            for node in &chain {
                node.apply_subqueries(|_| {
                    subquery = true;
                    Ok(TreeNodeRecursion::Stop)
                })?;
            }
            if subquery {
                return Ok(Err(NotIncremental::SubqueryOverAggregate));
            }
            // An aggregate above is computed again over the merge; one of
            // grouping sets is not rebuilt from its expressions.
            if chain.iter().any(|node| {
                matches!(node, LogicalPlan::Aggregate(a)
                    if a.group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))))
            }) {
                return Ok(Err(NotIncremental::GroupingSets));
            }
            let fields = agg_schema
                .iter()
                .map(|(qualifier, field)| (qualifier.cloned(), field.name().clone()))
                .collect();
            let post = Post {
                chain: chain.iter().map(|n| (*n).clone()).collect(),
                fields,
            };
            ((0..agg_schema.fields().len()).collect(), Some(post))
        }
    };
    let width = map.len();
    // The name of output column `i` of one piece.
    let name_of = |i: usize| -> String {
        match post {
            None => plan.schema().field(i).name().clone(),
            Some(_) => format!("__dfmv_p{i}"),
        }
    };
    let mut merges = Vec::with_capacity(width + 2);
    let mut state_exprs = vec![];
    let mut state_columns = vec![];
    for (i, &j) in map.iter().enumerate() {
        if j < keys {
            merges.push(Merge::Key);
            continue;
        }
        let Expr::AggregateFunction(f) = unalias(&aggregate.aggr_expr[j - keys]) else {
            return Ok(Err(NotIncremental::AggregateExpression));
        };
        let name = f.func.name().to_owned();
        if f.params.distinct {
            return Ok(Err(NotIncremental::Distinct { function: name }));
        }
        if !f.params.order_by.is_empty() {
            return Ok(Err(NotIncremental::Ordered { function: name }));
        }
        merges.push(match name.as_str() {
            "count" | "sum" => Merge::Sum,
            "min" => Merge::Min,
            "max" => Merge::Max,
            "avg" => {
                let output = agg_schema.field(j).data_type();
                if output != &DataType::Float64 {
                    return Ok(Err(NotIncremental::AvgOfType {
                        output: output.to_string(),
                    }));
                }
                let (sum_name, count_name) =
                    (format!("__dfmv_sum_{i}"), format!("__dfmv_count_{i}"));
                // With a post part, every column of a piece is named here.
                if post.is_none()
                    && plan
                        .schema()
                        .fields()
                        .iter()
                        .any(|f| f.name() == &sum_name || f.name() == &count_name)
                {
                    return Ok(Err(NotIncremental::StateNameTaken {
                        column: plan.schema().field(i).name().clone(),
                    }));
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
                return Ok(Err(NotIncremental::CannotMerge {
                    function: other.to_owned(),
                }));
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
        .map(|(i, &j)| column(j).alias(name_of(i)))
        .chain(
            state_columns
                .iter()
                .enumerate()
                .map(|(k, name)| column(first_state + k).alias(name)),
        )
        .collect();
    let pieces = LogicalPlanBuilder::from(with_state)
        .project(exprs)?
        .build()?;
    Ok(Ok(Aggregation {
        plan: pieces,
        input: Arc::clone(&aggregate.input),
        merges,
        // With a post part the view's data holds no state.
        state_columns: if post.is_some() {
            vec![]
        } else {
            state_columns
        },
        post,
    }))
}

impl Aggregation {
    /// The plan that merges `delta` (this aggregate over new rows) into
    /// the groups stored in `current` (a scan of the snapshot, state
    /// columns included): the view's new content.
    pub(super) fn merge(
        &self,
        current: Arc<dyn TableProvider>,
        delta: LogicalPlan,
    ) -> Result<LogicalPlan> {
        let stored = LogicalPlanBuilder::scan("__dfmv_current", provider_as_source(current), None)?
            .build()?;
        let both = LogicalPlanBuilder::from(stored).union(delta)?.build()?;
        self.merge_rows(both)
    }

    /// The plan that merges the partial aggregates `partials` holds (the
    /// view's columns and state columns, per group of source files) into
    /// the view's content: the same merge as [`Aggregation::merge`].
    pub(super) fn merge_partials(&self, partials: Arc<dyn TableProvider>) -> Result<LogicalPlan> {
        let scan = LogicalPlanBuilder::scan("__dfmv_partials", provider_as_source(partials), None)?
            .build()?;
        self.merge_rows(scan)
    }

    /// Groups `both` (rows of the columns of `plan`, one per group and
    /// piece) by the keys and merges each column; with a post part, then
    /// applies it.
    pub(super) fn merge_rows(&self, both: LogicalPlan) -> Result<LogicalPlan> {
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
        let merged = LogicalPlanBuilder::from(merged).project(exprs)?.build()?;
        match &self.post {
            Some(post) => post.apply(merged),
            None => Ok(merged),
        }
    }
}
