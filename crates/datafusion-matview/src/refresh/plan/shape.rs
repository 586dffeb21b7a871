//! The shape of a view's query as refresh sees it: row-wise, or an
//! aggregate whose outputs can be merged (and how).

use super::*;
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
#[derive(Debug, Clone)]
pub(crate) struct Aggregation {
    /// The view's query, also returning the state columns after its own.
    pub plan: LogicalPlan,
    /// The aggregate's input.
    pub(super) input: Arc<LogicalPlan>,
    /// Per column of `plan`.
    pub(super) merges: Vec<Merge>,
    /// Names of the state columns.
    pub state_columns: Vec<String>,
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
                LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(Distinct::All(_)) => break,
                _ => return Shape::Rows,
            }
        }
        let plan = match distinct_as_aggregate(plan) {
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
        LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => Ok(Transformed::no(node)),
        // Below the top: left as it is.
        other => Ok(Transformed::new(other, false, TreeNodeRecursion::Jump)),
    })?;
    // The projections above were planned against the DISTINCT's schema,
    // which the aggregate's equals; rebuild them so they own the new input.
    Ok(rewritten.data.recompute_schema()?)
}

pub(super) fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}

/// Analyses a plan known to end in projections over an aggregate.
pub(super) fn aggregation(
    plan: &LogicalPlan,
) -> Result<std::result::Result<Aggregation, NotIncremental>> {
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
                        return Ok(Err(NotIncremental::ComputedFromAggregates {
                            column: plan.schema().field(next.len()).name().clone(),
                        }));
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
        return Ok(Err(NotIncremental::GroupingSets));
    }
    let keys = aggregate.group_expr.len();
    if let Some(k) = (0..keys).find(|k| !map.contains(k)) {
        return Ok(Err(NotIncremental::KeyNotOutput {
            key: aggregate.group_expr[k].schema_name().to_string(),
        }));
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
                let column = plan.schema().field(i).name();
                let (sum_name, count_name) =
                    (format!("__dfmv_sum_{i}"), format!("__dfmv_count_{i}"));
                if plan
                    .schema()
                    .fields()
                    .iter()
                    .any(|f| f.name() == &sum_name || f.name() == &count_name)
                {
                    return Ok(Err(NotIncremental::StateNameTaken {
                        column: column.clone(),
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

    /// Groups `both` (rows of the view's columns and state columns, one
    /// per group and piece) by the keys and merges each column.
    fn merge_rows(&self, both: LogicalPlan) -> Result<LogicalPlan> {
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
