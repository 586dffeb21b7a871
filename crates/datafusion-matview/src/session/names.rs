//! Names (resolution, display, what a name is) and the session's
//! schemas that list materialized views.

use super::*;

impl MatviewSession {
    pub(super) fn defaults(&self) -> (String, String) {
        crate::sql::defaults(&self.ctx)
    }

    /// Whether unquoted identifiers are lower-cased (DataFusion's setting).
    pub(super) fn normalizes_idents(&self) -> bool {
        self.ctx
            .state_ref()
            .read()
            .config()
            .options()
            .sql_parser
            .enable_ident_normalization
    }

    pub(super) fn resolve(&self, name: &ObjectName) -> Result<QualifiedName> {
        check_name(name)?;
        let reference = object_name_to_table_reference(name.clone(), self.normalizes_idents())?;
        Ok(self.resolve_reference(&reference))
    }

    pub(super) fn resolve_reference(&self, reference: &TableReference) -> QualifiedName {
        let (catalog, schema) = self.defaults();
        reference.clone().resolve(&catalog, &schema).into()
    }

    /// `name` as messages show it: the shortest form that means it under
    /// the session's default catalog and schema.
    pub fn display(&self, name: &QualifiedName) -> String {
        let (catalog, schema) = self.defaults();
        name.short(&catalog, &schema)
    }

    /// [`Self::display`] with each part quoted as PostgreSQL does in the
    /// DETAIL of dependency errors.
    pub(super) fn display_quoted(&self, name: &QualifiedName) -> String {
        let (catalog, schema) = self.defaults();
        name.short_quoted(&catalog, &schema)
    }

    pub(super) fn schema_provider(&self, name: &QualifiedName) -> Option<Arc<dyn SchemaProvider>> {
        self.ctx.catalog(&name.catalog)?.schema(&name.schema)
    }

    /// The table registered in the session under `name`, if any.
    pub(super) async fn registered(
        &self,
        name: &QualifiedName,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        let catalogs = Arc::clone(self.ctx.state_ref().read().catalog_list());
        crate::resolve::registered(&catalogs, name).await
    }

    /// What `name` is: a materialized view of the catalog, or a table or
    /// view of the session.
    pub(super) async fn kind_of(
        &self,
        index: &Index,
        name: &QualifiedName,
    ) -> Result<Option<Kind>> {
        if index.view(name).is_some() {
            return Ok(Some(Kind::MaterializedView));
        }
        // A dynamic file catalog (datafusion-cli's) answers `table()` for
        // any name that is a path to a file; only a registered name is taken.
        let exists = self
            .schema_provider(name)
            .is_some_and(|s| s.table_exist(&name.name));
        if !exists {
            return Ok(None);
        }
        Ok(self.registered(name).await?.map(|p| {
            if p.table_type() == TableType::View {
                Kind::View
            } else {
                Kind::Table
            }
        }))
    }

    /// Makes the schema of view `name` list the catalog's views (see
    /// [`crate::schema`]), creating its catalog and schema in the session
    /// if this process has not yet. Nothing per view is registered.
    pub(super) fn register_view(&self, name: &QualifiedName) -> Result<()> {
        // A schema that lists the views answers for this one (also through
        // datafusion-cli's dynamic file schema, which wraps it); a schema
        // dropped and created again does not.
        let listed = self
            .schema_provider(name)
            .is_some_and(|s| s.table_exist(&name.name));
        if !listed {
            crate::schema::install(
                &self.ctx,
                &self.catalog,
                &name.catalog,
                &name.schema,
                self.lazy_relations(),
            )?;
        }
        Ok(())
    }

    /// Makes schema `catalog.schema` list the catalog's views, without
    /// reading the index's views: it is wrapped unless it already is.
    fn install_schema(&self, catalog: &str, schema: &str) -> Result<()> {
        let wrapped = self
            .ctx
            .catalog(catalog)
            .and_then(|c| c.schema(schema))
            .is_some_and(|s| crate::schema::lists_views_of(&s, &self.catalog));
        if !wrapped {
            crate::schema::install(
                &self.ctx,
                &self.catalog,
                catalog,
                schema,
                self.lazy_relations(),
            )?;
        }
        Ok(())
    }

    /// What a schema wrapper needs to build remembered relations, when
    /// this session remembers them.
    fn lazy_relations(&self) -> Option<crate::schema::LazyRelations> {
        self.options
            .remember_relations
            .then(|| crate::schema::LazyRelations {
                sessions: self.family.clone(),
                created_under: Arc::clone(&self.views_created_under),
            })
    }

    /// Removes a plain view or table from the session (a materialized
    /// view leaves with its index entry).
    pub(super) fn deregister(&self, name: &QualifiedName) -> Result<()> {
        if let Some(schema) = self.schema_provider(name) {
            schema.deregister_table(&name.name)?;
        }
        Ok(())
    }

    pub(super) fn created_under(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<QualifiedName, (String, String)>> {
        self.views_created_under
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The defaults a plain view's plan was made under: recorded when this
    /// session created or restored it, else the session's current ones.
    pub(super) fn view_defaults(&self, name: &QualifiedName) -> (String, String) {
        if let Some(defaults) = self.created_under().get(name) {
            return defaults.clone();
        }
        self.defaults()
    }

    pub(super) fn synced(&self) -> std::sync::MutexGuard<'_, Synced> {
        self.synced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Catches up with commits of other sessions and processes: loads the
    /// latest catalog version (two `HEAD` requests when nothing changed)
    /// and registers, replaces or removes views to match it. Every
    /// statement run through [`Self::sql`] does this first.
    pub async fn sync(&self) -> Result<()> {
        self.sync_base().await.map(drop)
    }

    /// [`Self::sync`], returning the index it loaded: the base state a
    /// statement works from, so that it loads the index once.
    pub(crate) async fn sync_base(&self) -> Result<Arc<Index>> {
        let version = self.catalog.load_latest().await?;
        let base = self.catalog.index();
        if self.synced().version == version {
            return Ok(base);
        }
        for (catalog, schema) in self.catalog.schemas() {
            self.install_schema(&catalog, &schema)?;
        }
        if self.options.remember_relations {
            for relation in self.catalog.relations() {
                self.install_schema(&relation.name.catalog, &relation.name.schema)?;
            }
            self.sync_relations().await?;
        }
        self.synced().version = version;
        Ok(base)
    }

    /// Brings the remembered relations of this session up to the loaded
    /// index: those another process created, replaced or dropped since
    /// this one last looked are removed from this session, to be built
    /// from the catalog's definition when a statement next names them;
    /// then, if any was, so is every remembered plain view, so that views
    /// over a replaced table read the new one.
    async fn sync_relations(&self) -> Result<()> {
        let now = self.catalog.relations();
        let applied = std::mem::take(&mut self.synced().relations);
        let removed = applied
            .keys()
            .filter(|name| !now.iter().any(|r| &r.name == *name));
        let changed = now
            .iter()
            .filter(|r| applied.get(&r.name) != Some(*r))
            .map(|r| &r.name);
        let mut any = false;
        for name in removed.chain(changed) {
            any = true;
            if self.catalog.index().view(name).is_none() {
                self.deregister(name)?;
            }
            self.created_under().remove(name);
        }
        if any {
            self.unbind_remembered_views(None)?;
        }
        self.synced().relations = now.into_iter().map(|r| (r.name.clone(), r)).collect();
        Ok(())
    }

    /// Records that this session created `relation` as the catalog now
    /// remembers it (or, `None`, forgot `name`), so that catching up with
    /// the index does not create it again.
    pub(super) fn applied(&self, name: &QualifiedName, relation: Option<&RelationEntry>) {
        let mut registrations = self.synced();
        match relation {
            Some(relation) => registrations
                .relations
                .insert(name.clone(), relation.clone()),
            None => registrations.relations.remove(name),
        };
    }
}
