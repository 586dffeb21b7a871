//! [`MatviewSession`]: a DataFusion [`SessionContext`] that also runs the
//! materialized-view statements. The only module that knows the parser, the
//! catalog, refresh and the table provider together.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{BooleanArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::SchemaProvider;
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

use crate::catalog::{
    Catalog, CleanupReport, DEFAULT_LEASE_TTL, DEFAULT_RETENTION, IndexCommit, IndexUpdate,
    RecoveryReport, Requirement, Sweep,
};
use crate::error::{Error, Result};
use crate::freshness::{Diff, Fingerprinter};
use crate::functions::MaterializedViewsFunction;
pub use crate::refresh::ProgressListener;
use crate::refresh::plan::{
    self, Pin, Shape, Strategy, Write, plan_definition, rename_columns, state_for,
};
use crate::refresh::write::{import_snapshot, write_snapshot};
use crate::spec::{
    DEFINITION_FORMAT, Definition, Index, QualifiedName, RelationEntry, RelationKind, Snapshot,
    SourceFingerprint, ViewEntry, view_dir,
};
use crate::sql::{
    CreateMaterializedView, DropMaterializedView, RefreshMaterializedView, Statement,
    parse_sql_with_text, without_secret_options,
};
use crate::table::{MaterializedViewTable, UnreadableFile};
pub use api::{CreateOptions, DropOptions, RefreshOptions};
pub use describe::{ColumnDescription, ViewDescription};
pub use diagnose::{MismatchedFile, is_cast_error, is_file_read_error};

// One module per statement; each adds methods to `MatviewSession`.
mod alter;
mod api;
pub mod auto;
mod create;
mod describe;
mod diagnose;
mod drop;
mod guard;
mod names;
mod rebind;
mod refresh;
mod relations;
mod rewrite;
pub(crate) use relations::{build_relation, resolved_table};

use guard::{check_name, not_reproducible};

/// Marks a session state whose plans run on a cluster's executors rather
/// than in this process. `datafusion-matview-ballista` sets it (its
/// `for_cluster`, which its `remote` applies) together with a query
/// planner that turns scans of views into scans of their snapshots'
/// files. The snapshot writer then tells which part of a refresh wrote
/// which file by listing after each part, since Ballista's plan codec drops
/// the Parquet footer metadata that says so in one process.
#[derive(Debug, Default)]
pub struct ClusterExecution;

/// Whether `state` runs its plans on a cluster ([`ClusterExecution`]).
pub(crate) fn on_cluster(state: &datafusion::execution::SessionState) -> bool {
    state.config().get_extension::<ClusterExecution>().is_some()
}

/// A context that sends its queries to a Ballista scheduler (it has
/// Ballista's settings) but was not prepared for materialized views
/// cannot serve them: the scheduler would fail to decode a view's scan.
/// Told by the settings' namespace, so the library needs no Ballista
/// dependency to refuse it.
fn check_cluster_ready(state: &datafusion::execution::SessionState) -> Result<()> {
    let ballista = state
        .config()
        .options()
        .extensions
        .iter()
        .any(|(prefix, _)| prefix == "ballista");
    if ballista && !on_cluster(state) {
        return Err(Error::NotSupported(
            "this context sends its queries to a Ballista cluster but was not prepared for materialized views: open the session on datafusion_matview_ballista::remote(url, state), or on a state passed through datafusion_matview_ballista::for_cluster".into(),
        ));
    }
    Ok(())
}

/// Options of a [`MatviewSession`].
#[derive(Debug, Clone)]
pub struct MatviewOptions {
    /// How long superseded snapshots and manifest versions are kept for
    /// readers that planned against them, and how old unreferenced files
    /// must be before the cleanup sweep takes them for leftovers of a
    /// writer that died. Default: [`DEFAULT_RETENTION`]. A write in
    /// progress is protected by its lease however long it runs (see
    /// [`Self::lease_ttl`]). (Zero is for tests.)
    pub retention: Duration,
    /// How long the lease of a write in progress (REFRESH, CREATE) holds
    /// without renewal; the writer renews it four times per period, and
    /// cleanup in any process leaves what an unexpired lease names alone.
    /// A process killed mid-write keeps its leftovers from cleanup for
    /// this long after its last renewal. Default: [`DEFAULT_LEASE_TTL`].
    pub lease_ttl: Duration,
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
    /// List every table's files afresh for each statement (within one
    /// statement, every scan of a table sees the same listing), unless
    /// the runtime was given `datafusion.runtime.list_files_cache_ttl`
    /// (then its cache is used as configured). DataFusion otherwise keeps
    /// a table's listing for the life of the session, so a file added
    /// later is not seen. `dfmv` and `dfmv serve` turn this on. Default:
    /// false: a session over your own `SessionContext` leaves its cache
    /// alone (REFRESH and freshness checks list afresh regardless).
    pub list_files_per_statement: bool,
    /// Take a user function (one that is not DataFusion's own) to compute
    /// the same in every session and process that registers one under its
    /// name. A catalog cannot compare implementations (a closure registered
    /// with `create_udf` has no identity but its name and signature), so by
    /// default a view created over an `Immutable` user function is treated
    /// like one over a volatile function: its freshness is `unknown` and
    /// every refresh is full, saying why. Set this when every process that
    /// refreshes the catalog's views registers the same functions; it
    /// applies to views created while it is set. Default: false.
    pub trust_user_functions: bool,
    /// How many refresh attempts of each view the refresh history keeps
    /// (`materialized_view_refreshes()`, see [`crate::history`]); 0 turns
    /// the history off. Default: [`crate::history::DEFAULT_HISTORY_PER_VIEW`].
    pub history_per_view: usize,
    /// Who runs this session's refreshes, as the history records it
    /// (with the host and process id): `dfmv serve` names itself. Default:
    /// none (the host and process id alone).
    pub actor: Option<String>,
}

impl Default for MatviewOptions {
    fn default() -> Self {
        Self {
            retention: DEFAULT_RETENTION,
            lease_ttl: DEFAULT_LEASE_TTL,
            cleanup_after_commit: true,
            remember_relations: false,
            list_files_per_statement: false,
            trust_user_functions: false,
            history_per_view: crate::history::DEFAULT_HISTORY_PER_VIEW,
            actor: None,
        }
    }
}

/// How a refresh brought a view up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefreshMode {
    /// No source changed since the last refresh: nothing was written.
    NoOp,
    /// Only what changed was computed (see `src/refresh/plan.rs`).
    Incremental,
    /// The query ran whole.
    Full,
}

impl RefreshMode {
    /// `no_op`, `incremental` or `full`, as results and messages show it.
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshMode::NoOp => "no_op",
            RefreshMode::Incremental => "incremental",
            RefreshMode::Full => "full",
        }
    }
}

impl std::fmt::Display for RefreshMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `CREATE MATERIALIZED VIEW` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOutcome {
    /// The view, as named in messages.
    pub view: String,
    /// Created, replaced (OR REPLACE) or skipped (IF NOT EXISTS).
    pub action: CreateAction,
    /// Rows of its first snapshot; `None` when it was not populated (WITH
    /// NO DATA, or skipped).
    pub rows_written: Option<u64>,
    /// The version of the view's own log: 1 for a view created or
    /// replaced (a new definition starts a new log); when skipped, the
    /// existing view's (0 when the name is another kind of relation).
    pub version: u64,
}

impl CreateOutcome {
    /// One row per outcome: `view`, `action` (`created`, `replaced`,
    /// `skipped`), `populated`, `rows_written` (null when not populated),
    /// `version`.
    pub fn batch(outcomes: &[CreateOutcome]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("action", DataType::Utf8, false),
            Field::new("populated", DataType::Boolean, false),
            Field::new("rows_written", DataType::Int64, true),
            Field::new("version", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    outcomes.iter().map(|o| o.view.as_str()),
                )),
                Arc::new(StringArray::from_iter_values(
                    outcomes.iter().map(|o| o.action.as_str()),
                )),
                Arc::new(BooleanArray::from_iter(
                    outcomes.iter().map(|o| Some(o.rows_written.is_some())),
                )),
                Arc::new(Int64Array::from_iter(
                    outcomes.iter().map(|o| o.rows_written.map(|n| n as i64)),
                )),
                Arc::new(Int64Array::from_iter_values(
                    outcomes.iter().map(|o| o.version as i64),
                )),
            ],
        )
        .expect("create result columns match their schema")
    }
}

/// See [`CreateOutcome::action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreateAction {
    /// A new view.
    Created,
    /// A new definition of an existing view (OR REPLACE).
    Replaced,
    /// IF NOT EXISTS found the name taken; nothing changed.
    Skipped,
}

impl CreateAction {
    /// `created`, `replaced` or `skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            CreateAction::Created => "created",
            CreateAction::Replaced => "replaced",
            CreateAction::Skipped => "skipped",
        }
    }
}

/// What a refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshOutcome {
    /// The view, as named in messages.
    pub view: String,
    /// How: `full`, `incremental` or `no_op`.
    pub mode: RefreshMode,
    /// Rows written: the whole new snapshot for `full`; for `incremental`
    /// the new rows (of a merged aggregate: every group).
    pub rows_written: u64,
    /// The version of the view's own log that committed it (for `no_op`,
    /// the current one): one more per refresh that landed.
    pub version: u64,
    /// Rows of the previous snapshot that the new one no longer has (its
    /// evicted or replaced files).
    pub rows_deleted: u64,
    /// Why this mode: `sources unchanged`, `changed: t`, `first refresh`, ...
    pub detail: String,
    /// The materialized views the refresh read (directly or through plain
    /// views), each with the version of its log it read: the latest, or
    /// the one [`MatviewSession::refresh_at`] pinned.
    pub source_versions: BTreeMap<QualifiedName, u64>,
    /// Files the refresh's file scans read (as planned, before pruning:
    /// the changed files of an incremental refresh, every file of a full
    /// one; 0 for `no_op`); `None` where not known (on a cluster).
    pub files_read: Option<u64>,
    /// Bytes of those files.
    pub bytes_read: Option<u64>,
}

/// No rows and no columns: what CREATE and DROP return through `sql()`.
pub fn no_rows(ctx: &SessionContext) -> DataFrame {
    let plan = LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: false,
        schema: Arc::new(DFSchema::empty()),
    });
    DataFrame::new(ctx.state(), plan)
}

/// What a statement did, as [`MatviewSession::run_statement`] says it.
#[derive(Debug)]
pub enum StatementOutcome {
    /// `CREATE MATERIALIZED VIEW`.
    Created(CreateOutcome),
    /// `REFRESH MATERIALIZED VIEW`: one outcome per view refreshed, the
    /// named view last (`CASCADE` refreshes what it reads first).
    Refreshed(Vec<RefreshOutcome>),
    /// `DROP MATERIALIZED VIEW`: what `CASCADE` dropped with the named
    /// views, each with its kind, in PostgreSQL's notice order.
    Dropped(Vec<(QualifiedName, &'static str)>),
    /// `SHOW MATERIALIZED VIEWS`: the rows of `materialized_views()`.
    Shown(DataFrame),
    /// `VACUUM MATERIALIZED VIEWS`.
    Vacuumed(CleanupReport),
    /// Anything else (`EXPLAIN REFRESH`, DataFusion's statements): its
    /// rows, as `SessionContext::sql` gives them.
    Rows(DataFrame),
}

impl StatementOutcome {
    /// The rows `sql()` returns for it: none for CREATE and DROP; a row per
    /// view refreshed; the counts VACUUM removed; the rows of the rest.
    pub fn into_dataframe(self, ctx: &SessionContext) -> Result<DataFrame> {
        Ok(match self {
            StatementOutcome::Created(_) | StatementOutcome::Dropped(_) => no_rows(ctx),
            StatementOutcome::Refreshed(outcomes) => {
                ctx.read_batch(RefreshOutcome::batch(&outcomes))?
            }
            StatementOutcome::Vacuumed(report) => {
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
                ctx.read_batch(batch)?
            }
            StatementOutcome::Shown(df) | StatementOutcome::Rows(df) => df,
        })
    }
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
                    outcomes.iter().map(|o| o.mode.as_str()),
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
    progress: Option<Arc<dyn ProgressListener>>,
    synced: Arc<std::sync::Mutex<Synced>>,
    /// Default catalog and schema in force when each plain view of this
    /// session was created (its plan keeps names as written).
    views_created_under: crate::functions::ViewDefaults,
    /// This session and its forks (see [`crate::schema::Family`]).
    family: crate::schema::Family,
    /// Where refresh attempts are recorded.
    history: Arc<crate::history::History>,
    /// The shapes of views' definitions, for the rewrite.
    shapes: rewrite::Shapes,
    /// The statements this session prepared (`PREPARE`), as planned, for
    /// `EXECUTE` to answer from views once its parameters are bound.
    prepared: rewrite::PreparedStatements,
}

/// What the session last brought up to the catalog's index.
#[derive(Debug, Default)]
struct Synced {
    /// The index version whose schemas list its views.
    version: u64,
    /// The remembered relations as this session last created them (or
    /// failed to), by name: another process's change to one shows as a
    /// different entry in the index.
    relations: BTreeMap<QualifiedName, RelationEntry>,
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
        check_cluster_ready(&ctx.state())?;
        let (store_url, root) = resolve_location(&ctx, location)?;
        let store = ctx.runtime_env().object_store(&store_url).map_err(|e| Error::InvalidLocation {
            location: location.to_owned(),
            reason: format!("{e}; register an object store for it with SessionContext::register_object_store"),
        })?;
        let catalog =
            Arc::new(Catalog::open(location, store_url, store, root, options.retention).await?);
        catalog.set_lease_ttl(options.lease_ttl);
        let views_created_under: crate::functions::ViewDefaults = Arc::default();
        ctx.register_udtf(
            "materialized_views",
            Arc::new(MaterializedViewsFunction::new(
                Arc::clone(&catalog),
                Arc::clone(&views_created_under),
            )),
        );
        ctx.register_udtf(
            crate::versioned::AT_FUNCTION,
            Arc::new(crate::versioned::MaterializedViewAtFunction::new(
                Arc::clone(&catalog),
            )),
        );
        ctx.register_udtf(
            crate::versioned::CHANGES_FUNCTION,
            Arc::new(crate::versioned::MaterializedViewChangesFunction::new(
                Arc::clone(&catalog),
            )),
        );
        ctx.register_udtf(
            crate::history::FUNCTION,
            Arc::new(crate::history::RefreshHistoryFunction::new(
                Arc::clone(&catalog),
                options.history_per_view,
            )),
        );
        let history = Arc::new(crate::history::History::new(
            Arc::clone(&catalog),
            options.history_per_view,
            options.actor.as_deref(),
        ));
        install_rewrite(&ctx);
        let family = crate::schema::Family::of(&ctx);
        let session = Self {
            ctx,
            catalog,
            options,
            progress: None,
            synced: Arc::default(),
            views_created_under,
            family,
            history,
            shapes: Arc::default(),
            prepared: Arc::default(),
        };
        // Remembered relations are built where they are first used.
        session.sync().await?;
        Ok(session)
    }

    /// Reports the progress of every CREATE and REFRESH that computes data.
    pub fn with_progress_listener(mut self, listener: Arc<dyn ProgressListener>) -> Self {
        self.progress = Some(listener);
        self
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

    /// Moves a catalog written in format 1 (one log of whole-catalog
    /// manifests, by builds before format 2) to the current format now; any
    /// commit does so too. Returns whether it migrated (false: already
    /// format 2 or later,
    /// or empty). Views read the same before and after; see
    /// [`Catalog::migrate`].
    pub async fn migrate(&self) -> Result<bool> {
        let migrated = self.catalog.migrate().await?;
        self.sync().await?;
        Ok(migrated)
    }

    /// The wrapped DataFusion context.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// A session over the same catalog, relations and functions with its
    /// own settings: a `SET` in one does not change the other (see
    /// [`Self::fork_with_runtime`] for paths used as tables). Tables and
    /// views created in either are seen by both (they share DataFusion's
    /// catalog list), and so is the runtime (object stores, memory pool,
    /// caches). A server gives each client one.
    pub fn fork(&self) -> Self {
        self.fork_with_runtime(self.ctx.runtime_env())
    }

    /// Replaces this session's runtime (in every clone of it), keeping
    /// everything else. Url tables (`FROM 'path'`) of this session and of
    /// its forks resolve through this session's state, so after this they
    /// read through `runtime` too.
    pub fn replace_runtime(&self, runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>) {
        let state_ref = self.ctx.state_ref();
        let mut state = state_ref.write();
        let session_id = state.session_id().to_owned();
        *state = rebuilt(&state, |b| {
            b.with_session_id(session_id).with_runtime_env(runtime)
        });
    }

    /// [`Self::fork`] over another runtime: for example one whose object
    /// store registry restricts what the fork may read and write. Paths
    /// used as tables (`FROM 'data/x.parquet'`, when url tables are on)
    /// are looked up through the session forked from, whose runtime reads
    /// their schema.
    pub fn fork_with_runtime(
        &self,
        runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    ) -> Self {
        let state = rebuilt(&self.ctx.state(), |b| b.with_runtime_env(runtime));
        let ctx = SessionContext::new_with_state(state);
        self.family.join(&ctx);
        Self {
            ctx,
            catalog: Arc::clone(&self.catalog),
            options: self.options.clone(),
            progress: self.progress.clone(),
            synced: Arc::clone(&self.synced),
            views_created_under: Arc::clone(&self.views_created_under),
            family: self.family.clone(),
            history: Arc::clone(&self.history),
            shapes: Arc::clone(&self.shapes),
            prepared: Arc::default(),
        }
    }

    /// This session, listing files afresh for each statement (see
    /// [`MatviewOptions::list_files_per_statement`]).
    pub fn listing_per_statement(mut self) -> Self {
        self.options.list_files_per_statement = true;
        self
    }

    /// Runs one or more `;`-separated statements, DataFusion's or the view
    /// statements, and returns the result of the last, like
    /// [`SessionContext::sql`]. Earlier statements run to completion.
    pub async fn sql(&self, sql: &str) -> Result<DataFrame> {
        let (dialect, recursion_limit) = crate::sql::parser_settings(&self.ctx);
        let statements = parse_sql_with_text(sql, &dialect, recursion_limit)?;
        self.execute_all(statements).await
    }

    /// Runs statements parsed with [`crate::sql::parse_sql_with_text`] (each
    /// with its text), as [`Self::sql`] does.
    pub async fn execute_all(&self, statements: Vec<(Statement, String)>) -> Result<DataFrame> {
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
        self.run_statement(statement, text)
            .await?
            .into_dataframe(&self.ctx)
    }

    /// Runs one parsed statement and says what it did, typed: the one
    /// place a statement is dispatched. `sql()` returns the outcome's rows
    /// ([`StatementOutcome::into_dataframe`]); `dfmv`, the server and
    /// Flight SQL print or serialise the outcome. `text` is how the user
    /// wrote the statement (kept for a remembered `CREATE EXTERNAL TABLE`
    /// or `CREATE VIEW`).
    pub async fn run_statement(
        &self,
        statement: Statement,
        text: Option<&str>,
    ) -> Result<StatementOutcome> {
        let base = self.sync_base().await?;
        if self.options.list_files_per_statement {
            let cache = &self.ctx.runtime_env().cache_manager;
            if cache.get_list_files_cache_ttl().is_none()
                && let Some(listings) = cache.get_list_files_cache()
            {
                listings.clear();
            }
        }
        Ok(match statement {
            Statement::Create(create) => StatementOutcome::Created(
                self.create(&create, None)
                    .await
                    .map_err(|e| self.refused("CREATE MATERIALIZED VIEW", e))?,
            ),
            Statement::Refresh(refresh) => StatementOutcome::Refreshed(
                self.refresh_pinned(
                    &refresh,
                    &base,
                    &refresh::PinnedSources::new(),
                    refresh::Origin::STATEMENT,
                )
                .await?,
            ),
            Statement::ExplainRefresh(refresh) => {
                StatementOutcome::Rows(self.explain_refresh(&refresh, &base).await?)
            }
            Statement::Drop(drop) => StatementOutcome::Dropped(self.drop_synced(&drop).await?),
            Statement::Alter(alter) => {
                self.alter_materialized_view(&alter).await?;
                StatementOutcome::Rows(no_rows(&self.ctx))
            }
            Statement::Show { like } => StatementOutcome::Shown(self.show(like.as_deref()).await?),
            Statement::Vacuum => StatementOutcome::Vacuumed(
                self.cleanup()
                    .await
                    .map_err(|e| self.refused("VACUUM MATERIALIZED VIEWS", e))?,
            ),
            Statement::DataFusion(statement) => {
                StatementOutcome::Rows(self.execute_datafusion(*statement, text).await?)
            }
        })
    }

    /// After a query over materialized view `name` failed reading Parquet:
    /// the first file of its current snapshot that cannot be read back
    /// whole, if any. Reads every file of the snapshot.
    pub async fn unreadable_file(&self, name: &QualifiedName) -> Option<UnreadableFile> {
        let state = self.catalog.view(name).await.ok()??;
        let snapshot = state.view.snapshot.as_ref()?;
        crate::table::first_unreadable_file(&self.catalog, snapshot).await
    }

    /// Removes superseded manifest versions, retired snapshots and files
    /// left by failed writers, once older than the retention window.
    pub async fn cleanup(&self) -> Result<CleanupReport> {
        let mut report = self.catalog.cleanup(Sweep::Full).await?;
        if self.options.history_per_view > 0 {
            report.history_deleted =
                crate::history::prune_all(&self.catalog, self.options.history_per_view).await?;
        }
        Ok(report)
    }

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
}

/// Gives `ctx` the rewrite's settings (`matview.*`) and a query planner
/// that plans around its `EXPLAIN` marks (see [`crate::rewrite`]), unless
/// it has them.
fn install_rewrite(ctx: &SessionContext) {
    let state_ref = ctx.state_ref();
    let mut state = state_ref.write();
    if state
        .config()
        .options()
        .extensions
        .get::<crate::rewrite::MatviewConfig>()
        .is_some()
    {
        return;
    }
    let session_id = state.session_id().to_owned();
    let planner = Arc::new(crate::rewrite::Planner {
        inner: Arc::clone(state.query_planner()),
    });
    let mut next = rebuilt(&state, |b| {
        b.with_session_id(session_id).with_query_planner(planner)
    });
    next.config_mut()
        .options_mut()
        .extensions
        .insert(crate::rewrite::MatviewConfig::default());
    *state = next;
}

/// `state` rebuilt through DataFusion's builder with `edit`, its functions
/// named as they were. The builder registers the functions again in the
/// order of a hash map, each under its name and aliases: a function a user
/// (or Spark's) registered over a built-in of the same name could lose
/// that name to the built-in whose alias points at it (`date_trunc` to
/// `datetrunc`'s), at random. Each name that now means another function
/// is registered again until every name means what it did.
fn rebuilt(
    state: &datafusion::execution::SessionState,
    edit: impl FnOnce(
        datafusion::execution::SessionStateBuilder,
    ) -> datafusion::execution::SessionStateBuilder,
) -> datafusion::execution::SessionState {
    use datafusion::execution::FunctionRegistry;
    let mut next =
        edit(datafusion::execution::SessionStateBuilder::new_from_existing(state.clone())).build();
    /// The functions that some name of `then` no longer means in `now`.
    fn moved<F>(then: &HashMap<String, Arc<F>>, now: &HashMap<String, Arc<F>>) -> Vec<Arc<F>> {
        then.iter()
            .filter(|(name, f)| !now.get(*name).is_some_and(|n| Arc::ptr_eq(n, f)))
            .map(|(_, f)| Arc::clone(f))
            .collect()
    }
    // Each pass settles at least the names of the functions it registers;
    // a name can only be unsettled by a function that claims it too.
    for _ in 0..8 {
        let scalar = moved(state.scalar_functions(), next.scalar_functions());
        let aggregate = moved(state.aggregate_functions(), next.aggregate_functions());
        let window = moved(state.window_functions(), next.window_functions());
        if scalar.is_empty() && aggregate.is_empty() && window.is_empty() {
            return next;
        }
        for f in scalar {
            let _ = next.register_udf(f);
        }
        for f in aggregate {
            let _ = next.register_udaf(f);
        }
        for f in window {
            let _ = next.register_udwf(f);
        }
    }
    log::warn!("a session's functions could not all keep their names when it was rebuilt");
    next
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

    /// A function registered over a built-in of the same name keeps the
    /// name through `open`, `fork` and `replace_runtime`, which rebuild the
    /// session's state (DataFusion's built-in `date_trunc` has the alias
    /// `datetrunc`, which a rebuild could register over the user's).
    #[tokio::test]
    async fn functions_registered_over_built_ins_keep_their_names() {
        use datafusion::arrow::datatypes::DataType;
        use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
        let own = Arc::new(create_udf(
            "date_trunc",
            vec![DataType::Int64],
            DataType::Int64,
            Volatility::Immutable,
            Arc::new(|args: &[ColumnarValue]| Ok(args[0].clone())),
        ));
        let is_own = |ctx: &SessionContext| {
            let state = ctx.state();
            let f = &state.scalar_functions()["date_trunc"];
            (f.inner().as_ref() as &dyn std::any::Any)
                .is::<datafusion::logical_expr::SimpleScalarUDF>()
        };
        // The rebuilt map's order differs from run to run: try often.
        for _ in 0..20 {
            let ctx = SessionContext::new();
            ctx.register_udf(own.as_ref().clone());
            assert!(is_own(&ctx));
            let s = MatviewSession::open(ctx, "memory:///catalog")
                .await
                .unwrap();
            assert!(is_own(s.context()), "open kept the user's date_trunc");
            assert!(is_own(s.fork().context()), "fork kept it");
            s.replace_runtime(s.context().runtime_env());
            assert!(is_own(s.context()), "replace_runtime kept it");
        }
    }

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

    datafusion::common::extensions_options! {
        /// Stands for Ballista's settings (namespace `ballista`).
        struct FakeBallista {
            job_name: String, default = String::new()
        }
    }

    impl datafusion::common::config::ConfigExtension for FakeBallista {
        const PREFIX: &'static str = "ballista";
    }

    /// A context with Ballista's settings is refused unless it was
    /// prepared for views (`ClusterExecution`): its scheduler could not
    /// decode a view's scan.
    #[tokio::test]
    async fn a_ballista_context_must_be_prepared_for_views() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("cat").display().to_string();
        let config = datafusion::prelude::SessionConfig::new()
            .with_option_extension(FakeBallista::default());
        let e = MatviewSession::open(SessionContext::new_with_config(config.clone()), &location)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::NotSupported(m) if m.contains("for_cluster")),
            "{e}"
        );
        let prepared = config.with_extension(Arc::new(ClusterExecution));
        assert!(on_cluster(
            &SessionContext::new_with_config(prepared.clone()).state()
        ));
        MatviewSession::open(SessionContext::new_with_config(prepared), &location)
            .await
            .unwrap();
        // Without Ballista's settings nothing is asked.
        MatviewSession::open(SessionContext::new(), &location)
            .await
            .unwrap();
    }
}
