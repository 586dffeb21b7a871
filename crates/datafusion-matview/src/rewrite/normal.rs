//! The normal form a query block and a view definition are compared in:
//! the relations read, the conjuncts of every `WHERE` and `ON`, the
//! grouping keys, and the output columns, with every column named by the
//! relation it comes from (its fully qualified name, not the alias the SQL
//! gave it) so that two plans written differently compare equal.

use std::collections::{BTreeSet, HashMap};

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, JoinType, NullEquality, TableReference};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Distinct, Expr, LogicalPlan, Operator};

use crate::spec::QualifiedName;

/// A select-project-join block, grouped or not.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Block {
    /// The relations read, each once.
    pub tables: BTreeSet<QualifiedName>,
    /// The conjuncts its rows satisfy (`WHERE` and `ON`), canonical.
    pub predicates: Vec<Expr>,
    /// The grouping keys, when it is grouped (empty: one global group).
    pub group: Option<Vec<Expr>>,
    /// The conjuncts its groups satisfy (`HAVING`), canonical: over the
    /// grouping keys and aggregate calls.
    pub having: Vec<Expr>,
    /// Its output columns left to right, canonical: over the relations'
    /// columns, and over aggregate calls when grouped.
    pub outputs: Vec<Expr>,
}

/// Why a plan is not a block the rewrite handles.
pub(crate) type NotABlock = String;

/// The canonical reference for `name`'s columns.
pub(crate) fn canonical_relation(name: &QualifiedName) -> TableReference {
    name.to_table_reference()
}

/// The catalog and schema each plain view was created under, by name:
/// the names in its plan are read under them, as freshness reads them.
pub(crate) type ViewDefaults = HashMap<QualifiedName, (String, String)>;

/// The block `plan` computes, reading relation names under `defaults`
/// (and under a plain view inlined in it, under `views`' defaults for it).
/// Projections and aliases may sit anywhere; filters and inner joins
/// below the aggregate; above an aggregate only projections and aliases.
/// `SELECT DISTINCT` is a `GROUP BY` of all its columns.
pub(crate) fn block(
    plan: &LogicalPlan,
    defaults: (&str, &str),
    views: &ViewDefaults,
) -> Result<Block, NotABlock> {
    let mut parser = Parser {
        defaults: (defaults.0.to_owned(), defaults.1.to_owned()),
        views,
        tables: BTreeSet::new(),
        predicates: vec![],
        group: None,
        having: vec![],
    };
    let outputs = parser.parse(plan)?;
    let Parser {
        tables,
        predicates,
        group,
        having,
        ..
    } = parser;
    Ok(Block {
        tables,
        predicates,
        group,
        having,
        outputs,
    })
}

struct Parser<'a> {
    defaults: (String, String),
    views: &'a ViewDefaults,
    tables: BTreeSet<QualifiedName>,
    predicates: Vec<Expr>,
    group: Option<Vec<Expr>>,
    having: Vec<Expr>,
}

impl Parser<'_> {
    /// The canonical expression of each output column of `plan`.
    fn parse(&mut self, plan: &LogicalPlan) -> Result<Vec<Expr>, NotABlock> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                if !scan.filters.is_empty() || scan.fetch.is_some() {
                    return Err("a scan with pushed-down filters or a limit".into());
                }
                if self.group.is_some() {
                    return Err("a relation read beside an aggregate".into());
                }
                let name: QualifiedName = scan
                    .table_name
                    .clone()
                    .resolve(&self.defaults.0, &self.defaults.1)
                    .into();
                if !self.tables.insert(name.clone()) {
                    return Err(format!("{name} read twice"));
                }
                let relation = canonical_relation(&name);
                Ok(scan
                    .projected_schema
                    .fields()
                    .iter()
                    .map(|f| Expr::Column(Column::new(Some(relation.clone()), f.name())))
                    .collect())
            }
            LogicalPlan::SubqueryAlias(alias) => {
                // A plain view's plan names relations as it was created.
                let name: QualifiedName = alias
                    .alias
                    .clone()
                    .resolve(&self.defaults.0, &self.defaults.1)
                    .into();
                match self.views.get(&name) {
                    Some(defaults) if *defaults != self.defaults => {
                        let outer = std::mem::replace(&mut self.defaults, defaults.clone());
                        let parsed = self.parse(&alias.input);
                        self.defaults = outer;
                        parsed
                    }
                    _ => self.parse(&alias.input),
                }
            }
            LogicalPlan::Projection(projection) => {
                let inputs = self.parse(&projection.input)?;
                projection
                    .expr
                    .iter()
                    .map(|e| substitute(e, projection.input.as_ref(), &inputs))
                    .collect()
            }
            LogicalPlan::Filter(filter) => {
                let inputs = self.parse(&filter.input)?;
                // Over an aggregate: its conjuncts filter groups, which no
                // WHERE of a query implies; they are compared apart.
                let grouped = self.group.is_some();
                for conjunct in split_conjunction(&filter.predicate) {
                    let conjunct = substitute(conjunct, filter.input.as_ref(), &inputs)?;
                    if grouped {
                        if !self.having.contains(&conjunct) {
                            self.having.push(conjunct);
                        }
                    } else {
                        self.add_predicate(conjunct);
                    }
                }
                Ok(inputs)
            }
            LogicalPlan::Join(join) => {
                if join.join_type != JoinType::Inner {
                    return Err(format!("a {} join", join.join_type));
                }
                if join.null_equality != NullEquality::NullEqualsNothing || join.null_aware {
                    return Err("a join whose keys match nulls".into());
                }
                let mut outputs = self.parse(&join.left)?;
                outputs.extend(self.parse(&join.right)?);
                self.below_the_aggregate("a join over an aggregate")?;
                for (left, right) in &join.on {
                    let left = substitute(left, plan, &outputs)?;
                    let right = substitute(right, plan, &outputs)?;
                    self.add_predicate(left.eq(right));
                }
                if let Some(filter) = &join.filter {
                    for conjunct in split_conjunction(filter) {
                        let conjunct = substitute(conjunct, plan, &outputs)?;
                        self.add_predicate(conjunct);
                    }
                }
                Ok(outputs)
            }
            LogicalPlan::Aggregate(aggregate) => {
                let inputs = self.parse(&aggregate.input)?;
                if self.group.is_some() {
                    return self.rolled_up(aggregate, &inputs);
                }
                let keys = aggregate
                    .group_expr
                    .iter()
                    .map(|e| {
                        if matches!(e, Expr::GroupingSet(_)) {
                            return Err("GROUPING SETS, CUBE or ROLLUP".to_owned());
                        }
                        substitute(e, aggregate.input.as_ref(), &inputs)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let mut outputs = keys.clone();
                for e in &aggregate.aggr_expr {
                    let e = substitute(e, aggregate.input.as_ref(), &inputs)?;
                    if !matches!(e, Expr::AggregateFunction(_)) {
                        return Err(format!("aggregate output {e}"));
                    }
                    outputs.push(e);
                }
                self.group = Some(keys);
                Ok(outputs)
            }
            // SELECT DISTINCT: a GROUP BY of all its columns.
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let keys = self.parse(input)?;
                // Its columns would be keys and aggregates at once.
                self.below_the_aggregate("DISTINCT over an aggregate")?;
                self.group = Some(keys.clone());
                Ok(keys)
            }
            other => Err(format!("a {} node", other.display())),
        }
    }

    /// An aggregate over an aggregate (its input's outputs `inputs`) as
    /// one aggregate of the relations, when it is one: its keys are
    /// computed from the lower keys alone (so each of its groups is a union
    /// of lower groups), no filter of groups lies between, and each of its
    /// aggregates rolls the lower ones up: `sum` of `sum`, `min` of `min`,
    /// `max` of `max`, `sum` of `count` (beside keys: a global `sum` over
    /// no rows is null where `count` is 0), or what only asks which values
    /// a group holds (`min`, `max`, a `DISTINCT` aggregate) of lower keys.
    /// So a view that rolls another up (`monthly` over `daily`) compares
    /// with queries over the relations.
    fn rolled_up(
        &mut self,
        aggregate: &datafusion::logical_expr::Aggregate,
        inputs: &[Expr],
    ) -> Result<Vec<Expr>, NotABlock> {
        let refused = |why: &str| Err(format!("an aggregate over an aggregate: {why}"));
        if !self.having.is_empty() {
            return refused("the lower one's groups are filtered");
        }
        let has_aggregate = |e: &Expr| {
            e.exists(|e| Ok(matches!(e, Expr::AggregateFunction(_))))
                .unwrap_or(true)
        };
        let input = aggregate.input.as_ref();
        let mut keys = vec![];
        for key in &aggregate.group_expr {
            if matches!(key, Expr::GroupingSet(_)) {
                return refused("GROUPING SETS, CUBE or ROLLUP");
            }
            let key = substitute(key, input, inputs)?;
            if has_aggregate(&key) {
                return refused(&format!("key {key} is an aggregate"));
            }
            keys.push(key);
        }
        let mut outputs = keys.clone();
        for e in &aggregate.aggr_expr {
            let e = substitute(e, input, inputs)?;
            let Expr::AggregateFunction(outer) = &e else {
                return refused(&format!("output {e}"));
            };
            let params = &outer.params;
            let [argument] = params.args.as_slice() else {
                return refused(&format!("{e}"));
            };
            if params.filter.is_some()
                || !params.order_by.is_empty()
                || params.null_treatment.is_some()
            {
                return refused(&format!("{e}"));
            }
            let outer_name = outer.func.name();
            // Over lower keys only: the values each group holds.
            if !has_aggregate(argument) {
                if params.distinct || matches!(outer_name, "min" | "max") {
                    outputs.push(e.clone());
                    continue;
                }
                return refused(&format!("{e} counts the lower groups"));
            }
            let lower = match argument {
                Expr::Cast(cast) if outer_name == "sum" => cast.expr.as_ref(),
                other => other,
            };
            let Expr::AggregateFunction(inner) = lower else {
                return refused(&format!("{e}"));
            };
            let inner_name = inner.func.name();
            let rolls_up = !params.distinct
                && !inner.params.distinct
                && match (outer_name, inner_name) {
                    ("sum", "sum") | ("min", "min") | ("max", "max") => true,
                    ("sum", "count") => !keys.is_empty(),
                    _ => false,
                };
            if !rolls_up {
                return refused(&format!("{e} does not roll {inner_name} up"));
            }
            outputs.push(lower.clone());
        }
        self.group = Some(keys);
        Ok(outputs)
    }

    /// Refuses `what` (a filter, join, aggregate or DISTINCT, its input
    /// parsed) when an aggregate is below it: a block has one aggregate,
    /// with only projections and aliases above it. Checked after the
    /// input, which is where an aggregate below would have been found.
    fn below_the_aggregate(&self, what: &str) -> Result<(), NotABlock> {
        match self.group {
            Some(_) => Err(what.to_owned()),
            None => Ok(()),
        }
    }

    fn add_predicate(&mut self, predicate: Expr) {
        if !self.predicates.contains(&predicate) {
            self.predicates.push(predicate);
        }
    }
}

/// `plan` with each scan of a relation in `definitions` (its name read
/// under `defaults`, and under a plain view's or definition's own
/// defaults below it, as [`block`] reads them) replaced by that plan,
/// aliased as the scan was named; and whether one was. The plans are
/// definitions of materialized views, whose scans give their output.
pub(crate) fn replace_scans(
    plan: LogicalPlan,
    defaults: &(String, String),
    views: &ViewDefaults,
    definitions: &HashMap<QualifiedName, LogicalPlan>,
) -> datafusion::common::Result<(LogicalPlan, bool)> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let name: QualifiedName = scan
                .table_name
                .clone()
                .resolve(&defaults.0, &defaults.1)
                .into();
            match definitions.get(&name) {
                Some(definition)
                    if scan.projection.is_none()
                        && scan.filters.is_empty()
                        && scan.fetch.is_none() =>
                {
                    let alias = datafusion::logical_expr::SubqueryAlias::try_new(
                        std::sync::Arc::new(definition.clone()),
                        scan.table_name.clone(),
                    )?;
                    Ok((LogicalPlan::SubqueryAlias(alias), true))
                }
                _ => Ok((LogicalPlan::TableScan(scan), false)),
            }
        }
        plan => {
            let below = match &plan {
                LogicalPlan::SubqueryAlias(alias) => {
                    let name: QualifiedName =
                        alias.alias.clone().resolve(&defaults.0, &defaults.1).into();
                    views.get(&name).cloned()
                }
                _ => None,
            };
            let below = below.as_ref().unwrap_or(defaults);
            let mut changed = false;
            let plan = plan
                .map_children(|child| {
                    let (child, replaced) = replace_scans(child, below, views, definitions)?;
                    changed |= replaced;
                    Ok(Transformed::new_transformed(child, replaced))
                })?
                .data;
            // A changed child's schema may differ in what it carries
            // (nullability, metadata): rebuilt from the new inputs.
            let plan = if changed {
                plan.recompute_schema()?
            } else {
                plan
            };
            Ok((plan, changed))
        }
    }
}

/// `expr` (over `input`'s columns) with each column replaced by its
/// canonical expression and aliases removed. Refuses what cannot be
/// compared by its text: subqueries, placeholders, volatile functions.
fn substitute(expr: &Expr, input: &LogicalPlan, canonical: &[Expr]) -> Result<Expr, NotABlock> {
    let mut refused = None;
    expr.apply(|e| {
        let why = match e {
            Expr::ScalarSubquery(_)
            | Expr::Exists(_)
            | Expr::InSubquery(_)
            | Expr::OuterReferenceColumn(..) => Some("a subquery".to_owned()),
            Expr::Placeholder(p) => Some(format!("parameter {}", p.id)),
            Expr::GroupingSet(_) => Some("GROUPING SETS, CUBE or ROLLUP".to_owned()),
            Expr::WindowFunction(_) => Some("a window function".to_owned()),
            _ if e.is_volatile_node() => Some(format!("volatile {e}")),
            _ => None,
        };
        if let Some(why) = why {
            refused = Some(why);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| e.to_string())?;
    if let Some(why) = refused {
        return Err(why);
    }
    let schema = input.schema();
    let substituted = expr
        .clone()
        .transform_up(|e| match e {
            Expr::Column(column) => {
                let i = schema.index_of_column(&column)?;
                Ok(Transformed::yes(canonical[i].clone()))
            }
            Expr::Alias(alias) => Ok(Transformed::yes(*alias.expr)),
            other => Ok(Transformed::no(other)),
        })
        .map_err(|e| e.to_string())?;
    Ok(normalize(substituted.data))
}

/// Puts comparisons in one orientation (column first, and for two
/// columns the smaller first) so that `a = b` and `b = a`, or `5 < x` and
/// `x > 5`, compare equal.
pub(crate) fn normalize(expr: Expr) -> Expr {
    expr.transform_up(|e| {
        let Expr::BinaryExpr(binary) = &e else {
            return Ok(Transformed::no(e));
        };
        let Some(swapped) = binary.op.swap() else {
            return Ok(Transformed::no(e));
        };
        let flip = match (binary.left.as_ref(), binary.right.as_ref()) {
            (Expr::Column(_), Expr::Column(_)) | (Expr::Literal(..), Expr::Literal(..)) => {
                is_comparison(binary.op) && binary.right.to_string() < binary.left.to_string()
            }
            (l, Expr::Column(_)) if !matches!(l, Expr::Column(_)) => is_comparison(binary.op),
            _ => false,
        };
        if !flip {
            return Ok(Transformed::no(e));
        }
        let Expr::BinaryExpr(binary) = e else {
            unreachable!()
        };
        Ok(Transformed::yes(Expr::BinaryExpr(
            datafusion::logical_expr::BinaryExpr::new(binary.right, swapped, binary.left),
        )))
    })
    .map(|t| t.data)
    .expect("normalizing an expression does not fail")
}

fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}
