//! [`MatviewSession`]: a DataFusion [`SessionContext`] that also runs the
//! materialized-view statements. The only module that knows the parser, the
//! catalog, refresh and the table provider together.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{MemoryCatalogProvider, MemorySchemaProvider, SchemaProvider};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, TableReference};
use datafusion::dataframe::DataFrame;
use datafusion::datasource::{TableProvider, TableType, source_as_provider};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{
    DdlStatement, EmptyRelation, Expr, LogicalPlan, Volatility, WindowFunctionDefinition, col, lit,
};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::planner::{IdentNormalizer, object_name_to_table_reference};
use datafusion::sql::sqlparser::ast::{
    FromTable, ObjectName, ObjectType, Statement as SQLStatement, TableFactor, TableObject,
    TableWithJoins,
};
use object_store::memory::InMemory;
use object_store::path::Path;

use crate::catalog::{Catalog, CleanupReport, DEFAULT_RETENTION, RecoveryReport, Sweep};
use crate::error::{Error, Result};
use crate::freshness::{Fingerprinter, Freshness, compare};
use crate::functions::MaterializedViewsFunction;
use crate::incremental::{self, Shape, Strategy, Write};
pub use crate::refresh::ProgressListener;
use crate::refresh::{import_snapshot, plan_definition, rename_columns, state_for, write_snapshot};
use crate::spec::{
    DEFINITION_FORMAT, Definition, Manifest, QualifiedName, RelationEntry, RelationKind, Snapshot,
    SourceFingerprint, ViewEntry, view_dir,
};
use crate::sql::{
    CreateMaterializedView, DropMaterializedView, RefreshMaterializedView, Statement,
    parse_sql_with_text, quote_ident, without_secret_options,
};
use crate::table::{MaterializedViewTable, UnreadableFile};

/// Options of a [`MatviewSession`].
#[derive(Debug, Clone)]
pub struct MatviewOptions {
    /// How long superseded snapshots and manifest versions are kept for
    /// readers that planned against them. Default: [`DEFAULT_RETENTION`].
    /// It must also be longer than the longest refresh: the cleanup sweep
    /// takes unreferenced files older than the window for leftovers of a
    /// writer that died. (Zero is for tests.)
    pub retention: Duration,
    /// Remove retired snapshots and manifest versions older than the
    /// retention window with every REFRESH (while its query runs) and after
    /// every DROP and CREATE OR REPLACE. This reads only the latest
    /// manifest; the sweep for files of failed writers is left to
    /// [`MatviewSession::cleanup`]. Default: true.
    pub cleanup_after_commit: bool,
    /// Remember `CREATE EXTERNAL TABLE` and `CREATE VIEW` (and forget them
    /// on `DROP`) in the catalog, and replay them when it is opened, so a
    /// new process can query and refresh views with no set-up. Default:
    /// false (a library caller usually registers its own tables).
    pub remember_relations: bool,
}

impl Default for MatviewOptions {
    fn default() -> Self {
        Self {
            retention: DEFAULT_RETENTION,
            cleanup_after_commit: true,
            remember_relations: false,
        }
    }
}

/// What a refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshOutcome {
    /// The view, as named in messages.
    pub view: String,
    /// `full`; `incremental` when only what changed was computed (see
    /// `src/incremental.rs`); `no_op` when no source changed since the
    /// last refresh.
    pub mode: &'static str,
    /// Rows written: the whole new snapshot for `full`; for `incremental`
    /// the new rows (of a merged aggregate: every group).
    pub rows_written: u64,
    /// Catalog version that committed it (for `no_op`, the current one).
    pub version: u64,
    /// Rows of the previous snapshot that the new one no longer has (its
    /// evicted or replaced files).
    pub rows_deleted: u64,
    /// Why this mode: `sources unchanged`, `changed: t`, `first refresh`, ...
    pub detail: String,
}

impl RefreshOutcome {
    /// The rows `sql("REFRESH ...")` returns, one per view refreshed:
    /// `view`, `mode`, `rows_written`, `version`, `rows_deleted`, `detail`.
    pub fn batch(outcomes: &[RefreshOutcome]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("mode", DataType::Utf8, false),
            Field::new("rows_written", DataType::Int64, false),
            Field::new("version", DataType::Int64, false),
            Field::new("rows_deleted", DataType::Int64, false),
            Field::new("detail", DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    outcomes.iter().map(|o| o.view.as_str()),
                )),
                Arc::new(StringArray::from_iter_values(
                    outcomes.iter().map(|o| o.mode),
                )),
                Arc::new(Int64Array::from_iter_values(
                    outcomes.iter().map(|o| o.rows_written as i64),
                )),
                Arc::new(Int64Array::from_iter_values(
                    outcomes.iter().map(|o| o.version as i64),
                )),
                Arc::new(Int64Array::from_iter_values(
                    outcomes.iter().map(|o| o.rows_deleted as i64),
                )),
                Arc::new(StringArray::from_iter_values(
                    outcomes.iter().map(|o| o.detail.as_str()),
                )),
            ],
        )
        .expect("refresh result columns match their schema")
    }
}

/// What a refresh of one view will do (see `MatviewSession::plan_refresh`).
struct PlannedRefresh {
    name: QualifiedName,
    display: String,
    /// Catalog version it was planned against.
    version: u64,
    entry: ViewEntry,
    mode: &'static str,
    detail: String,
    /// What to write, with the session state to run it in; `None` for
    /// `no_op`.
    run: Option<(datafusion::execution::SessionState, Write)>,
    fingerprints: Vec<SourceFingerprint>,
}

/// The plan(s) a refresh runs, optimized, for EXPLAIN REFRESH: the first
/// part's, with a note when the same query runs over several groups of
/// source files.
fn explain_write(state: &datafusion::execution::SessionState, write: &Write) -> String {
    let Some(first) = write.parts.first() else {
        return "(no query: only files are evicted)".into();
    };
    let plan = state
        .optimize(&first.plan)
        .map(|optimized| optimized.display_indent().to_string())
        .unwrap_or_else(|_| first.plan.display_indent().to_string());
    match write.parts.len() {
        1 => plan,
        n => format!(
            "{plan}\n(and {} more like it: one per group of source files)",
            n - 1
        ),
    }
}

/// Wraps what made a refresh fail, naming the view; conflicts and
/// definition changes already do.
fn refresh_failed(view: &str, e: Error) -> Error {
    match e {
        e @ (Error::DefinitionChanged { .. } | Error::CommitConflict { .. }) => e,
        e => Error::RefreshFailed {
            name: view.to_owned(),
            source: Box::new(e),
        },
    }
}

/// The kind of a relation, as PostgreSQL names it in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Table,
    View,
    MaterializedView,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Table => "table",
            Kind::View => "view",
            Kind::MaterializedView => "materialized view",
        }
    }

    /// PostgreSQL's hint when a DROP names an object of another kind.
    fn drop_hint(self) -> &'static str {
        match self {
            Kind::Table => "Use DROP TABLE to remove a table.",
            Kind::View => "Use DROP VIEW to remove a view.",
            Kind::MaterializedView => "Use DROP MATERIALIZED VIEW to remove a materialized view.",
        }
    }
}

/// A DataFusion session with materialized views.
///
/// ```no_run
/// # async fn demo() -> datafusion_matview::Result<()> {
/// use datafusion::prelude::SessionContext;
/// use datafusion_matview::MatviewSession;
///
/// let mv = MatviewSession::open(SessionContext::new(), "file:///tmp/catalog").await?;
/// mv.sql("CREATE TABLE t AS VALUES (1), (2)").await?;
/// mv.sql("CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n FROM t").await?;
/// mv.sql("SELECT n FROM v").await?.show().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MatviewSession {
    ctx: SessionContext,
    catalog: Arc<Catalog>,
    options: MatviewOptions,
    warnings: Arc<Vec<String>>,
    progress: Option<Arc<dyn ProgressListener>>,
    registered: Arc<std::sync::Mutex<Registrations>>,
    /// Default catalog and schema in force when each plain view of this
    /// session was created (its plan keeps names as written).
    views_created_under: crate::functions::ViewDefaults,
}

/// Which definition of each view this session has registered, and for
/// which catalog version that was last reconciled.
#[derive(Debug, Default)]
struct Registrations {
    version: u64,
    ids: HashMap<QualifiedName, String>,
}

impl std::fmt::Debug for MatviewSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatviewSession")
            .field("session_id", &self.ctx.session_id())
            .field("catalog", &self.catalog)
            .field("options", &self.options)
            .finish()
    }
}

impl MatviewSession {
    /// Opens (or creates) the catalog at `location` and registers its views
    /// in `ctx`. `location` is a URL of an object store registered in `ctx`
    /// (`file://` always is; `memory://` is registered on demand) or a
    /// local directory path.
    pub async fn open(ctx: SessionContext, location: &str) -> Result<Self> {
        Self::open_with_options(ctx, location, MatviewOptions::default()).await
    }

    /// [`Self::open`] with options.
    pub async fn open_with_options(
        ctx: SessionContext,
        location: &str,
        options: MatviewOptions,
    ) -> Result<Self> {
        let (store_url, root) = resolve_location(&ctx, location)?;
        let store = ctx.runtime_env().object_store(&store_url).map_err(|e| Error::InvalidLocation {
            location: location.to_owned(),
            reason: format!("{e}; register an object store for it with SessionContext::register_object_store"),
        })?;
        let catalog =
            Arc::new(Catalog::open(location, store_url, store, root, options.retention).await?);
        let views_created_under: crate::functions::ViewDefaults = Arc::default();
        ctx.register_udtf(
            "materialized_views",
            Arc::new(MaterializedViewsFunction::new(
                Arc::clone(&catalog),
                Arc::clone(&views_created_under),
            )),
        );
        let mut session = Self {
            ctx,
            catalog,
            options,
            warnings: Arc::default(),
            progress: None,
            registered: Arc::default(),
            views_created_under,
        };
        let manifest = session.catalog.current();
        for entry in &manifest.views {
            session.register_view(entry)?;
        }
        if session.options.remember_relations {
            let mut warnings = vec![];
            for relation in &manifest.relations {
                if let Err(e) = session.restore_relation(relation).await {
                    let withheld = if relation.withheld_options.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (its options {} carry secrets and were not stored: \
                             provide them through the environment or register the object store)",
                            relation.withheld_options.join(", ")
                        )
                    };
                    warnings.push(format!(
                        "could not restore {} {}: {e}{withheld}",
                        match relation.kind {
                            RelationKind::ExternalTable => "table",
                            RelationKind::View => "view",
                        },
                        session.display(&relation.name)
                    ));
                }
            }
            session.warnings = Arc::new(warnings);
        }
        Ok(session)
    }

    /// Reports the progress of every CREATE and REFRESH that computes data.
    pub fn with_progress_listener(mut self, listener: Arc<dyn ProgressListener>) -> Self {
        self.progress = Some(listener);
        self
    }

    /// What could not be restored when the catalog was opened (for example
    /// an external table whose files are gone), one message each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

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
    async fn remember(
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
        let (default_catalog, default_schema) = self.defaults();
        let text = text.map_or_else(|| statement.to_string(), str::to_owned);
        let (sql, withheld_options) = match kind {
            RelationKind::ExternalTable => {
                let dialect = self.ctx.state().config().options().sql_parser.dialect;
                without_secret_options(&text, dialect.as_ref())?
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
        Ok(())
    }

    /// Rebuilds the catalog at `location` from the snapshot markers of its
    /// data, for when its manifest log is lost or corrupt (see
    /// [`Catalog::recover`]). Does not need the catalog to open.
    pub async fn recover(ctx: &SessionContext, location: &str) -> Result<RecoveryReport> {
        let (store_url, root) = resolve_location(ctx, location)?;
        let store =
            ctx.runtime_env()
                .object_store(&store_url)
                .map_err(|e| Error::InvalidLocation {
                    location: location.to_owned(),
                    reason: e.to_string(),
                })?;
        Catalog::unloaded(location, store_url, store, root, DEFAULT_RETENTION)
            .recover()
            .await
    }

    /// The wrapped DataFusion context.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Runs one or more `;`-separated statements, DataFusion's or the view
    /// statements, and returns the result of the last, like
    /// [`SessionContext::sql`]. Earlier statements run to completion.
    pub async fn sql(&self, sql: &str) -> Result<DataFrame> {
        let statements = {
            let state = self.ctx.state();
            let options = state.config().options();
            parse_sql_with_text(
                sql,
                options.sql_parser.dialect.as_ref(),
                options.sql_parser.recursion_limit.get(),
            )?
        };
        let count = statements.len();
        if count == 0 {
            return Err(Error::DataFusion(datafusion::error::DataFusionError::Plan(
                "No SQL statements were provided in the query string".into(),
            )));
        }
        let mut last = None;
        for (i, (statement, text)) in statements.into_iter().enumerate() {
            let df = self.run(statement, Some(&text)).await?;
            if i + 1 < count {
                df.collect().await?;
            } else {
                last = Some(df);
            }
        }
        Ok(last.expect("count > 0"))
    }

    /// Runs one parsed statement.
    pub async fn execute(&self, statement: Statement) -> Result<DataFrame> {
        self.run(statement, None).await
    }

    /// `error`, as [`Error::ReadOnlyCatalog`] when it is the catalog's
    /// store refusing `command`'s writes.
    fn refused(&self, command: &'static str, error: Error) -> Error {
        if matches!(error, Error::ReadOnlyCatalog { .. }) || !self.catalog.refused(&error) {
            return error;
        }
        Error::ReadOnlyCatalog {
            command,
            location: self.catalog.location().to_string(),
            detail: error.to_string(),
        }
    }

    /// Runs one statement; `text` is how the user wrote it, remembered for
    /// `CREATE EXTERNAL TABLE` / `CREATE VIEW` (DataFusion's printed form of
    /// a statement can leave out its options).
    async fn run(&self, statement: Statement, text: Option<&str>) -> Result<DataFrame> {
        self.sync().await?;
        match statement {
            Statement::Create(create) => {
                self.create(&create, None)
                    .await
                    .map_err(|e| self.refused("CREATE MATERIALIZED VIEW", e))?;
                self.empty()
            }
            Statement::Refresh(refresh) => {
                let outcomes = self.refresh(&refresh).await?;
                Ok(self.ctx.read_batch(RefreshOutcome::batch(&outcomes))?)
            }
            Statement::ExplainRefresh(refresh) => self.explain_refresh(&refresh).await,
            Statement::Drop(drop) => {
                self.drop_materialized_views(&drop).await?;
                self.empty()
            }
            Statement::Show { like } => self.show(like.as_deref()).await,
            Statement::Vacuum => {
                let report = self
                    .cleanup()
                    .await
                    .map_err(|e| self.refused("VACUUM MATERIALIZED VIEWS", e))?;
                let schema = Arc::new(Schema::new(vec![
                    Field::new("manifests_deleted", DataType::Int64, false),
                    Field::new("files_deleted", DataType::Int64, false),
                ]));
                let batch = RecordBatch::try_new(
                    schema,
                    vec![
                        Arc::new(Int64Array::from(vec![report.manifests_deleted as i64])),
                        Arc::new(Int64Array::from(vec![report.files_deleted as i64])),
                    ],
                )?;
                Ok(self.ctx.read_batch(batch)?)
            }
            Statement::DataFusion(statement) => self.execute_datafusion(*statement, text).await,
        }
    }

    /// After a query over materialized view `name` failed reading Parquet:
    /// the first file of its current snapshot that cannot be read back
    /// whole, if any. Reads every file of the snapshot.
    pub async fn unreadable_file(&self, name: &QualifiedName) -> Option<UnreadableFile> {
        let manifest = self.catalog.current();
        let snapshot = manifest.view(name)?.snapshot.as_ref()?;
        crate::table::first_unreadable_file(&self.catalog, snapshot).await
    }

    /// Removes superseded manifest versions, retired snapshots and files
    /// left by failed writers, once older than the retention window.
    pub async fn cleanup(&self) -> Result<CleanupReport> {
        self.catalog.cleanup(Sweep::Full).await
    }

    fn empty(&self) -> Result<DataFrame> {
        let plan = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::new(DFSchema::empty()),
        });
        Ok(DataFrame::new(self.ctx.state(), plan))
    }

    // ---- names ----------------------------------------------------------

    fn defaults(&self) -> (String, String) {
        let state = self.ctx.state();
        let options = state.config().options();
        (
            options.catalog.default_catalog.clone(),
            options.catalog.default_schema.clone(),
        )
    }

    /// Whether unquoted identifiers are lower-cased (DataFusion's setting).
    fn normalizes_idents(&self) -> bool {
        self.ctx
            .state()
            .config()
            .options()
            .sql_parser
            .enable_ident_normalization
    }

    fn resolve(&self, name: &ObjectName) -> Result<QualifiedName> {
        check_name(name)?;
        let reference = object_name_to_table_reference(name.clone(), self.normalizes_idents())?;
        Ok(self.resolve_reference(&reference))
    }

    fn resolve_reference(&self, reference: &TableReference) -> QualifiedName {
        let (catalog, schema) = self.defaults();
        reference.clone().resolve(&catalog, &schema).into()
    }

    fn display(&self, name: &QualifiedName) -> String {
        let (catalog, schema) = self.defaults();
        name.short(&catalog, &schema)
    }

    /// [`Self::display`] with each part quoted as PostgreSQL does in the
    /// DETAIL of dependency errors.
    fn display_quoted(&self, name: &QualifiedName) -> String {
        let (catalog, schema) = self.defaults();
        name.short_quoted(&catalog, &schema)
    }

    fn schema_provider(&self, name: &QualifiedName) -> Option<Arc<dyn SchemaProvider>> {
        self.ctx.catalog(&name.catalog)?.schema(&name.schema)
    }

    /// The table registered in the session under `name`, if any.
    async fn registered(&self, name: &QualifiedName) -> Result<Option<Arc<dyn TableProvider>>> {
        crate::resolve::registered(self.ctx.state().catalog_list(), name).await
    }

    /// What `name` is: a materialized view of the catalog, or a table or
    /// view of the session.
    async fn kind_of(&self, manifest: &Manifest, name: &QualifiedName) -> Result<Option<Kind>> {
        if manifest.view(name).is_some() {
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

    // ---- registration ---------------------------------------------------

    /// Registers (or re-registers) a view's table provider, creating its
    /// catalog and schema in the session if this process has not yet.
    fn register_view(&self, entry: &ViewEntry) -> Result<()> {
        let name = &entry.name;
        let catalog = match self.ctx.catalog(&name.catalog) {
            Some(c) => c,
            None => {
                let c = Arc::new(MemoryCatalogProvider::new());
                self.ctx
                    .register_catalog(&name.catalog, Arc::clone(&c) as _);
                c as _
            }
        };
        let schema = match catalog.schema(&name.schema) {
            Some(s) => s,
            None => {
                let s: Arc<dyn SchemaProvider> = Arc::new(MemorySchemaProvider::new());
                catalog.register_schema(&name.schema, Arc::clone(&s))?;
                s
            }
        };
        let columns = &entry.definition.column_names;
        let definition = format!(
            "CREATE MATERIALIZED VIEW {}{} AS {}",
            name.to_table_reference(),
            if columns.is_empty() {
                String::new()
            } else {
                let quoted: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
                format!(" ({})", quoted.join(", "))
            },
            entry.definition.sql
        );
        let provider = MaterializedViewTable::new(
            Arc::clone(&self.catalog),
            name.clone(),
            self.display(name),
            Arc::new(entry.definition.schema.clone()),
            definition,
        );
        schema.deregister_table(&name.name)?;
        schema.register_table(name.name.clone(), Arc::new(provider))?;
        self.registrations()
            .ids
            .insert(name.clone(), entry.id.clone());
        Ok(())
    }

    fn deregister(&self, name: &QualifiedName) -> Result<()> {
        if let Some(schema) = self.schema_provider(name) {
            schema.deregister_table(&name.name)?;
        }
        self.registrations().ids.remove(name);
        Ok(())
    }

    fn created_under(&self) -> std::sync::MutexGuard<'_, HashMap<QualifiedName, (String, String)>> {
        self.views_created_under
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The defaults a plain view's plan was made under: recorded when this
    /// session created or restored it, else the session's current ones.
    fn view_defaults(&self, name: &QualifiedName) -> (String, String) {
        if let Some(defaults) = self.created_under().get(name) {
            return defaults.clone();
        }
        self.defaults()
    }

    fn registrations(&self) -> std::sync::MutexGuard<'_, Registrations> {
        self.registered.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Catches up with commits of other sessions and processes: loads the
    /// latest catalog version (one `HEAD` request when nothing changed) and
    /// registers, replaces or removes views to match it. Every statement
    /// run through [`Self::sql`] does this first.
    pub async fn sync(&self) -> Result<()> {
        let manifest = self.catalog.reload().await?;
        if self.registrations().version == manifest.version {
            return Ok(());
        }
        for entry in &manifest.views {
            let current = self.registrations().ids.get(&entry.name).cloned();
            if current.as_ref() != Some(&entry.id) {
                self.register_view(entry)?;
            }
        }
        let gone: Vec<QualifiedName> = self
            .registrations()
            .ids
            .keys()
            .filter(|name| manifest.view(name).is_none())
            .cloned()
            .collect();
        for name in gone {
            self.deregister(&name)?;
        }
        self.registrations().version = manifest.version;
        Ok(())
    }

    // ---- CREATE ---------------------------------------------------------

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
        let state = self.ctx.state();
        let options = state.config().options();
        let mut statements = crate::sql::parse_sql(
            &sql,
            options.sql_parser.dialect.as_ref(),
            options.sql_parser.recursion_limit.get(),
        )?;
        match (statements.pop(), statements.is_empty()) {
            (Some(Statement::Create(create)), true) => self.create(&create, Some(files)).await,
            _ => Err(Error::NotSupported(format!(
                "cannot adopt \"{name}\": the query must be a single SELECT"
            ))),
        }
    }

    async fn create(
        &self,
        create: &CreateMaterializedView,
        import: Option<&[String]>,
    ) -> Result<()> {
        let name = self.resolve(&create.name)?;
        let display = self.display(&name);
        let manifest = self.catalog.reload().await?;
        let replaced = manifest.view(&name).map(|e| e.id.clone());
        match self.kind_of(&manifest, &name).await? {
            None => {}
            Some(_) if create.if_not_exists => return Ok(()),
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
        let sql = create.query.to_string();
        let plan = state.create_logical_plan(&sql).await?;
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
        if let Some(old) = manifest.view(&name)
            && old.definition.schema != *plan.schema().as_arrow()
        {
            // Views reading it were planned against its columns.
            let target = [(name.clone(), Kind::MaterializedView)];
            let dependents = self.dependents(&manifest, &target).await?;
            if !dependents.is_empty() {
                return Err(Error::ColumnsInUse {
                    name: self.display_quoted(&name),
                    details: self.describe_dependents(&dependents),
                });
            }
        }
        let mut entry = ViewEntry {
            dir: view_dir(&name),
            name: name.clone(),
            id: uuid::Uuid::new_v4().simple().to_string(),
            definition: Definition {
                format: DEFINITION_FORMAT,
                sql,
                column_names,
                default_catalog,
                default_schema,
                schema: plan.schema().as_arrow().clone(),
                sources: sources.into_iter().collect(),
                not_reproducible: not_reproducible(&plan),
            },
            created_at: chrono::Utc::now(),
            snapshot: None,
        };
        if import.is_some() || create.with_data {
            // Adopted data comes with no fingerprints: nothing says which
            // state of the sources it was computed from (it may predate
            // their files of today), so the view is `unknown` and its
            // first refresh is full.
            let fingerprints = match import {
                Some(_) => vec![],
                None => {
                    self.fingerprinter(&manifest)
                        .sources(&entry.definition.sources)
                        .await?
                }
            };
            entry.snapshot = Some(match import {
                Some(files) => {
                    import_snapshot(&state, &self.catalog, &entry, files, fingerprints).await?
                }
                None => {
                    let progress = self.progress.as_ref().map(|l| (display.as_str(), l));
                    let shape = Shape::of(&plan);
                    let write = self.full_write(plan, &shape, &fingerprints).await?;
                    write_snapshot(state, &self.catalog, &entry, write, progress, fingerprints)
                        .await?
                }
            });
        }
        let committed = self
            .catalog
            .commit(|m| {
                let current = m.view(&name).map(|e| e.id.clone());
                if current != replaced {
                    return Err(match current {
                        Some(_) if replaced.is_none() => Error::AlreadyExists {
                            name: display.clone(),
                        },
                        _ => Error::CommitConflict {
                            name: display.clone(),
                            reason: "it was replaced or dropped by another session".into(),
                        },
                    });
                }
                m.upsert(entry.clone());
                Ok(())
            })
            .await;
        if let Err(e) = committed {
            // Only what provably did not land is ours to delete.
            if let Some(s) = &entry.snapshot
                && e.commit_rejected()
            {
                let _ = self
                    .catalog
                    .delete_dir(&format!("{}/{}", entry.dir, s.id))
                    .await;
            }
            return Err(e);
        }
        self.register_view(&entry)?;
        if replaced.is_some() {
            self.cleanup_expired().await?;
        }
        Ok(())
    }

    /// Fully qualified names of the existing tables and views `plan` scans
    /// (see [`crate::resolve::sources_of`]).
    async fn sources_of(
        &self,
        plan: &LogicalPlan,
        catalog: &str,
        schema: &str,
    ) -> Result<BTreeSet<QualifiedName>> {
        crate::resolve::sources_of(self.ctx.state().catalog_list(), plan, catalog, schema).await
    }

    // ---- REFRESH --------------------------------------------------------

    /// Brings a view up to date (see [`Self::plan_refresh`] for how) and
    /// atomically replaces its data; with CASCADE, first the materialized
    /// views it reads (directly or through plain views), in dependency
    /// order, each once. One outcome per view refreshed, the named view last.
    pub async fn refresh(&self, refresh: &RefreshMaterializedView) -> Result<Vec<RefreshOutcome>> {
        let mut outcomes = vec![];
        for (name, full) in self.refresh_order(refresh).await? {
            let planned = self.plan_refresh(&name, full).await?;
            let outcome = self
                .run_refresh(planned)
                .await
                .map_err(|e| self.refused("REFRESH MATERIALIZED VIEW", e))?;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// The views a REFRESH statement refreshes, in order, each with whether
    /// to recompute it fully: with CASCADE the materialized views it reads
    /// first; FULL applies to the named view only (what it reads is brought
    /// up to date the cheapest way).
    async fn refresh_order(
        &self,
        refresh: &RefreshMaterializedView,
    ) -> Result<Vec<(QualifiedName, bool)>> {
        let name = self.resolve(&refresh.name)?;
        let mut order = vec![];
        if refresh.cascade {
            let manifest = self.catalog.reload().await?;
            self.upstream_views(&manifest, &name, &mut order).await?;
        }
        let mut order: Vec<(QualifiedName, bool)> = order.into_iter().map(|n| (n, false)).collect();
        order.push((name, refresh.full));
        Ok(order)
    }

    /// The materialized views `name` reads, directly or through plain
    /// views, each after the ones it reads itself.
    async fn upstream_views(
        &self,
        manifest: &Manifest,
        name: &QualifiedName,
        order: &mut Vec<QualifiedName>,
    ) -> Result<()> {
        let mut stack = vec![(name.clone(), false)];
        let mut seen = BTreeSet::new();
        while let Some((current, expanded)) = stack.pop() {
            if expanded {
                if &current != name
                    && manifest.view(&current).is_some()
                    && !order.contains(&current)
                {
                    order.push(current);
                }
                continue;
            }
            if !seen.insert(current.clone()) {
                continue;
            }
            stack.push((current.clone(), true));
            let sources: Vec<QualifiedName> = match manifest.view(&current) {
                Some(view) => view.definition.sources.clone(),
                None => match self.registered(&current).await? {
                    Some(table) if table.table_type() == TableType::View => {
                        match table.get_logical_plan() {
                            Some(plan) => {
                                let (catalog, schema) = self.view_defaults(&current);
                                self.sources_of(&plan, &catalog, &schema)
                                    .await?
                                    .into_iter()
                                    .collect()
                            }
                            None => vec![],
                        }
                    }
                    _ => vec![],
                },
            };
            for source in sources.into_iter().rev() {
                stack.push((source, false));
            }
        }
        Ok(())
    }

    /// Decides how to bring view `name` up to date, without changing
    /// anything: `no_op` when no source changed since the last refresh,
    /// `incremental` when one file-backed table changed and the query's
    /// shape allows computing only what changed (see
    /// [`crate::incremental`]), else `full`; with the reason.
    async fn plan_refresh(&self, name: &QualifiedName, full: bool) -> Result<PlannedRefresh> {
        let display = self.display(name);
        let manifest = self.catalog.reload().await?;
        let Some(entry) = manifest.view(name).cloned() else {
            return Err(match self.kind_of(&manifest, name).await? {
                Some(_) => Error::WrongObjectType {
                    name: display,
                    expected: "materialized view",
                    hint: None,
                },
                None => Error::NotFound { name: display },
            });
        };
        let failed = |e: Error| refresh_failed(&display, e);
        if entry.definition.format > DEFINITION_FORMAT {
            return Err(Error::UnsupportedDefinition {
                name: display,
                found: entry.definition.format,
                supported: DEFINITION_FORMAT,
            });
        }
        for source in &entry.definition.sources {
            if manifest.view(source).is_none() && self.registered(source).await?.is_none() {
                return Err(failed(Error::RelationNotFound {
                    name: self.display(source),
                }));
            }
        }
        // Fingerprint the sources before reading them: a change made while
        // the query runs leaves the view stale, never wrongly fresh.
        // Planning reads no data, so the two run together.
        let fingerprinter = self.fingerprinter(&manifest);
        let (planned, fingerprints) = futures::join!(
            plan_definition(self.ctx.state(), &display, &entry.definition),
            fingerprinter.sources(&entry.definition.sources)
        );
        let (state, plan) = planned.map_err(failed)?;
        let fingerprints = fingerprints?;
        // Analysed only when the view is not fresh.
        let mut shape = None;
        let mut mode = "full";
        let mut chosen = None;
        // Judged on today's plan too: a definition stored by an older
        // build may not have recorded it.
        let not_reproducible = entry
            .definition
            .not_reproducible
            .clone()
            .or_else(|| not_reproducible(&plan));
        let detail = match (&entry.snapshot, not_reproducible) {
            (None, _) => "first refresh".to_string(),
            (Some(_), _) if full => "FULL requested".to_string(),
            (Some(_), Some(why)) => why,
            (Some(snapshot), None) => {
                let has_sources = !entry.definition.sources.is_empty();
                match compare(&snapshot.sources, &fingerprints, has_sources) {
                    Freshness::Fresh => {
                        mode = "no_op";
                        "sources unchanged".into()
                    }
                    Freshness::Stale(changed) => {
                        let shape = shape.insert(Shape::of(&plan));
                        match self
                            .choose_incremental(&plan, shape, snapshot, &fingerprints)
                            .await?
                        {
                            Strategy::Incremental { write, detail } => {
                                mode = "incremental";
                                chosen = Some(write);
                                detail
                            }
                            Strategy::Full(why) => {
                                format!("changed: {}; {why}", self.names(&changed))
                            }
                        }
                    }
                    Freshness::Unknown(unknown) if unknown.is_empty() => {
                        "no fingerprints recorded at the last refresh".into()
                    }
                    Freshness::Unknown(unknown) => {
                        format!("cannot tell whether {} changed", self.names(&unknown))
                    }
                }
            }
        };
        let write = match (mode, chosen) {
            ("no_op", _) => None,
            (_, Some(write)) => Some(write),
            _ => {
                let shape = shape.unwrap_or_else(|| Shape::of(&plan));
                Some(self.full_write(plan, &shape, &fingerprints).await?)
            }
        };
        Ok(PlannedRefresh {
            name: name.clone(),
            display,
            version: manifest.version,
            entry,
            mode,
            detail,
            run: write.map(|write| (state, write)),
            fingerprints,
        })
    }

    /// How to refresh a stale view incrementally, or why it must be
    /// recomputed (see [`incremental::choose`]).
    async fn choose_incremental(
        &self,
        plan: &LogicalPlan,
        shape: &Shape,
        snapshot: &Snapshot,
        fingerprints: &[SourceFingerprint],
    ) -> Result<Strategy> {
        let change = match incremental::changed_table(&snapshot.sources, fingerprints, |n| {
            self.display(n)
        }) {
            Ok(change) => change,
            Err(why) => return Ok(Strategy::Full(why)),
        };
        let source = self.display(&change.name);
        let Some(provider) = self.registered(&change.name).await? else {
            return Ok(Strategy::Full(format!("{source} is not a table")));
        };
        incremental::choose(
            plan,
            shape,
            snapshot,
            &change,
            &source,
            &provider,
            &self.catalog,
        )
    }

    /// What a full computation of a view with query `plan` writes (see
    /// [`incremental::full`]).
    async fn full_write(
        &self,
        plan: LogicalPlan,
        shape: &Shape,
        fingerprints: &[SourceFingerprint],
    ) -> Result<Write> {
        let table = incremental::only_table(fingerprints);
        let provider = match table {
            Some((name, _)) => self.registered(name).await?,
            None => None,
        };
        let single = table
            .zip(provider.as_ref())
            .map(|((name, files), provider)| (provider, name, files));
        incremental::full(plan, shape, single)
    }

    /// Carries out a planned refresh: writes the new snapshot and commits it.
    async fn run_refresh(&self, planned: PlannedRefresh) -> Result<RefreshOutcome> {
        let PlannedRefresh {
            name,
            display,
            version,
            entry,
            mode,
            detail,
            run,
            fingerprints,
        } = planned;
        let Some((state, write)) = run else {
            return Ok(RefreshOutcome {
                view: display,
                mode,
                rows_written: 0,
                version,
                rows_deleted: 0,
                detail,
            });
        };
        let previous_rows = entry.snapshot.as_ref().map_or(0, |s| s.row_count);
        let kept_rows: u64 = write.keep.iter().map(|f| f.rows).sum();
        let progress = self.progress.as_ref().map(|l| (display.as_str(), l));
        // What expired is removed while the query runs rather than after the
        // commit, off the statement's path; what this refresh supersedes
        // goes with a later one.
        let (written, _) = futures::join!(
            write_snapshot(state, &self.catalog, &entry, write, progress, fingerprints),
            self.cleanup_expired()
        );
        let snapshot = written.map_err(|e| refresh_failed(&display, e))?;
        let base_id = entry.snapshot.as_ref().map(|s| s.id.clone());
        let committed = self
            .catalog
            .commit(|m| {
                let conflict = |reason: &str| Error::CommitConflict {
                    name: display.clone(),
                    reason: reason.into(),
                };
                let current = m
                    .view(&name)
                    .ok_or_else(|| conflict("it was dropped by another session"))?;
                if current.id != entry.id {
                    return Err(conflict("it was replaced by another session"));
                }
                if current.snapshot.as_ref().map(|s| &s.id) != base_id.as_ref() {
                    return Err(conflict("it was refreshed by another session"));
                }
                m.set_snapshot(&name, snapshot.clone());
                Ok(())
            })
            .await;
        let version = match committed {
            Ok(((), manifest)) => manifest.version,
            Err(e) => {
                // Only what provably did not land is ours to delete.
                if e.commit_rejected() {
                    let _ = self
                        .catalog
                        .delete_dir(&format!("{}/{}", entry.dir, snapshot.id))
                        .await;
                }
                return Err(e);
            }
        };
        Ok(RefreshOutcome {
            view: display,
            mode,
            rows_written: snapshot.row_count - kept_rows,
            version,
            rows_deleted: previous_rows - kept_rows,
            detail,
        })
    }

    /// `EXPLAIN REFRESH MATERIALIZED VIEW v`: the mode, the reason and the
    /// plan a refresh would run, changing nothing.
    async fn explain_refresh(&self, refresh: &RefreshMaterializedView) -> Result<DataFrame> {
        let (mut views, mut modes, mut details, mut plans) = (vec![], vec![], vec![], vec![]);
        for (name, full) in self.refresh_order(refresh).await? {
            let planned = self.plan_refresh(&name, full).await?;
            views.push(planned.display.clone());
            modes.push(planned.mode);
            details.push(planned.detail.clone());
            plans.push(match &planned.run {
                Some((state, write)) => explain_write(state, write),
                None => String::new(),
            });
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("mode", DataType::Utf8, false),
            Field::new("detail", DataType::Utf8, false),
            Field::new("plan", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(views)),
                Arc::new(StringArray::from(modes)),
                Arc::new(StringArray::from(details)),
                Arc::new(StringArray::from(plans)),
            ],
        )?;
        Ok(self.ctx.read_batch(batch)?)
    }

    /// A fingerprinter for this session's sources against `manifest`.
    fn fingerprinter<'a>(&self, manifest: &'a Manifest) -> Fingerprinter<'a> {
        Fingerprinter::new(self.ctx.state(), manifest, self.created_under().clone())
    }

    /// `a, s.b`: names for messages.
    fn names(&self, names: &[QualifiedName]) -> String {
        names
            .iter()
            .map(|n| self.display(n))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Removes what expired (see [`Sweep::Quick`]), after DROP and CREATE
    /// OR REPLACE commit and while a refresh runs its query. Best effort:
    /// whatever is left is removed by a later cleanup.
    async fn cleanup_expired(&self) -> Result<()> {
        if self.options.cleanup_after_commit
            && let Err(e) = self.catalog.cleanup(Sweep::Quick).await
        {
            log::warn!("cleanup failed (a later cleanup retries): {e}");
        }
        Ok(())
    }

    // ---- DROP -----------------------------------------------------------

    /// Runs `DROP MATERIALIZED VIEW` as [`Self::sql`] does, and returns
    /// what CASCADE dropped with the named views: each dependent's name and
    /// kind (`materialized view`, `view`), in the order PostgreSQL names
    /// them in its `drop cascades to ...` notices.
    pub async fn drop_materialized_views(
        &self,
        drop: &DropMaterializedView,
    ) -> Result<Vec<(QualifiedName, &'static str)>> {
        self.sync().await?;
        let cascaded = self
            .drop_views(drop)
            .await
            .map_err(|e| self.refused("DROP MATERIALIZED VIEW", e))?;
        Ok(cascaded.into_iter().map(|(n, k)| (n, k.as_str())).collect())
    }

    async fn drop_views(&self, drop: &DropMaterializedView) -> Result<Vec<(QualifiedName, Kind)>> {
        let manifest = self.catalog.reload().await?;
        let mut targets = vec![];
        for name in &drop.names {
            let name = self.resolve(name)?;
            match self.kind_of(&manifest, &name).await? {
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
        self.drop_with_dependents(&manifest, &targets, drop.cascade, Protect::AnyDependent)
            .await
    }

    /// Drops `targets` (all of one statement); with `cascade` their
    /// dependents first, otherwise refuses when there are any that
    /// `protect` counts. Returns the dependents dropped.
    async fn drop_with_dependents(
        &self,
        manifest: &Manifest,
        targets: &[(QualifiedName, Kind)],
        cascade: bool,
        protect: Protect,
    ) -> Result<Vec<(QualifiedName, Kind)>> {
        let mut dependents = self.dependents(manifest, targets).await?;
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
        let remembered = self.catalog.current();
        if dropped.is_empty()
            && !order
                .iter()
                .any(|(n, _)| remembered.relations.iter().any(|r| &r.name == n))
        {
            deregister_views()?;
            return Ok(cascaded);
        }
        let views: Vec<&QualifiedName> = order
            .iter()
            .filter(|(_, k)| *k == Kind::View)
            .map(|(n, _)| n)
            .collect();
        self.catalog
            .commit(|m| {
                for name in &dropped {
                    m.remove(name);
                }
                for name in &views {
                    m.remove_relation(name);
                }
                Ok(())
            })
            .await?;
        deregister_views()?;
        for name in &dropped {
            self.deregister(name)?;
        }
        self.cleanup_expired().await?;
        Ok(cascaded)
    }

    /// `materialized view m depends on table t`, one line per dependent.
    fn describe_dependents(
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
    async fn dependents(
        &self,
        manifest: &Manifest,
        roots: &[(QualifiedName, Kind)],
    ) -> Result<Vec<(QualifiedName, Kind, QualifiedName, Kind)>> {
        let edges = self.dependency_edges(manifest).await?;
        let mut reverse: HashMap<&QualifiedName, Vec<(&QualifiedName, Kind)>> = HashMap::new();
        for (dependent, kind, source) in &edges {
            reverse.entry(source).or_default().push((dependent, *kind));
        }
        let mut seen: BTreeSet<QualifiedName> = roots.iter().map(|(n, _)| n.clone()).collect();
        let mut queue: VecDeque<(QualifiedName, Kind)> = roots.iter().cloned().collect();
        let mut out = vec![];
        while let Some((name, kind)) = queue.pop_front() {
            for (dependent, dependent_kind) in reverse.get(&name).into_iter().flatten() {
                if seen.insert((*dependent).clone()) {
                    out.push(((*dependent).clone(), *dependent_kind, name.clone(), kind));
                    queue.push_back(((*dependent).clone(), *dependent_kind));
                }
            }
        }
        Ok(out)
    }

    /// `(dependent, its kind, source)` for every materialized view of the
    /// catalog and every plain view registered in the session.
    async fn dependency_edges(
        &self,
        manifest: &Manifest,
    ) -> Result<Vec<(QualifiedName, Kind, QualifiedName)>> {
        let mut edges = vec![];
        for view in &manifest.views {
            for source in &view.definition.sources {
                edges.push((view.name.clone(), Kind::MaterializedView, source.clone()));
            }
        }
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
                for table_name in schema.table_names() {
                    let Some(table) = schema.table(&table_name).await? else {
                        continue;
                    };
                    if table.table_type() != TableType::View {
                        continue;
                    }
                    let Some(plan) = table.get_logical_plan() else {
                        continue;
                    };
                    let name = QualifiedName::new(&catalog_name, &schema_name, &table_name);
                    views.push((name, plan.into_owned()));
                }
            }
        }
        // In name order, so messages list dependents the same way each time.
        views.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, plan) in views {
            // Names in a view's plan are as written; resolve them as they
            // were when the view was created.
            let (catalog, schema) = self.view_defaults(&name);
            for source in self.sources_of(&plan, &catalog, &schema).await? {
                edges.push((name.clone(), Kind::View, source));
            }
        }
        Ok(edges)
    }

    // ---- SHOW -----------------------------------------------------------

    async fn show(&self, like: Option<&str>) -> Result<DataFrame> {
        self.catalog.reload().await?;
        let table = MaterializedViewsFunction::new(
            Arc::clone(&self.catalog),
            Arc::clone(&self.views_created_under),
        )
        .table();
        let mut df = self.ctx.read_table(table)?;
        if let Some(pattern) = like {
            df = df.filter(col("table_name").like(lit(pattern)))?;
        }
        Ok(df.sort(vec![
            col("table_catalog").sort(true, false),
            col("table_schema").sort(true, false),
            col("table_name").sort(true, false),
        ])?)
    }

    // ---- DataFusion statements -----------------------------------------

    async fn execute_datafusion(
        &self,
        statement: DFStatement,
        text: Option<&str>,
    ) -> Result<DataFrame> {
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
                        if self.catalog.current().view(&name).is_some() {
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
        let existed = match created {
            Some(name) if self.options.remember_relations => {
                self.registered(&self.resolve(name)?).await?.is_some()
            }
            _ => false,
        };
        let plan = self
            .ctx
            .state()
            .statement_to_plan(statement.clone())
            .await?;
        // DDL (CREATE VIEW over an unpopulated view) and EXPLAIN do not read
        // data; EXPLAIN ANALYZE fails when its scan runs.
        if !matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Explain(_)) {
            self.check_populated(&plan)?;
        }
        let df = self.ctx.execute_logical_plan(plan).await?;
        if let DFStatement::Statement(inner) = &statement
            && let SQLStatement::CreateView(view) = inner.as_ref()
        {
            let name = self.resolve(&view.name)?;
            self.created_under().insert(name, self.defaults());
        }
        if self.options.remember_relations
            && let Err(e) = self.remember(&statement, text, existed).await
        {
            // Not remembered, so not created: a later process would not
            // have it. (A replaced relation stays replaced in this one.)
            if let Some(name) = created
                && !existed
            {
                self.deregister(&self.resolve(name)?)?;
            }
            let command = match &statement {
                DFStatement::CreateExternalTable(_) => "CREATE EXTERNAL TABLE",
                _ => "CREATE VIEW",
            };
            return Err(self.refused(command, e));
        }
        Ok(df)
    }

    /// `DROP SCHEMA ... CASCADE`: drops the materialized views in the
    /// schemas and everything elsewhere that depends on their relations;
    /// DataFusion then drops the schemas with their tables and views.
    async fn drop_schema_contents(&self, names: &[ObjectName]) -> Result<()> {
        let manifest = self.catalog.reload().await?;
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
                if let Some(kind) = self.kind_of(&manifest, &name).await? {
                    targets.push((name, kind));
                }
            }
        }
        // Only view kinds are removed here; tables go with the schema.
        self.drop_with_dependents(&manifest, &targets, true, Protect::AnyDependent)
            .await?;
        Ok(())
    }

    /// `CREATE [OR REPLACE] TABLE/VIEW` must not replace a materialized view.
    async fn check_name_free(
        &self,
        name: &ObjectName,
        if_not_exists: bool,
        or_replace: bool,
        kind: &'static str,
    ) -> Result<()> {
        let name = self.resolve(name)?;
        if if_not_exists || self.catalog.current().view(&name).is_none() {
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
    fn check_populated(&self, plan: &LogicalPlan) -> Result<()> {
        let mut result = Ok(());
        plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node
                && let Ok(provider) = source_as_provider(&scan.source)
                && let Some(view) = (provider.as_ref() as &dyn std::any::Any)
                    .downcast_ref::<MaterializedViewTable>()
                && let Err(e) = view.snapshot()
            {
                result = Err(e);
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        result
    }

    /// `DROP TABLE` / `DROP VIEW`: refuses a materialized view and
    /// objects a materialized view depends on, directly or through plain
    /// views (unless CASCADE, which drops the dependents first), then lets
    /// DataFusion drop the object. An object only plain views depend on
    /// is dropped as DataFusion drops it.
    async fn drop_relations(
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
        let manifest = self.catalog.reload().await?;
        let mut targets = vec![];
        let mut unrestored = BTreeSet::new();
        for object in names {
            let name = self.resolve(object)?;
            match self.kind_of(&manifest, &name).await? {
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
                None if manifest.relations.iter().any(|r| r.name == name) => {
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
        self.drop_with_dependents(
            &manifest,
            &checked,
            cascade,
            Protect::MaterializedDependents,
        )
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
        let mut result = self.empty()?;
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
        let remembered = self.catalog.current();
        if forget
            .iter()
            .any(|n| remembered.relations.iter().any(|r| &r.name == n))
        {
            self.catalog
                .commit(|m| {
                    for name in &forget {
                        m.remove_relation(name);
                    }
                    Ok(())
                })
                .await?;
        }
        Ok(result)
    }
}

/// Which dependents stop a DROP without CASCADE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protect {
    /// Any (the view statements, as in PostgreSQL).
    AnyDependent,
    /// Only a materialized view among them (DROP TABLE / DROP VIEW, which
    /// otherwise behave as in DataFusion).
    MaterializedDependents,
}

/// Why running `plan` again may give other rows even when its sources are
/// unchanged, if it may: a function that is not `Immutable` (volatile ones
/// such as `random()`, and stable ones such as `now()` or `current_date()`,
/// whose value depends on when the query runs), of any kind (scalar,
/// aggregate, window), or a table function.
fn not_reproducible(plan: &LogicalPlan) -> Option<String> {
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
                    Expr::ScalarFunction(f) => Some((f.name(), f.func.signature().volatility)),
                    Expr::AggregateFunction(f) => {
                        Some((f.func.name(), f.func.signature().volatility))
                    }
                    Expr::WindowFunction(f) => Some((
                        f.fun.name(),
                        match &f.fun {
                            WindowFunctionDefinition::AggregateUDF(udf) => {
                                udf.signature().volatility
                            }
                            WindowFunctionDefinition::WindowUDF(udf) => udf.signature().volatility,
                        },
                    )),
                    _ => None,
                };
                match function {
                    Some((name, volatility)) if volatility != Volatility::Immutable => {
                        let kind = match volatility {
                            Volatility::Volatile => "non-deterministic",
                            _ => "depends on when it runs",
                        };
                        found = Some(format!("{kind}: {name}()"));
                        Ok(TreeNodeRecursion::Stop)
                    }
                    _ => Ok(TreeNodeRecursion::Continue),
                }
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
fn dml_targets(statement: &SQLStatement) -> Vec<&ObjectName> {
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
fn check_name(name: &ObjectName) -> Result<()> {
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

fn resolve_location(ctx: &SessionContext, location: &str) -> Result<(ObjectStoreUrl, Path)> {
    let invalid = |reason: String| Error::InvalidLocation {
        location: location.to_owned(),
        reason,
    };
    let url = if location.contains("://") {
        url::Url::parse(location).map_err(|e| invalid(e.to_string()))?
    } else {
        std::fs::create_dir_all(location).map_err(|e| invalid(e.to_string()))?;
        let absolute = std::fs::canonicalize(location).map_err(|e| invalid(e.to_string()))?;
        url::Url::from_directory_path(&absolute)
            .map_err(|()| invalid("not an absolute path".into()))?
    };
    if url.scheme() == "file" {
        let path = url
            .to_file_path()
            .map_err(|()| invalid("not a local path".into()))?;
        std::fs::create_dir_all(&path).map_err(|e| invalid(e.to_string()))?;
    }
    let store_url = ObjectStoreUrl::parse(format!(
        "{}://{}",
        url.scheme(),
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    ))?;
    if url.scheme() == "memory" && ctx.runtime_env().object_store(&store_url).is_err() {
        ctx.register_object_store(store_url.as_ref(), Arc::new(InMemory::new()));
    }
    let root = Path::from_url_path(url.path()).map_err(|e| invalid(e.to_string()))?;
    Ok((store_url, root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_into_store_and_root() {
        let ctx = SessionContext::new();
        let (url, root) = resolve_location(&ctx, "memory:///a/b").unwrap();
        assert_eq!(url.as_str(), "memory:///");
        assert_eq!(root.as_ref(), "a/b");
        assert!(ctx.runtime_env().object_store(&url).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let (url, root) = resolve_location(&ctx, dir.path().join("cat").to_str().unwrap()).unwrap();
        assert_eq!(url.as_str(), "file:///");
        assert!(root.as_ref().ends_with("/cat"), "{root}");
        assert!(dir.path().join("cat").is_dir());
    }

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
