//! The integration tests, one binary with a module per area (linking
//! DataFusion once instead of once per file). Run one area with
//! `cargo test --test it catalog::`, one test with its name.
//!
//! The Ballista cluster tests (`tests/ballista.rs`, feature `ballista`) and
//! the sqllogictest runner (`tests/sqllogictests.rs`, its own `main`) stay
//! binaries of their own.

mod api;
mod auto;
mod catalog;
mod common;
mod correctness;
mod dfmv_cli;
mod dfmv_slt;
mod docs;
mod golden;
mod history;
mod incremental;
mod migration;
mod model;
mod reliability;
mod rewrite;
mod server;
mod statement_splitting;
mod upstream_slt;
mod versions;
