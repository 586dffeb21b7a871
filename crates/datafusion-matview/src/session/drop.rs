//! `DROP MATERIALIZED VIEW`, `DROP TABLE` / `DROP VIEW` and `DROP SCHEMA ...
//! CASCADE`: dependency checks and the catalog commit.

use super::*;

/// Which dependents stop a DROP without CASCADE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protect {
    /// Any (the view statements, as in PostgreSQL).
    AnyDependent,
    /// Only a materialized view among them (DROP TABLE / DROP VIEW, which
    /// otherwise behave as in DataFusion).
    MaterializedDependents,
}

impl MatviewSession {
    /// Runs `DROP MATERIALIZED VIEW` as [`Self::sql`] does, and returns
    /// what CASCADE dropped with the named views: each dependent's name and
    /// kind (`materialized view`, `view`), in the order PostgreSQL names
    /// them in its `drop cascades to ...` notices.
    pub async fn drop_materialized_views(
        &self,
        drop: &DropMaterializedView,
    ) -> Result<Vec<(QualifiedName, &'static str)>> {
        self.sync().await?;
        self.drop_synced(drop).await
    }

    /// [`Self::drop_materialized_views`] once the session has caught up
    /// with the catalog (the statement dispatcher has).
    pub(super) async fn drop_synced(
        &self,
        drop: &DropMaterializedView,
    ) -> Result<Vec<(QualifiedName, &'static str)>> {
        let cascaded = self
            .run_drop(drop)
            .await
            .map_err(|e| self.refused("DROP MATERIALIZED VIEW", e))?;
        Ok(cascaded.into_iter().map(|(n, k)| (n, k.as_str())).collect())
    }

    pub(super) async fn run_drop(
        &self,
        drop: &DropMaterializedView,
    ) -> Result<Vec<(QualifiedName, Kind)>> {
        let index = self.catalog.reload().await?;
        let mut targets = vec![];
        for name in &drop.names {
            let name = self.resolve(name)?;
            match self.kind_of(&index, &name).await? {
                Some(Kind::MaterializedView) => targets.push((name, Kind::MaterializedView)),
                Some(other) => {
                    return Err(Error::WrongObjectType {
                        name: self.display(&name),
                        expected: "materialized view",
                        hint: Some(other.drop_hint()),
                    });
                }
                None if drop.if_exists => {}
                None => {
                    return Err(Error::NotFound {
                        name: self.display(&name),
                    });
                }
            }
        }
        self.drop_with_dependents(&index, &targets, drop.cascade, Protect::AnyDependent)
            .await
    }

    /// Drops `targets` (all of one statement); with `cascade` their
    /// dependents first, otherwise refuses when there are any that
    /// `protect` counts. Returns the dependents dropped.
    pub(super) async fn drop_with_dependents(
        &self,
        index: &Index,
        targets: &[(QualifiedName, Kind)],
        cascade: bool,
        protect: Protect,
    ) -> Result<Vec<(QualifiedName, Kind)>> {
        let mut dependents = self.dependents(index, targets).await?;
        if protect == Protect::MaterializedDependents
            && !dependents
                .iter()
                .any(|(_, kind, _, _)| *kind == Kind::MaterializedView)
        {
            // Only plain views: DataFusion drops the object alone and
            // leaves them (they keep the plan they were created with).
            dependents.clear();
        }
        if !dependents.is_empty() && !cascade {
            return Err(Error::DependentObjects {
                object: match targets {
                    [(name, kind)] => {
                        Some(format!("{} {}", kind.as_str(), self.display_quoted(name)))
                    }
                    _ => None,
                },
                details: self.describe_dependents(&dependents),
            });
        }
        let cascaded: Vec<(QualifiedName, Kind)> =
            dependents.into_iter().map(|(d, k, _, _)| (d, k)).collect();
        // Dependents deepest first, then the targets.
        let mut order: Vec<(QualifiedName, Kind)> = cascaded.iter().rev().cloned().collect();
        order.extend(targets.iter().cloned());
        // Out of the session only once the catalog has forgotten them: a
        // refused commit leaves everything as it was.
        let deregister_views = || -> Result<()> {
            for (name, kind) in &order {
                if *kind == Kind::View {
                    self.deregister(name)?;
                }
            }
            Ok(())
        };
        let dropped: Vec<QualifiedName> = order
            .iter()
            .filter(|(_, k)| *k == Kind::MaterializedView)
            .map(|(n, _)| n.clone())
            .collect();
        let views: Vec<&QualifiedName> = order
            .iter()
            .filter(|(_, k)| *k == Kind::View)
            .map(|(n, _)| n)
            .collect();
        // Nothing of the index to change (a table the statement drops is
        // forgotten by the caller, in a commit of its own): no version.
        let remembered = self.catalog.index();
        if dropped.is_empty()
            && !views
                .iter()
                .any(|n| remembered.relations.iter().any(|r| &r.name == *n))
        {
            deregister_views()?;
            return Ok(cascaded);
        }
        // Checked again at every attempt of the commit: a view another
        // session created over one of them since the check above stops it.
        let commit = IndexCommit::default()
            .require(no_dependents(&order))
            .updates(dropped.iter().cloned().map(IndexUpdate::RemoveView))
            .updates(
                views
                    .iter()
                    .map(|n| IndexUpdate::RemoveRelation((*n).clone())),
            );
        self.catalog.commit(&commit).await?;
        for name in &views {
            self.applied(name, None);
        }
        deregister_views()?;
        for name in &dropped {
            self.deregister(name)?;
        }
        self.cleanup_expired().await?;
        Ok(cascaded)
    }

    /// `materialized view m depends on table t`, one line per dependent.
    pub(super) fn describe_dependents(
        &self,
        dependents: &[(QualifiedName, Kind, QualifiedName, Kind)],
    ) -> Vec<String> {
        dependents
            .iter()
            .map(|(dep, dep_kind, on, on_kind)| {
                format!(
                    "{} {} depends on {} {}",
                    dep_kind.as_str(),
                    self.display_quoted(dep),
                    on_kind.as_str(),
                    self.display_quoted(on)
                )
            })
            .collect()
    }

    /// Every object that depends on one of `roots`, directly or through
    /// other dependents, breadth first, each once, as
    /// `(dependent, its kind, what it depends on, that one's kind)`.
    /// Materialized views reading a relation come from the index's
    /// readers (one block of a checkpoint each), plain views from the
    /// session.
    pub(super) async fn dependents(
        &self,
        index: &Index,
        roots: &[(QualifiedName, Kind)],
    ) -> Result<Vec<(QualifiedName, Kind, QualifiedName, Kind)>> {
        let plain = self.plain_view_sources().await?;
        let mut plain_readers: HashMap<&QualifiedName, Vec<&QualifiedName>> = HashMap::new();
        for (view, source) in &plain {
            plain_readers.entry(source).or_default().push(view);
        }
        let mut seen: BTreeSet<QualifiedName> = roots.iter().map(|(n, _)| n.clone()).collect();
        let mut queue: VecDeque<(QualifiedName, Kind)> = roots.iter().cloned().collect();
        let mut out = vec![];
        while let Some((name, kind)) = queue.pop_front() {
            let readers = index
                .views
                .readers_of(&name)
                .into_iter()
                .map(|r| (r, Kind::MaterializedView))
                .chain(
                    plain_readers
                        .get(&name)
                        .into_iter()
                        .flatten()
                        .map(|r| ((*r).clone(), Kind::View)),
                );
            for (dependent, dependent_kind) in readers {
                if seen.insert(dependent.clone()) {
                    out.push((dependent.clone(), dependent_kind, name.clone(), kind));
                    queue.push_back((dependent, dependent_kind));
                }
            }
        }
        index.views.failure().map_or(Ok(()), |(path, reason)| {
            Err(Error::CorruptManifest { path, reason })
        })?;
        Ok(out)
    }

    /// `(plain view, what it reads)` for every plain view registered in the
    /// session (or remembered by the catalog), in the views' name order.
    async fn plain_view_sources(&self) -> Result<Vec<(QualifiedName, QualifiedName)>> {
        let mut views = vec![];
        for catalog_name in self.ctx.catalog_names() {
            let Some(catalog) = self.ctx.catalog(&catalog_name) else {
                continue;
            };
            for schema_name in catalog.schema_names() {
                if schema_name == "information_schema" {
                    continue;
                }
                let Some(schema) = catalog.schema(&schema_name) else {
                    continue;
                };
                // Not the materialized views: the index has those.
                let names = match (schema.as_ref() as &dyn std::any::Any)
                    .downcast_ref::<crate::schema::MatviewSchemaProvider>()
                {
                    Some(matviews) => matviews.other_table_names(),
                    None => schema.table_names(),
                };
                for table_name in names {
                    let name = QualifiedName::new(&catalog_name, &schema_name, &table_name);
                    let Some(table) = schema.table(&table_name).await? else {
                        continue;
                    };
                    if table.table_type() != TableType::View {
                        continue;
                    }
                    let Some(plan) = table.get_logical_plan() else {
                        continue;
                    };
                    views.push((name, plan.into_owned()));
                }
            }
        }
        // In name order, so messages list dependents the same way each time.
        views.sort_by(|a, b| a.0.cmp(&b.0));
        let mut edges = vec![];
        for (name, plan) in views {
            // Names in a view's plan are as written; resolve them as they
            // were when the view was created.
            let (catalog, schema) = self.view_defaults(&name);
            for source in self.sources_of(&plan, &catalog, &schema).await? {
                edges.push((name.clone(), source));
            }
        }
        Ok(edges)
    }

    /// `DROP SCHEMA ... CASCADE`: drops the materialized views in the
    /// schemas and everything elsewhere that depends on their relations;
    /// DataFusion then drops the schemas with their tables and views.
    pub(super) async fn drop_schema_contents(&self, names: &[ObjectName]) -> Result<()> {
        let index = self.catalog.reload().await?;
        let (default_catalog, _) = self.defaults();
        let mut targets = vec![];
        for object in names {
            let parts: Vec<String> = object.0.iter().map(|p| p.to_string()).collect();
            let normalizer = IdentNormalizer::new(self.normalizes_idents());
            let idents: Vec<String> = object
                .0
                .iter()
                .filter_map(|p| p.as_ident().cloned())
                .map(|i| normalizer.normalize(i))
                .collect();
            let (catalog, schema) = match idents.as_slice() {
                [schema] => (default_catalog.clone(), schema.clone()),
                [catalog, schema] => (catalog.clone(), schema.clone()),
                _ => {
                    return Err(Error::NotSupported(format!(
                        "invalid schema name {}",
                        parts.join(".")
                    )));
                }
            };
            let Some(provider) = self.ctx.catalog(&catalog).and_then(|c| c.schema(&schema)) else {
                continue;
            };
            for table in provider.table_names() {
                let name = QualifiedName::new(&catalog, &schema, &table);
                if let Some(kind) = self.kind_of(&index, &name).await? {
                    targets.push((name, kind));
                }
            }
        }
        // Only view kinds are removed here; tables go with the schema.
        self.drop_with_dependents(&index, &targets, true, Protect::AnyDependent)
            .await?;
        Ok(())
    }

    /// `DROP TABLE` / `DROP VIEW`: refuses a materialized view and
    /// objects a materialized view depends on, directly or through plain
    /// views (unless CASCADE, which drops the dependents first), then lets
    /// DataFusion drop the object. An object only plain views depend on
    /// is dropped as DataFusion drops it.
    pub(super) async fn drop_relations(
        &self,
        kind: Kind,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
        statement: &DFStatement,
    ) -> Result<DataFrame> {
        if names.len() != 1 {
            // DataFusion drops one object per statement; its planner gives
            // the answer ("Multiple objects not supported").
            let plan = self
                .ctx
                .state()
                .statement_to_plan(statement.clone())
                .await?;
            return Ok(self.ctx.execute_logical_plan(plan).await?);
        }
        let index = self.catalog.reload().await?;
        let mut targets = vec![];
        let mut unrestored = BTreeSet::new();
        for object in names {
            let name = self.resolve(object)?;
            match self.kind_of(&index, &name).await? {
                Some(Kind::MaterializedView) => {
                    return Err(Error::WrongObjectType {
                        name: self.display(&name),
                        expected: kind.as_str(),
                        hint: Some(Kind::MaterializedView.drop_hint()),
                    });
                }
                // DROP VIEW of a table, DROP TABLE of a view: DataFusion's
                // answer ("View 't' doesn't exist.").
                Some(found) if found != kind => {}
                Some(_) => targets.push((name, kind)),
                // Remembered but not restored in this session (its files
                // are gone): dropping it only forgets it.
                None if index.relations.iter().any(|r| r.name == name) => {
                    unrestored.insert(name);
                }
                None => {}
            }
        }
        // Refuses without CASCADE; with it, drops the dependents (and the
        // view targets themselves, which DataFusion then finds gone). A
        // remembered relation that could not be restored still has them.
        let mut checked = targets.clone();
        checked.extend(unrestored.iter().map(|n| (n.clone(), kind)));
        self.drop_with_dependents(&index, &checked, cascade, Protect::MaterializedDependents)
            .await?;
        let DFStatement::Statement(inner) = statement else {
            unreachable!("checked by caller")
        };
        let SQLStatement::Drop {
            object_type,
            purge,
            temporary,
            table,
            restrict,
            ..
        } = inner.as_ref().clone()
        else {
            unreachable!("checked by caller")
        };
        let mut result = no_rows(&self.ctx);
        for object in names {
            let name = self.resolve(object)?;
            let gone = kind == Kind::View && targets.iter().any(|(t, _)| *t == name);
            if gone || unrestored.contains(&name) {
                continue;
            }
            let single = SQLStatement::Drop {
                object_type,
                if_exists,
                names: vec![object.clone()],
                cascade: false,
                restrict,
                purge,
                temporary,
                table: table.clone(),
            };
            let plan = self
                .ctx
                .state()
                .statement_to_plan(DFStatement::Statement(Box::new(single)))
                .await?;
            result = self.ctx.execute_logical_plan(plan).await?;
        }
        let forget: Vec<QualifiedName> = targets
            .into_iter()
            .map(|(n, _)| n)
            .chain(unrestored)
            .collect();
        let remembered = self.catalog.index();
        if forget
            .iter()
            .any(|n| remembered.relations.iter().any(|r| &r.name == n))
        {
            let forgotten: Vec<(QualifiedName, Kind)> =
                forget.iter().map(|n| (n.clone(), kind)).collect();
            let commit = IndexCommit::default()
                .require(no_dependents(&forgotten))
                .updates(forget.iter().cloned().map(IndexUpdate::RemoveRelation));
            self.catalog.commit(&commit).await?;
            for name in &forget {
                self.applied(name, None);
            }
        }
        Ok(result)
    }
}

/// That no materialized view outside `dropping` reads any of them, as
/// commit requirements (see [`Requirement::NoDependents`]).
fn no_dependents(dropping: &[(QualifiedName, Kind)]) -> Vec<Requirement> {
    let names: Vec<QualifiedName> = dropping.iter().map(|(n, _)| n.clone()).collect();
    dropping
        .iter()
        .map(|(name, kind)| Requirement::NoDependents {
            name: name.clone(),
            kind: kind.as_str().into(),
            dropping: names.clone(),
        })
        .collect()
}
