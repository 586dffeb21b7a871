//! `dfmv serve`: one catalog over HTTP (the materialized-view REST API,
//! shaped like LanceDB's, with asynchronous jobs) and over Arrow Flight SQL
//! (feature `flight-sql`).
//!
//! ```no_run
//! # async fn demo() -> datafusion_matview::Result<()> {
//! use datafusion::prelude::SessionContext;
//! use datafusion_matview::MatviewSession;
//! use datafusion_matview::server::{Server, ServerOptions};
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

use crate::error::{Error, Result};
use crate::session::MatviewSession;

mod errors;
#[cfg(feature = "flight-sql")]
pub mod flight;
pub mod ids;
pub mod jobs;
mod openapi;
pub mod rest;

pub use errors::ApiError;
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
    pub(crate) session: MatviewSession,
    pub(crate) jobs: Arc<Jobs>,
    pub(crate) options: Arc<ServerOptions>,
    pub(crate) prepare: Option<Arc<dyn Prepare>>,
}

impl Shared {
    /// Runs `sql` as [`MatviewSession::sql`] does, except that a CREATE
    /// MATERIALIZED VIEW alone answers its result row (view, action,
    /// populated, rows_written, version) as REFRESH does, rather than
    /// nothing: a client over the network has no other way to see it.
    pub(crate) async fn statement(&self, sql: &str) -> Result<datafusion::dataframe::DataFrame> {
        if let Some(prepare) = &self.prepare {
            prepare.prepare(&self.session, sql).await?;
        }
        let ctx = self.session.context();
        let (dialect, limit) = crate::sql::parser_settings(ctx);
        if let Ok(mut statements) = crate::sql::parse_sql(sql, &dialect, limit)
            && statements.len() == 1
            && let Some(crate::sql::Statement::Create(create)) = statements.pop()
        {
            let outcome = self.session.create_materialized_view(&create).await?;
            return Ok(ctx.read_batch(crate::session::CreateOutcome::batch(&[outcome]))?);
        }
        self.session.sql(sql).await
    }

    /// [`Self::statement`], collected.
    pub(crate) async fn run_sql(
        &self,
        sql: &str,
    ) -> Result<(
        datafusion::arrow::datatypes::SchemaRef,
        Vec<datafusion::arrow::array::RecordBatch>,
    )> {
        let df = self.statement(sql).await?;
        let schema = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await?;
        Ok((schema, batches))
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
    /// [`Self::run`]) over `session`'s catalog.
    pub async fn bind(session: MatviewSession, options: ServerOptions) -> Result<Self> {
        Self::bind_with(session, options, None).await
    }

    /// [`Self::bind`] with a hook run before every SQL text.
    pub async fn bind_with(
        session: MatviewSession,
        options: ServerOptions,
        prepare: Option<Arc<dyn Prepare>>,
    ) -> Result<Self> {
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
        let jobs = Arc::new(Jobs::new(
            options.max_jobs,
            options.max_running_jobs,
            options.keep_finished_jobs,
        ));
        Ok(Self {
            shared: Shared {
                session,
                jobs,
                options: Arc::new(options),
                prepare,
            },
            http,
            http_addr,
            #[cfg(feature = "flight-sql")]
            flight,
        })
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
        let trigger = async move {
            shutdown.await;
            stop.cancel();
        };
        let (http, flight, ()) = tokio::join!(
            async {
                http.await.map_err(|e| Error::Serve {
                    what: "serve HTTP".into(),
                    reason: e.to_string(),
                })
            },
            flight,
            trigger
        );
        self.shared.jobs.shutdown().await;
        http?;
        flight
    }
}
