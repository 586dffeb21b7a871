//! `CREATE MATERIALIZED VIEW` (and adopting existing data).

use super::*;
use crate::catalog::index_entry;
use crate::history::Trigger;
use crate::refresh::write::{Reads, Watch};

/// What [`MatviewSession::prepare_create`] decided.
enum Prepared {
    /// IF NOT EXISTS found the name taken.
    Skipped(CreateOutcome),
    /// Nothing stands in the way.
    Ready(Box<ReadyCreate>),
}

/// A CREATE that passed its checks, before it writes anything.
struct ReadyCreate {
    name: QualifiedName,
    display: String,
    /// The id of the definition it replaces (OR REPLACE).
    replaced: Option<String>,
    /// The state and plan to compute it with.
    state: datafusion::execution::SessionState,
    plan: LogicalPlan,
    /// The new definition, without data.
    entry: ViewEntry,
}

impl MatviewSession {
    /// Creates a materialized view whose first snapshot is existing Parquet
    /// data, copied into the catalog, instead of running `query`: for
    /// adopting results computed the old way (`COPY ... TO`). `name` is
    /// written as in SQL (quote it if needed); `files` are paths or URLs of
    /// object stores registered in the session. The files' columns must be
    /// the query's. The view's freshness is `unknown` (nothing records which
    /// state of the sources the data was computed from) and its first
    /// REFRESH is full; afterwards it refreshes like any other.
    pub async fn adopt(&self, name: &str, query: &str, files: &[String]) -> Result<()> {
        let sql = format!("CREATE MATERIALIZED VIEW {name} AS {query}");
        let (dialect, recursion_limit) = crate::sql::parser_settings(&self.ctx);
        let mut statements = crate::sql::parse_sql(&sql, &dialect, recursion_limit)?;
        match (statements.pop(), statements.is_empty()) {
            (Some(Statement::Create(create)), true) => {
                self.create(&create, Some(files)).await?;
                Ok(())
            }
            _ => Err(Error::NotSupported(format!(
                "cannot adopt \"{name}\": the query must be a single SELECT"
            ))),
        }
    }

    /// Runs `CREATE MATERIALIZED VIEW` (as [`Self::execute`] does) and says
    /// what it did.
    pub async fn create_materialized_view(
        &self,
        create: &CreateMaterializedView,
    ) -> Result<CreateOutcome> {
        self.sync().await?;
        self.create(create, None)
            .await
            .map_err(|e| self.refused("CREATE MATERIALIZED VIEW", e))
    }

    /// Checks that `create` would run, as CREATE checks it before it
    /// computes anything (the name, the query's plan, the columns views
    /// reading it rely on), without changing anything: a server answers
    /// these errors before it queues the population as a job.
    pub async fn check_create(&self, create: &CreateMaterializedView) -> Result<()> {
        self.check_create_columns(create).await.map(|_| ())
    }

    /// [`Self::check_create`], answering the columns the view would have
    /// (named as its column list says); `None` when IF NOT EXISTS finds
    /// the name taken.
    pub async fn check_create_columns(
        &self,
        create: &CreateMaterializedView,
    ) -> Result<Option<Schema>> {
        self.sync().await?;
        Ok(match self.prepare_create(create).await? {
            Prepared::Skipped(_) => None,
            Prepared::Ready(ready) => Some(ready.plan.schema().as_arrow().clone()),
        })
    }

    pub(super) async fn create(
        &self,
        create: &CreateMaterializedView,
        import: Option<&[String]>,
    ) -> Result<CreateOutcome> {
        let ReadyCreate {
            name,
            display,
            replaced,
            state,
            plan,
            mut entry,
        } = match self.prepare_create(create).await? {
            Prepared::Skipped(outcome) => return Ok(outcome),
            Prepared::Ready(ready) => *ready,
        };
        // A CREATE that computes the view's data is its first refresh
        // attempt, in the history.
        let mut recording = (import.is_none() && create.with_data).then(|| {
            let mut recording = self.history.start(&name, Trigger::Create, None);
            let attempt = recording.attempt();
            attempt.definition = entry.id.clone();
            attempt.mode = Some(RefreshMode::Full.as_str().to_owned());
            attempt.reason = Some("CREATE MATERIALIZED VIEW".to_owned());
            recording
        });
        let reads = Reads::default();
        let measured = !on_cluster(&state);
        let created = Box::pin(async {
            // Cleanup leaves what this write makes alone until it commits.
            let lease = self.catalog.lease(&entry, true).await?;
            if import.is_some() || create.with_data {
                // Adopted data comes with no fingerprints: nothing says which
                // state of the sources it was computed from (it may predate
                // their files of today), so the view is `unknown` and its
                // first refresh is full.
                let fingerprints = match import {
                    Some(_) => vec![],
                    None => {
                        self.fingerprinter()
                            .sources(&entry.definition.sources)
                            .await?
                    }
                };
                if let Some(recording) = recording.as_mut() {
                    recording.attempt().sources =
                        Some(self.sources_read(&fingerprints, &BTreeMap::new()));
                }
                entry.snapshot = Some(match import {
                    Some(files) => {
                        import_snapshot(&state, &self.catalog, &entry, files, fingerprints, &lease)
                            .await?
                    }
                    None => {
                        let progress = self.progress.as_ref().map(|l| (display.as_str(), l));
                        let shape = Shape::of(&plan);
                        let write = self
                            .full_write(plan, &shape, &fingerprints, &Default::default(), None)
                            .await?;
                        // Held to the files it fingerprinted, as a refresh
                        // is: a listing cached elsewhere (a Ballista
                        // scheduler's) may not have the newest files yet,
                        // and the view would be `fresh` without them.
                        let write =
                            write.pin(&self.pins(&fingerprints, &Default::default()).await?)?;
                        let plans = write.plans();
                        match write_snapshot(
                            state,
                            &self.catalog,
                            &entry,
                            write,
                            Watch {
                                progress,
                                reads: &reads,
                            },
                            fingerprints,
                            &lease,
                        )
                        .await
                        {
                            Ok(snapshot) => snapshot,
                            Err(e) => return Err(self.explain_write_error(&plans, e).await),
                        }
                    }
                });
            }
            // What it reads and the catalog holds must still be there when it
            // commits: another session may drop it meanwhile.
            let held = self.catalog.index();
            let sources = entry
                .definition
                .sources
                .iter()
                .filter(|s| held.view(s).is_some() || held.relations.iter().any(|r| &r.name == *s))
                .map(|s| Requirement::SourceExists(s.clone()));
            let requirements: Vec<Requirement> = [match &replaced {
                None => Requirement::ViewAbsent(name.clone()),
                Some(id) => Requirement::ViewIs {
                    name: name.clone(),
                    id: id.clone(),
                },
            }]
            .into_iter()
            .chain(sources)
            .collect();
            // The definition's own log first: nothing references it until the
            // index commit does.
            let slot = lease.slot.clone().unwrap_or_else(crate::spec::new_id);
            let logged = async {
                if let Some(s) = &entry.snapshot {
                    lease.confirm(&self.catalog, s).await?;
                }
                self.catalog.create_view_log_in(&entry, slot).await
            };
            let slot = match logged.await {
                Ok(slot) => slot,
                Err(e) => {
                    if let Some(s) = &entry.snapshot {
                        let _ = self.catalog.delete_dir(&entry.snapshot_dir(s)).await;
                    }
                    return Err(e);
                }
            };
            let indexed = index_entry(&entry, slot.clone());
            let commit = IndexCommit::new(&display)
                .require(requirements)
                .update(IndexUpdate::PutView(indexed));
            match self.catalog.commit(&commit).await {
                Ok(_) => lease.release().await,
                Err(failure) => {
                    // Only what provably did not land is ours to delete; what
                    // may still land keeps its lease until it expires.
                    if failure.is_rejected() {
                        if let Some(s) = &entry.snapshot {
                            let _ = self.catalog.delete_dir(&entry.snapshot_dir(s)).await;
                        }
                        let _ = self.catalog.discard_view_log(&slot).await;
                        lease.release().await;
                    } else {
                        lease.keep();
                    }
                    return Err(failure.into());
                }
            };
            self.register_view(&name)?;
            if replaced.is_some() {
                self.cleanup_expired().await?;
            }
            Ok(CreateOutcome {
                view: display,
                action: match replaced {
                    Some(_) => CreateAction::Replaced,
                    None => CreateAction::Created,
                },
                rows_written: entry.snapshot.as_ref().map(|s| s.row_count),
                version: 1,
            })
        })
        .await;
        if let Some(mut recording) = recording.take() {
            if let Ok(outcome) = &created {
                let attempt = recording.attempt();
                attempt.version = Some(outcome.version);
                attempt.rows_written = outcome.rows_written;
                attempt.rows_deleted = Some(0);
                attempt.files_read = measured.then(|| reads.files());
                attempt.bytes_read = measured.then(|| reads.bytes());
            }
            recording.finish(created.as_ref().err()).await;
        }
        created
    }

    /// Everything CREATE decides before it writes: the name's checks, the
    /// plan, and the new definition.
    async fn prepare_create(&self, create: &CreateMaterializedView) -> Result<Prepared> {
        let name = self.resolve(&create.name)?;
        let mut auto_refresh = crate::spec::AutoRefresh::default();
        auto_refresh
            .set(&create.options)
            .map_err(Error::InvalidOption)?;
        let display = self.display(&name);
        // The query is planned over the files there now.
        crate::refresh::plan::forget_listings(&self.ctx.state_ref().read());
        let index = self.catalog.reload().await?;
        let replaced = index.view(&name).map(|e| e.id.clone());
        match self.kind_of(&index, &name).await? {
            None => {}
            Some(kind) if create.if_not_exists => {
                let version = match kind {
                    Kind::MaterializedView => {
                        self.catalog.view(&name).await?.map_or(0, |v| v.version)
                    }
                    _ => 0,
                };
                return Ok(Prepared::Skipped(CreateOutcome {
                    view: display,
                    action: CreateAction::Skipped,
                    rows_written: None,
                    version,
                }));
            }
            Some(Kind::MaterializedView) if create.or_replace => {}
            Some(_) if create.or_replace => {
                return Err(Error::WrongObjectType {
                    name: display,
                    expected: "materialized view",
                    hint: None,
                });
            }
            Some(_) => return Err(Error::AlreadyExists { name: display }),
        }
        if self.schema_provider(&name).is_none() {
            return Err(Error::SchemaNotFound {
                name: name.schema.clone(),
            });
        }

        let (default_catalog, default_schema) = self.defaults();
        let state = state_for(self.ctx.state(), &default_catalog, &default_schema);
        let mut query = create.query.clone();
        crate::versioned::rewrite_version_clauses(query.as_mut())?;
        if crate::versioned::reads_versions(query.as_mut()) {
            return Err(Error::NotSupported(format!(
                "a materialized view cannot be defined over {}() or {}(): they read other views' versions, which freshness does not follow",
                crate::versioned::AT_FUNCTION,
                crate::versioned::CHANGES_FUNCTION
            )));
        }
        let sql = query.to_string();
        let mut plan = state.create_logical_plan(&sql).await?;
        // Plain views read the relations their names mean now, as in a new
        // process (see `rebind`); planned again if one had to be.
        let read = self
            .sources_of(&plan, &default_catalog, &default_schema)
            .await?;
        if self
            .rebind_views(&read.into_iter().collect::<Vec<_>>())
            .await?
        {
            plan = state.create_logical_plan(&sql).await?;
        }
        let normalizer = IdentNormalizer::new(self.normalizes_idents());
        let column_names: Vec<String> = create
            .columns
            .iter()
            .map(|c| normalizer.normalize(c.clone()))
            .collect();
        let plan = rename_columns(plan, &column_names)?;
        let sources = self
            .sources_of(&plan, &default_catalog, &default_schema)
            .await?;
        if sources.contains(&name) {
            return Err(Error::NotSupported(format!(
                "materialized view \"{display}\" cannot read itself"
            )));
        }
        if let Some(old) = self.catalog.entry(&name).await?
            && old.definition.schema != *plan.schema().as_arrow()
        {
            // Views reading it were planned against its columns.
            let target = [(name.clone(), Kind::MaterializedView)];
            let dependents = self.dependents(&index, &target).await?;
            if !dependents.is_empty() {
                return Err(Error::ColumnsInUse {
                    name: self.display_quoted(&name),
                    details: self.describe_dependents(&dependents),
                });
            }
        }
        let entry = ViewEntry {
            dir: view_dir(&name),
            name: name.clone(),
            id: crate::spec::new_id(),
            definition: Definition {
                format: DEFINITION_FORMAT,
                sql,
                column_names,
                default_catalog,
                default_schema,
                schema: plan.schema().as_arrow().clone(),
                sources: sources.into_iter().collect(),
                not_reproducible: not_reproducible(&plan, self.options.trust_user_functions),
                settings: Some(crate::refresh::plan::result_settings(
                    self.ctx.state_ref().read().config().options(),
                )),
            },
            created_at: chrono::Utc::now(),
            snapshot: None,
            auto_refresh,
        };
        Ok(Prepared::Ready(Box::new(ReadyCreate {
            name,
            display,
            replaced,
            state,
            plan,
            entry,
        })))
    }

    /// Fully qualified names of the existing tables and views `plan` scans
    /// (see [`crate::resolve::sources_of`]).
    pub(super) async fn sources_of(
        &self,
        plan: &LogicalPlan,
        catalog: &str,
        schema: &str,
    ) -> Result<BTreeSet<QualifiedName>> {
        let catalogs = Arc::clone(self.ctx.state_ref().read().catalog_list());
        crate::resolve::sources_of(&catalogs, plan, catalog, schema).await
    }
}
