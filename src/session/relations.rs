//! Remembered relations: `CREATE EXTERNAL TABLE` and `CREATE VIEW` kept
//! in the catalog and re-created when it is opened.

use super::*;

impl MatviewSession {
    /// Re-creates a remembered relation under the defaults it was created
    /// with and its fully qualified name (as opening the catalog does; for
    /// retrying one that could not be restored then, e.g. once the object
    /// store it lives in is registered).
    pub async fn restore_relation(&self, relation: &RelationEntry) -> Result<()> {
        let state = state_for(
            self.ctx.state(),
            &relation.default_catalog,
            &relation.default_schema,
        );
        let plan = match state.create_logical_plan(&relation.sql).await? {
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(mut create)) => {
                create.name = relation.name.to_table_reference();
                LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create))
            }
            LogicalPlan::Ddl(DdlStatement::CreateView(mut create)) => {
                create.name = relation.name.to_table_reference();
                LogicalPlan::Ddl(DdlStatement::CreateView(create))
            }
            _ => {
                return Err(Error::NotSupported(format!(
                    "remembered statement is not CREATE EXTERNAL TABLE or CREATE VIEW: {}",
                    relation.sql
                )));
            }
        };
        if let Some(schema) = self.schema_provider(&relation.name) {
            schema.deregister_table(&relation.name.name)?;
        }
        self.ctx.execute_logical_plan(plan).await?;
        if relation.kind == RelationKind::View {
            self.created_under().insert(
                relation.name.clone(),
                (
                    relation.default_catalog.clone(),
                    relation.default_schema.clone(),
                ),
            );
        }
        Ok(())
    }

    /// After `statement` ran: remember the relation it created.
    pub(super) async fn remember(
        &self,
        statement: &DFStatement,
        text: Option<&str>,
        existed: bool,
    ) -> Result<()> {
        let (name, kind, if_not_exists) = match statement {
            DFStatement::CreateExternalTable(create) => (
                &create.name,
                RelationKind::ExternalTable,
                create.if_not_exists,
            ),
            DFStatement::Statement(inner) => match inner.as_ref() {
                SQLStatement::CreateView(view) if !view.materialized && !view.temporary => {
                    (&view.name, RelationKind::View, view.if_not_exists)
                }
                _ => return Ok(()),
            },
            _ => return Ok(()),
        };
        if existed && if_not_exists {
            return Ok(());
        }
        // A table over what was piped into this process (dfmv's and
        // datafusion-cli's `stdin://`) cannot come back in another one.
        if let DFStatement::CreateExternalTable(create) = statement
            && create.locations.iter().any(|l| {
                l.get(..8)
                    .is_some_and(|scheme| scheme.eq_ignore_ascii_case("stdin://"))
            })
        {
            return Ok(());
        }
        let (default_catalog, default_schema) = self.defaults();
        let text = text.map_or_else(|| statement.to_string(), str::to_owned);
        let (sql, withheld_options) = match kind {
            RelationKind::ExternalTable => {
                let (dialect, _) = crate::sql::parser_settings(&self.ctx);
                without_secret_options(&text, &dialect)?
            }
            RelationKind::View => (text, vec![]),
        };
        let entry = RelationEntry {
            name: self.resolve(name)?,
            kind,
            sql,
            default_catalog,
            default_schema,
            withheld_options,
        };
        self.catalog
            .commit(|m| {
                m.upsert_relation(entry.clone());
                Ok(())
            })
            .await?;
        self.applied(&entry.name, Some(&entry));
        if existed {
            // Plain views over what was replaced read the new definition,
            // as they do in every other process (which re-create them).
            self.replan_remembered_views(Some(&entry.name)).await?;
        }
        Ok(())
    }

    /// Re-creates every remembered plain view but `except` from its SQL,
    /// against the relations registered now: after a relation they may
    /// read was created, replaced or dropped. One that no longer plans is
    /// dropped from this session (with a warning), as a new process would
    /// fail to restore it.
    pub(super) async fn replan_remembered_views(
        &self,
        except: Option<&QualifiedName>,
    ) -> Result<()> {
        let views = self
            .catalog
            .relations()
            .into_iter()
            .filter(|r| r.kind == RelationKind::View && Some(&r.name) != except);
        for view in views {
            if let Err(e) = self.restore_relation(&view).await {
                log::warn!(
                    "could not re-create view {} over the relations as they are now: {e}",
                    self.display(&view.name)
                );
                self.deregister(&view.name)?;
            }
        }
        Ok(())
    }
}
