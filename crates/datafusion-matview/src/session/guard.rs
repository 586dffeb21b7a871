//! DataFusion's own statements, with the guards the views need: names a
//! view holds, writes into a view, scans of unpopulated views; and what
//! makes a query not reproducible.

use super::*;

/// The kinds of function a plan calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FunctionKind {
    Scalar,
    Aggregate,
    Window,
}

/// The type that implements a function (through its `dyn Any` form, so
/// the function's own type, not the reference's).
fn implementation_of(function: &dyn std::any::Any) -> std::any::TypeId {
    function.type_id()
}

/// Whether the function `name` of `kind`, implemented by the type
/// `implementation`, is DataFusion's own (registered by default under
/// that name, by that type: a user's function under a built-in name is
/// not).
fn is_datafusion_own(kind: FunctionKind, name: &str, implementation: std::any::TypeId) -> bool {
    use datafusion::execution::SessionStateDefaults as Defaults;
    type Own = std::collections::HashSet<(FunctionKind, String, std::any::TypeId)>;
    static OWN: std::sync::OnceLock<Own> = std::sync::OnceLock::new();
    let own = OWN.get_or_init(|| {
        let mut own = Own::new();
        let mut add = |kind, name: &str, aliases: &[String], id| {
            for name in std::iter::once(name).chain(aliases.iter().map(String::as_str)) {
                own.insert((kind, name.to_owned(), id));
            }
        };
        for f in Defaults::default_scalar_functions() {
            let id = implementation_of(f.inner().as_ref());
            add(FunctionKind::Scalar, f.name(), f.aliases(), id);
        }
        for f in Defaults::default_aggregate_functions() {
            let id = implementation_of(f.inner().as_ref());
            add(FunctionKind::Aggregate, f.name(), f.aliases(), id);
        }
        for f in Defaults::default_window_functions() {
            let id = implementation_of(f.inner().as_ref());
            add(FunctionKind::Window, f.name(), f.aliases(), id);
        }
        own
    });
    own.contains(&(kind, name.to_owned(), implementation))
}

/// Why running `plan` again may give other rows even when its sources are
/// unchanged, if it may: a function that is not `Immutable` (volatile ones
/// such as `random()`, and stable ones such as `now()` or `current_date()`,
/// whose value depends on when the query runs), of any kind (scalar,
/// aggregate, window), or a table function; unless `trust_user_functions`
/// (see [`MatviewOptions::trust_user_functions`]), also a user function,
/// which another session may register under the same name with another
/// implementation.
pub(super) fn not_reproducible(plan: &LogicalPlan, trust_user_functions: bool) -> Option<String> {
    let mut why = None;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && scan.table_name.table().ends_with("()")
        {
            why = Some(format!("reads table function {}", scan.table_name.table()));
            return Ok(TreeNodeRecursion::Stop);
        }
        let mut found = None;
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                let function = match e {
                    Expr::ScalarFunction(f) => Some((
                        f.name(),
                        f.func.signature().volatility,
                        FunctionKind::Scalar,
                        implementation_of(f.func.inner().as_ref()),
                    )),
                    Expr::AggregateFunction(f) => Some((
                        f.func.name(),
                        f.func.signature().volatility,
                        FunctionKind::Aggregate,
                        implementation_of(f.func.inner().as_ref()),
                    )),
                    Expr::WindowFunction(f) => Some(match &f.fun {
                        WindowFunctionDefinition::AggregateUDF(udf) => (
                            udf.name(),
                            udf.signature().volatility,
                            FunctionKind::Aggregate,
                            implementation_of(udf.inner().as_ref()),
                        ),
                        WindowFunctionDefinition::WindowUDF(udf) => (
                            udf.name(),
                            udf.signature().volatility,
                            FunctionKind::Window,
                            implementation_of(udf.inner().as_ref()),
                        ),
                    }),
                    _ => None,
                };
                let Some((name, volatility, kind, implementation)) = function else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                if volatility != Volatility::Immutable {
                    let why = match volatility {
                        Volatility::Volatile => "non-deterministic",
                        _ => "depends on when it runs",
                    };
                    found = Some(format!("{why}: {name}()"));
                    return Ok(TreeNodeRecursion::Stop);
                }
                if !trust_user_functions && !is_datafusion_own(kind, name, implementation) {
                    found = Some(format!(
                        "calls user function {name}(), which another session may define \
                         otherwise (MatviewOptions::trust_user_functions)"
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        if let Some(reason) = found {
            why = Some(reason);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    why
}

/// The relations an INSERT, UPDATE, DELETE or TRUNCATE writes to.
pub(super) fn dml_targets(statement: &SQLStatement) -> Vec<&ObjectName> {
    fn relation(t: &TableWithJoins) -> Option<&ObjectName> {
        match &t.relation {
            TableFactor::Table { name, .. } => Some(name),
            _ => None,
        }
    }
    match statement {
        SQLStatement::Insert(insert) => match &insert.table {
            TableObject::TableName(name) => vec![name],
            _ => vec![],
        },
        SQLStatement::Update(update) => relation(&update.table).into_iter().collect(),
        SQLStatement::Delete(delete) => {
            let from = match &delete.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            delete
                .tables
                .iter()
                .chain(from.iter().filter_map(relation))
                .collect()
        }
        SQLStatement::Truncate(truncate) => truncate.table_names.iter().map(|t| &t.name).collect(),
        _ => vec![],
    }
}

/// Splits a catalog location into the object-store URL and the root path
/// within that store, registering an in-memory store for `memory://`.
/// Rejects names PostgreSQL's lexer rejects: an empty quoted identifier,
/// and control characters.
pub(super) fn check_name(name: &ObjectName) -> Result<()> {
    for part in &name.0 {
        let Some(ident) = part.as_ident() else {
            continue;
        };
        if ident.value.is_empty() {
            return Err(Error::ZeroLengthIdentifier);
        }
        if let Some(character) = ident.value.chars().find(|c| c.is_control()) {
            return Err(Error::InvalidCharacter {
                name: ident.value.clone(),
                character,
            });
        }
    }
    Ok(())
}

impl MatviewSession {
    pub(super) async fn execute_datafusion(
        &self,
        mut statement: DFStatement,
        text: Option<&str>,
    ) -> Result<DataFrame> {
        rewrite_versions(&mut statement)?;
        match &statement {
            DFStatement::Statement(inner) => match inner.as_ref() {
                SQLStatement::Drop {
                    object_type: object_type @ (ObjectType::Table | ObjectType::View),
                    names,
                    if_exists,
                    cascade,
                    ..
                } => {
                    let kind = if *object_type == ObjectType::Table {
                        Kind::Table
                    } else {
                        Kind::View
                    };
                    let command = if kind == Kind::Table {
                        "DROP TABLE"
                    } else {
                        "DROP VIEW"
                    };
                    return self
                        .drop_relations(kind, names, *if_exists, *cascade, &statement)
                        .await
                        .map_err(|e| self.refused(command, e));
                }
                SQLStatement::Drop {
                    object_type: ObjectType::Schema,
                    names,
                    cascade: true,
                    ..
                } => {
                    self.drop_schema_contents(names).await?;
                }
                SQLStatement::CreateView(view) => {
                    self.check_name_free(&view.name, view.if_not_exists, view.or_replace, "view")
                        .await?;
                }
                SQLStatement::CreateTable(table) => {
                    self.check_name_free(
                        &table.name,
                        table.if_not_exists,
                        table.or_replace,
                        "table",
                    )
                    .await?;
                }
                other => {
                    for target in dml_targets(other) {
                        let name = self.resolve(target)?;
                        if self.catalog.index().view(&name).is_some() {
                            return Err(Error::ReadOnly {
                                name: self.display(&name),
                            });
                        }
                    }
                }
            },
            DFStatement::CreateExternalTable(table) => {
                self.check_name_free(&table.name, table.if_not_exists, table.or_replace, "table")
                    .await?;
                for location in &table.locations {
                    self.check_outside_catalog(location, "to create a table over")?;
                }
            }
            DFStatement::CopyTo(copy) => {
                self.check_outside_catalog(&copy.target, "to write into")?;
            }
            _ => {}
        }
        let created = match &statement {
            DFStatement::CreateExternalTable(c) => Some(&c.name),
            DFStatement::Statement(inner) => match inner.as_ref() {
                SQLStatement::CreateView(v) => Some(&v.name),
                _ => None,
            },
            _ => None,
        };
        // What the name held before, to put back if the statement cannot
        // be remembered.
        let previous = match created {
            Some(name) if self.options.remember_relations => {
                self.registered(&self.resolve(name)?).await?
            }
            _ => None,
        };
        let existed = previous.is_some();
        let previous_defaults = match created {
            Some(name) => self.created_under().get(&self.resolve(name)?).cloned(),
            None => None,
        };
        // What the version functions read, read now: planning is
        // synchronous.
        let (default_catalog, default_schema) = self.defaults();
        let prepared = crate::versioned::prepare(
            &self.catalog,
            &statement,
            (&default_catalog, &default_schema),
        )
        .await?;
        let plan = crate::versioned::with_prepared(
            prepared,
            self.ctx.state().statement_to_plan(statement.clone()),
        )
        .await?;
        // DDL (CREATE VIEW over an unpopulated view) and EXPLAIN do not read
        // data; EXPLAIN ANALYZE fails when its scan runs.
        if !matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Explain(_)) {
            self.check_populated(&plan).await?;
        }
        if let LogicalPlan::Statement(datafusion::logical_expr::Statement::ResetVariable(reset)) =
            &plan
            && self.reset_matview_setting(&reset.variable)?
        {
            return Ok(no_rows(&self.ctx));
        }
        // What a PREPARE or DEALLOCATE does, kept once DataFusion did it.
        let prepared = match &plan {
            LogicalPlan::Statement(datafusion::logical_expr::Statement::Prepare(prepare)) => {
                Some((prepare.name.clone(), Some(prepare.clone())))
            }
            LogicalPlan::Statement(datafusion::logical_expr::Statement::Deallocate(deallocate)) => {
                Some((deallocate.name.clone(), None))
            }
            _ => None,
        };
        let plan = self.answer_from_views(plan).await?;
        let plan = self.execute_from_views(plan).await;
        let df = self.ctx.execute_logical_plan(plan).await?;
        if let Some((name, prepare)) = prepared {
            self.prepared_changed(name, prepare);
        }
        if let DFStatement::Statement(inner) = &statement
            && let SQLStatement::CreateView(view) = inner.as_ref()
        {
            let name = self.resolve(&view.name)?;
            self.created_under().insert(name, self.defaults());
        }
        if self.options.remember_relations
            && let Err(e) = self.remember(&statement, text, existed).await
        {
            // Not remembered, so not created (or replaced): a later process
            // would not have it, so neither does this one.
            if let Some(name) = created {
                let name = self.resolve(name)?;
                self.deregister(&name)?;
                match previous_defaults {
                    Some(defaults) => self.created_under().insert(name.clone(), defaults),
                    None => self.created_under().remove(&name),
                };
                if let Some(previous) = previous
                    && let Some(schema) = self.schema_provider(&name)
                {
                    schema.register_table(name.name.clone(), previous)?;
                }
            }
            let command = match &statement {
                DFStatement::CreateExternalTable(_) => "CREATE EXTERNAL TABLE",
                _ => "CREATE VIEW",
            };
            return Err(self.refused(command, e));
        }
        Ok(df)
    }

    /// The catalog's folder holds only what the catalog writes: a `COPY`
    /// into it, or a table over it (which `INSERT` could write through),
    /// would change views behind the catalog's back.
    fn check_outside_catalog(&self, location: &str, doing: &str) -> Result<()> {
        let Ok(url) = datafusion::datasource::listing::ListingTableUrl::parse(location) else {
            return Ok(());
        };
        let root = self.catalog.path("");
        if url.object_store().as_str() == self.catalog.store_url().as_str()
            && url.prefix().prefix_matches(&root)
        {
            return Err(Error::PermissionDenied {
                what: format!("{doing} \"{location}\": it is inside the catalog's folder"),
                hint: "The catalog's files belong to its materialized views: change a view with \
                       REFRESH MATERIALIZED VIEW, and keep other files elsewhere."
                    .into(),
            });
        }
        Ok(())
    }

    /// `CREATE [OR REPLACE] TABLE/VIEW` must not replace a materialized view.
    pub(super) async fn check_name_free(
        &self,
        name: &ObjectName,
        if_not_exists: bool,
        or_replace: bool,
        kind: &'static str,
    ) -> Result<()> {
        let name = self.resolve(name)?;
        if if_not_exists || self.catalog.index().view(&name).is_none() {
            return Ok(());
        }
        let display = self.display(&name);
        Err(if or_replace {
            Error::WrongObjectType {
                name: display,
                expected: kind,
                hint: None,
            }
        } else {
            Error::AlreadyExists { name: display }
        })
    }

    /// A query of an unpopulated view fails when it is planned, as in
    /// PostgreSQL, rather than later when it is run.
    pub(super) async fn check_populated(&self, plan: &LogicalPlan) -> Result<()> {
        let mut views = vec![];
        plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node
                && let Ok(provider) = source_as_provider(&scan.source)
                && (provider.as_ref() as &dyn std::any::Any)
                    .downcast_ref::<MaterializedViewTable>()
                    .is_some()
            {
                views.push(provider);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        for provider in views {
            if let Some(view) =
                (provider.as_ref() as &dyn std::any::Any).downcast_ref::<MaterializedViewTable>()
            {
                view.latest_snapshot().await?;
            }
        }
        Ok(())
    }
}

/// `v VERSION AS OF n` in `statement` read as `materialized_view_at('v',
/// n) AS v`, wherever a query sits (see
/// [`crate::versioned::rewrite_version_clauses`]).
fn rewrite_versions(statement: &mut DFStatement) -> Result<()> {
    match statement {
        DFStatement::Statement(inner) => crate::versioned::rewrite_version_clauses(inner.as_mut()),
        DFStatement::Explain(explain) => rewrite_versions(explain.statement.as_mut()),
        DFStatement::CopyTo(copy) => match &mut copy.source {
            datafusion::sql::parser::CopyToSource::Query(query) => {
                crate::versioned::rewrite_version_clauses(query.as_mut())
            }
            datafusion::sql::parser::CopyToSource::Relation(_) => Ok(()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dml_targets_cover_every_form() {
        let targets = |sql: &str| {
            let statements = crate::sql::parse_sql(sql, "generic", 50).unwrap();
            let Statement::DataFusion(s) = &statements[0] else {
                panic!()
            };
            let DFStatement::Statement(s) = s.as_ref() else {
                panic!()
            };
            dml_targets(s)
                .into_iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(targets("INSERT INTO v VALUES (1)"), ["v"]);
        assert_eq!(targets("UPDATE s.v SET a = 1"), ["s.v"]);
        assert_eq!(targets("DELETE FROM v WHERE a = 1"), ["v"]);
        assert_eq!(targets("TRUNCATE TABLE v"), ["v"]);
        assert!(targets("SELECT 1").is_empty());
    }
}
