//! Answering queries from materialized views: a block of a query (the
//! relations it reads, joined and filtered, maybe grouped) is replaced by a
//! scan of a view that provably holds the same rows, filtered further
//! and, when the view groups more finely, aggregated again.
//!
//! The matching follows Goldstein and Larson (SIGMOD 2001): the query and
//! the view read the same relations; the query's predicates imply the
//! view's (equivalence classes, ranges, and the residue compared by its
//! text), and the predicates that select the query's rows from the view's
//! are computable from the view's columns; so is every output column. For
//! a grouped view, those predicates may use only its grouping columns,
//! and the query's aggregates roll up from the view's: `sum` of `sum`,
//! `sum` of `count`, `min` of `min`, `max` of `max`, `avg` from a `sum`
//! and a `count`.
//!
//! Which views may be used is the session's business
//! ([`crate::session::MatviewSession`] checks each candidate's freshness
//! first): this module only matches and builds plans.

pub(crate) mod config;
pub(crate) mod normal;
pub(crate) mod predicates;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::display::{PlanType, StringifiedPlan};
use datafusion::common::format::ExplainFormat;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, TableReference};
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Expr, ExprSchemable, Extension, LogicalPlan, LogicalPlanBuilder, TableSource,
    UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::explain::ExplainExec;

pub use config::{MatviewConfig, RewriteMode};
use normal::Block;
use predicates::Predicates;

/// What a view's definition computes, in the form matching compares.
#[derive(Debug)]
pub(crate) struct Shape {
    pub block: Block,
    pub predicates: Predicates,
}

impl Shape {
    /// The shape of the definition plan `definition` (analyzed), names
    /// read under `defaults`.
    pub fn of(
        definition: &LogicalPlan,
        defaults: (&str, &str),
        views: &normal::ViewDefaults,
    ) -> Result<Shape, String> {
        let block = normal::block(definition, defaults, views)?;
        let predicates = Predicates::new(&block.predicates);
        Ok(Shape { block, predicates })
    }
}

/// Why a fresh view may be used, as `EXPLAIN` shows it.
pub(crate) const FRESH: &str = "fresh";

/// A view the rewrite may use, and what the session found of it.
pub(crate) struct Candidate {
    /// The view's name as messages show it.
    pub display: String,
    /// What its definition computes.
    pub shape: Arc<Shape>,
    /// The relation to scan: the view held at the state checked.
    pub source: Arc<dyn TableSource>,
    /// The name the scan is qualified with.
    pub reference: TableReference,
    /// Its rows (smaller views are preferred).
    pub rows: u64,
    /// `Ok(why it may be used)` (`fresh`, or how stale it is) or why not;
    /// `None` until checked. An unchecked view is taken to be fresh: the
    /// session checks each one a pass used, and passes again unless all
    /// were (see [`Report::unchecked`]).
    pub usable: Option<Result<String, String>>,
    /// When the view is stale by a change an incremental refresh follows:
    /// its data as of now (the view's columns), computed from its stored
    /// data and the changed source files, read instead of its scan. A
    /// grouped view's may hold several rows per group (see
    /// [`crate::refresh::plan::Write::pieces`]).
    pub data: Option<LogicalPlan>,
    /// Whether `data` is one row per group, as the view's own data: a
    /// grouped view merged with appended files, or a view that filters or
    /// computes over its aggregate (`HAVING`), which merges its partials
    /// and applies the rest, as its refresh does.
    pub data_merged: bool,
}

/// What one pass of the rewrite did.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// `view (why)` for each replacement.
    pub used: Vec<String>,
    /// `view: why not` for each view that did not replace a block it was
    /// tried on.
    pub rejected: Vec<String>,
    /// Views the pass used without knowing whether they are usable (as
    /// if fresh), by index.
    pub unchecked: Vec<usize>,
}

/// Replaces blocks of `plan` (analyzed) with scans of the usable
/// `candidates`, largest blocks first. Reads names under `defaults`.
pub(crate) fn rewrite(
    plan: LogicalPlan,
    candidates: &[Candidate],
    defaults: (&str, &str),
    views: &normal::ViewDefaults,
) -> datafusion::error::Result<(LogicalPlan, Report)> {
    let mut report = Report::default();
    let rewritten = plan.transform_down_with_subqueries(|node| {
        let query = match &node {
            // A grouped block ends at its aggregate, or at the filter of
            // its groups (HAVING) over it.
            LogicalPlan::Aggregate(_)
            | LogicalPlan::Projection(_)
            | LogicalPlan::Distinct(_)
            | LogicalPlan::Filter(_) => match normal::block(&node, defaults, views) {
                Ok(block)
                    if match &node {
                        LogicalPlan::Filter(_) => block.group.is_some() && !block.having.is_empty(),
                        LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(_) => true,
                        _ => block.group.is_none(),
                    } =>
                {
                    block
                }
                _ => return Ok(Transformed::no(node)),
            },
            _ => return Ok(Transformed::no(node)),
        };
        let predicates = Predicates::new(&query.predicates);
        let mut best: Option<(bool, u64, LogicalPlan, String, Option<usize>)> = None;
        for (i, candidate) in candidates.iter().enumerate() {
            // A query that filters its groups is matched with a view that
            // filters them alike; any other view is tried on the aggregate
            // below the filter, which this pass comes to next.
            if candidate.shape.block.tables != query.tables
                || (!query.having.is_empty() && candidate.shape.block.having.is_empty())
            {
                continue;
            }
            // The shape must match, then the view be usable.
            let found =
                replace(&node, &query, &predicates, candidate).and_then(|(exact, replacement)| {
                    match &candidate.usable {
                        Some(Ok(why)) => Ok((exact, replacement, why.as_str())),
                        Some(Err(why)) => Err(why.clone()),
                        None => Ok((exact, replacement, FRESH)),
                    }
                });
            let (exact, replacement, why) = match found {
                Ok(found) => found,
                Err(why) => {
                    report
                        .rejected
                        .push(format!("{}: {why}", candidate.display));
                    continue;
                }
            };
            let better = match &best {
                None => true,
                Some((best_exact, best_rows, ..)) => {
                    (exact, std::cmp::Reverse(candidate.rows))
                        > (*best_exact, std::cmp::Reverse(*best_rows))
                }
            };
            if better {
                best = Some((
                    exact,
                    candidate.rows,
                    replacement,
                    format!("{} ({why})", candidate.display),
                    candidate.usable.is_none().then_some(i),
                ));
            }
        }
        Ok(match best {
            Some((_, _, replacement, why, unchecked)) => {
                report.unchecked.extend(unchecked);
                report.used.push(why.clone());
                let node = MatviewRewrite::mark(why, replacement);
                Transformed::new(node, true, TreeNodeRecursion::Jump)
            }
            None => Transformed::no(node),
        })
    })?;
    let plan = if rewritten.transformed {
        rewritten
            .data
            .transform_up_with_subqueries(|node| node.recompute_schema().map(Transformed::yes))?
            .data
    } else {
        rewritten.data
    };
    Ok((plan, report))
}

/// How one output of the replacement is finished from the aggregate
/// built over the view: by the index of that aggregate's output.
enum Finish {
    Column(usize),
    /// `coalesce(x, 0)`: a count rolled up, which an empty input leaves null.
    Count(usize),
    /// `sum / count`, as `Float64`.
    Average(usize, usize),
}

/// The plan that computes `root`'s rows from `view`, and whether it reads
/// the view's rows as they are (no aggregate again); or why it cannot.
fn replace(
    root: &LogicalPlan,
    query: &Block,
    predicates: &Predicates,
    view: &Candidate,
) -> Result<(bool, LogicalPlan), String> {
    let error = |e: datafusion::error::DataFusionError| e.to_string();
    if query.group.is_none() && view.shape.block.group.is_some() {
        return Err("the view is grouped and the query is not".into());
    }
    // Groups filtered (HAVING): the view's groups are the query's only
    // when both filter them alike (a query that filters them is tried
    // with views that do not on the aggregate below its filter).
    let having = |block: &Block| {
        block
            .having
            .iter()
            .map(Expr::to_string)
            .collect::<std::collections::BTreeSet<_>>()
    };
    if having(query) != having(&view.shape.block) {
        return Err("the view and the query filter their groups (HAVING) differently".into());
    }
    let compensation = predicates.compensation(&view.shape.predicates)?;
    let mapper = Mapper { view };
    let mut filters = vec![];
    for alternatives in &compensation {
        match alternatives.iter().find_map(|e| mapper.map(e)) {
            Some(mapped) => filters.push(mapped),
            None => {
                return Err(format!("the view has no column for {}", alternatives[0]));
            }
        }
    }
    let mut plan = match &view.data {
        // The view's data as of now, under the view's name.
        Some(data) => LogicalPlanBuilder::from(data.clone())
            .alias(view.reference.clone())
            .map_err(error)?,
        None => LogicalPlanBuilder::scan(view.reference.clone(), Arc::clone(&view.source), None)
            .map_err(error)?,
    };
    if let Some(filter) = conjunction(filters) {
        plan = plan.filter(filter).map_err(error)?;
    }
    let map = |e: &Expr| {
        mapper
            .map(e)
            .ok_or_else(|| format!("the view has no column for {e}"))
    };
    let (exact, outputs) = match (&query.group, &view.shape.block.group) {
        (None, _) => (
            true,
            query
                .outputs
                .iter()
                .map(map)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        (Some(keys), view_keys) => {
            let mapped_keys = keys.iter().map(map).collect::<Result<Vec<_>, _>>()?;
            let aggregates = &query.outputs[keys.len()..];
            // Data computed now may have several rows per group (unless
            // merged): then aggregate again.
            let exact = (view.data.is_none() || view.data_merged)
                && view_keys.as_ref().is_some_and(|view_keys| {
                    view_keys.iter().all(|key| {
                        view.shape
                            .block
                            .outputs
                            .iter()
                            .enumerate()
                            .any(|(i, o)| o == key && mapped_keys.contains(&mapper.column(i)))
                    })
                });
            if !exact && !view.shape.block.having.is_empty() {
                return Err(if view.data.is_some() {
                    "the view filters its groups (HAVING), and its data computed past \
                         the change is not one row per group"
                        .into()
                } else {
                    "the view filters its groups (HAVING) and the query groups otherwise".into()
                });
            }
            if exact {
                let mut outputs = mapped_keys;
                for a in aggregates {
                    let mapped = map(a)?;
                    // A count a view rolled up from another (`sum` of
                    // counts) is typed nullable; in a group it is never
                    // null, and a count never is.
                    let count = matches!(a, Expr::AggregateFunction(f) if f.func.name() == "count");
                    let nullable = mapped.nullable(plan.schema().as_ref()).map_err(error)?;
                    outputs.push(if count && nullable {
                        datafusion::functions::expr_fn::coalesce(vec![
                            mapped,
                            datafusion::prelude::lit(0i64),
                        ])
                    } else {
                        mapped
                    });
                }
                (true, outputs)
            } else {
                let mut group: Vec<Expr> = vec![];
                let mut key_index = vec![];
                for key in mapped_keys {
                    key_index.push(match group.iter().position(|g| *g == key) {
                        Some(i) => i,
                        None => {
                            group.push(key);
                            group.len() - 1
                        }
                    });
                }
                let mut calls: Vec<Expr> = vec![];
                let mut add = |call: Expr| match calls.iter().position(|c| *c == call) {
                    Some(i) => group.len() + i,
                    None => {
                        calls.push(call);
                        group.len() + calls.len() - 1
                    }
                };
                let mut finish = vec![];
                for a in aggregates {
                    finish.push(if view_keys.is_some() {
                        roll_up(a, &mapper, &mut add)?
                    } else {
                        Finish::Column(add(map(a)?))
                    });
                }
                plan = plan.aggregate(group, calls).map_err(error)?;
                let schema = plan.schema().clone();
                let column = |i: usize| {
                    Expr::Column(datafusion::common::Column::from(schema.qualified_field(i)))
                };
                let mut outputs: Vec<Expr> = key_index.into_iter().map(column).collect();
                for f in finish {
                    outputs.push(match f {
                        Finish::Column(i) => column(i),
                        Finish::Count(i) => datafusion::functions::expr_fn::coalesce(vec![
                            column(i),
                            datafusion::prelude::lit(0i64),
                        ]),
                        Finish::Average(s, c) => {
                            datafusion::prelude::cast(
                                column(s),
                                datafusion::arrow::datatypes::DataType::Float64,
                            ) / datafusion::prelude::cast(
                                column(c),
                                datafusion::arrow::datatypes::DataType::Float64,
                            )
                        }
                    });
                }
                (false, outputs)
            }
        }
    };
    // The root's columns exactly: names, qualifiers, types; never more
    // nullable than the query's.
    let wanted = root.schema();
    let input = plan.schema().clone();
    let mut exprs = Vec::with_capacity(outputs.len());
    for (i, expr) in outputs.into_iter().enumerate() {
        let (qualifier, field) = wanted.qualified_field(i);
        let data_type = expr.get_type(input.as_ref()).map_err(error)?;
        let expr = if &data_type == field.data_type() {
            expr
        } else {
            datafusion::prelude::cast(expr, field.data_type().clone())
        };
        if !field.is_nullable() && expr.nullable(input.as_ref()).map_err(error)? {
            return Err(format!(
                "its column for {} may be null where the query's may not",
                field.name()
            ));
        }
        exprs.push(expr.alias_qualified(qualifier.cloned(), field.name()));
    }
    let plan = plan.project(exprs).map_err(error)?.build().map_err(error)?;
    Ok((exact, plan))
}

/// The aggregate calls over the view that roll `aggregate` (the query's)
/// up from the view's finer groups, added with `add`.
fn roll_up(
    aggregate: &Expr,
    mapper: &Mapper,
    add: &mut impl FnMut(Expr) -> usize,
) -> Result<Finish, String> {
    let Expr::AggregateFunction(AggregateFunction { func, params }) = aggregate else {
        return Err(format!("{aggregate} is not an aggregate call"));
    };
    let cannot = || format!("{aggregate} cannot be rolled up from the view's groups");
    if params.filter.is_some() || !params.order_by.is_empty() || params.null_treatment.is_some() {
        return Err(cannot());
    }
    let own = |name: &str| {
        datafusion::execution::SessionStateDefaults::default_aggregate_functions()
            .into_iter()
            .find(|f| f.name() == name)
            .expect("a default aggregate")
    };
    let whole = |e: &Expr| mapper.whole(e).ok_or_else(cannot);
    let name = func.name();
    // What only asks which values a group holds (a DISTINCT aggregate,
    // `min`, `max`) of the view's grouping columns: the view's rows hold
    // the same values per group as the query's rows, so it is computed
    // over them as written. (A view's aggregate of the same is preferred
    // below, for `min` and `max`.)
    let of_keys = || {
        let mut over_view = aggregate.clone();
        if let Expr::AggregateFunction(f) = &mut over_view {
            f.params.args = f
                .params
                .args
                .iter()
                .map(|arg| mapper.map(arg))
                .collect::<Option<Vec<_>>>()?;
        }
        Some(over_view)
    };
    if params.distinct && !matches!(name, "min" | "max") {
        return Ok(Finish::Column(add(of_keys().ok_or_else(cannot)?)));
    }
    let call = |f: &str, arg: Expr| own(f).call(vec![arg]);
    match name {
        "sum" => Ok(Finish::Column(add(call("sum", whole(aggregate)?)))),
        "min" | "max" => {
            let mut plain = aggregate.clone();
            if let Expr::AggregateFunction(f) = &mut plain {
                f.params.distinct = false;
            }
            match mapper.whole(&plain).or_else(|| mapper.whole(aggregate)) {
                Some(column) => Ok(Finish::Column(add(call(name, column)))),
                None => Ok(Finish::Column(add(of_keys().ok_or_else(cannot)?))),
            }
        }
        "count" => Ok(Finish::Count(add(call("sum", whole(aggregate)?)))),
        "avg" => {
            let [argument] = params.args.as_slice() else {
                return Err(cannot());
            };
            // Type coercion casts an integer argument to `Float64`: the
            // sum and count of the value itself are what a view keeps.
            let argument = match argument {
                Expr::Cast(cast) => cast.expr.as_ref(),
                other => other,
            };
            let sum = own("sum").call(vec![argument.clone()]);
            let count = own("count").call(vec![argument.clone()]);
            let (sum, count) = (whole(&sum)?, whole(&count)?);
            Ok(Finish::Average(
                add(call("sum", sum)),
                add(call("sum", count)),
            ))
        }
        _ => Err(cannot()),
    }
}

/// Expressions over the query's relations as expressions over the view's
/// columns.
struct Mapper<'a> {
    view: &'a Candidate,
}

impl Mapper<'_> {
    /// The view's column `i`.
    fn column(&self, i: usize) -> Expr {
        let schema = self.view.source.schema();
        Expr::Column(datafusion::common::Column::new(
            Some(self.view.reference.clone()),
            schema.field(i).name(),
        ))
    }

    /// The view column that is `expr` as a whole.
    fn whole(&self, expr: &Expr) -> Option<Expr> {
        let outputs = &self.view.shape.block.outputs;
        if let Some(i) = outputs.iter().position(|o| o == expr) {
            return Some(self.column(i));
        }
        if let Expr::Column(c) = expr {
            for equal in self.view.shape.predicates.class(c) {
                let equal = Expr::Column(equal);
                if let Some(i) = outputs.iter().position(|o| *o == equal) {
                    return Some(self.column(i));
                }
            }
        }
        None
    }

    /// `expr` computed from the view's columns, if it can be. A grouped
    /// view's aggregates count only as a whole.
    fn map(&self, expr: &Expr) -> Option<Expr> {
        if let Some(column) = self.whole(expr) {
            return Some(column);
        }
        match expr {
            Expr::Column(_) => return None,
            Expr::AggregateFunction(_) if self.view.shape.block.group.is_some() => return None,
            _ => {}
        }
        expr.clone()
            .map_children(|child| match self.map(&child) {
                Some(mapped) => Ok(Transformed::yes(mapped)),
                None => datafusion::common::plan_err!("unmapped"),
            })
            .ok()
            .map(|t| t.data)
    }
}

/// Marks where a view replaced part of a query, for `EXPLAIN`:
/// `MatviewRewrite: daily_sales (fresh)`. It computes nothing: the
/// session's planner ([`Planner`]) plans its input in its place.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct MatviewRewrite {
    /// `view (why)`.
    pub why: String,
    input: LogicalPlan,
}

impl MatviewRewrite {
    /// `input` marked as `why`'s replacement.
    pub(crate) fn mark(why: String, input: LogicalPlan) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(MatviewRewrite { why, input }),
        })
    }

    /// `plan` without the marks.
    pub fn strip(plan: LogicalPlan) -> datafusion::error::Result<LogicalPlan> {
        Ok(plan
            .transform_up_with_subqueries(|node| match &node {
                LogicalPlan::Extension(e) => {
                    match e.node.as_any().downcast_ref::<MatviewRewrite>() {
                        Some(mark) => Ok(Transformed::yes(mark.input.clone())),
                        None => Ok(Transformed::no(node)),
                    }
                }
                _ => Ok(Transformed::no(node)),
            })?
            .data)
    }
}

impl UserDefinedLogicalNodeCore for MatviewRewrite {
    fn name(&self) -> &str {
        "MatviewRewrite"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn prevent_predicate_push_down_columns(&self) -> std::collections::HashSet<String> {
        std::collections::HashSet::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MatviewRewrite: {}", self.why)
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        Ok(MatviewRewrite {
            why: self.why.clone(),
            input: inputs.swap_remove(0),
        })
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        Some(vec![output_columns.to_vec()])
    }

    fn supports_limit_pushdown(&self) -> bool {
        true
    }
}

/// The session's query planner: removes the rewrite's marks, then plans
/// as the planner it wraps does.
#[derive(Debug)]
pub(crate) struct Planner {
    pub inner: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for Planner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn Session,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let plan = MatviewRewrite::strip(logical_plan.clone())?;
        let physical = self
            .inner
            .create_physical_plan(&plan, session_state)
            .await?;
        // An EXPLAIN's final logical plan is printed here, from the plan
        // given: print it with the marks.
        let (LogicalPlan::Explain(explain), Some(exec)) =
            (logical_plan, physical.downcast_ref::<ExplainExec>())
        else {
            return Ok(physical);
        };
        let marked = &explain.plan;
        let mut plans: Vec<StringifiedPlan> = vec![];
        if explain.explain_format == ExplainFormat::Tree {
            // The tree shows the physical plan only: say which views
            // answered above it.
            let mut marks = vec![];
            marked.apply_with_subqueries(|node| {
                if let LogicalPlan::Extension(e) = node
                    && let Some(mark) = e.node.as_any().downcast_ref::<MatviewRewrite>()
                {
                    marks.push(format!("MatviewRewrite: {}", mark.why));
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
            if !marks.is_empty() {
                plans.push(StringifiedPlan::new(
                    PlanType::FinalLogicalPlan,
                    marks.join("\n"),
                ));
            }
        }
        plans.extend(exec.stringified_plans().iter().map(|p| {
            if p.plan_type != PlanType::FinalLogicalPlan {
                return p.clone();
            }
            let text = match explain.explain_format {
                ExplainFormat::Indent => marked.display_indent().to_string(),
                ExplainFormat::PostgresJSON => marked.display_pg_json().to_string(),
                ExplainFormat::Graphviz => marked.display_graphviz().to_string(),
                ExplainFormat::Tree => return p.clone(),
            };
            StringifiedPlan::new(PlanType::FinalLogicalPlan, text)
        }));
        Ok(Arc::new(ExplainExec::new(
            exec.schema(),
            plans,
            exec.verbose(),
        )))
    }
}
