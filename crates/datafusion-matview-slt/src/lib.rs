//! sqllogictest support: a driver that runs `.slt` files with materialized
//! views, and a runner over files and folders.
//!
//! The driver is a drop-in for `datafusion-sqllogictest`'s `DataFusion`
//! engine: every statement goes through [`MatviewSession::sql`] (so the view
//! statements work too), and everything else is as upstream prints it:
//!
//! - errors from DataFusion read `DataFusion error: ...`, through upstream's
//!   own [`DFSqlLogicTestError`]; errors of this crate (the view
//!   statements) keep their PostgreSQL wording, unprefixed;
//! - values, column types and validators are upstream's
//!   ([`convert_batches`], [`convert_schema_to_types`],
//!   [`df_value_validator`], [`value_normalizer`]), with its float format
//!   for files under `spark/` ([`is_spark_path`]);
//! - paths in results (EXPLAIN) are normalised to `WORKSPACE_ROOT` for files
//!   of a DataFusion-style tree (see [`PathNormalizer`]);
//! - the session is configured as upstream's runner configures it
//!   (`target_partitions` 4, default features, `information_schema` left to
//!   the file), or, with [`RunOptions::upstream_setup`], by upstream's own
//!   per-file setup [`TestContext::try_new_for_test_file`] (Spark functions
//!   for `spark/`, the tables and functions it registers for some files);
//! - `test_files/scratch/<file>` is emptied before each file;
//! - every failing record of a file is reported, not only the first.
//!
//! Each file gets a fresh catalog in a temporary directory.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::common::collect;
use datafusion::physical_plan::execute_stream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_sqllogictest::{
    DFColumnType, DFOutput, DFSqlLogicTestError, TestContext, convert_batches,
    convert_schema_to_types, df_value_validator, is_spark_path, value_normalizer,
};
use sqllogictest::{DBOutput, Record};

use datafusion_matview::error::Error;
use datafusion_matview::session::MatviewSession;

/// An error of a statement run by [`MatviewDriver`], printed as the
/// sqllogictest output shows it.
#[derive(Debug, thiserror::Error)]
pub enum SltError {
    /// An error from DataFusion (or formatting its results), printed as
    /// `datafusion-sqllogictest`'s engine prints it: `DataFusion error: ...`.
    #[error(transparent)]
    Upstream(#[from] DFSqlLogicTestError),
    /// An error of this crate (a view statement), in PostgreSQL's wording.
    #[error(transparent)]
    Matview(Error),
}

impl From<Error> for SltError {
    fn from(e: Error) -> Self {
        match e {
            Error::DataFusion(e) => SltError::Upstream(DFSqlLogicTestError::DataFusion(e)),
            other => SltError::Matview(other),
        }
    }
}

impl From<DataFusionError> for SltError {
    fn from(e: DataFusionError) -> Self {
        // Unwraps errors of this crate that travelled through DataFusion.
        Error::from(e).into()
    }
}

/// Replaces the location of a DataFusion-style source tree in results with
/// `WORKSPACE_ROOT`, as `datafusion-sqllogictest` does for its own checkout
/// (`src/engines/datafusion_engine/normalize.rs`, `normalize_paths`).
///
/// Upstream runs its files from `<root>/datafusion/sqllogictest` (the crate
/// that holds `test_files/`) and prints `<root>` as `WORKSPACE_ROOT`; its own
/// root is fixed when it is compiled, so it only matches a checkout it was
/// built in. This one is taken from the file: for a file under
/// `<crate>/test_files/`, `<crate>` is printed as
/// `WORKSPACE_ROOT/datafusion/sqllogictest` (so a copy of the published
/// crate, wherever it is, prints as the checkout would) and `<crate>/../..`
/// as `WORKSPACE_ROOT`. Like upstream's, the paths are compared as object
/// store paths (no leading `/`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathNormalizer {
    replacements: Vec<(String, String)>,
}

impl PathNormalizer {
    /// No replacement.
    pub fn none() -> Self {
        Self::default()
    }

    /// The normaliser for `file`: none unless it lies under a `test_files`
    /// folder.
    pub fn for_file(file: &Path) -> Self {
        let Some(crate_dir) = suite_crate_dir(file) else {
            return Self::none();
        };
        Self::for_crate_dir(&crate_dir)
    }

    /// The normaliser for the crate folder that holds `test_files/`.
    pub fn for_crate_dir(crate_dir: &Path) -> Self {
        let crate_dir = std::fs::canonicalize(crate_dir)
            .or_else(|_| std::path::absolute(crate_dir))
            .unwrap_or_else(|_| crate_dir.to_owned());
        let as_store_path = |p: &Path| p.to_string_lossy().trim_start_matches('/').to_string();
        let mut replacements = vec![];
        let crate_path = as_store_path(&crate_dir);
        if !crate_path.is_empty() {
            replacements.push((crate_path, "WORKSPACE_ROOT/datafusion/sqllogictest".into()));
        }
        if let Some(root) = crate_dir.parent().and_then(Path::parent) {
            let root = as_store_path(root);
            // Never replace `/` (every absolute path would change).
            if !root.is_empty() {
                replacements.push((root, "WORKSPACE_ROOT".into()));
            }
        }
        Self { replacements }
    }

    /// `value` with the tree's paths replaced.
    pub fn normalize(&self, value: &str) -> String {
        let mut out = value.to_owned();
        for (from, to) in &self.replacements {
            if out.contains(from.as_str()) {
                out = out.replace(from.as_str(), to);
            }
        }
        out
    }
}

/// The folder holding the `test_files` folder `file` is in, if any (the
/// innermost).
fn suite_crate_dir(file: &Path) -> Option<PathBuf> {
    let file = std::path::absolute(file).ok()?;
    file.ancestors()
        .skip(1)
        .find(|a| a.file_name().is_some_and(|n| n == "test_files"))
        .and_then(Path::parent)
        .map(Path::to_owned)
}

/// `file`'s path relative to its `test_files` folder (what upstream's runner
/// calls a test file's relative path: `spark/...` selects the Spark setup,
/// the file name selects extra tables), or its file name when it is not in
/// one.
pub fn relative_test_path(file: &Path) -> PathBuf {
    let components: Vec<Component<'_>> = file.components().collect();
    match components
        .iter()
        .rposition(|c| c.as_os_str() == "test_files")
    {
        Some(i) if i + 1 < components.len() => components[i + 1..].iter().collect(),
        _ => file.file_name().map(PathBuf::from).unwrap_or_default(),
    }
}

/// Empties (creating it if needed) the scratch folder of `file`:
/// `<crate>/test_files/scratch/<file stem>` when the file is in a
/// `test_files` tree. Follows `setup_scratch_dir` of upstream's
/// `src/util.rs`, which does the same relative to the current directory
/// (from where upstream's runner always runs); this one takes the tree from
/// the file, so it empties the right folder from anywhere. Files outside a
/// `test_files` tree have no scratch folder.
pub fn setup_scratch_dir(file: &Path) -> std::io::Result<()> {
    let (Some(crate_dir), Some(stem)) = (suite_crate_dir(file), file.file_stem()) else {
        return Ok(());
    };
    let path = crate_dir.join("test_files").join("scratch").join(stem);
    if path.exists() {
        std::fs::remove_dir_all(&path)?;
    }
    std::fs::create_dir_all(&path)
}

/// The session context upstream's runner gives a file without per-file
/// setup: `target_partitions` pinned to 4 so plans do not depend on the
/// machine, DataFusion's default features, `information_schema` off unless
/// the file turns it on. Follows `TestContext::try_new_for_test_file` in
/// upstream's `src/test_context.rs` (its default branch).
pub fn default_context() -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(4);
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(Arc::new(RuntimeEnv::default()))
        .with_default_features()
        .build();
    SessionContext::new_with_state(state)
}

/// A sqllogictest database: a [`MatviewSession`] over a catalog of its own.
pub struct MatviewDriver {
    session: MatviewSession,
    paths: PathNormalizer,
    spark: bool,
    _dir: Option<Arc<tempfile::TempDir>>,
}

impl MatviewDriver {
    /// A driver over an existing session, without path normalisation.
    pub fn new(session: MatviewSession) -> Self {
        Self {
            session,
            paths: PathNormalizer::none(),
            spark: false,
            _dir: None,
        }
    }

    /// A driver with a fresh session configured as upstream's runner
    /// configures one ([`default_context`]) over a new catalog in a
    /// temporary directory, removed when the driver is dropped.
    pub async fn with_temporary_catalog() -> Result<Self, SltError> {
        let (session, dir) = open_temporary(default_context()).await?;
        Ok(Self {
            _dir: Some(Arc::new(dir)),
            ..Self::new(session)
        })
    }

    /// Normalises paths in results with `paths`.
    pub fn with_path_normalizer(mut self, paths: PathNormalizer) -> Self {
        self.paths = paths;
        self
    }

    /// Formats results as upstream does for a file under `spark/`.
    pub fn with_spark_formatting(mut self, spark: bool) -> Self {
        self.spark = spark;
        self
    }

    /// The session the driver runs statements in.
    pub fn session(&self) -> &MatviewSession {
        &self.session
    }
}

/// A session over `ctx` with a catalog in a new temporary directory.
async fn open_temporary(ctx: SessionContext) -> Result<(MatviewSession, tempfile::TempDir), Error> {
    let dir = tempfile::tempdir().map_err(|e| Error::InvalidLocation {
        location: std::env::temp_dir().display().to_string(),
        reason: e.to_string(),
    })?;
    let location = dir.path().join("catalog");
    let session = MatviewSession::open(ctx, &location.to_string_lossy()).await?;
    Ok((session, dir))
}

#[async_trait]
impl sqllogictest::AsyncDB for MatviewDriver {
    type Error = SltError;
    type ColumnType = DFColumnType;

    /// As upstream's `run_query` (`src/engines/datafusion_engine/runner.rs`)
    /// with [`MatviewSession::sql`] in place of `SessionContext::sql`.
    async fn run(&mut self, sql: &str) -> Result<DFOutput, SltError> {
        let df = self.session.sql(sql).await?;
        let task_ctx = Arc::new(df.task_ctx());
        let plan = df.create_physical_plan().await?;
        let schema = plan.schema();
        let stream = execute_stream(plan, task_ctx)?;
        let types = convert_schema_to_types(stream.schema().fields());
        let batches = collect(stream).await?;
        let mut rows = convert_batches(&schema, batches, self.spark)?;
        for row in &mut rows {
            for cell in row.iter_mut() {
                *cell = self.paths.normalize(cell);
            }
        }
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

/// How [`run_file`] runs a file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Rewrite the file's expected output instead of checking it.
    pub complete: bool,
    /// Configure each file's session with upstream's per-file setup,
    /// [`TestContext::try_new_for_test_file`]: Spark functions and dialect
    /// for `spark/`, and the tables and functions upstream's runner
    /// registers for some files by name (`joins.slt`, `map.slt`, ...).
    /// Without it every file gets [`default_context`].
    pub upstream_setup: bool,
    /// Run each file's statements on the Ballista cluster whose scheduler
    /// is at this URL (`df://host:port`), as `dfmv --ballista` does.
    #[cfg(feature = "ballista")]
    pub ballista: Option<String>,
}

/// What happened to one `.slt` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every record passed.
    Passed,
    /// Some records failed: the report, every failing record with its
    /// file and line.
    Failed(String),
    /// Not run, and why (upstream's setup skips files needing a feature
    /// this build lacks).
    Skipped(String),
}

/// The outcome of one `.slt` file.
#[derive(Debug)]
pub struct FileOutcome {
    /// The file.
    pub path: PathBuf,
    /// What happened.
    pub outcome: Outcome,
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

/// Upstream's runner shows at most this many failing records of a file
/// (`ERRS_PER_FILE_LIMIT` in its `bin/sqllogictests.rs`).
const ERRS_PER_FILE_LIMIT: usize = 10;

/// Runs one file with a fresh catalog (see [`RunOptions`]).
pub async fn run_file(path: &Path, options: &RunOptions) -> FileOutcome {
    let outcome = match run_file_inner(path, options).await {
        Ok(outcome) => outcome,
        Err(message) => Outcome::Failed(message),
    };
    FileOutcome {
        path: path.to_owned(),
        outcome,
    }
}

async fn run_file_inner(path: &Path, options: &RunOptions) -> Result<Outcome, String> {
    let relative = relative_test_path(path);
    // Upstream's per-file setup keeps temporary folders in the TestContext;
    // it lives until the file is done.
    let mut _upstream = None;
    let ctx = if options.upstream_setup {
        match TestContext::try_new_for_test_file(&relative).await {
            Some(test_ctx) => {
                let ctx = test_ctx.session_ctx().clone();
                _upstream = Some(test_ctx);
                ctx
            }
            None => {
                return Ok(Outcome::Skipped(
                    "upstream's setup skips it (a feature of datafusion-sqllogictest this build does not enable)".into(),
                ));
            }
        }
    } else {
        default_context()
    };
    #[cfg(feature = "ballista")]
    let ctx = match &options.ballista {
        Some(url) => datafusion_matview_ballista::remote(url, ctx.state())
            .await
            .map_err(|e| format!("could not connect to the Ballista scheduler at {url}: {e}"))?,
        None => ctx,
    };
    setup_scratch_dir(path).map_err(|e| {
        format!(
            "could not empty the scratch folder of {}: {e}",
            path.display()
        )
    })?;
    let (session, dir) = open_temporary(ctx)
        .await
        .map_err(|e| format!("could not open a catalog: {e}"))?;
    let dir = Arc::new(dir);
    let paths = PathNormalizer::for_file(path);
    let spark = is_spark_path(&relative);
    let mut runner = sqllogictest::Runner::new(move || {
        let driver = MatviewDriver {
            session: session.clone(),
            paths: paths.clone(),
            spark,
            _dir: Some(Arc::clone(&dir)),
        };
        async move { Ok::<_, SltError>(driver) }
    });
    // Upstream's runner labels its engine `Datafusion` and names it
    // `DataFusion`; both count for `skipif` / `onlyif`, as does our name.
    runner.add_label("Datafusion");
    runner.add_label("DataFusion");
    // `skipif ballista`: what a cluster does otherwise (EXPLAIN prints the
    // distributed plan; queries are not answered from views there).
    #[cfg(feature = "ballista")]
    if options.ballista.is_some() {
        runner.add_label("ballista");
    }
    runner.with_column_validator(sqllogictest::strict_column_validator);
    runner.with_normalizer(value_normalizer);
    runner.with_validator(df_value_validator);
    let outcome = if options.complete {
        match runner
            .update_test_file(
                path,
                " ",
                df_value_validator,
                value_normalizer,
                sqllogictest::strict_column_validator,
            )
            .await
        {
            Ok(()) => Outcome::Passed,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    } else {
        run_records(path, &mut runner).await?
    };
    runner.shutdown_async().await;
    Ok(outcome)
}

/// Runs every record of `path`, collecting the failures, as upstream's
/// `run_file_in_runner` (`bin/sqllogictests.rs`) does.
async fn run_records<M>(
    path: &Path,
    runner: &mut sqllogictest::Runner<MatviewDriver, M>,
) -> Result<Outcome, String>
where
    M: sqllogictest::MakeConnection<Conn = MatviewDriver>,
{
    let records = sqllogictest::parse_file::<DFColumnType>(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut errors = vec![];
    for record in records {
        if let Record::Halt { .. } = record {
            break;
        }
        if let Err(e) = runner.run_async(record).await {
            errors.push(e.display(false).to_string());
        }
    }
    if errors.is_empty() {
        return Ok(Outcome::Passed);
    }
    let mut message = format!("{} errors in file {}\n\n", errors.len(), path.display());
    for (i, error) in errors.iter().enumerate() {
        if i >= ERRS_PER_FILE_LIMIT {
            message.push_str(&format!(
                "... other {} errors in {} not shown ...\n\n",
                errors.len() - ERRS_PER_FILE_LIMIT,
                path.display()
            ));
            break;
        }
        message.push_str(&format!("{}. {error}\n\n", i + 1));
    }
    Ok(Outcome::Failed(message.trim_end().to_string()))
}

/// Runs every file, printing each outcome (`ok`, `FAILED` with the report,
/// `skipped` with the reason), then `N passed, N failed` (and `, N
/// skipped` when some were). Returns the number of failed files.
pub async fn run_and_report(files: &[PathBuf], options: &RunOptions) -> usize {
    let (mut failed, mut skipped) = (0, 0);
    for file in files {
        let outcome = run_file(file, options).await;
        match &outcome.outcome {
            Outcome::Passed => println!("ok      {}", file.display()),
            Outcome::Failed(message) => {
                failed += 1;
                println!("FAILED  {}\n{message}\n", file.display());
            }
            Outcome::Skipped(why) => {
                skipped += 1;
                println!("skipped {}: {why}", file.display());
            }
        }
    }
    let passed = files.len() - failed - skipped;
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    failed
}

/// Command-line entry shared by `dfmv-slt` and `cargo test --test
/// sqllogictests`: `[--complete] [--upstream-setup] [PATH | FILTER]...`.
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
    let mut options = RunOptions::default();
    let mut paths = vec![];
    let mut filters = vec![];
    for arg in args {
        if arg == "--complete" {
            options.complete = true;
        } else if arg == "--upstream-setup" {
            options.upstream_setup = true;
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
                eprintln!("usage: dfmv-slt [--complete] [--upstream-setup] PATH...");
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
    if run_and_report(&files, &options).await == 0 {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_taken_from_test_files() {
        assert_eq!(
            relative_test_path(Path::new(
                "/x/datafusion/sqllogictest/test_files/spark/math/abs.slt"
            )),
            PathBuf::from("spark/math/abs.slt")
        );
        assert_eq!(
            relative_test_path(Path::new("test_files/joins.slt")),
            PathBuf::from("joins.slt")
        );
        assert_eq!(
            relative_test_path(Path::new("sqllogictest/basic.slt")),
            PathBuf::from("basic.slt")
        );
    }

    #[test]
    fn paths_of_the_tree_print_as_workspace_root() {
        let n = PathNormalizer::for_crate_dir(Path::new("/nonexistent/ws/datafusion/sqllogictest"));
        assert_eq!(
            n.normalize(
                "files=[nonexistent/ws/datafusion/sqllogictest/test_files/scratch/copy/a.csv]"
            ),
            "files=[WORKSPACE_ROOT/datafusion/sqllogictest/test_files/scratch/copy/a.csv]"
        );
        assert_eq!(
            n.normalize("nonexistent/ws/testing/data/csv/aggregate_test_100.csv"),
            "WORKSPACE_ROOT/testing/data/csv/aggregate_test_100.csv"
        );
        // A copy of the published crate prints as the checkout would.
        let n = PathNormalizer::for_crate_dir(Path::new(
            "/nonexistent/copy/datafusion-sqllogictest-55.2.0",
        ));
        assert_eq!(
            n.normalize("/nonexistent/copy/datafusion-sqllogictest-55.2.0/test_files/scratch/x"),
            "/WORKSPACE_ROOT/datafusion/sqllogictest/test_files/scratch/x"
        );
        assert_eq!(
            PathNormalizer::for_file(Path::new("/a/b.slt")),
            PathNormalizer::none()
        );
        assert_eq!(n.normalize("unrelated"), "unrelated");
    }

    #[test]
    fn errors_print_as_upstream_engine_prints_them() {
        let e: SltError = Error::DataFusion(DataFusionError::Plan("no".into())).into();
        assert_eq!(e.to_string(), "DataFusion error: Error during planning: no");
        let e: SltError = Error::AlreadyExists { name: "v".into() }.into();
        assert_eq!(e.to_string(), "relation \"v\" already exists");
        // Ours, travelling through DataFusion, keep their wording.
        let e: SltError =
            DataFusionError::External(Box::new(Error::AlreadyExists { name: "v".into() })).into();
        assert_eq!(e.to_string(), "relation \"v\" already exists");
    }

    #[tokio::test]
    async fn default_configuration_is_upstreams() {
        let ctx = default_context();
        let options = ctx.state().config().options().clone();
        assert_eq!(options.execution.target_partitions, 4);
        assert!(!options.catalog.information_schema);
    }

    #[test]
    fn scratch_folder_is_emptied_and_created() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("test_files").join("copy.slt");
        let scratch = dir.path().join("test_files").join("scratch").join("copy");
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("old.csv"), "x").unwrap();
        setup_scratch_dir(&file).unwrap();
        assert!(scratch.is_dir());
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
        // Outside a test_files tree nothing is created.
        let other = dir.path().join("suite").join("a.slt");
        setup_scratch_dir(&other).unwrap();
        assert!(!dir.path().join("suite").exists());
    }
}
