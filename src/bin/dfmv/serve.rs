//! `dfmv serve`: the catalog over HTTP (the REST API with jobs) and Arrow
//! Flight SQL, in a session set up as the prompt's is (the same object
//! stores, remembered tables and views), until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion_matview::MatviewSession;
use datafusion_matview::session::auto::AutoRefreshOptions;
use datafusion_matview::sql::Statement;
use datafusion_matview_server::{Prepare, Server, ServerOptions};

use crate::context;
use crate::exec::BoxError;

/// The flags of `dfmv serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Where the REST API listens (port 0: any free port; the address is
    /// printed).
    #[arg(long, default_value = "127.0.0.1:2333")]
    http: SocketAddr,
    /// Where Flight SQL listens, or `none`.
    #[arg(long, default_value = "127.0.0.1:50051")]
    flight_sql: String,
    /// Require `Authorization: Bearer TOKEN` on every request but /healthz.
    #[arg(long, env = "DFMV_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Jobs that may wait or run at once; more are refused with 503.
    #[arg(long, default_value_t = 64)]
    max_jobs: usize,
    /// Jobs (CREATE populations, REFRESHes) that run at once.
    #[arg(long, default_value_t = 2)]
    max_running_jobs: usize,
    /// Seconds a finished job can still be described.
    #[arg(long, default_value_t = 3600)]
    keep_jobs: u64,
    /// Largest request body, in bytes (larger: 413).
    #[arg(long, default_value_t = 1 << 20)]
    max_body: usize,
    /// Serve an address other than loopback without a token.
    #[arg(long)]
    no_auth: bool,
    /// A web origin (https://app.example.com) whose pages may call the REST
    /// API (repeatable); requests from any other origin are refused.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// A host name clients may use to reach the server, besides loopback
    /// names and IP addresses (repeatable).
    #[arg(long = "allowed-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
    /// A local folder whose files clients may read and write, besides the
    /// catalog's (repeatable).
    #[arg(long = "data-dir", value_name = "FOLDER")]
    data_dirs: Vec<std::path::PathBuf>,
    /// Another store (and path) clients may use: s3://bucket[/prefix],
    /// https://host (repeatable).
    #[arg(long = "allow-store", value_name = "URL")]
    allow_stores: Vec<String>,
    /// Seconds a client's statement may run.
    #[arg(long, default_value_t = 300)]
    statement_timeout: u64,
    /// Largest /v1/sql result, in bytes of Arrow data (larger: 413).
    #[arg(long, default_value_t = 256 << 20)]
    max_result_bytes: usize,
    /// Open Flight SQL tickets and prepared statements per connection (each).
    #[arg(long, default_value_t = 64)]
    max_handles_per_client: usize,
    /// Open Flight SQL tickets and prepared statements in all (each).
    #[arg(long, default_value_t = 1024)]
    max_handles: usize,
    /// Do not refresh views whose settings say auto_refresh = true.
    #[arg(long)]
    no_auto_refresh: bool,
    /// Seconds between the automatic-refresh scheduler's looks at the
    /// catalog.
    #[arg(long, default_value_t = 1.0)]
    auto_refresh_tick: f64,
}

impl ServeArgs {
    /// Where the REST API listens, as given.
    pub fn http(&self) -> SocketAddr {
        self.http
    }
}

/// Registers the object stores a statement names, as the prompt does.
struct Stores;

#[async_trait]
impl Prepare for Stores {
    async fn prepare(&self, session: &MatviewSession, sql: &str) -> datafusion_matview::Result<()> {
        let ctx = session.context();
        let (dialect, limit) = datafusion_matview::sql::parser_settings(ctx);
        // A statement that does not parse fails when it runs, with its message.
        let Ok(statements) = datafusion_matview::sql::parse_sql(sql, &dialect, limit) else {
            return Ok(());
        };
        for statement in statements {
            if let Statement::DataFusion(statement) = statement {
                context::prepare_stores(ctx, &statement, false).await?;
            }
        }
        Ok(())
    }
}

/// Serves `session` until SIGTERM or Ctrl-C.
pub async fn serve(session: MatviewSession, args: &ServeArgs, quiet: bool) -> Result<(), BoxError> {
    let flight_sql = match args.flight_sql.as_str() {
        "none" | "off" => None,
        addr => Some(
            addr.parse::<SocketAddr>()
                .map_err(|e| format!("invalid --flight-sql address \"{addr}\": {e}"))?,
        ),
    };
    let options = ServerOptions {
        http: args.http,
        flight_sql,
        token: args.token.clone().filter(|t| !t.is_empty()),
        max_body_bytes: args.max_body,
        max_jobs: args.max_jobs,
        max_running_jobs: args.max_running_jobs,
        keep_finished_jobs: Duration::from_secs(args.keep_jobs),
        log_requests: !quiet,
        no_auth: args.no_auth,
        allow_origins: args.allow_origins.clone(),
        allowed_hosts: args.allowed_hosts.clone(),
        data_dirs: args.data_dirs.clone(),
        allow_stores: args.allow_stores.clone(),
        statement_timeout: Duration::from_secs(args.statement_timeout),
        max_result_bytes: args.max_result_bytes,
        max_handles_per_client: args.max_handles_per_client,
        max_handles: args.max_handles,
        auto_refresh: (!args.no_auto_refresh).then(|| AutoRefreshOptions {
            tick: Duration::from_secs_f64(args.auto_refresh_tick.max(0.05)),
            ..Default::default()
        }),
    };
    let location = session.catalog().location().to_string();
    let server = Server::bind_with(session, options, Some(Arc::new(Stores))).await?;
    println!("dfmv serve: catalog {location}");
    println!("REST on http://{}", server.http_addr());
    if let Some(addr) = server.flight_sql_addr() {
        println!("Flight SQL on grpc://{addr}");
    }
    println!(
        "Clients may use files under {} and the tables the catalog remembers \
         (more with --data-dir, --allow-store)",
        server.allowed_places().join(", ")
    );
    server.run(shutdown_signal()).await?;
    if !quiet {
        eprintln!("dfmv serve: stopped");
    }
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
