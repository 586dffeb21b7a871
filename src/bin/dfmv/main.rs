//! `dfmv`: `datafusion-cli` with materialized views and a persistent catalog.
//!
//! Everything `datafusion-cli` does (the same flags, prompt, backslash
//! commands, output formats and object stores, through the
//! `datafusion-cli` library), plus `CREATE` / `REFRESH` / `DROP` / `SHOW
//! MATERIALIZED VIEWS`, `\dm`, a catalog that remembers views, external
//! tables and plain views between runs, and `dfmv adopt DIR` for folders
//! made the old way (`state.sql` + `views/manifest.json`).
//!
//! The flags follow datafusion-cli 55.2.0 `src/main.rs` (`Args`).

mod adopt;
mod context;
mod display;
mod exec;
mod progress;
mod repl;
mod script;
mod serve;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use datafusion_cli::DATAFUSION_CLI_VERSION;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreMode;
use datafusion_cli::pool_type::PoolType;
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};
use datafusion_matview::{MatviewOptions, MatviewSession};

use crate::exec::{App, BoxError};
use crate::progress::ProgressBars;

/// Default catalog location: a folder in the current directory.
const DEFAULT_CATALOG: &str = ".dfmv";

#[derive(Debug, Parser)]
#[command(
    name = "dfmv",
    version,
    about = "DataFusion CLI with materialized views and a persistent catalog",
    long_about = None
)]
struct Args {
    /// Where views and remembered tables are kept: a folder or an object
    /// store URL (file://, s3://, gs://, ...). Created on first use.
    #[arg(long, env = "DFMV_CATALOG", default_value = DEFAULT_CATALOG, global = true)]
    catalog: String,

    #[arg(
        short = 'p',
        long,
        help = "Folder to run in (relative paths of data are read from it); default: the current directory",
        value_parser(parse_valid_data_dir)
    )]
    data_path: Option<String>,

    #[arg(
        short = 'b',
        long,
        help = "Rows per batch when executing queries (default: DataFusion's)",
        value_parser(parse_batch_size)
    )]
    batch_size: Option<usize>,

    #[arg(
        short = 'c',
        long,
        num_args = 0..,
        help = "Run these statements or backslash commands (several -c allowed), then exit",
        value_parser(parse_command)
    )]
    command: Vec<String>,

    #[arg(
        short = 'm',
        long,
        help = "Limit the memory of queries (e.g. '10g'); default: no limit",
        value_parser(parse_memory_limit)
    )]
    memory_limit: Option<usize>,

    #[arg(
        short,
        long,
        num_args = 0..,
        help = "Run the statements of these files, then exit",
        value_parser(parse_valid_file)
    )]
    file: Vec<String>,

    #[arg(
        short = 'r',
        long,
        num_args = 0..,
        help = "Files to run at start-up of the prompt (default: ~/.datafusionrc if it exists)",
        value_parser(parse_valid_file),
        conflicts_with = "file"
    )]
    rc: Option<Vec<String>>,

    #[arg(
        long,
        value_enum,
        default_value_t = PrintFormat::Automatic,
        help = "Output format (automatic: a table for results that end, CSV for streams)"
    )]
    format: PrintFormat,

    #[arg(
        short,
        long,
        global = true,
        help = "Print only results: no banner, timings, status lines or progress"
    )]
    quiet: bool,

    #[arg(
        long,
        help = "Memory pool kind: 'greedy' or 'fair'",
        default_value_t = PoolType::Greedy
    )]
    mem_pool_type: PoolType,

    #[arg(
        long,
        help = "How many of the largest memory consumers to name when a query runs out of memory (0: do not track them)",
        default_value = "3"
    )]
    top_memory_consumers: usize,

    #[arg(
        long,
        help = "Rows shown at most in table output: a number, or 'inf' for all",
        default_value = "40"
    )]
    maxrows: MaxRows,

    #[arg(long, help = "Highlight SQL syntax at the prompt")]
    color: bool,

    #[arg(
        short = 'd',
        long,
        help = "Disk space queries may spill to (e.g. '10g'); default: DataFusion's (100g)",
        value_parser(parse_disk_limit)
    )]
    disk_limit: Option<usize>,

    #[arg(
        long,
        help = "Object store request profiling: disabled, summary or trace",
        default_value_t = InstrumentedObjectStoreMode::Disabled
    )]
    object_store_profiling: InstrumentedObjectStoreMode,

    /// Run statements on the Apache DataFusion Ballista cluster whose
    /// scheduler is at this URL (df://host:port): views' queries and
    /// Parquet writes run on its executors, which must reach the catalog.
    #[cfg(feature = "ballista")]
    #[arg(long, env = "DFMV_BALLISTA", global = true)]
    ballista: Option<String>,

    #[command(subcommand)]
    subcommand: Option<Sub>,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Adopt a folder made the old way: run what its state.sql defines
    /// (CREATE EXTERNAL TABLE, CREATE VIEW, SET), then make each view of
    /// views/manifest.json a materialized view whose first data is its
    /// existing Parquet files (freshness unknown until its first REFRESH,
    /// which is full).
    Adopt {
        /// The folder holding state.sql and views/manifest.json.
        dir: PathBuf,
        /// Run every statement of state.sql, also COPY, INSERT, DROP, ...
        #[arg(long)]
        run_all: bool,
    },
    /// Rebuild a catalog whose manifest log is lost or corrupt from its
    /// data: the newest readable version plus the markers of complete
    /// snapshots.
    Recover,
    /// Move a catalog written by an older dfmv (format 1, one log of
    /// whole-catalog manifests) to the current format now, rather than with
    /// its next change. Builds that read only older formats then refuse the
    /// catalog by name.
    Migrate,
    /// Serve the catalog: the materialized-view REST API (with jobs) and
    /// Arrow Flight SQL, until SIGTERM or Ctrl-C.
    Serve(Box<serve::ServeArgs>),
}

impl Args {
    /// Without -c/-f (and without a subcommand) dfmv runs the prompt.
    fn repl_mode(&self) -> bool {
        self.command.is_empty() && self.file.is_empty() && self.subcommand.is_none()
    }

    fn reads_sql_from_stdin(&self) -> bool {
        self.repl_mode()
            || self
                .file
                .iter()
                .any(|f| datafusion_cli::object_storage::is_stdin_location(f))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::init();
    let args = Args::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            println!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs what the arguments ask; `Ok(false)` when something failed and its
/// message has already been printed.
async fn run(args: Args) -> Result<bool, BoxError> {
    if !args.quiet && args.subcommand.is_none() {
        println!(
            "dfmv v{} (DataFusion CLI v{DATAFUSION_CLI_VERSION})",
            env!("CARGO_PKG_VERSION")
        );
    }

    // Paths given on the command line mean what they meant where dfmv was
    // started, also when --data-path moves the working directory.
    let catalog = absolute_if_local(&args.catalog);
    let files: Vec<String> = args.file.iter().map(|f| absolute_if_local(f)).collect();
    let rc: Option<Vec<String>> = args
        .rc
        .as_ref()
        .map(|rc| rc.iter().map(|f| absolute_if_local(f)).collect());
    let adopt_dir = match &args.subcommand {
        Some(Sub::Adopt { .. }) if !args.command.is_empty() || !args.file.is_empty() => {
            return Err("adopt runs alone: leave out -c and -f".into());
        }
        Some(Sub::Adopt { dir, run_all }) => Some((std::path::absolute(dir)?, *run_all)),
        Some(Sub::Recover) if !args.command.is_empty() || !args.file.is_empty() => {
            return Err("recover runs alone: leave out -c and -f".into());
        }
        Some(Sub::Migrate) if !args.command.is_empty() || !args.file.is_empty() => {
            return Err("migrate runs alone: leave out -c and -f".into());
        }
        Some(Sub::Serve(_)) if !args.command.is_empty() || !args.file.is_empty() => {
            return Err("serve runs alone: leave out -c and -f".into());
        }
        Some(Sub::Recover) | Some(Sub::Migrate) | Some(Sub::Serve(_)) | None => None,
    };
    if let Some(path) = &args.data_path {
        std::env::set_current_dir(Path::new(path))?;
    }

    let setup = context::Setup {
        batch_size: args.batch_size,
        memory_limit: args.memory_limit,
        mem_pool_type: args.mem_pool_type.clone(),
        top_memory_consumers: args.top_memory_consumers,
        disk_limit: args.disk_limit,
        object_store_profiling: args.object_store_profiling,
        stdin_carries_commands: args.reads_sql_from_stdin(),
    };
    let (ctx, registry) = context::create_context(&setup).await?;
    #[cfg(feature = "ballista")]
    let ctx = match &args.ballista {
        Some(url) => datafusion_matview_ballista::remote(url, ctx.state()).await?,
        None => ctx,
    };
    context::register_store_for_location(&ctx, &catalog).await?;
    context::check_catalog_location(&ctx, &catalog)?;

    // A catalog that needs recovery does not open: recover before opening.
    if let Some(Sub::Recover) = args.subcommand {
        let report = match MatviewSession::recover(&ctx, &catalog).await {
            Ok(report) => report,
            // A healthy catalog is left as it is: not a failure.
            Err(e @ datafusion_matview::Error::NothingToRecover { .. }) => {
                println!("{e}");
                return Ok(true);
            }
            Err(e) => return Err(e.into()),
        };
        println!("recovered catalog {catalog} as version {}", report.version);
        for view in &report.views {
            println!("  view {view}");
        }
        for skipped in &report.skipped {
            println!("  skipped {skipped}");
        }
        for lost in &report.lost {
            println!("  not recovered: {lost}");
        }
        // A view the catalog had is gone: a failure, though the rest was
        // recovered. (Remembered tables and views are reported lost
        // whenever no version of the log is readable, whether or not
        // there were any: that alone is not.)
        return Ok(report.views_lost.is_empty());
    }

    let options = MatviewOptions {
        remember_relations: true,
        list_files_per_statement: true,
        // The history says which server ran a refresh.
        actor: match &args.subcommand {
            Some(Sub::Serve(serve)) => Some(format!("dfmv serve {}", serve.http())),
            _ => Some("dfmv".to_owned()),
        },
        ..Default::default()
    };
    if let Some(Sub::Migrate) = args.subcommand {
        // The remembered tables are not needed to move the metadata.
        let options = MatviewOptions {
            remember_relations: false,
            ..options
        };
        let session = MatviewSession::open_with_options(ctx, &catalog, options).await?;
        let migrated = session.migrate().await?;
        let version = session.catalog().index().version;
        if migrated {
            println!(
                "catalog {catalog} moved to format {} at version {version}",
                datafusion_matview::spec::MANIFEST_FORMAT
            );
        } else {
            // Format 2 and 3 catalogs are read as they are: their next
            // commit writes current versions after theirs.
            println!("catalog {catalog} is already in format 2 or later: nothing to migrate");
        }
        return Ok(true);
    }
    let mut session = MatviewSession::open_with_options(ctx, &catalog, options).await?;
    if let Some(Sub::Serve(serve)) = &args.subcommand {
        let warnings = context::register_remembered_stores(&session).await;
        if !args.quiet {
            for warning in warnings {
                eprintln!("Warning: {warning}");
            }
        }
        serve::serve(session, serve, args.quiet).await?;
        return Ok(true);
    }
    let interactive = std::io::stdout().is_terminal();
    let progress = Arc::new(ProgressBars::new(interactive && !args.quiet));
    session = session.with_progress_listener(Arc::clone(&progress) as _);
    let warnings = context::register_remembered_stores(&session).await;
    if !args.quiet {
        for warning in warnings {
            eprintln!("Warning: {warning}");
        }
    }

    let mut print_options = PrintOptions {
        format: args.format,
        quiet: args.quiet,
        maxrows: args.maxrows,
        color: args.color,
        instrumented_registry: registry,
    };
    let app = App {
        session,
        progress,
        interactive,
    };

    if let Some((dir, run_all)) = adopt_dir {
        return adopt::adopt(&app, &dir, run_all).await;
    }

    if args.repl_mode() {
        let rc = match rc {
            Some(files) => files,
            None => dirs::home_dir()
                .map(|home| home.join(".datafusionrc"))
                .filter(|rc| rc.exists())
                .and_then(|rc| rc.into_os_string().into_string().ok())
                .into_iter()
                .collect(),
        };
        for file in rc {
            exec::exec_file(&app, &mut print_options, &file).await;
        }
        if !std::io::stdin().is_terminal() {
            // Piped statements are read as a script is (`-f`), with the
            // same rules for where a statement ends and the same errors.
            let stdin = std::io::BufReader::new(std::io::stdin());
            return Ok(exec::exec_lines(&app, &mut print_options, stdin).await);
        }
        repl::run(&app, &mut print_options).await?;
        return Ok(true);
    }

    let mut ok = true;
    for file in &files {
        ok &= exec::exec_file(&app, &mut print_options, file).await;
    }
    for command in args.command {
        match exec::exec_command(&app, &mut print_options, &command).await {
            Ok(exec::Flow::Continue) => {}
            Ok(exec::Flow::Quit) => break,
            Err(e) => {
                println!("Error: {e}");
                return Ok(false);
            }
        }
    }
    Ok(ok)
}

/// A local relative path made absolute; URLs (and `-` or stdin paths) unchanged.
fn absolute_if_local(location: &str) -> String {
    if location.contains("://") || datafusion_cli::object_storage::is_stdin_location(location) {
        return location.to_owned();
    }
    std::path::absolute(location)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| location.to_owned())
}

fn parse_valid_file(file: &str) -> Result<String, String> {
    if Path::new(file).is_file() {
        Ok(file.to_string())
    } else {
        Err(format!("Invalid file '{file}'"))
    }
}

fn parse_valid_data_dir(dir: &str) -> Result<String, String> {
    if Path::new(dir).is_dir() {
        Ok(dir.to_string())
    } else {
        Err(format!("Invalid data directory '{dir}'"))
    }
}

fn parse_batch_size(size: &str) -> Result<usize, String> {
    match size.parse::<usize>() {
        Ok(size) if size > 0 => Ok(size),
        _ => Err(format!("Invalid batch size '{size}'")),
    }
}

fn parse_command(command: &str) -> Result<String, String> {
    if !command.is_empty() {
        Ok(command.to_string())
    } else {
        Err("-c flag expects only non empty commands".to_string())
    }
}

fn parse_memory_limit(size: &str) -> Result<usize, String> {
    display::parse_size(size, "memory pool size")
}

fn parse_disk_limit(size: &str) -> Result<usize, String> {
    display::parse_size(size, "disk limit")
}
