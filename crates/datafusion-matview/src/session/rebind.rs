//! Plain views bound to what their names mean now.
//!
//! DataFusion plans a plain view once, when it is created, and keeps the
//! table providers it found then: after `CREATE OR REPLACE EXTERNAL TABLE
//! t` (here, or in another process whose change this one replays), a view
//! over `t` still reads the old `t`. A new process re-creates the view
//! from its SQL and reads the new one. A materialized view must equal its
//! query as a new process would run it, so before a refresh or a CREATE
//! plans its query, every plain view it reads (directly or through other
//! plain views) is planned again from its SQL, innermost first, against
//! the relations registered now.

use futures::future::BoxFuture;

use super::*;

/// How deep plain views may nest before rebinding stops.
const MAX_DEPTH: usize = 32;

impl MatviewSession {
    /// Re-plans every plain view among `sources`, and under them, from its
    /// SQL against the relations registered now (see the module docs).
    /// Returns whether any view was re-planned. A view without SQL (one
    /// registered through the API) is left as it is.
    pub(super) async fn rebind_views(&self, sources: &[QualifiedName]) -> Result<bool> {
        // The SQL of the remembered views, as the user wrote it.
        let remembered: HashMap<QualifiedName, String> = self
            .catalog
            .relations()
            .into_iter()
            .filter(|r| r.kind == RelationKind::View)
            .map(|r| (r.name, r.sql))
            .collect();
        let mut done = BTreeSet::new();
        let mut rebound = false;
        for source in sources {
            rebound |= self.rebind(source, &remembered, &mut done, 0).await?;
        }
        Ok(rebound)
    }

    fn rebind<'a>(
        &'a self,
        name: &'a QualifiedName,
        remembered: &'a HashMap<QualifiedName, String>,
        done: &'a mut BTreeSet<QualifiedName>,
        depth: usize,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            if depth > MAX_DEPTH || !done.insert(name.clone()) {
                return Ok(false);
            }
            let Some(table) = self.registered(name).await? else {
                return Ok(false);
            };
            if table.table_type() != TableType::View {
                return Ok(false);
            }
            let Some(plan) = table.get_logical_plan().map(|p| p.into_owned()) else {
                return Ok(false);
            };
            let (catalog, schema) = self.view_defaults(name);
            let mut rebound = false;
            for source in self.sources_of(&plan, &catalog, &schema).await? {
                rebound |= self.rebind(&source, remembered, done, depth + 1).await?;
            }
            // The SQL as the user wrote it when the catalog remembers it,
            // else as DataFusion kept it.
            let Some(sql) = remembered
                .get(name)
                .cloned()
                .or_else(|| table.get_table_definition().map(str::to_owned))
            else {
                return Ok(rebound);
            };
            let state = state_for(self.ctx.state(), &catalog, &schema);
            let LogicalPlan::Ddl(DdlStatement::CreateView(mut create)) =
                state.create_logical_plan(&sql).await?
            else {
                return Ok(rebound);
            };
            create.name = name.to_table_reference();
            create.or_replace = true;
            self.ctx
                .execute_logical_plan(LogicalPlan::Ddl(DdlStatement::CreateView(create)))
                .await?;
            Ok(true)
        })
    }
}
