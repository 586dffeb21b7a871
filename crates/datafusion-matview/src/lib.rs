//! # datafusion-matview
//!
//! Materialized views for [Apache DataFusion](https://datafusion.apache.org):
//! `CREATE MATERIALIZED VIEW … AS …`, `REFRESH`, `DROP` and `SHOW
//! MATERIALIZED VIEWS` in a DataFusion session, with each view's data kept
//! as atomic Parquet snapshots under a versioned manifest in an object store.
//!
//! ```no_run
//! # async fn demo() -> datafusion_matview::Result<()> {
//! use datafusion::prelude::SessionContext;
//! use datafusion_matview::MatviewSession;
//!
//! let mv = MatviewSession::open(SessionContext::new(), "./catalog").await?;
//! mv.sql("CREATE TABLE t AS VALUES (1), (2), (3)").await?;
//! mv.sql("CREATE MATERIALIZED VIEW big AS SELECT column1 AS x FROM t WHERE column1 > 1").await?;
//! mv.sql("SELECT * FROM big").await?.show().await?;
//! mv.sql("REFRESH MATERIALIZED VIEW big").await?.show().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Modules, in the direction data flows: [`sql`] parses, [`session`]
//! executes, [`refresh`](crate::session::MatviewSession::refresh) computes,
//! [`catalog`] commits, [`table`] scans, [`spec`] is the persisted data.
//!
//! The library has one Cargo feature, `testing` (hooks for tests), off by
//! default. The other parts are crates of their own: the server (REST and
//! Flight SQL) is `datafusion-matview-server`, views on a Ballista cluster
//! `datafusion-matview-ballista`, the sqllogictest driver and runner
//! `datafusion-matview-slt`, the fault-injecting object store of the tests
//! `datafusion-matview-testing`; the CLI (`dfmv`) is the workspace's root
//! package.

pub mod catalog;
pub mod error;
pub mod freshness;
pub mod functions;
pub mod history;
mod refresh;
mod resolve;
pub mod rewrite;
pub mod schema;
pub mod session;
pub mod spec;
pub mod sql;
pub mod table;
pub mod versioned;

pub use catalog::{Catalog, CleanupReport, RecoveryReport, Requirement, Sweep};
pub use error::{Error, ErrorCode, Result};
pub use session::{
    CreateAction, CreateOptions, CreateOutcome, DropOptions, MatviewOptions, MatviewSession,
    ProgressListener, RefreshMode, RefreshOptions, RefreshOutcome, StatementOutcome,
    ViewDescription,
};
