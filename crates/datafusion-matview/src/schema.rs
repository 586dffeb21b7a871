//! Materialized views as tables of a DataFusion schema, found on demand.
//!
//! Opening a catalog registers no view: each schema that may hold views is
//! wrapped in a [`MatviewSchemaProvider`], which answers `table(name)` from
//! the catalog's index and the view's own log when a query names the view,
//! and lists the index's views beside the schema's own tables. So opening a
//! catalog of 100,000 views reads its index and nothing per view.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::SessionState;
use datafusion::prelude::SessionContext;

use crate::catalog::Catalog;
use crate::spec::{QualifiedName, RelationEntry, RelationKind, ViewVersion};
use crate::table::MaterializedViewTable;

/// The default catalog and schema of a session, read when needed.
pub type Defaults = Arc<dyn Fn() -> Option<(String, String)> + Send + Sync>;

/// The defaults of `ctx`'s session, without keeping the session alive.
pub fn defaults_of(ctx: &SessionContext) -> Defaults {
    let state = Arc::downgrade(&ctx.state_ref());
    Arc::new(move || {
        let state = state.upgrade()?;
        let state = state.read();
        let options = &state.config().options().catalog;
        Some((
            options.default_catalog.clone(),
            options.default_schema.clone(),
        ))
    })
}

/// What a [`MatviewSchemaProvider`] needs to build the catalog's
/// remembered relations: the sessions that share its schemas (a session
/// and its forks, none kept alive by it), and where they record the
/// defaults their plain views were planned under.
#[derive(Clone)]
pub struct LazyRelations {
    pub(crate) sessions: Family,
    pub(crate) created_under: crate::functions::ViewDefaults,
}

/// A session, not kept alive.
#[derive(Clone)]
pub(crate) struct SessionOf {
    alive: Arc<dyn Fn() -> bool + Send + Sync>,
    state: Arc<dyn Fn() -> Option<SessionState> + Send + Sync>,
}

/// [`SessionOf`] for `ctx`.
pub(crate) fn session_of(ctx: &SessionContext) -> SessionOf {
    let state = Arc::downgrade(&ctx.state_ref());
    let weak = state.clone();
    SessionOf {
        alive: Arc::new(move || weak.strong_count() > 0),
        state: Arc::new(move || Some(state.upgrade()?.read().clone())),
    }
}

/// A session and its forks, which share one catalog list: a schema
/// wrapper installed by any of them (a fork for one request, say) builds
/// with whichever still lives.
#[derive(Clone)]
pub(crate) struct Family(Arc<Mutex<Vec<SessionOf>>>);

impl Family {
    /// The family of `ctx`'s session alone.
    pub(crate) fn of(ctx: &SessionContext) -> Self {
        Self(Arc::new(Mutex::new(vec![session_of(ctx)])))
    }

    /// Adds a fork, forgetting the members gone.
    pub(crate) fn join(&self, ctx: &SessionContext) {
        let mut members = self.0.lock().unwrap_or_else(|e| e.into_inner());
        members.retain(|m| (m.alive)());
        members.push(session_of(ctx));
    }

    /// The state of a live member.
    fn state(&self) -> Option<SessionState> {
        let members = self.0.lock().unwrap_or_else(|e| e.into_inner());
        members.iter().find_map(|m| (m.state)())
    }
}

tokio::task_local! {
    /// The remembered relations being built by this task, innermost last.
    static BUILDING: Vec<QualifiedName>;
}

/// A schema's own tables and the catalog's materialized views in it.
pub struct MatviewSchemaProvider {
    inner: Arc<dyn SchemaProvider>,
    catalog: Arc<Catalog>,
    catalog_name: String,
    schema_name: String,
    /// The session's default catalog and schema, which names are shown
    /// under in errors.
    defaults: Defaults,
    /// The provider last made for each view, reused while the view's state
    /// is the same.
    tables: Mutex<HashMap<String, Arc<MaterializedViewTable>>>,
    /// Set when the session remembers relations.
    lazy: Option<LazyRelations>,
}

impl std::fmt::Debug for MatviewSchemaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatviewSchemaProvider")
            .field("inner", &self.inner)
            .field("catalog", &self.catalog.location())
            .field(
                "schema",
                &format!("{}.{}", self.catalog_name, self.schema_name),
            )
            .finish()
    }
}

impl MatviewSchemaProvider {
    /// The schema provider that wraps `inner`.
    pub fn new(
        inner: Arc<dyn SchemaProvider>,
        catalog: Arc<Catalog>,
        catalog_name: &str,
        schema_name: &str,
        defaults: Defaults,
        lazy: Option<LazyRelations>,
    ) -> Self {
        Self {
            inner,
            catalog,
            catalog_name: catalog_name.to_owned(),
            schema_name: schema_name.to_owned(),
            defaults,
            tables: Mutex::new(HashMap::new()),
            lazy,
        }
    }

    /// The schema's own tables, without the views.
    pub fn inner(&self) -> &Arc<dyn SchemaProvider> {
        &self.inner
    }

    fn name(&self, table: &str) -> QualifiedName {
        QualifiedName::new(&self.catalog_name, &self.schema_name, table)
    }

    fn display(&self, name: &QualifiedName) -> String {
        match (self.defaults)() {
            Some((catalog, schema)) => name.short(&catalog, &schema),
            None => name.to_string(),
        }
    }

    fn provider(&self, state: Arc<ViewVersion>) -> Arc<MaterializedViewTable> {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let name = &state.view.name;
        let display = self.display(name);
        // One provider per definition, so that plans made at different
        // times name the same table.
        if let Some(table) = tables.get(&name.name)
            && table.state().view.id == state.view.id
            && table.display_name() == display
        {
            table.set_state(state);
            return Arc::clone(table);
        }
        let table = Arc::new(MaterializedViewTable::new(
            Arc::clone(&self.catalog),
            state,
            display,
        ));
        tables.insert(table.name().name.clone(), Arc::clone(&table));
        table
    }

    /// The names of the tables and views of this schema but its
    /// materialized views: what the session registered and the catalog
    /// remembers. Lists no materialized view, so it costs the same
    /// however many the schema holds.
    pub fn other_table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        self.add_remembered(&mut names);
        names
    }

    /// Adds the relations the catalog remembers in this schema (when it
    /// registers them lazily) to `names`, each once.
    fn add_remembered(&self, names: &mut Vec<String>) {
        if self.lazy.is_none() {
            return;
        }
        for relation in self.catalog.relations() {
            if relation.name.catalog == self.catalog_name
                && relation.name.schema == self.schema_name
                && !names.contains(&relation.name.name)
            {
                names.push(relation.name.name);
            }
        }
    }

    /// The views of the catalog's loaded index in this schema, by name.
    fn view_names(&self) -> Vec<String> {
        let index = self.catalog.index();
        let start = self.name("");
        index
            .views
            .range(start..)
            .take_while(|(n, _)| n.catalog == self.catalog_name && n.schema == self.schema_name)
            .map(|(n, _)| n.name.clone())
            .collect()
    }

    fn is_view(&self, table: &str) -> bool {
        self.catalog.index().view(&self.name(table)).is_some()
    }

    /// The remembered relation `table` of this schema, when this session
    /// builds remembered relations.
    fn remembered(&self, table: &str) -> Option<RelationEntry> {
        self.lazy.as_ref()?;
        self.catalog.relation(&self.name(table))
    }

    /// A table remembered before the catalog kept resolved tables has just
    /// been inferred: keeps what was inferred, so that no process infers it
    /// again, unless the catalog's entry changed meanwhile. A catalog this
    /// process may not write keeps inferring.
    async fn keep_resolved(&self, relation: &RelationEntry, table: &Arc<dyn TableProvider>) {
        let Some(resolved) = crate::session::resolved_table(table) else {
            return;
        };
        // A catalog in format 1 is migrated by its first commit, which is
        // not for a read to do.
        if self.catalog.is_format_1() {
            return;
        }
        let kept = self
            .catalog
            .commit(
                &crate::catalog::IndexCommit::new(self.display(&relation.name)).update(
                    crate::catalog::IndexUpdate::KeepResolved {
                        relation: relation.clone(),
                        resolved: resolved.clone(),
                    },
                ),
            )
            .await;
        if let Err(e) = kept {
            log::debug!(
                "did not keep the schema of {} in the catalog: {e}",
                self.display(&relation.name)
            );
        }
    }

    /// Builds the remembered relation `relation` and registers it in the
    /// schema, unless a statement of another task did first.
    async fn build(&self, relation: RelationEntry) -> DFResult<Option<Arc<dyn TableProvider>>> {
        let Some(lazy) = &self.lazy else {
            return Ok(None);
        };
        let Some(state) = lazy.sessions.state() else {
            return Err(DataFusionError::Plan(format!(
                "cannot build {}: every session over this catalog has been dropped",
                self.display(&relation.name)
            )));
        };
        let mut building = BUILDING.try_with(Clone::clone).unwrap_or_default();
        // Planning its own statement looks its name up. A table's needs
        // only to resolve, and must: answered with nothing, datafusion-cli's
        // dynamic file schema would take the name for a path and read (and
        // infer) a folder of that name under the working directory. A view
        // whose definition reaches itself must not find itself (it would
        // loop).
        if building.contains(&relation.name) {
            return Ok(match relation.kind {
                RelationKind::ExternalTable => {
                    Some(Arc::new(datafusion::datasource::empty::EmptyTable::new(
                        Arc::new(datafusion::arrow::datatypes::Schema::empty()),
                    )))
                }
                RelationKind::View => None,
            });
        }
        building.push(relation.name.clone());
        let table = BUILDING
            .scope(building, crate::session::build_relation(state, &relation))
            .await
            .map_err(|e| {
                let kind = match relation.kind {
                    RelationKind::ExternalTable => "table",
                    RelationKind::View => "view",
                };
                let mut message = format!(
                    "could not restore {kind} {} as the catalog remembers it: {e}",
                    self.display(&relation.name)
                );
                if !relation.withheld_options.is_empty() {
                    message.push_str(&format!(
                        " (its options {} carry secrets and were not stored: provide them \
                         through the environment or register the object store)",
                        relation.withheld_options.join(", ")
                    ));
                }
                DataFusionError::Plan(message)
            })?;
        if self.inner.table_exist(&relation.name.name)
            && let Some(first) = self.inner.table(&relation.name.name).await?
        {
            return Ok(Some(first));
        }
        if relation.kind == RelationKind::ExternalTable && relation.resolved.is_none() {
            self.keep_resolved(&relation, &table).await;
        }
        // Redefined while it was built (another session caught up with a
        // commit meanwhile): this statement reads what it planned with, and
        // the next builds the new definition.
        let statement = |r: &RelationEntry| RelationEntry {
            resolved: None,
            ..r.clone()
        };
        let now = self.catalog.relation(&relation.name);
        if now.as_ref().map(statement) != Some(statement(&relation)) {
            return Ok(Some(table));
        }
        self.inner
            .register_table(relation.name.name.clone(), Arc::clone(&table))?;
        if relation.kind == RelationKind::View {
            lazy.created_under
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    relation.name.clone(),
                    (relation.default_catalog, relation.default_schema),
                );
        }
        Ok(Some(table))
    }
}

#[async_trait]
impl SchemaProvider for MatviewSchemaProvider {
    fn owner_name(&self) -> Option<&str> {
        self.inner.owner_name()
    }

    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.extend(self.view_names());
        self.add_remembered(&mut names);
        names
    }

    async fn table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        let is_view = self.is_view(name);
        // A checkpoint whose views do not parse fails the statement.
        self.catalog.check_poisoned()?;
        if is_view {
            let qualified = self.name(name);
            if let Some(state) = self.catalog.view(&qualified).await? {
                return Ok(Some(self.provider(state) as Arc<dyn TableProvider>));
            }
        }
        // A table registered here first; then a remembered one; then what
        // the schema answers for other names (datafusion-cli's dynamic
        // file schema: a path), which must not stand for a remembered name.
        if !self.inner.table_exist(name)
            && let Some(relation) = self.remembered(name)
        {
            return self.build(relation).await;
        }
        self.inner.table(name).await
    }

    async fn table_type(&self, name: &str) -> DFResult<Option<TableType>> {
        if self.is_view(name) {
            return Ok(Some(TableType::Base));
        }
        if !self.inner.table_exist(name)
            && let Some(relation) = self.remembered(name)
        {
            return Ok(Some(match relation.kind {
                RelationKind::ExternalTable => TableType::Base,
                RelationKind::View => TableType::View,
            }));
        }
        self.inner.table_type(name).await
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> DFResult<Option<Arc<dyn TableProvider>>> {
        self.inner.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        self.inner.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        name == marker_name(&self.catalog)
            || self.is_view(name)
            || self.inner.table_exist(name)
            || self.remembered(name).is_some()
    }
}

/// Makes sure the schema `catalog_name.schema_name` of `ctx` (created if
/// missing) lists the views of `catalog`. Returns whether it wrapped it now.
pub fn install(
    ctx: &SessionContext,
    catalog: &Arc<Catalog>,
    catalog_name: &str,
    schema_name: &str,
    lazy: Option<LazyRelations>,
) -> DFResult<bool> {
    let provider = match ctx.catalog(catalog_name) {
        Some(c) => c,
        None => {
            let c: Arc<dyn CatalogProvider> = Arc::new(MemoryCatalogProvider::new());
            ctx.register_catalog(catalog_name, Arc::clone(&c));
            c
        }
    };
    let inner = match provider.schema(schema_name) {
        Some(s) if lists_views_of(&s, catalog) => return Ok(false),
        Some(s) => s,
        None => Arc::new(MemorySchemaProvider::new()),
    };
    let wrapper = MatviewSchemaProvider::new(
        inner,
        Arc::clone(catalog),
        catalog_name,
        schema_name,
        defaults_of(ctx),
        lazy,
    );
    provider.register_schema(schema_name, Arc::new(wrapper))?;
    Ok(true)
}

/// Whether `schema` is (or, through datafusion-cli's dynamic file schema,
/// which answers `table_names` from the schema it wraps, holds) a wrapper
/// listing `catalog`'s views. Reads no view.
pub fn lists_views_of(schema: &Arc<dyn SchemaProvider>, catalog: &Arc<Catalog>) -> bool {
    if let Some(ours) = (schema.as_ref() as &dyn Any).downcast_ref::<MatviewSchemaProvider>() {
        return Arc::ptr_eq(&ours.catalog, catalog);
    }
    // A wrapper of ours answers for this marker name.
    schema.table_exist(&marker_name(catalog))
}

/// A table name no user can create (it holds a NUL), which a
/// [`MatviewSchemaProvider`] says exists, so that a wrapper is found
/// through other schema providers wrapping it.
fn marker_name(catalog: &Arc<Catalog>) -> String {
    format!("\0dfmv:{:p}", Arc::as_ptr(catalog))
}
