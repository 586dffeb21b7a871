//! Reading a materialized view as a retained version of its log left it,
//! and the rows that changed between two versions.
//!
//! - `materialized_view_at('v', 3)` (and `v VERSION AS OF 3` in the
//!   dialects whose grammar has it: Databricks, BigQuery, Snowflake, MsSQL)
//!   reads version 3 of view `v`'s log: the snapshot it committed, as long
//!   as that version's log entry and data files are retained.
//! - `materialized_view_changes('v', 2, 5)` returns the rows version 5 has
//!   and version 2 had not (`_change_type` `insert`) and the other way
//!   round (`delete`), version by version (`_version`: the version that
//!   made the change). It reads only the data files one version added or
//!   removed against the one before it: an append reads the appended
//!   files, an eviction the evicted ones; where a version replaced files
//!   (a full refresh, a recomputed group of files) it reads the old and the
//!   new files and cancels the rows they share, so a row that a refresh
//!   rewrote unchanged is not reported.
//!
//! Versions are numbered per definition: one more per refresh that wrote
//! data (`REFRESH` returns it, `describe` lists the retained ones); a
//! `CREATE OR REPLACE` starts a new log at 1.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::{Column, ScalarValue, TableReference, plan_err};
use datafusion::datasource::{TableProvider, provider_as_source};
use datafusion::error::Result as DFResult;
use datafusion::functions_aggregate::expr_fn::sum;
use datafusion::functions_nested::expr_fn::range;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, col, lit, when};
use futures::{StreamExt, TryStreamExt};

use datafusion::sql::sqlparser::ast::{
    self as sql, FunctionArg, FunctionArgExpr, Ident, ObjectName, TableAlias, TableFactor,
    TableVersion, VisitMut, VisitorMut,
};

use crate::catalog::{Catalog, wait_for};
use crate::error::{Error, Result};
use crate::spec::{DataFile, QualifiedName, Snapshot, ViewVersion};
use crate::table::{MaterializedViewTable, SnapshotTable};

/// The name `materialized_view_at` is registered under.
pub const AT_FUNCTION: &str = "materialized_view_at";
/// The name `materialized_view_changes` is registered under.
pub const CHANGES_FUNCTION: &str = "materialized_view_changes";

/// The column of [`CHANGES_FUNCTION`] that says `insert` or `delete`.
pub const CHANGE_TYPE: &str = "_change_type";
/// The column of [`CHANGES_FUNCTION`] naming the version that made a change.
pub const CHANGE_VERSION: &str = "_version";

/// `materialized_view_at('v', version)`: view `v` as version `version` of
/// its log left it.
#[derive(Debug)]
pub struct MaterializedViewAtFunction {
    catalog: Arc<Catalog>,
}

impl MaterializedViewAtFunction {
    pub(crate) fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }
}

impl TableFunctionImpl for MaterializedViewAtFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if exprs.len() != 2 {
            return plan_err!(
                "{AT_FUNCTION}(view, version) takes 2 arguments, {} given",
                exprs.len()
            );
        }
        let (name, display) = view_argument(&args, AT_FUNCTION)?;
        let version = version_argument(&exprs[1], AT_FUNCTION, "version")?;
        let catalog = &self.catalog;
        let state = match prepared_at(&(name.clone(), version)) {
            Some(state) => state,
            None => wait(read_at(catalog, &name, &display, version))?,
        };
        Ok(Arc::new(MaterializedViewTable::at(
            Arc::clone(catalog),
            state,
            display,
        )))
    }
}

/// `materialized_view_changes('v', from_version [, to_version])`: the rows
/// added and removed from version `from_version` to `to_version` (default:
/// the latest) of view `v`, each with [`CHANGE_TYPE`] and
/// [`CHANGE_VERSION`] after the view's columns.
#[derive(Debug)]
pub struct MaterializedViewChangesFunction {
    catalog: Arc<Catalog>,
}

impl MaterializedViewChangesFunction {
    pub(crate) fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }
}

impl TableFunctionImpl for MaterializedViewChangesFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if !(2..=3).contains(&exprs.len()) {
            return plan_err!(
                "{CHANGES_FUNCTION}(view, from_version [, to_version]) takes 2 or 3 arguments, {} given",
                exprs.len()
            );
        }
        let (name, display) = view_argument(&args, CHANGES_FUNCTION)?;
        let from = version_argument(&exprs[1], CHANGES_FUNCTION, "from_version")?;
        let to = match exprs.get(2) {
            Some(expr) => Some(version_argument(expr, CHANGES_FUNCTION, "to_version")?),
            None => None,
        };
        let catalog = &self.catalog;
        let steps = match prepared_changes(&(name.clone(), from, to)) {
            Some(steps) => steps,
            None => wait(steps_between(catalog, &name, &display, from, to))?,
        };
        let plan = changes_plan(catalog, &steps)?;
        Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
            plan, None,
        )))
    }
}

/// Waits for `read` from a table function's (synchronous) planning.
///
/// A statement run by [`crate::MatviewSession`] never gets here: it reads
/// the versions its calls name before planning ([`prepare`]). Otherwise
/// (a plan made on the session's `SessionContext` directly) this waits in
/// `block_in_place` on a multi-threaded Tokio runtime; on any other it
/// refuses, since the reads may wait for tasks of the very runtime it
/// would block.
fn wait<T: Send>(read: impl std::future::Future<Output = Result<T>> + Send) -> Result<T> {
    // Not a local store's thread of its own: that would block this runtime.
    wait_for(false, read, "a materialized view's versions").map_err(|_| {
        Error::NotSupported(format!(
            "{AT_FUNCTION}() and {CHANGES_FUNCTION}() are read before planning by MatviewSession::sql; planned elsewhere they need a multi-threaded Tokio runtime"
        ))
    })?
}

tokio::task_local! {
    /// What the statement being planned reads with the functions, read
    /// beforehand (see [`prepare`]).
    static PREPARED: Arc<Prepared>;
}

/// A call of [`CHANGES_FUNCTION`]: the view, from and to.
type ChangesCall = (QualifiedName, u64, Option<u64>);

/// The view's columns and what each version of a range changed.
type Changes = (SchemaRef, Vec<Step>);

/// The versions and changes one statement's calls read, by call.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    at: std::sync::Mutex<std::collections::HashMap<(QualifiedName, u64), Arc<ViewVersion>>>,
    changes: std::sync::Mutex<std::collections::HashMap<ChangesCall, Changes>>,
}

/// Reads what the calls of [`AT_FUNCTION`] and [`CHANGES_FUNCTION`] in
/// `statement` name (their arguments as literals; `catalog` and `schema`
/// resolve names), so that planning, which is synchronous, finds it
/// ([`with_prepared`]). A version that cannot be read fails here, as
/// planning would.
pub(crate) async fn prepare(
    catalog: &Catalog,
    statement: &datafusion::sql::parser::Statement,
    (default_catalog, default_schema): (&str, &str),
) -> Result<Arc<Prepared>> {
    use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
    use datafusion::sql::sqlparser::ast::Visit;
    struct Calls(Vec<(String, String, Vec<u64>)>);
    impl datafusion::sql::sqlparser::ast::Visitor for Calls {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(args),
                ..
            } = factor
            {
                let function = name.to_string().to_ascii_lowercase();
                if function != AT_FUNCTION && function != CHANGES_FUNCTION {
                    return ControlFlow::Continue(());
                }
                let literal = |arg: &FunctionArg| match arg {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(sql::Expr::Value(v))) => {
                        Some(v.value.clone())
                    }
                    _ => None,
                };
                let mut values = args.args.iter().map(literal);
                let Some(Some(
                    sql::Value::SingleQuotedString(view) | sql::Value::DoubleQuotedString(view),
                )) = values.next()
                else {
                    return ControlFlow::Continue(());
                };
                let numbers: Option<Vec<u64>> = values
                    .map(|v| match v {
                        Some(sql::Value::Number(n, _)) => n.parse().ok(),
                        _ => None,
                    })
                    .collect();
                if let Some(numbers) = numbers {
                    self.0.push((function, view, numbers));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut calls = Calls(vec![]);
    let mut pending = vec![statement];
    while let Some(next) = pending.pop() {
        match next {
            DFStatement::Statement(inner) => {
                let _ = inner.visit(&mut calls);
            }
            DFStatement::Explain(explain) => pending.push(explain.statement.as_ref()),
            DFStatement::CopyTo(copy) => {
                if let CopyToSource::Query(query) = &copy.source {
                    let _ = query.visit(&mut calls);
                }
            }
            _ => {}
        }
    }
    let prepared = Arc::new(Prepared::default());
    for (function, text, numbers) in calls.0 {
        let name = QualifiedName::from(
            TableReference::parse_str(&text).resolve(default_catalog, default_schema),
        );
        match (function.as_str(), numbers.as_slice()) {
            (AT_FUNCTION, [version]) if *version > 0 => {
                let state = read_at(catalog, &name, &text, *version).await?;
                prepared
                    .at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((name, *version), state);
            }
            (CHANGES_FUNCTION, [from, rest @ ..]) if rest.len() <= 1 && *from > 0 => {
                let to = rest.first().copied();
                let steps = steps_between(catalog, &name, &text, *from, to).await?;
                prepared
                    .changes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((name, *from, to), steps);
            }
            // Planning says what is wrong with the arguments.
            _ => {}
        }
    }
    Ok(prepared)
}

/// Runs `planning` with `prepared` in reach of the functions.
pub(crate) async fn with_prepared<F: std::future::Future>(
    prepared: Arc<Prepared>,
    planning: F,
) -> F::Output {
    PREPARED.scope(prepared, planning).await
}

/// What [`prepare`] read for `key`, when planning runs under it.
fn prepared_at(key: &(QualifiedName, u64)) -> Option<Arc<ViewVersion>> {
    PREPARED
        .try_with(|p| {
            p.at.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .cloned()
        })
        .ok()
        .flatten()
}

/// What [`prepare`] read for `key`, when planning runs under it.
fn prepared_changes(key: &ChangesCall) -> Option<Changes> {
    PREPARED
        .try_with(|p| {
            p.changes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .cloned()
        })
        .ok()
        .flatten()
}

/// The view a function's first argument names (a string, resolved as a
/// table name is against the session's default catalog and schema), and
/// how messages name it.
fn view_argument(args: &TableFunctionArgs, function: &str) -> DFResult<(QualifiedName, String)> {
    let Some(Expr::Literal(
        ScalarValue::Utf8(Some(text))
        | ScalarValue::LargeUtf8(Some(text))
        | ScalarValue::Utf8View(Some(text)),
        _,
    )) = args.exprs().first()
    else {
        return plan_err!("{function}: the first argument must be a view's name, as a string");
    };
    let options = args.session().config().options();
    let resolved = TableReference::parse_str(text).resolve(
        &options.catalog.default_catalog,
        &options.catalog.default_schema,
    );
    Ok((QualifiedName::from(resolved), text.clone()))
}

/// A version number argument: a positive integer literal.
fn version_argument(expr: &Expr, function: &str, what: &str) -> DFResult<u64> {
    let value = match expr {
        Expr::Literal(value, _) => value.clone(),
        Expr::Cast(cast) => match cast.expr.as_ref() {
            Expr::Literal(value, _) => value.clone(),
            _ => return plan_err!("{function}: {what} must be a number"),
        },
        _ => return plan_err!("{function}: {what} must be a number"),
    };
    let number = match value {
        ScalarValue::Int8(Some(v)) => i64::from(v),
        ScalarValue::Int16(Some(v)) => i64::from(v),
        ScalarValue::Int32(Some(v)) => i64::from(v),
        ScalarValue::Int64(Some(v)) => v,
        ScalarValue::UInt8(Some(v)) => i64::from(v),
        ScalarValue::UInt16(Some(v)) => i64::from(v),
        ScalarValue::UInt32(Some(v)) => i64::from(v),
        ScalarValue::UInt64(Some(v)) => i64::try_from(v).unwrap_or(i64::MAX),
        _ => return plan_err!("{function}: {what} must be a number"),
    };
    match u64::try_from(number) {
        Ok(version) if version > 0 => Ok(version),
        _ => plan_err!("{function}: {what} must be 1 or more, not {number}"),
    }
}

/// Version `version` of view `name`, checked readable, or why not with
/// the oldest version that is.
async fn read_at(
    catalog: &Catalog,
    name: &QualifiedName,
    display: &str,
    version: u64,
) -> Result<Arc<ViewVersion>> {
    let read = catalog.view_at(name, display, version).await;
    not_retained(catalog, name, read).await
}

/// `read`, with [`Error::SourceVersionUnavailable`] told as
/// [`Error::VersionNotRetained`]: the oldest version that can be read.
async fn not_retained<T>(catalog: &Catalog, name: &QualifiedName, read: Result<T>) -> Result<T> {
    match read {
        Err(Error::SourceVersionUnavailable {
            name: display,
            version,
            reason,
        }) => {
            let oldest = catalog
                .retained_versions(name)
                .await?
                .first()
                .map(|v| v.version);
            Err(Error::VersionNotRetained {
                name: display,
                version,
                reason,
                oldest,
            })
        }
        other => other,
    }
}

/// What one version changed against the one before it.
#[derive(Debug, Clone)]
struct Step {
    /// The version that made the change.
    version: u64,
    /// Data files it no longer has.
    removed: Vec<DataFile>,
    /// Data files it added.
    added: Vec<DataFile>,
}

/// The view's columns and what each version after `from` up to `to`
/// changed. An unpopulated version counts as empty.
async fn steps_between(
    catalog: &Catalog,
    name: &QualifiedName,
    display: &str,
    from: u64,
    to: Option<u64>,
) -> Result<(SchemaRef, Vec<Step>)> {
    let Some(latest) = catalog.view(name).await? else {
        return Err(Error::NotFound {
            name: display.to_owned(),
        });
    };
    let to = to.unwrap_or(latest.version);
    if from > to {
        return Err(Error::NotSupported(format!(
            "{CHANGES_FUNCTION}: from_version {from} is after to_version {to}"
        )));
    }
    let reads = (from..=to).map(|version| async move {
        let read = catalog.view_version(name, display, version).await;
        not_retained(catalog, name, read).await.map(|(_, v)| v)
    });
    let states: Vec<Arc<ViewVersion>> = futures::stream::iter(reads)
        .buffered(16)
        .try_collect()
        .await?;
    let files = |state: &ViewVersion| -> Vec<DataFile> {
        state
            .view
            .snapshot
            .as_ref()
            .map(|s| s.files.clone())
            .unwrap_or_default()
    };
    let mut steps = vec![];
    for pair in states.windows(2) {
        let (before, after) = (files(&pair[0]), files(&pair[1]));
        let before_paths: BTreeSet<&str> = before.iter().map(|f| f.path.as_str()).collect();
        let after_paths: BTreeSet<&str> = after.iter().map(|f| f.path.as_str()).collect();
        let step = Step {
            version: pair[1].version,
            removed: before
                .iter()
                .filter(|f| !after_paths.contains(f.path.as_str()))
                .cloned()
                .collect(),
            added: after
                .iter()
                .filter(|f| !before_paths.contains(f.path.as_str()))
                .cloned()
                .collect(),
        };
        let paths: Vec<&str> = step
            .removed
            .iter()
            .chain(&step.added)
            .map(|f| f.path.as_str())
            .collect();
        let checked = catalog
            .check_retained(&latest, &paths, display, step.version)
            .await;
        not_retained(catalog, name, checked).await?;
        if !(step.removed.is_empty() && step.added.is_empty()) {
            steps.push(step);
        }
    }
    let schema = Arc::new(latest.view.definition.schema.clone());
    Ok((schema, steps))
}

/// Internal columns of the changes plan.
const DIFF: &str = "__dfmv_diff";
const COPIES: &str = "__dfmv_copies";

/// The plan of [`MaterializedViewChangesFunction`]: per step, the rows of
/// its added files as inserts and of its removed files as deletes; where a
/// step has both, rows are counted per distinct row (+1 added, -1 removed)
/// and each row whose count is not zero comes out that many times.
fn changes_plan(
    catalog: &Arc<Catalog>,
    (schema, steps): &(SchemaRef, Vec<Step>),
) -> Result<LogicalPlan> {
    let columns: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|f| Expr::Column(Column::new_unqualified(f.name())))
        .collect();
    let scan = |files: &[DataFile]| -> Result<LogicalPlanBuilder> {
        let snapshot = Snapshot {
            id: String::new(),
            files: files.to_vec(),
            row_count: files.iter().map(|f| f.rows).sum(),
            size_bytes: files.iter().map(|f| f.size).sum(),
            refreshed_at: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            sources: vec![],
            state_columns: vec![],
            partials: vec![],
            lineage_of: None,
        };
        let table = SnapshotTable::new(Arc::clone(catalog), snapshot, Arc::clone(schema));
        Ok(LogicalPlanBuilder::scan(
            "changes",
            provider_as_source(Arc::new(table)),
            None,
        )?)
    };
    let tagged = |builder: LogicalPlanBuilder, change: Expr, version: u64| -> Result<LogicalPlan> {
        let mut exprs = columns.clone();
        exprs.push(change.alias(CHANGE_TYPE));
        exprs.push(lit(version as i64).alias(CHANGE_VERSION));
        Ok(builder.project(exprs)?.build()?)
    };
    let mut plans = vec![];
    for step in steps {
        let plan = match (step.removed.is_empty(), step.added.is_empty()) {
            (_, true) => tagged(scan(&step.removed)?, lit("delete"), step.version)?,
            (true, false) => tagged(scan(&step.added)?, lit("insert"), step.version)?,
            (false, false) => {
                let signed = |files: &[DataFile], sign: i64| -> Result<LogicalPlan> {
                    let mut exprs = columns.clone();
                    exprs.push(lit(sign).alias(DIFF));
                    Ok(scan(files)?.project(exprs)?.build()?)
                };
                let counted = LogicalPlanBuilder::from(signed(&step.removed, -1)?)
                    .union(signed(&step.added, 1)?)?
                    .aggregate(columns.clone(), vec![sum(col(DIFF)).alias(DIFF)])?
                    .filter(col(DIFF).not_eq(lit(0i64)))?;
                let mut exprs = columns.clone();
                exprs.push(
                    range(
                        lit(0i64),
                        datafusion::functions::math::expr_fn::abs(col(DIFF)),
                        lit(1i64),
                    )
                    .alias(COPIES),
                );
                exprs.push(col(DIFF));
                let copies = counted.project(exprs)?.unnest_column(COPIES)?;
                tagged(
                    copies,
                    when(col(DIFF).gt(lit(0i64)), lit("insert")).otherwise(lit("delete"))?,
                    step.version,
                )?
            }
        };
        plans.push(plan);
    }
    let mut plans = plans.into_iter();
    let Some(first) = plans.next() else {
        // Nothing changed: no rows, with the columns.
        return tagged(scan(&[])?, lit("insert"), 0);
    };
    let mut builder = LogicalPlanBuilder::from(first);
    for plan in plans {
        builder = builder.union(plan)?;
    }
    Ok(builder.build()?)
}

/// Rewrites `v VERSION AS OF n` in `statement` (parsed in a dialect whose
/// grammar has it) to `materialized_view_at('v', n) AS v`. Any other table
/// version clause (`FOR SYSTEM_TIME AS OF`, `TIMESTAMP AS OF`, `AT(...)`,
/// `CHANGES(...)`) is an error: DataFusion's planner would ignore it and
/// read the latest data.
pub(crate) fn rewrite_version_clauses<V: VisitMut>(statement: &mut V) -> Result<()> {
    struct Rewriter;
    impl VisitorMut for Rewriter {
        type Break = Error;
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<Error> {
            let TableFactor::Table {
                name,
                alias,
                args,
                version,
                ..
            } = factor
            else {
                return ControlFlow::Continue(());
            };
            match version.take() {
                None => {}
                Some(TableVersion::VersionAsOf(number)) if args.is_none() => {
                    let written = name.to_string();
                    let last = name
                        .0
                        .last()
                        .and_then(|part| part.as_ident())
                        .cloned()
                        .unwrap_or_else(|| Ident::new(written.clone()));
                    if alias.is_none() {
                        *alias = Some(TableAlias {
                            explicit: true,
                            name: last,
                            columns: vec![],
                            at: None,
                        });
                    }
                    *args = Some(sql::TableFunctionArgs {
                        args: vec![
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(sql::Expr::value(
                                sql::Value::SingleQuotedString(written),
                            ))),
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(number)),
                        ],
                        settings: None,
                    });
                    *name = ObjectName::from(vec![Ident::new(AT_FUNCTION)]);
                }
                Some(other) => {
                    return ControlFlow::Break(Error::NotSupported(format!(
                        "{other} is not supported: a materialized view is read at a version of its log with VERSION AS OF n or {AT_FUNCTION}('view', n)"
                    )));
                }
            }
            ControlFlow::Continue(())
        }
    }
    match statement.visit(&mut Rewriter) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Whether `query` calls [`AT_FUNCTION`] or [`CHANGES_FUNCTION`] anywhere.
pub(crate) fn reads_versions<V: VisitMut>(query: &mut V) -> bool {
    struct Finder;
    impl VisitorMut for Finder {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            match factor {
                TableFactor::Table {
                    name,
                    args: Some(_),
                    ..
                } if name.to_string().eq_ignore_ascii_case(CHANGES_FUNCTION)
                    || name.to_string().eq_ignore_ascii_case(AT_FUNCTION) =>
                {
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    query.visit(&mut Finder).is_break()
}
