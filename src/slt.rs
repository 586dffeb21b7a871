//! sqllogictest support: a driver that runs `.slt` files with materialized
//! views, and a runner over files and folders.
//!
//! The driver behaves as `datafusion-sqllogictest`'s `DataFusion` driver
//! (same value formatting, column types and validators, `information_schema`
//! on as in `datafusion-cli`) and sends every statement through
//! [`MatviewSession::sql`], so the view statements work too. Each file gets
//! a fresh catalog in a temporary directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::physical_plan::common::collect;
use datafusion::physical_plan::execute_stream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_sqllogictest::{DFColumnType, DFOutput, convert_batches, convert_schema_to_types};
use sqllogictest::DBOutput;

use crate::error::{Error, Result};
use crate::session::MatviewSession;

/// A sqllogictest database: a [`MatviewSession`] over a catalog of its own.
pub struct MatviewDriver {
    session: MatviewSession,
    _dir: Option<tempfile::TempDir>,
}

impl MatviewDriver {
    /// A driver over an existing session.
    pub fn new(session: MatviewSession) -> Self {
        Self {
            session,
            _dir: None,
        }
    }

    /// A driver with a fresh session (`information_schema` on) over a new
    /// catalog in a temporary directory, removed when the driver is dropped.
    pub async fn with_temporary_catalog() -> Result<Self> {
        let dir = tempfile::tempdir().map_err(|e| Error::InvalidLocation {
            location: std::env::temp_dir().display().to_string(),
            reason: e.to_string(),
        })?;
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        let location = dir.path().join("catalog");
        let session = MatviewSession::open(ctx, &location.to_string_lossy()).await?;
        Ok(Self {
            session,
            _dir: Some(dir),
        })
    }

    /// The session the driver runs statements in.
    pub fn session(&self) -> &MatviewSession {
        &self.session
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for MatviewDriver {
    type Error = Error;
    type ColumnType = DFColumnType;

    async fn run(&mut self, sql: &str) -> Result<DFOutput> {
        let df = self.session.sql(sql).await?;
        let task_ctx = Arc::new(df.task_ctx());
        let plan = df.create_physical_plan().await?;
        let schema = plan.schema();
        let batches = collect(execute_stream(plan, task_ctx)?).await?;
        let types = convert_schema_to_types(schema.fields());
        let rows = convert_batches(&schema, batches, false).map_err(|e| {
            Error::DataFusion(datafusion::error::DataFusionError::External(Box::new(e)))
        })?;
        if rows.is_empty() && types.is_empty() {
            Ok(DBOutput::StatementComplete(0))
        } else {
            Ok(DBOutput::Rows { types, rows })
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "datafusion-matview"
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await;
    }
}

/// The outcome of one `.slt` file.
#[derive(Debug)]
pub struct FileOutcome {
    /// The file.
    pub path: PathBuf,
    /// `None` when it passed; otherwise the failure, with file and line.
    pub failure: Option<String>,
}

/// Every `.slt` file under `paths` (files are taken as given, folders are
/// searched recursively), sorted, keeping those whose path contains one of
/// `filters` (all when `filters` is empty).
pub fn collect_files(paths: &[PathBuf], filters: &[String]) -> std::io::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, out)?;
            } else if path.extension().is_some_and(|e| e == "slt") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = vec![];
    for path in paths {
        if path.is_dir() {
            walk(path, &mut files)?;
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: no such file", path.display()),
            ));
        }
    }
    files.sort();
    files.dedup();
    files.retain(|f| {
        filters.is_empty()
            || filters
                .iter()
                .any(|s| f.to_string_lossy().contains(s.as_str()))
    });
    Ok(files)
}

/// Runs one file with a fresh catalog; with `complete`, rewrites its
/// expected output instead of checking it.
pub async fn run_file(path: &Path, complete: bool) -> FileOutcome {
    let mut runner =
        sqllogictest::Runner::new(|| async { MatviewDriver::with_temporary_catalog().await });
    runner.with_column_validator(sqllogictest::strict_column_validator);
    runner.with_normalizer(datafusion_sqllogictest::value_normalizer);
    runner.with_validator(datafusion_sqllogictest::df_value_validator);
    let failure = if complete {
        runner
            .update_test_file(
                path,
                " ",
                datafusion_sqllogictest::df_value_validator,
                datafusion_sqllogictest::value_normalizer,
                sqllogictest::strict_column_validator,
            )
            .await
            .err()
            .map(|e| e.to_string())
    } else {
        runner
            .run_file_async(path)
            .await
            .err()
            .map(|e| e.display(false).to_string())
    };
    runner.shutdown_async().await;
    FileOutcome {
        path: path.to_owned(),
        failure,
    }
}

/// Runs every file, printing each failure, then `N passed, N failed`.
/// Returns the number of failed files.
pub async fn run_and_report(files: &[PathBuf], complete: bool) -> usize {
    let mut failed = 0;
    for file in files {
        let outcome = run_file(file, complete).await;
        match &outcome.failure {
            None => println!("ok      {}", file.display()),
            Some(message) => {
                failed += 1;
                println!("FAILED  {}\n{message}\n", file.display());
            }
        }
    }
    println!("{} passed, {} failed", files.len() - failed, failed);
    failed
}

/// Command-line entry shared by `dfmv-slt` and `cargo test --test
/// sqllogictests`: `[--complete] [PATH | FILTER]...`.
///
/// Without `default_dir` (the `dfmv-slt` binary) every argument is a path.
/// With it (the test harness), arguments that are existing paths are run,
/// other arguments are substring filters on file paths, and with no path
/// `default_dir` is run. Running no file is an error (exit code 2), so a
/// mistyped filter or path never passes. Unknown `--flags` (such as those `cargo test`
/// passes to every test binary) are ignored.
pub async fn main_with_args(
    args: impl IntoIterator<Item = String>,
    default_dir: Option<PathBuf>,
) -> i32 {
    let mut complete = false;
    let mut paths = vec![];
    let mut filters = vec![];
    for arg in args {
        if arg == "--complete" {
            complete = true;
        } else if arg.starts_with("--") {
            continue;
        } else if default_dir.is_none() || Path::new(&arg).exists() {
            paths.push(PathBuf::from(arg));
        } else {
            filters.push(arg);
        }
    }
    if paths.is_empty() {
        match default_dir {
            Some(dir) => paths.push(dir),
            None => {
                eprintln!("usage: dfmv-slt [--complete] PATH...");
                return 2;
            }
        }
    }
    let files = match collect_files(&paths, &filters) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    if files.is_empty() {
        // A typo in a filter or a path must not pass as "nothing failed".
        let searched: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        if filters.is_empty() {
            eprintln!("no .slt file found in {}", searched.join(", "));
        } else {
            eprintln!(
                "no .slt file under {} matches {}",
                searched.join(", "),
                filters.join(", ")
            );
        }
        return 2;
    }
    if run_and_report(&files, complete).await == 0 {
        0
    } else {
        1
    }
}
