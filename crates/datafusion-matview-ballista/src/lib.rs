//! Materialized views on an Apache DataFusion Ballista 55 cluster.
//!
//! A Ballista client sends the *logical* plan of each query to the
//! scheduler, which plans it physically and hands its tasks to executors.
//! A stock scheduler decodes only what DataFusion's own codecs know:
//! tables over files (`ListingTable`), plain views, `VALUES`, `COPY TO`.
//! So a context made by [`remote`] (or a Ballista state passed through
//! [`for_cluster`]) puts a [`ClusterPlanner`] in front of Ballista's
//! planner, and a [`MatviewSession`](datafusion_matview::MatviewSession)
//! opened on it serves views; just before a plan leaves the client it
//! rewrites
//!
//! - each scan of a materialized view into a scan of a `ListingTable` over
//!   exactly the Parquet files of the snapshot the scan reads (the latest
//!   committed one, or the one a pinned refresh holds), and the snapshot
//!   tables inside incremental refresh plans likewise;
//! - `materialized_views()` into `VALUES` holding its rows (the catalog is
//!   read on the client);
//! - and it refuses, naming the relation, a scan of anything else only the
//!   client holds (an in-memory table, a custom provider) in a plan that
//!   also reads files, and a write into such a table, instead of letting
//!   the scheduler fail to decode it. A plan that reads no files at all (a
//!   statement's result row, `SELECT 1`, a query of in-memory tables only)
//!   runs on the client.
//!
//! What runs where: a view's query and its Parquet writes (`COPY (query)
//! TO '<new snapshot directory>'`, the same statement a refresh runs in one
//! process) run on the executors; the client plans, fingerprints sources,
//! lists and checks the files the executors wrote (row counts against the
//! `COPY`'s count), writes the snapshot marker and commits. No custom
//! scheduler or executor is needed. Executors need to reach the catalog's
//! store (a shared folder, or S3 with `s3.*` settings, see docs/cluster.md).
//!
//! Two things Ballista's serialization drops, and what follows: `COPY`'s
//! options (so each refresh part is written to a path ending in
//! `.parquet`, which DataFusion writes as one file anyway) and the Parquet
//! key-value metadata (so snapshot files written on a cluster do not name
//! their view and snapshot in their footers; the `_snapshot.json` marker
//! written by the client does, and recovery reads that).
//!
//! An executor that dies mid-refresh is declared lost by the scheduler,
//! which runs its tasks again elsewhere; if the dead one had already
//! written its file, the rows are written twice, the client's row count
//! finds more rows than the `COPY` reported, and the refresh fails without
//! committing (the view keeps its snapshot; a retry succeeds).
//!
//! [`LocalCluster`] runs a scheduler and executors in this process, for one
//! machine and for tests; [`LocalExecutor`] adds a stock executor, in this
//! process or another, to any scheduler.

use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ballista_core::config::{BallistaConfig, TaskSchedulingPolicy};
use ballista_core::extension::{
    SessionConfigExt, ballista_aggregate_functions, ballista_scalar_functions,
    ballista_window_functions,
};
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::serde::BallistaCodec;
use ballista_core::serde::protobuf::ExecutorRegistration;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpcServer;
use ballista_core::serde::scheduler::{
    ExecutorOperatingSystemSpecification, ExecutorSpecification,
};
use ballista_core::utils::{GrpcServerConfig, create_grpc_server};
use ballista_executor::execution_engine::QueryStageExecutor;
use ballista_executor::executor::Executor;
use ballista_executor::flight_service::BallistaFlightService;
use ballista_executor::metrics::ExecutorMetricsCollector;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::metrics::default_metrics_collector;
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::MemTable;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{Column, ScalarValue, plan_err};
use datafusion::datasource::empty::EmptyTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::{TableProvider, ViewTable, provider_as_source, source_as_provider};
use datafusion::error::Result as DFResult;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, TableScan, lit};
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion::prelude::{SessionConfig, SessionContext};
use tokio::task::JoinHandle;

use datafusion_matview::catalog::Catalog;
use datafusion_matview::error::{Error, Result};
use datafusion_matview::functions::MaterializedViewsFunction;
use datafusion_matview::spec::Snapshot;
use datafusion_matview::table::{MaterializedViewTable, SnapshotTable};

/// Ballista's setting for its adaptive query planner.
const ADAPTIVE_PLANNER: &str = "ballista.planner.adaptive.enabled";

/// Whether `state` sends its queries to a Ballista cluster.
pub fn is_ballista(state: &SessionState) -> bool {
    state
        .config()
        .options()
        .extensions
        .get::<BallistaConfig>()
        .is_some()
}

/// A context whose queries run on the Ballista cluster whose scheduler is
/// at `url` (`df://host:port`), with `state`'s catalogs, functions and
/// object stores (Ballista's `SessionContext::remote_with_state`),
/// prepared for materialized views ([`for_cluster`]). Open a
/// [`MatviewSession`](datafusion_matview::MatviewSession) on it.
pub async fn remote(url: &str, state: SessionState) -> Result<SessionContext> {
    use ballista::prelude::SessionContextExt;
    let ctx = SessionContext::remote_with_state(url, state).await?;
    Ok(SessionContext::new_with_state(for_cluster(ctx.state())))
}

/// `state` with a [`ClusterPlanner`] in front of its query planner, and
/// Ballista's adaptive query planner turned off: in Ballista 55 it counts
/// one input of a union twice under some schedules (the union under an
/// aggregate that an incremental GROUP BY refresh runs, with one task slot
/// per executor; `tests/ballista.rs` shows it), and a view must never be
/// silently wrong. `SET ballista.planner.adaptive.enabled = true` turns it
/// back on for the session.
pub fn for_cluster(mut state: SessionState) -> SessionState {
    state
        .config_mut()
        .set_extension(Arc::new(datafusion_matview::session::ClusterExecution));
    if let Err(e) = state
        .config_mut()
        .options_mut()
        .set(ADAPTIVE_PLANNER, "false")
    {
        log::warn!("could not turn off Ballista's adaptive planner: {e}");
    }
    let inner = Arc::clone(state.query_planner());
    SessionStateBuilder::new_from_existing(state)
        .with_query_planner(Arc::new(ClusterPlanner { inner }))
        .build()
}

/// A query planner that makes a plan readable by a stock Ballista
/// scheduler (see the module docs), then hands it to `inner`.
#[derive(Debug)]
pub struct ClusterPlanner {
    inner: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for ClusterPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        state: &dyn Session,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        if !reads_files(plan)? {
            // Nothing for the executors to read: a statement's result, or
            // `materialized_views()`, runs here.
            return DefaultPhysicalPlanner::default()
                .create_physical_plan(plan, state)
                .await;
        }
        if let LogicalPlan::Dml(dml) = plan
            && let Ok(target) = source_as_provider(&dml.target)
            && !(target.as_ref() as &dyn Any).is::<ListingTable>()
        {
            return plan_err!(
                "cannot write into \"{}\" on a Ballista cluster: the query reads files the executors read, and the table is held by this process only; write into a table over files (CREATE EXTERNAL TABLE) or COPY TO files",
                dml.table_name
            );
        }
        let plan = cluster_plan(plan, state).await?;
        self.inner.create_physical_plan(&plan, state).await
    }
}

/// Whether `plan` scans a table over files, a plain view or a
/// materialized view: something the executors read.
fn reads_files(plan: &LogicalPlan) -> DFResult<bool> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
        {
            let any = provider.as_ref() as &dyn Any;
            found = any.is::<ListingTable>()
                || any.is::<ViewTable>()
                || any.is::<MaterializedViewTable>()
                || any.is::<SnapshotTable>();
        }
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(found)
}

/// What a scan of one provider becomes on a cluster.
enum Replacement {
    Table(Arc<dyn TableProvider>),
    Rows(Vec<Vec<ScalarValue>>),
    Refused(String),
}

/// Identity of a provider in a plan.
fn key(provider: &Arc<dyn TableProvider>) -> usize {
    Arc::as_ptr(provider) as *const () as usize
}

/// `plan` with every scan a stock scheduler cannot decode replaced (see
/// the module docs).
pub async fn cluster_plan(plan: &LogicalPlan, state: &dyn Session) -> DFResult<LogicalPlan> {
    let mut providers: Vec<Arc<dyn TableProvider>> = vec![];
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
        {
            providers.push(provider);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let mut replacements: HashMap<usize, Replacement> = HashMap::new();
    for provider in providers {
        if replacements.contains_key(&key(&provider)) {
            continue;
        }
        if let Some(replacement) = replacement(&provider, state).await? {
            replacements.insert(key(&provider), replacement);
        }
    }
    if replacements.is_empty() {
        return Ok(plan.clone());
    }
    let rewritten = plan.clone().transform_up_with_subqueries(|node| {
        let LogicalPlan::TableScan(scan) = node else {
            return Ok(Transformed::no(node));
        };
        let Some(replacement) = source_as_provider(&scan.source)
            .ok()
            .and_then(|p| replacements.get(&key(&p)))
        else {
            return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
        };
        match replacement {
            Replacement::Table(table) => Ok(Transformed::yes(LogicalPlan::TableScan(TableScan {
                source: provider_as_source(Arc::clone(table)),
                ..scan
            }))),
            Replacement::Rows(rows) => Ok(Transformed::yes(rows_plan(&scan, rows)?)),
            Replacement::Refused(why) => {
                plan_err!(
                    "relation \"{}\" cannot be read on a Ballista cluster: {why}",
                    scan.table_name
                )
            }
        }
    })?;
    Ok(rewritten.data)
}

/// What to do with a scan of `provider`; `None`: it goes as it is.
async fn replacement(
    provider: &Arc<dyn TableProvider>,
    state: &dyn Session,
) -> DFResult<Option<Replacement>> {
    let any = provider.as_ref() as &dyn Any;
    if any.is::<ListingTable>() || any.is::<ViewTable>() {
        return Ok(None);
    }
    if let Some(view) = any.downcast_ref::<MaterializedViewTable>() {
        let snapshot = view.snapshot_to_scan().await?;
        return Ok(Some(snapshot_files(
            view.catalog(),
            &snapshot,
            view.schema(),
        )?));
    }
    if let Some(table) = any.downcast_ref::<SnapshotTable>() {
        let (catalog, snapshot, schema) = table.parts();
        return Ok(Some(snapshot_files(catalog, snapshot, schema)?));
    }
    if any.is::<EmptyTable>() {
        return Ok(Some(Replacement::Rows(vec![])));
    }
    if any.is::<MaterializedViewsFunction>() {
        let plan = provider.scan(state, None, &[], None).await?;
        let batches = collect(plan, state.task_ctx()).await?;
        let mut rows = vec![];
        for batch in &batches {
            for row in 0..batch.num_rows() {
                rows.push(
                    batch
                        .columns()
                        .iter()
                        .map(|column| ScalarValue::try_from_array(column, row))
                        .collect::<DFResult<Vec<_>>>()?,
                );
            }
        }
        return Ok(Some(Replacement::Rows(rows)));
    }
    let what = if any.is::<MemTable>() {
        "it is an in-memory table, held by this process only, and the query also reads files the executors read; store it as files and use CREATE EXTERNAL TABLE"
    } else {
        "its table provider is not one a stock Ballista scheduler can decode; executors read tables over files (CREATE EXTERNAL TABLE), plain views and materialized views"
    };
    Ok(Some(Replacement::Refused(what.to_owned())))
}

/// A table over exactly the data files of `snapshot`, read with `schema`
/// (extra columns in the files are ignored).
fn snapshot_files(
    catalog: &Catalog,
    snapshot: &Snapshot,
    schema: SchemaRef,
) -> DFResult<Replacement> {
    if snapshot.files.is_empty() {
        return Ok(Replacement::Rows(vec![]));
    }
    let urls = snapshot
        .files
        .iter()
        .map(|f| ListingTableUrl::parse(catalog.url_of_file(&f.path)))
        .collect::<DFResult<Vec<_>>>()?;
    let options =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    Ok(Replacement::Table(Arc::new(ListingTable::try_new(config)?)))
}

/// The rows of a scan as a plan of the scan's columns, names and
/// qualifier that a scheduler decodes as such. DataFusion's plan encoding
/// keeps neither the schema of `VALUES` (decoded as `column1`,
/// `column2`, ...) nor that of an empty relation (decoded with no
/// columns), so a plan that joined an empty table by qualified columns
/// did not decode (`No field named f.id`). So: `VALUES` of the rows (with
/// no rows, one row of typed values, filtered out), each column renamed
/// to the scan's, under the scan's name. (A column of rows is as nullable
/// as its values.)
fn rows_plan(scan: &TableScan, rows: &[Vec<ScalarValue>]) -> DFResult<LogicalPlan> {
    let fields = scan.projected_schema.fields();
    let mut values: Vec<Vec<Expr>> = rows
        .iter()
        .map(|row| {
            let row: Vec<&ScalarValue> = match &scan.projection {
                Some(projection) => projection.iter().map(|&i| &row[i]).collect(),
                None => row.iter().collect(),
            };
            // A scan of no columns (`count(*)`) still has its rows.
            if row.is_empty() {
                return vec![lit(true)];
            }
            row.into_iter().map(|v| lit(v.clone())).collect()
        })
        .collect();
    if let Some(fetch) = scan.fetch {
        values.truncate(fetch);
    }
    let empty = values.is_empty();
    if empty {
        values.push(if fields.is_empty() {
            vec![lit(true)]
        } else {
            // A null where the column may hold one, so that each column
            // is as nullable as the scan's.
            fields
                .iter()
                .map(|f| match f.is_nullable() {
                    true => ScalarValue::try_from(f.data_type()),
                    false => ScalarValue::new_default(f.data_type()),
                })
                .map(|v| v.map(lit))
                .collect::<DFResult<_>>()?
        });
    }
    let mut builder = LogicalPlanBuilder::values(values)?;
    if empty {
        builder = builder.filter(lit(false))?;
    }
    let listed = Arc::clone(builder.schema());
    let named = fields
        .iter()
        .enumerate()
        .map(|(i, f)| Expr::Column(Column::from(listed.qualified_field(i))).alias(f.name()));
    builder
        .project(named)?
        .alias(scan.table_name.clone())?
        .build()
}

/// A Ballista scheduler and executors running in this process on loopback
/// ports: a cluster for one machine, and for tests. Its scheduler and
/// executors are the stock ones (the same code as Ballista's binaries,
/// with Ballista's default session and codecs); they share this
/// process's object stores through `runtime`. More executors, in this
/// process or others, can join it: see [`LocalExecutor::start`].
pub struct LocalCluster {
    scheduler: SocketAddr,
    /// The scheduler's gRPC server; stopped with the cluster.
    serving: JoinHandle<()>,
    executors: Vec<LocalExecutor>,
}

/// A stock Ballista executor running in this process; it stops when
/// dropped.
pub struct LocalExecutor {
    tasks: Arc<TaskCounts>,
    running: Vec<JoinHandle<()>>,
    /// Shuffle files; removed with the executor.
    _work_dir: tempfile::TempDir,
}

/// Called with the plan (as text) of each task an executor has finished,
/// before the executor reports the task to the scheduler.
pub type TaskObserver = Arc<dyn Fn(&str) + Send + Sync>;

/// What one executor ran.
#[derive(Debug, Default)]
struct TaskCounts {
    tasks: AtomicUsize,
    writes: AtomicUsize,
}

/// Counts the tasks an executor finished, and those that wrote files, and
/// shows each to the executor's observer.
struct Counting {
    counts: Arc<TaskCounts>,
    observer: Option<TaskObserver>,
}

impl ExecutorMetricsCollector for Counting {
    fn record_stage(
        &self,
        _job_id: &ballista_core::JobId,
        _stage_id: usize,
        _task_id: usize,
        plan: Arc<dyn QueryStageExecutor>,
    ) {
        let plan = plan.to_string();
        self.counts.tasks.fetch_add(1, Ordering::SeqCst);
        if plan.contains("DataSinkExec") {
            self.counts.writes.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(observer) = &self.observer {
            observer(&plan);
        }
    }
}

/// How long Ballista's scheduler waits to hear from an executor before it
/// declares it dead (its `executor_timeout_seconds` default).
const DEFAULT_EXECUTOR_TIMEOUT: Duration = Duration::from_secs(180);

impl LocalCluster {
    /// Starts a scheduler and `executors` executors of `vcores` task slots
    /// each, all reading and writing through `runtime`'s object stores.
    pub async fn start(
        runtime: Arc<RuntimeEnv>,
        executors: usize,
        vcores: usize,
    ) -> Result<LocalCluster> {
        Self::start_with(
            Stores::Shared(runtime),
            executors,
            vcores,
            DEFAULT_EXECUTOR_TIMEOUT,
        )
        .await
    }

    /// [`Self::start`], with a scheduler that declares an executor dead
    /// when it has not heard from it for `executor_timeout` (Ballista's
    /// default is 180 s) and then runs the dead executor's tasks, and any
    /// its lost output feeds, on the others. A busy executor is heard from
    /// at least every 5 s, so a timeout much below 10 s may declare live
    /// executors dead.
    pub async fn start_with_executor_timeout(
        runtime: Arc<RuntimeEnv>,
        executors: usize,
        vcores: usize,
        executor_timeout: Duration,
    ) -> Result<LocalCluster> {
        Self::start_with(Stores::Shared(runtime), executors, vcores, executor_timeout).await
    }

    /// [`Self::start`], with the scheduler and executors building their
    /// object stores as Ballista's `ballista-scheduler` and
    /// `ballista-executor` binaries do: local files, and S3 from the
    /// `s3.*` settings each job carries (`s3.endpoint`, `s3.region`,
    /// `s3.access_key_id`, `s3.secret_access_key`, `s3.session_token`,
    /// `s3.allow_http`; else the `AWS_*` environment). The client then
    /// needs those settings too: see [`s3_settings_state`].
    pub async fn start_like_binaries(executors: usize, vcores: usize) -> Result<LocalCluster> {
        Self::start_with(
            Stores::FromSettings,
            executors,
            vcores,
            DEFAULT_EXECUTOR_TIMEOUT,
        )
        .await
    }

    async fn start_with(
        stores: Stores,
        executors: usize,
        vcores: usize,
        executor_timeout: Duration,
    ) -> Result<LocalCluster> {
        let (scheduler, serving) = start_scheduler(stores.clone(), executor_timeout)
            .await
            .map_err(|e| failed_to_start("scheduler", &e))?;
        let mut cluster = LocalCluster {
            scheduler,
            serving,
            executors: vec![],
        };
        for _ in 0..executors {
            let executor =
                LocalExecutor::spawn("localhost", scheduler.port(), stores.clone(), vcores, None)
                    .await
                    .map_err(|e| failed_to_start("executor", &e))?;
            cluster.executors.push(executor);
        }
        Ok(cluster)
    }

    /// The scheduler's URL, `df://localhost:PORT`.
    pub fn url(&self) -> String {
        format!("df://localhost:{}", self.scheduler.port())
    }

    /// A context whose queries run on this cluster, with `state`'s
    /// catalogs, functions and object stores.
    pub async fn context(&self, state: SessionState) -> Result<SessionContext> {
        remote(&self.url(), state).await
    }

    /// How many tasks each executor started with the cluster has finished,
    /// in start order.
    pub fn tasks(&self) -> Vec<usize> {
        self.executors.iter().map(LocalExecutor::tasks).collect()
    }

    /// How many of each executor's finished tasks wrote files.
    pub fn write_tasks(&self) -> Vec<usize> {
        self.executors
            .iter()
            .map(LocalExecutor::write_tasks)
            .collect()
    }
}

fn failed_to_start(what: &str, e: &dyn std::fmt::Display) -> Error {
    Error::Serve {
        what: format!("start the in-process Ballista {what}"),
        reason: e.to_string(),
    }
}

/// Starts a stock scheduler (as Ballista's
/// `new_standalone_scheduler_with_builder` does, pull-based) on a free
/// loopback port, with `executor_timeout`; its address and server task.
/// Ballista's function always uses `SchedulerConfig::default()`, whose
/// 180 s executor timeout no test can wait out, hence this copy of its
/// steps.
async fn start_scheduler(
    stores: Stores,
    executor_timeout: Duration,
) -> ballista_core::error::Result<(SocketAddr, JoinHandle<()>)> {
    let builder_stores = stores.clone();
    let session_builder = Arc::new(move |config: SessionConfig| {
        let runtime = builder_stores.runtime_for(&config)?;
        Ok(stock_state(config, runtime))
    });
    let config_producer: ballista_core::ConfigProducer = Arc::new(move || config_of(&stores));
    let max_message = config_producer().ballista_grpc_client_max_message_size();
    // The scheduler's name in its state (Ballista's standalone one uses
    // this too), not the address it listens on.
    let name = "localhost:50050";
    let cluster = BallistaCluster::new_memory(name, session_builder, Arc::clone(&config_producer));
    let timeout = executor_timeout.as_secs().max(2);
    // Look for dead executors a few times per timeout, at most every 15 s
    // (Ballista's default).
    let interval = (timeout / 8).clamp(1, 15);
    let config = SchedulerConfig {
        executor_timeout_seconds: timeout,
        expire_dead_executor_interval_seconds: interval,
        no_executors_grace_period_seconds: timeout,
        ..SchedulerConfig::default()
    }
    .with_scheduler_policy(TaskSchedulingPolicy::PullStaged);
    config.validate()?;
    let codec: BallistaCodec = BallistaCodec::default();
    let mut server = SchedulerServer::new(
        name.to_owned(),
        cluster,
        codec,
        Arc::new(config),
        default_metrics_collector()?,
    );
    server.init().await?;
    let grpc = SchedulerGrpcServer::new(server)
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message);
    let listener = tokio::net::TcpListener::bind("localhost:0").await?;
    let address = listener.local_addr()?;
    let serving = tokio::spawn(async move {
        let _ = create_grpc_server(&GrpcServerConfig::default())
            .add_service(grpc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    Ok((address, serving))
}

impl LocalExecutor {
    /// Starts a stock executor in this process that joins the scheduler
    /// at `url` (`df://host:port`) with `vcores` task slots, building its
    /// object stores as the `ballista-executor` binary does (see
    /// [`LocalCluster::start_like_binaries`]). `observer`, if given, sees
    /// each task it finishes before the scheduler does.
    pub async fn start(
        url: &str,
        vcores: usize,
        observer: Option<TaskObserver>,
    ) -> Result<LocalExecutor> {
        let bad_url = || Error::Serve {
            what: format!("join the Ballista scheduler at {url}"),
            reason: "expected a URL of the form df://host:port".to_owned(),
        };
        let (host, port) = url
            .strip_prefix("df://")
            .and_then(|rest| rest.rsplit_once(':'))
            .ok_or_else(bad_url)?;
        let port: u16 = port.parse().map_err(|_| bad_url())?;
        Self::spawn(host, port, Stores::FromSettings, vcores, observer)
            .await
            .map_err(|e| failed_to_start("executor", &e))
    }

    async fn spawn(
        host: &str,
        port: u16,
        stores: Stores,
        vcores: usize,
        observer: Option<TaskObserver>,
    ) -> std::result::Result<LocalExecutor, Box<dyn std::error::Error + Send + Sync>> {
        let scheduler = SchedulerGrpcClient::connect(format!("http://{host}:{port}")).await?;
        let listener = tokio::net::TcpListener::bind("localhost:0").await?;
        let address = listener.local_addr()?;
        let registration = ExecutorRegistration {
            id: datafusion_matview::spec::new_id(),
            host: Some("localhost".to_owned()),
            port: address.port() as u32,
            grpc_port: 0,
            specification: Some(
                ExecutorSpecification::default()
                    .with_vcores(vcores as u32)
                    .into(),
            ),
            os_info: Some(ExecutorOperatingSystemSpecification::default().into()),
            ballista_protocol_version: ballista_core::BALLISTA_PROTOCOL_VERSION,
        };
        let work_dir = tempfile::Builder::new()
            .prefix("dfmv-ballista-")
            .tempdir()?;
        let work_path = work_dir.path().display().to_string();
        let tasks = Arc::new(TaskCounts::default());
        let config = config_of(&stores);
        let state = stock_state(config.clone(), stores.runtime_for(&config)?);
        let executor = Arc::new(Executor::with_default_execution_engine(
            registration,
            &work_path,
            Arc::new(move |config: &SessionConfig| stores.runtime_for(config)),
            Arc::new(move || config.clone()),
            Arc::new(BallistaFunctionRegistry::from(&state)),
            Arc::new(Counting {
                counts: Arc::clone(&tasks),
                observer,
            }),
            vcores,
        ));
        let flight = arrow_flight::flight_service_server::FlightServiceServer::new(
            BallistaFlightService::new(work_path),
        );
        let server = tokio::spawn(async move {
            let _ = create_grpc_server(&GrpcServerConfig::default())
                .add_service(flight)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        let poll = tokio::spawn(async move {
            let _ = ballista_executor::execution_loop::poll_loop(
                scheduler,
                executor,
                BallistaCodec::default(),
                None,
                None,
                ballista_executor::health::ExecutorHealth::new(),
            )
            .await;
        });
        Ok(LocalExecutor {
            tasks,
            running: vec![server, poll],
            _work_dir: work_dir,
        })
    }

    /// How many tasks it has finished.
    pub fn tasks(&self) -> usize {
        self.tasks.tasks.load(Ordering::SeqCst)
    }

    /// How many of its finished tasks wrote files.
    pub fn write_tasks(&self) -> usize {
        self.tasks.writes.load(Ordering::SeqCst)
    }
}

impl Drop for LocalExecutor {
    fn drop(&mut self) {
        for task in &self.running {
            task.abort();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// Where a [`LocalCluster`]'s scheduler and executors get object stores.
#[derive(Clone)]
enum Stores {
    /// This process's runtime, shared.
    Shared(Arc<RuntimeEnv>),
    /// Built per job from its `s3.*` settings, as Ballista's binaries do.
    FromSettings,
}

impl Stores {
    fn runtime_for(&self, config: &SessionConfig) -> DFResult<Arc<RuntimeEnv>> {
        match self {
            Stores::Shared(runtime) => Ok(Arc::clone(runtime)),
            Stores::FromSettings => {
                ballista_core::object_store::runtime_env_with_s3_support(config)
            }
        }
    }
}

/// The configuration a stock scheduler or executor starts each job from.
fn config_of(stores: &Stores) -> SessionConfig {
    match stores {
        Stores::Shared(_) => SessionConfig::new_with_ballista(),
        Stores::FromSettings => ballista_core::object_store::session_config_with_s3_support(),
    }
}

/// A client session state whose object stores are built from `s3.*`
/// settings, `settings` given as (key, value) pairs such as
/// `("s3.endpoint", "http://localhost:9000")`: the same settings travel
/// with each job to stock schedulers and executors (Ballista's
/// `session_state_with_s3_support`). Local files work as usual; other
/// object stores cannot be registered on such a state.
pub fn s3_settings_state(settings: &[(&str, &str)]) -> Result<SessionState> {
    let mut config = ballista_core::object_store::session_config_with_s3_support();
    for (key, value) in settings {
        config.options_mut().set(key, value)?;
    }
    Ok(ballista_core::object_store::session_state_with_s3_support(
        config,
    )?)
}

/// The session a stock scheduler or executor builds (Ballista's
/// `default_session_builder`), over `runtime`.
fn stock_state(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> SessionState {
    SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_optimizer_rules(ballista_core::optimizer::ballista_default_optimizer_rules())
        .with_scalar_functions(ballista_scalar_functions())
        .with_aggregate_functions(ballista_aggregate_functions())
        .with_window_functions(ballista_window_functions())
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::functions_aggregate::count::count_all;
    use datafusion::logical_expr::TableScanBuilder;
    use datafusion::prelude::col;
    use datafusion_proto::bytes::{logical_plan_from_bytes, logical_plan_to_bytes};

    /// `plan` encoded and decoded as Ballista sends it to a scheduler.
    fn decoded(ctx: &SessionContext, plan: &LogicalPlan) -> LogicalPlan {
        let bytes = logical_plan_to_bytes(plan).unwrap();
        logical_plan_from_bytes(&bytes, &ctx.task_ctx()).unwrap()
    }

    async fn run(ctx: &SessionContext, plan: LogicalPlan) -> Vec<RecordBatch> {
        let df = ctx.execute_logical_plan(plan).await.unwrap();
        df.collect().await.unwrap()
    }

    /// What a scheduler runs for `sql`, which must have the query's
    /// columns.
    async fn on_a_scheduler(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
        let plan = ctx.sql(sql).await.unwrap().into_unoptimized_plan();
        let sent = cluster_plan(&plan, &ctx.state()).await.unwrap();
        let decoded = decoded(ctx, &sent);
        assert_eq!(decoded.schema(), plan.schema(), "{sql}");
        run(ctx, decoded).await
    }

    /// A table with no files (an `EmptyTable`, as a refresh pins one)
    /// joined by qualified columns. It used to go as an empty relation,
    /// which decodes with no columns, and the scheduler refused the plan
    /// (`No field named f.id. Valid fields are d.k`).
    #[tokio::test]
    async fn an_empty_table_keeps_its_columns_through_the_plan_encoding() {
        let ctx = SessionContext::new();
        let fact = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("k", DataType::Utf8, true),
        ]);
        ctx.register_table("fact", Arc::new(EmptyTable::new(Arc::new(fact))))
            .unwrap();
        ctx.sql("CREATE VIEW dims AS SELECT * FROM (VALUES ('a', 'one')) AS t(k, label)")
            .await
            .unwrap();
        let joined = on_a_scheduler(
            &ctx,
            "SELECT count(*) AS n, max(f.id) AS hi FROM fact f JOIN dims d ON f.k = d.k",
        )
        .await;
        assert_eq!(
            pretty_format_batches(&joined).unwrap().to_string(),
            "+---+----+\n| n | hi |\n+---+----+\n| 0 |    |\n+---+----+"
        );
        let rows = on_a_scheduler(&ctx, "SELECT fact.k, id FROM fact").await;
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    }

    /// Rows a scan is replaced by keep their columns' names, types and
    /// qualifier, and a scan of no columns keeps its rows.
    #[tokio::test]
    async fn rows_keep_their_columns_and_count() {
        let ctx = SessionContext::new();
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ]));
        let source = provider_as_source(Arc::new(EmptyTable::new(schema)));
        let rows = vec![
            vec![ScalarValue::Int32(Some(1)), ScalarValue::from("x")],
            vec![ScalarValue::Int32(None), ScalarValue::from("y")],
        ];
        let all = TableScanBuilder::new("t", Arc::clone(&source))
            .build()
            .unwrap();
        let plan = decoded(&ctx, &rows_plan(&all, &rows).unwrap());
        let qualified = LogicalPlanBuilder::from(plan)
            .project(vec![col("t.b"), col("t.a")])
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            pretty_format_batches(&run(&ctx, qualified).await)
                .unwrap()
                .to_string(),
            "+---+---+\n| b | a |\n+---+---+\n| x | 1 |\n| y |   |\n+---+---+"
        );
        let none = TableScanBuilder::new("t", source)
            .with_projection(Some(vec![]))
            .build()
            .unwrap();
        let plan = decoded(&ctx, &rows_plan(&none, &rows).unwrap());
        assert!(plan.schema().fields().is_empty());
        let counted = LogicalPlanBuilder::from(plan)
            .aggregate(Vec::<Expr>::new(), vec![count_all()])
            .unwrap()
            .build()
            .unwrap();
        let batches = run(&ctx, counted).await;
        let text = pretty_format_batches(&batches).unwrap().to_string();
        assert!(text.contains("| 2 "), "{text}");
    }
}
