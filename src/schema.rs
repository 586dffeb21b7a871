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
use datafusion::error::Result as DFResult;
use datafusion::prelude::SessionContext;

use crate::catalog::Catalog;
use crate::spec::{QualifiedName, ViewVersion};
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
    ) -> Self {
        Self {
            inner,
            catalog,
            catalog_name: catalog_name.to_owned(),
            schema_name: schema_name.to_owned(),
            defaults,
            tables: Mutex::new(HashMap::new()),
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
}

#[async_trait]
impl SchemaProvider for MatviewSchemaProvider {
    fn owner_name(&self) -> Option<&str> {
        self.inner.owner_name()
    }

    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.extend(self.view_names());
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
        self.inner.table(name).await
    }

    async fn table_type(&self, name: &str) -> DFResult<Option<TableType>> {
        if self.is_view(name) {
            return Ok(Some(TableType::Base));
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
        name == marker_name(&self.catalog) || self.is_view(name) || self.inner.table_exist(name)
    }
}

/// Makes sure the schema `catalog_name.schema_name` of `ctx` (created if
/// missing) lists the views of `catalog`. Returns whether it wrapped it now.
pub fn install(
    ctx: &SessionContext,
    catalog: &Arc<Catalog>,
    catalog_name: &str,
    schema_name: &str,
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
