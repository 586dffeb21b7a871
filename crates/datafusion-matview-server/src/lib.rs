//! `dfmv serve`: one catalog over HTTP (the materialized-view REST API,
//! shaped like LanceDB's, with asynchronous jobs) and over Arrow Flight SQL
//! (feature `flight-sql`).
//!
//! ```no_run
//! # async fn demo() -> datafusion_matview::Result<()> {
//! use datafusion::prelude::SessionContext;
//! use datafusion_matview::MatviewSession;
//! use datafusion_matview_server::{Server, ServerOptions};
//!
//! let session = MatviewSession::open(SessionContext::new(), "/tmp/catalog").await?;
//! let server = Server::bind(session, ServerOptions::default()).await?;
//! println!("REST on http://{}", server.http_addr());
//! server.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The REST routes, their bodies and answers are in [`rest`] and in the
//! OpenAPI document the server serves at `/openapi.json`; jobs in [`jobs`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::net::TcpListener;

use datafusion_matview::error::{Error, Result};
use datafusion_matview::session::{MatviewSession, StatementOutcome};

pub mod access;
mod errors;
#[cfg(feature = "flight-sql")]
pub mod flight;
pub mod ids;
pub mod jobs;
mod openapi;
pub mod rest;

pub use errors::{ApiError, Condition};
use jobs::Jobs;

/// How a [`Server`] listens and how much work it takes on.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Where the REST API listens (port 0: any free port).
    pub http: SocketAddr,
    /// Where Flight SQL listens; `None`: not at all.
    pub flight_sql: Option<SocketAddr>,
    /// When set, every request but `/healthz` must carry
    /// `Authorization: Bearer <token>` (REST and Flight SQL).
    pub token: Option<String>,
    /// Largest request body accepted, in bytes (larger: 413).
    pub max_body_bytes: usize,
    /// Jobs that may wait or run at once (more: 503).
    pub max_jobs: usize,
    /// Jobs that run at once; the others wait their turn.
    pub max_running_jobs: usize,
    /// How long a finished job can still be described.
    pub keep_finished_jobs: Duration,
    /// Write one line per request to stderr.
    pub log_requests: bool,
    /// Serve an address other than loopback without a token. Without it,
    /// [`Server::bind`] refuses: anyone who can reach the address could
    /// run statements with the server's rights.
    pub no_auth: bool,
    /// Origins (`https://app.example.com`) whose web pages may call the
    /// REST API. A request with any other `Origin` header is refused
    /// (403): by default no web page may drive the server.
    pub allow_origins: Vec<String>,
    /// Host names, besides loopback names, IP addresses and the bound
    /// address, that requests may name in their `Host` header (others:
    /// 421), so a web page cannot reach the server through DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Local folders whose files clients may read and write, besides the
    /// catalog's own (see [`access`]).
    pub data_dirs: Vec<std::path::PathBuf>,
    /// Stores (and paths in them) clients may use besides the catalog's:
    /// `s3://bucket`, `s3://bucket/prefix`, `https://example.com`.
    pub allow_stores: Vec<String>,
    /// Longest a client's statement may take, from parsing to its last row.
    pub statement_timeout: Duration,
    /// Largest result `/v1/sql` answers, in bytes of Arrow data (larger:
    /// 413; Flight SQL streams results and has no such limit).
    pub max_result_bytes: usize,
    /// Open Flight SQL tickets and prepared statements one client may hold
    /// (each kind).
    pub max_handles_per_client: usize,
    /// Open Flight SQL tickets and prepared statements all clients together
    /// may hold (each kind).
    pub max_handles: usize,
    /// Refresh the views whose settings say `auto_refresh = true` (see
    /// [`datafusion_matview::session::auto`]); `None`: never (`dfmv serve
    /// --no-auto-refresh`).
    pub auto_refresh: Option<datafusion_matview::session::auto::AutoRefreshOptions>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            http: SocketAddr::from(([127, 0, 0, 1], 2333)),
            flight_sql: Some(SocketAddr::from(([127, 0, 0, 1], 50051))),
            token: None,
            max_body_bytes: 1 << 20,
            max_jobs: 64,
            max_running_jobs: 2,
            keep_finished_jobs: Duration::from_secs(3600),
            log_requests: false,
            no_auth: false,
            allow_origins: vec![],
            allowed_hosts: vec![],
            data_dirs: vec![],
            allow_stores: vec![],
            statement_timeout: Duration::from_secs(300),
            max_result_bytes: 256 << 20,
            max_handles_per_client: 64,
            max_handles: 1024,
            auto_refresh: Some(Default::default()),
        }
    }
}

/// What runs before each SQL text the server executes: for example
/// registering the object stores a `CREATE EXTERNAL TABLE` names, as dfmv
/// does. The default does nothing.
#[async_trait]
pub trait Prepare: Send + Sync {
    /// Called with every SQL text before it runs.
    async fn prepare(&self, session: &MatviewSession, sql: &str) -> Result<()>;
}

/// What every route and Flight SQL call shares.
#[derive(Clone)]
pub(crate) struct Shared {
    /// The server's own session: the one given to [`Server::bind`], whose
    /// runtime now reaches only what [`access`] allows. No client's
    /// `SET` reaches it; each client runs in a fork of it.
    pub(crate) session: MatviewSession,
    pub(crate) access: Arc<access::Access>,
    pub(crate) jobs: Arc<Jobs>,
    pub(crate) options: Arc<ServerOptions>,
    pub(crate) prepare: Option<Arc<dyn Prepare>>,
    /// Where jobs and clients' statements run: a runtime of its own, so
    /// work that keeps its threads busy (DataFusion's operators yield only
    /// now and then) cannot stall answering requests, timers and cancels.
    pub(crate) work: Arc<WorkRuntime>,
}

/// The runtime jobs and statements run on; shut down without waiting
/// when the server is dropped.
pub(crate) struct WorkRuntime(Option<tokio::runtime::Runtime>);

impl WorkRuntime {
    fn new() -> Result<Self> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("dfmv-work")
            .enable_all()
            .build()
            .map_err(|e| Error::Serve {
                what: "start the runtime for statements and jobs".into(),
                reason: e.to_string(),
            })?;
        Ok(Self(Some(runtime)))
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("the runtime lives until dropped")
            .handle()
    }

    /// Runs `work` on this runtime and waits for it; dropping the wait (a
    /// time limit, a client gone) stops it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        struct AbortOnDrop(tokio::task::AbortHandle);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let task = self.handle().spawn(work);
        let _abort = AbortOnDrop(task.abort_handle());
        task.await.map_err(|e| Error::Serve {
            what: "run the statement".into(),
            reason: e.to_string(),
        })?
    }
}

impl Drop for WorkRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Longest the parsing of one request's SQL may take.
const PARSE_TIME_LIMIT: Duration = Duration::from_secs(5);

impl Shared {
    /// A session of its own for one client (see [`MatviewSession::fork`]).
    pub(crate) fn client(&self) -> MatviewSession {
        self.session.fork()
    }

    /// Runs `sql` in `session` (a client's) as [`MatviewSession::sql`]
    /// does, after the checks of a server: it parses off the async workers
    /// within [`PARSE_TIME_LIMIT`], refuses settings that would reach
    /// beyond the client (see [`check_setting`]) and store options that
    /// would replace the catalog's store. A CREATE MATERIALIZED VIEW alone
    /// answers its result row (view, action, populated, rows_written,
    /// version) as REFRESH does, rather than nothing: a client over the
    /// network has no other way to see it. Errors from a refused file are
    /// [`Error::PermissionDenied`].
    pub(crate) async fn statement(
        &self,
        session: &MatviewSession,
        sql: &str,
    ) -> Result<datafusion::dataframe::DataFrame> {
        self.statement_inner(session, sql)
            .await
            .map_err(|e| access::Refusal::find(&e).unwrap_or(e))
    }

    async fn statement_inner(
        &self,
        session: &MatviewSession,
        sql: &str,
    ) -> Result<datafusion::dataframe::DataFrame> {
        let ctx = session.context();
        let (dialect, limit) = datafusion_matview::sql::parser_settings(ctx);
        let text = sql.to_owned();
        let parsing = tokio::task::spawn_blocking(move || {
            datafusion_matview::sql::parse_sql_with_text(&text, &dialect, limit)
        });
        let statements = match tokio::time::timeout(PARSE_TIME_LIMIT, parsing).await {
            Ok(Ok(parsed)) => parsed?,
            Ok(Err(e)) => {
                return Err(Error::Serve {
                    what: "parse the statement".into(),
                    reason: e.to_string(),
                });
            }
            Err(_) => {
                return Err(Error::NotSupported(format!(
                    "the statement took longer than {} s to parse; simplify it",
                    PARSE_TIME_LIMIT.as_secs()
                )));
            }
        };
        for (statement, _) in &statements {
            self.check(session, statement).await?;
        }
        if let Some(prepare) = &self.prepare {
            prepare.prepare(session, sql).await?;
        }
        // One statement at a time, each changing a view under that view's
        // lock, as the job routes do. A CREATE answers its outcome's row
        // (what the REST create route answers); the rest what `sql()` does.
        let count = statements.len();
        let mut last = None;
        for (i, (statement, text)) in statements.into_iter().enumerate() {
            let names: Vec<_> = match &statement {
                datafusion_matview::sql::Statement::Create(c) => vec![c.name.clone()],
                datafusion_matview::sql::Statement::Refresh(r) => vec![r.name.clone()],
                datafusion_matview::sql::Statement::Drop(d) => d.names.clone(),
                datafusion_matview::sql::Statement::Alter(a) => vec![a.name.clone()],
                _ => vec![],
            };
            let _locks = self.lock_views(session, &names).await?;
            let df = match session.run_statement(statement, Some(&text)).await? {
                StatementOutcome::Created(outcome) => {
                    ctx.read_batch(datafusion_matview::session::CreateOutcome::batch(&[
                        outcome,
                    ]))?
                }
                other => other.into_dataframe(ctx)?,
            };
            if i + 1 < count {
                df.collect().await?;
            } else {
                last = Some(df);
            }
        }
        match last {
            Some(df) => Ok(df),
            // No statement: DataFusion's error for an empty query.
            None => session.execute_all(vec![]).await,
        }
    }

    /// The job routes' locks of the views `names` (as `session` resolves
    /// them), taken in name order so two statements cannot deadlock.
    async fn lock_views(
        &self,
        session: &MatviewSession,
        names: &[datafusion::sql::sqlparser::ast::ObjectName],
    ) -> Result<Vec<tokio::sync::OwnedMutexGuard<()>>> {
        let mut qualified = names
            .iter()
            .map(|n| datafusion_matview::sql::qualify(session.context(), n))
            .collect::<Result<Vec<_>>>()?;
        qualified.sort();
        qualified.dedup();
        let mut guards = vec![];
        for name in qualified {
            guards.push(self.jobs.view_lock(&name).lock_owned().await);
        }
        Ok(guards)
    }

    /// Refuses what a client may not do through the server: settings that
    /// reach beyond its own session or could hang or crash the server, and
    /// store options for the store holding the catalog.
    async fn check(
        &self,
        session: &MatviewSession,
        statement: &datafusion_matview::sql::Statement,
    ) -> Result<()> {
        use datafusion::logical_expr::{LogicalPlan, Statement as PlanStatement};
        use datafusion::sql::parser::Statement as DFStatement;
        use datafusion::sql::sqlparser::ast::Statement as SQLStatement;
        let statement = match statement {
            datafusion_matview::sql::Statement::Create(create) => {
                return self.check_paths(session, create.query.as_ref());
            }
            datafusion_matview::sql::Statement::DataFusion(statement) => statement,
            _ => return Ok(()),
        };
        match statement.as_ref() {
            DFStatement::Statement(inner) => self.check_paths(session, inner.as_ref())?,
            DFStatement::CopyTo(copy) => {
                if let datafusion::sql::parser::CopyToSource::Query(query) = &copy.source {
                    self.check_paths(session, query.as_ref())?;
                }
            }
            DFStatement::Explain(explain) => {
                if let DFStatement::Statement(inner) = explain.statement.as_ref() {
                    self.check_paths(session, inner.as_ref())?;
                }
            }
            _ => {}
        }
        let (locations, options): (Vec<&String>, &[(String, _)]) = match statement.as_ref() {
            DFStatement::CreateExternalTable(c) => (c.locations.iter().collect(), &c.options),
            DFStatement::CopyTo(c) => (vec![&c.target], &c.options),
            DFStatement::Statement(_) | DFStatement::Reset(_) => {
                let is_setting = match statement.as_ref() {
                    DFStatement::Statement(inner) => matches!(inner.as_ref(), SQLStatement::Set(_)),
                    _ => true,
                };
                if !is_setting {
                    return Ok(());
                }
                let state = session.context().state();
                let plan = state.statement_to_plan(statement.as_ref().clone()).await?;
                let current = state.config().options();
                return match &plan {
                    LogicalPlan::Statement(PlanStatement::SetVariable(set)) => {
                        check_setting(&set.variable, Some(&set.value), current)
                    }
                    LogicalPlan::Statement(PlanStatement::ResetVariable(reset)) => {
                        check_setting(&reset.variable, None, current)
                    }
                    _ => Ok(()),
                };
            }
            _ => return Ok(()),
        };
        let configures_store = options
            .iter()
            .any(|(key, _)| !key.to_ascii_lowercase().starts_with("format."));
        for location in locations {
            let Ok(url) = datafusion::datasource::listing::ListingTableUrl::parse(location) else {
                continue;
            };
            // Said here, before DataFusion's writers turn the store's
            // refusal into an "error while finalizing writes".
            self.access.check_url(&url)?;
            if configures_store
                && url.scheme() != "file"
                && self.access.is_catalog_store(url.as_ref())
            {
                let store = access::store_key(url.as_ref());
                return Err(Error::PermissionDenied {
                    what: format!("to configure the store that holds the catalog ({store})"),
                    hint: format!(
                        "Leave out the store's OPTIONS: locations in {store} are read with the \
                         catalog's own store."
                    ),
                });
            }
        }
        Ok(())
    }

    /// Refuses, with [`Error::PermissionDenied`], a path used as a table
    /// (`FROM 'private/x.csv'`) that clients may not read. The stores
    /// would refuse it anyway, but DataFusion reports a path it cannot
    /// read as a table that does not exist.
    pub(crate) fn check_paths<V: datafusion::sql::sqlparser::ast::Visit>(
        &self,
        session: &MatviewSession,
        node: &V,
    ) -> Result<()> {
        let flow = datafusion::sql::sqlparser::ast::visit_relations(node, |name| {
            let [part] = name.0.as_slice() else {
                return std::ops::ControlFlow::Continue(());
            };
            let Some(ident) = part.as_ident() else {
                return std::ops::ControlFlow::Continue(());
            };
            let path = ident.value.as_str();
            if !path.contains('/') || session.context().table_exist(path).unwrap_or(false) {
                return std::ops::ControlFlow::Continue(());
            }
            match datafusion::datasource::listing::ListingTableUrl::parse(path) {
                Ok(url) => match self.access.check_url(&url) {
                    Ok(()) => std::ops::ControlFlow::Continue(()),
                    Err(e) => std::ops::ControlFlow::Break(e),
                },
                Err(_) => std::ops::ControlFlow::Continue(()),
            }
        });
        match flow {
            std::ops::ControlFlow::Break(e) => Err(e),
            std::ops::ControlFlow::Continue(()) => Ok(()),
        }
    }

    /// [`Self::statement`], collected: at most
    /// [`ServerOptions::max_result_bytes`] of Arrow data, within
    /// [`ServerOptions::statement_timeout`].
    pub(crate) async fn run_sql(
        &self,
        session: &MatviewSession,
        sql: &str,
    ) -> Result<(
        datafusion::arrow::datatypes::SchemaRef,
        Vec<datafusion::arrow::array::RecordBatch>,
    )> {
        use futures::StreamExt;
        let limit = self.options.max_result_bytes;
        let (shared, session, sql) = (self.clone(), session.clone(), sql.to_owned());
        let run = async move {
            let df = shared.statement(&session, &sql).await?;
            let schema = Arc::new(df.schema().as_arrow().clone());
            let plan = df.logical_plan().clone();
            let mut stream = df.execute_stream().await?;
            let (mut batches, mut bytes) = (vec![], 0usize);
            while let Some(batch) = stream.next().await {
                let batch = match batch {
                    Ok(batch) => batch,
                    Err(e) => {
                        let e = Error::from(e);
                        let e = access::Refusal::find(&e).unwrap_or(e);
                        return Err(session.explain_cast_error(&plan, e).await);
                    }
                };
                bytes += batch.get_array_memory_size();
                if bytes > limit {
                    return Err(Error::ResultTooLarge { limit });
                }
                batches.push(batch);
            }
            Ok((schema, batches))
        };
        self.within_time_limit(self.work.run(run)).await
    }

    /// `work`, or [`Error::StatementTimeout`] once it has run for
    /// [`ServerOptions::statement_timeout`] (and is dropped, which stops it).
    pub(crate) async fn within_time_limit<T>(
        &self,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let limit = self.options.statement_timeout;
        tokio::time::timeout(limit, work)
            .await
            .unwrap_or(Err(Error::StatementTimeout { limit }))
    }

    /// Whether `header` (an `Authorization` value) carries the token; true
    /// when no token is set.
    pub(crate) fn authorized(&self, header: Option<&str>) -> bool {
        let Some(token) = &self.options.token else {
            return true;
        };
        let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        // Compare every byte, so the time taken does not tell how much of
        // a guess was right.
        given.len() == token.len()
            && given
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Refuses a client's `SET variable = value` (`RESET variable` when
/// `value` is `None`) that would reach beyond its own session or let one
/// statement hang or crash the server: the runtime (memory pool, spill
/// folder, caches) every client shares, another SQL dialect (the
/// PostgreSQL parser has inputs that take minutes), and raising the
/// parser's recursion limit or the planner's parallelism above the
/// server's.
fn check_setting(
    variable: &str,
    value: Option<&str>,
    current: &datafusion::config::ConfigOptions,
) -> Result<()> {
    let variable = variable.trim().to_ascii_lowercase();
    let refuse = |why: &str| {
        Err(Error::PermissionDenied {
            what: format!("to set {variable} through the server"),
            hint: why.to_owned(),
        })
    };
    if variable.starts_with("datafusion.runtime.") {
        return refuse(
            "The runtime is shared by every client of the server; set it when starting the server.",
        );
    }
    let at_most = |server: usize| -> Result<()> {
        match value.map(|v| v.trim().trim_matches('\'').parse::<usize>()) {
            Some(Ok(n)) if n >= 1 && n <= server => Ok(()),
            Some(_) => refuse(&format!(
                "Clients may lower it, from 1 up to the server's {server}."
            )),
            // RESET: DataFusion's default may be above the server's.
            None => refuse(&format!("Clients may lower it; the server's is {server}.")),
        }
    };
    match variable.as_str() {
        "datafusion.sql_parser.dialect" => {
            let dialect = current.sql_parser.dialect.as_ref();
            match value {
                Some(v) if v.trim().trim_matches('\'').eq_ignore_ascii_case(dialect) => Ok(()),
                _ => refuse(&format!(
                    "The server parses every client's statements in its dialect ({dialect})."
                )),
            }
        }
        "datafusion.sql_parser.recursion_limit" => {
            at_most(current.sql_parser.recursion_limit.get())
        }
        "datafusion.execution.target_partitions" => at_most(current.execution.target_partitions),
        "datafusion.execution.planning_concurrency" => {
            at_most(current.execution.planning_concurrency)
        }
        "datafusion.execution.meta_fetch_concurrency" => {
            at_most(current.execution.meta_fetch_concurrency.get())
        }
        "datafusion.execution.batch_size" => at_most(current.execution.batch_size.get()),
        _ => Ok(()),
    }
}

/// Whether `addr` is only reachable from this machine.
fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// A bound server: [`Server::bind`], then [`Server::run`].
pub struct Server {
    shared: Shared,
    http: TcpListener,
    http_addr: SocketAddr,
    #[cfg(feature = "flight-sql")]
    flight: Option<(TcpListener, SocketAddr)>,
}

impl Server {
    /// Binds the addresses of `options` (so a port 0 is known before
    /// [`Self::run`]) over `session`'s catalog. From then on `session`
    /// (and every clone of it) reads and writes only what
    /// [`access`] allows the server's clients; refuses a non-loopback
    /// address without a token unless [`ServerOptions::no_auth`].
    pub async fn bind(session: MatviewSession, options: ServerOptions) -> Result<Self> {
        Self::bind_with(session, options, None).await
    }

    /// [`Self::bind`] with a hook run before every SQL text.
    pub async fn bind_with(
        session: MatviewSession,
        options: ServerOptions,
        prepare: Option<Arc<dyn Prepare>>,
    ) -> Result<Self> {
        let exposed = std::iter::once(options.http)
            .chain(options.flight_sql)
            .find(|addr| !is_loopback(addr));
        if let Some(addr) = exposed
            && options.token.is_none()
            && !options.no_auth
        {
            return Err(Error::Serve {
                what: format!("serve {addr} without a token"),
                reason: "anyone who can reach that address could run statements with this \
                         server's rights; set a token (dfmv serve --token, or DFMV_TOKEN), or \
                         say --no-auth to serve it without one"
                    .into(),
            });
        }
        let access = Arc::new(access::Access::new(
            Arc::clone(session.catalog()),
            &options.data_dirs,
            &options.allow_stores,
        )?);
        let runtime = session.context().runtime_env();
        let guarded =
            datafusion::execution::runtime_env::RuntimeEnvBuilder::from_runtime_env(&runtime)
                .with_object_store_registry(Arc::new(access::GuardedRegistry::new(
                    Arc::clone(&runtime.object_store_registry),
                    Arc::clone(&access),
                )))
                .build_arc()?;
        // Everything the server runs reads through the guarded stores: in
        // place, so url tables (resolved through this session's state) do.
        session.replace_runtime(guarded);
        // Clients see the files that are there when their statement runs.
        let session = session.listing_per_statement();
        let bind_error = |addr: SocketAddr, e: std::io::Error| Error::Serve {
            what: format!("listen on {addr}"),
            reason: e.to_string(),
        };
        // The bound address (with the port a port 0 got).
        let listen = |addr: SocketAddr| async move {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| bind_error(addr, e))?;
            let bound = listener.local_addr().map_err(|e| bind_error(addr, e))?;
            Ok::<_, Error>((listener, bound))
        };
        let (http, http_addr) = listen(options.http).await?;
        #[cfg(feature = "flight-sql")]
        let flight = match options.flight_sql {
            Some(addr) => Some(listen(addr).await?),
            None => None,
        };
        #[cfg(not(feature = "flight-sql"))]
        if options.flight_sql.is_some() {
            return Err(Error::NotSupported(
                "this build has no Flight SQL: build with the `flight-sql` feature".into(),
            ));
        }
        let work = Arc::new(WorkRuntime::new()?);
        let jobs = Arc::new(
            Jobs::new(
                options.max_jobs,
                options.max_running_jobs,
                options.keep_finished_jobs,
            )
            .on(work.handle().clone()),
        );
        Ok(Self {
            shared: Shared {
                session,
                access,
                jobs,
                work,
                options: Arc::new(options),
                prepare,
            },
            http,
            http_addr,
            #[cfg(feature = "flight-sql")]
            flight,
        })
    }

    /// The places the server's clients may read and write: the catalog,
    /// the data folders and the other stores it was given (and, not listed,
    /// the locations of the tables the catalog remembers).
    pub fn allowed_places(&self) -> Vec<String> {
        self.shared.access.places()
    }

    /// Where the REST API listens.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Where Flight SQL listens, if it does.
    pub fn flight_sql_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "flight-sql")]
        {
            self.flight.as_ref().map(|(_, addr)| *addr)
        }
        #[cfg(not(feature = "flight-sql"))]
        None
    }

    /// Serves until `shutdown` completes; then stops taking requests,
    /// cancels the jobs that have not started, lets running jobs finish
    /// (a job cut short would leave no half-written view either: every
    /// write is a new file followed by a conditional commit) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let stop = tokio_util::sync::CancellationToken::new();
        let app = rest::router(self.shared.clone());
        let http_stop = stop.clone();
        let http = axum::serve(self.http, app).with_graceful_shutdown(async move {
            http_stop.cancelled().await;
        });
        #[cfg(feature = "flight-sql")]
        let flight = {
            let flight_stop = stop.clone();
            let listener = self.flight.map(|(listener, _)| listener);
            let shared = self.shared.clone();
            async move {
                match listener {
                    Some(listener) => flight::serve(shared, listener, flight_stop).await,
                    None => Ok(()),
                }
            }
        };
        #[cfg(not(feature = "flight-sql"))]
        let flight = async { Ok::<(), Error>(()) };
        let scheduler = self.shared.options.auto_refresh.clone().map(|options| {
            datafusion_matview::session::auto::Scheduler::new(self.shared.session.fork(), options)
        });
        let auto_stop = stop.clone();
        let auto = async move {
            if let Some(scheduler) = scheduler {
                scheduler.run(auto_stop.cancelled()).await;
            }
        };
        let trigger = async move {
            shutdown.await;
            stop.cancel();
        };
        let (http, flight, (), ()) = tokio::join!(
            async {
                http.await.map_err(|e| Error::Serve {
                    what: "serve HTTP".into(),
                    reason: e.to_string(),
                })
            },
            flight,
            trigger,
            auto
        );
        self.shared.jobs.shutdown().await;
        http?;
        flight
    }
}
