//! Running statements and backslash commands, and printing what they
//! return as `datafusion-cli` prints it.
//!
//! Follows datafusion-cli 55.2.0 `src/exec.rs` (`exec_from_files`,
//! `exec_and_print`: bounded results collected up to `--maxrows`,
//! unbounded ones streamed) and `src/command.rs` (backslash commands,
//! which it calls through the library where they are public).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::dataframe::DataFrame;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::spill::get_record_batch_memory_size;
use datafusion::physical_plan::{ExecutionPlanProperties, execute_stream};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{ObjectName, Statement as SQLStatement};
use datafusion_cli::command::{Command, OutputFormat};
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};
use datafusion_matview::spec::QualifiedName;
use datafusion_matview::sql::{Statement, parse_sql_with_text};
use datafusion_matview::{
    CreateAction, CreateOutcome, MatviewSession, RefreshMode, RefreshOutcome, StatementOutcome,
};
use futures::StreamExt;

use crate::context;
use crate::display;
use crate::progress::ProgressBars;
use crate::script::{ScriptChunk, ScriptSplitter};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// Views larger than this get a warning after CREATE and REFRESH
/// (`DFMV_WARN_VIEW_SIZE`, e.g. `512m`, overrides it).
const DEFAULT_WARN_VIEW_SIZE: u64 = 1 << 30;

/// What dfmv runs statements with.
pub struct App {
    pub session: MatviewSession,
    pub progress: Arc<ProgressBars>,
    /// stdout is a terminal.
    pub interactive: bool,
}

impl App {
    /// Shows the progress indicator only on a terminal and when not quiet.
    pub fn follow_quiet(&self, print_options: &PrintOptions) {
        self.progress
            .set_enabled(self.interactive && !print_options.quiet);
    }
}

/// Whether to go on after a backslash command.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Quit,
}

/// One `-c` argument: SQL (one or more statements) or a backslash command.
pub async fn exec_command(
    app: &App,
    print_options: &mut PrintOptions,
    command: &str,
) -> Result<Flow> {
    let trimmed = command.trim();
    if trimmed.starts_with('\\') {
        return backslash(app, print_options, trimmed).await;
    }
    exec_sql(app, print_options, command).await?;
    Ok(Flow::Continue)
}

/// Runs a script file, as `datafusion-cli -f` does: a statement ends at
/// the end of a line that completes it with `;` (a `;` inside a string, a
/// quoted identifier or a comment ends nothing), lines starting with `--`
/// or `#!` between statements are skipped, and a line starting with `\`
/// between statements is a backslash command. Statements run as the
/// user's exact bytes. Every error is printed to stderr and the script
/// goes on; returns false when anything failed.
pub async fn exec_file(app: &App, print_options: &mut PrintOptions, path: &str) -> bool {
    match File::open(path) {
        Ok(file) => exec_lines(app, print_options, BufReader::new(file)).await,
        Err(e) => {
            eprintln!("Error: cannot open {path}: {e}");
            false
        }
    }
}

/// [`exec_file`] over any reader.
pub async fn exec_lines(
    app: &App,
    print_options: &mut PrintOptions,
    mut reader: impl BufRead,
) -> bool {
    let mut ok = true;
    let mut splitter = ScriptSplitter::new();
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("Error: {e}");
                ok = false;
                break;
            }
        }
        if splitter.is_between_statements() && line.trim_start().starts_with('\\') {
            splitter.skip_line();
            match backslash(app, print_options, line.trim()).await {
                Ok(Flow::Continue) => {}
                Ok(Flow::Quit) => return ok,
                Err(e) => {
                    eprintln!("Error: {e}");
                    ok = false;
                }
            }
            continue;
        }
        // The dialect in force now: a statement of the script can change it.
        let (dialect, _) = context::parser_settings(app.session.context());
        if let Some(chunk) = splitter.push_line(&line, &dialect)
            && let Err(e) = exec_chunk(app, print_options, &chunk).await
        {
            eprintln!("Error: {e}");
            ok = false;
        }
    }
    if let Some(chunk) = splitter.finish()
        && let Err(e) = exec_chunk(app, print_options, &chunk).await
    {
        eprintln!("Error: {e}");
        ok = false;
    }
    ok
}

/// Parses `sql` (DataFusion's statements and the materialized-view ones)
/// and runs each statement, printing its result; stops at the first error.
pub async fn exec_sql(app: &App, print_options: &PrintOptions, sql: &str) -> Result<()> {
    let (dialect, recursion_limit) = context::parser_settings(app.session.context());
    let statements = parse_sql_with_text(sql, &dialect, recursion_limit)?;
    for (statement, text) in statements {
        exec_statement(app, print_options, statement, &text).await?;
    }
    Ok(())
}

/// [`exec_sql`] of statements read from a script (syntax errors name the
/// script's line).
async fn exec_chunk(app: &App, print_options: &PrintOptions, chunk: &ScriptChunk) -> Result<()> {
    let (dialect, recursion_limit) = context::parser_settings(app.session.context());
    for (statement, text) in chunk.parse(&dialect, recursion_limit)? {
        exec_statement(app, print_options, statement, &text).await?;
    }
    Ok(())
}

async fn exec_statement(
    app: &App,
    print_options: &PrintOptions,
    statement: Statement,
    text: &str,
) -> Result<()> {
    let started = Instant::now();
    let session = &app.session;
    match statement {
        Statement::DataFusion(statement) => {
            if let Some(create) = context::stdin_table(session.context(), &statement).await? {
                let df = session
                    .execute(Statement::DataFusion(Box::new(create)))
                    .await?;
                return print_dataframe(app, print_options, df, started, false).await;
            }
            context::prepare_stores(session.context(), &statement, false).await?;
            // SHOW / SHOW ALL print every setting, whatever --maxrows says.
            let all_rows = matches!(
                statement.as_ref(),
                DFStatement::Statement(s) if matches!(s.as_ref(), SQLStatement::ShowVariable { .. })
            );
            // Through sql() so that a remembered CREATE EXTERNAL TABLE /
            // CREATE VIEW keeps the text as written.
            let df = match session.sql(text).await {
                Err(e) if context::retry_with_region(&statement, &e) => {
                    log::warn!(
                        "S3 error ({e}); trying again with the bucket's region detected \
                         (this may be slow; setting aws.region avoids it)"
                    );
                    context::prepare_stores(session.context(), &statement, true).await?;
                    session.sql(text).await?
                }
                other => other?,
            };
            let scanned = scanned_views(session, df.logical_plan());
            let plan = df.logical_plan().clone();
            match print_dataframe(app, print_options, df, started, all_rows).await {
                Err(e) if datafusion_matview::session::is_cast_error(e.as_ref()) => {
                    match session.mismatched_file(&plan).await {
                        Some(file) => Err(format!("{e}\n{}", file.detail()).into()),
                        None => Err(e),
                    }
                }
                Err(e) if datafusion_matview::session::is_file_read_error(e.as_ref()) => {
                    Err(name_unreadable_file(session, &scanned, e).await)
                }
                other => other,
            }
        }
        // The view statements: the library runs them and says what they
        // did; this prints it.
        statement => {
            let named = match &statement {
                Statement::Create(create) => Some(create.name.clone()),
                Statement::Refresh(refresh) => Some(refresh.name.clone()),
                _ => None,
            };
            let result = session.run_statement(statement, Some(text)).await;
            app.progress.clear();
            match result? {
                StatementOutcome::Created(outcome) => {
                    created(app, print_options, named.as_ref(), &outcome, started).await
                }
                StatementOutcome::Refreshed(outcomes) => {
                    refreshed(app, print_options, named.as_ref(), &outcomes, started).await
                }
                StatementOutcome::Dropped(cascaded) => {
                    if !print_options.quiet {
                        // PostgreSQL's notice, one line per object dropped
                        // with them.
                        let (catalog, schema) = context::defaults(session.context());
                        for (name, kind) in &cascaded {
                            eprintln!(
                                "NOTICE: drop cascades to {kind} {}",
                                name.short_quoted(&catalog, &schema)
                            );
                        }
                    }
                    let df = datafusion_matview::session::no_rows(session.context());
                    print_dataframe(app, print_options, df, started, false).await
                }
                StatementOutcome::Shown(df) => {
                    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
                    let mut batches = df.collect().await?;
                    if batches.is_empty() {
                        batches.push(RecordBatch::new_empty(schema));
                    }
                    let (schema, batches) = display::humanize_show(&batches)?;
                    print_batches(app, print_options, schema, &batches, started)
                }
                // Whatever else the library adds: its rows as they are.
                other => {
                    let df = other.into_dataframe(session.context())?;
                    print_dataframe(app, print_options, df, started, false).await
                }
            }
        }
    }
}

/// The materialized views a plan scans (through plain views and
/// subqueries too).
fn scanned_views(session: &MatviewSession, plan: &LogicalPlan) -> Vec<QualifiedName> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let (catalog, schema) = context::defaults(session.context());
    let index = session.catalog().index();
    let mut views = vec![];
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let name: QualifiedName = scan.table_name.clone().resolve(&catalog, &schema).into();
            if index.view(&name).is_some() && !views.contains(&name) {
                views.push(name);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    views
}

/// A Parquet error from a query over materialized views, with the file
/// that cannot be read named and what to do about it.
async fn name_unreadable_file(
    session: &MatviewSession,
    views: &[QualifiedName],
    error: BoxError,
) -> BoxError {
    for view in views {
        if let Some(file) = session.unreadable_file(view).await {
            let (catalog, schema) = context::defaults(session.context());
            return format!(
                "{error}\nDETAIL: file {} of materialized view \"{}\" cannot be read: {}\n\
                 HINT: REFRESH MATERIALIZED VIEW {} FULL writes it again from its sources.",
                file.path,
                view.short(&catalog, &schema),
                file.reason,
                view.short_quoted(&catalog, &schema),
            )
            .into();
        }
    }
    error
}

/// Runs a DataFrame and prints it as `datafusion-cli` does: bounded
/// results collected (at most `--maxrows` kept) and printed as a table by
/// default, unbounded ones streamed.
pub async fn print_dataframe(
    app: &App,
    print_options: &PrintOptions,
    df: DataFrame,
    started: Instant,
    all_rows: bool,
) -> Result<()> {
    let mut options = print_options.clone();
    if all_rows
        || matches!(
            df.logical_plan(),
            LogicalPlan::Explain(_) | LogicalPlan::DescribeTable(_) | LogicalPlan::Analyze(_)
        )
    {
        options.maxrows = MaxRows::Unlimited;
    }
    let physical = df.create_physical_plan().await?;
    let task_ctx = app.session.context().task_ctx();
    let format = task_ctx.session_config().options().format.clone();
    if physical.boundedness().is_unbounded() {
        if physical.pipeline_behavior() == EmissionType::Final {
            return Err("The given query can generate a valid result only once \
                the source finishes, but the source is unbounded"
                .into());
        }
        let stream = execute_stream(physical, Arc::clone(&task_ctx))?;
        options.print_stream(stream, started, &format).await?;
        return Ok(());
    }
    let schema = physical.schema();
    let mut stream = execute_stream(physical, Arc::clone(&task_ctx))?;
    let reservation = MemoryConsumer::new("dfmv").register(task_ctx.memory_pool());
    let max_rows = match options.maxrows {
        MaxRows::Unlimited => usize::MAX,
        MaxRows::Limited(n) => n,
    };
    let mut results = vec![];
    let mut row_count = 0_usize;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let rows = batch.num_rows();
        if row_count < max_rows.saturating_add(rows) {
            reservation.try_grow(get_record_batch_memory_size(&batch))?;
            results.push(batch);
        }
        row_count += rows;
    }
    if options.format == PrintFormat::Automatic {
        options.format = PrintFormat::Table;
    }
    options.print_batches(schema, &results, started, row_count, &format)?;
    reservation.free();
    Ok(())
}

/// Prints batches made by dfmv itself (SHOW MATERIALIZED VIEWS, `\dm`, `\?`).
fn print_batches(
    app: &App,
    print_options: &PrintOptions,
    schema: SchemaRef,
    batches: &[RecordBatch],
    started: Instant,
) -> Result<()> {
    let mut options = print_options.clone();
    if options.format == PrintFormat::Automatic {
        options.format = PrintFormat::Table;
    }
    let rows = batches.iter().map(RecordBatch::num_rows).sum();
    let task_ctx = app.session.context().task_ctx();
    let format = &task_ctx.session_config().options().format;
    options.print_batches(schema, batches, started, rows, format)?;
    Ok(())
}

/// The fully qualified name a statement's object name means now.
pub fn qualify(session: &MatviewSession, name: &ObjectName) -> Result<QualifiedName> {
    Ok(datafusion_matview::sql::qualify(session.context(), name)?)
}

/// Prints what CREATE MATERIALIZED VIEW `name` did.
async fn created(
    app: &App,
    print_options: &PrintOptions,
    name: Option<&ObjectName>,
    outcome: &CreateOutcome,
    started: Instant,
) -> Result<()> {
    let session = &app.session;
    let display = &outcome.view;
    let size = match name.map(|name| qualify(session, name)) {
        Some(Ok(name)) => session.catalog().entry(&name).await.ok().flatten(),
        _ => None,
    }
    .and_then(|v| v.snapshot)
    .map(|s| s.size_bytes);
    if outcome.action == CreateAction::Skipped && !print_options.quiet {
        eprintln!("NOTICE: relation \"{display}\" already exists, skipping");
    }
    if structured(print_options) {
        let batch = CreateOutcome::batch(std::slice::from_ref(outcome));
        print_batches(app, print_options, batch.schema(), &[batch], started)?;
    } else if !print_options.quiet {
        match outcome.rows_written {
            _ if outcome.action == CreateAction::Skipped => {}
            Some(rows) => println!(
                "CREATE MATERIALIZED VIEW {display}: full, {} written in {:.2} s",
                display::rows(rows),
                started.elapsed().as_secs_f64()
            ),
            None => println!(
                "CREATE MATERIALIZED VIEW {display}: not populated (WITH NO DATA); use REFRESH MATERIALIZED VIEW {display}"
            ),
        }
    }
    if outcome.rows_written.is_some()
        && let Some(bytes) = size
    {
        warn_if_large(display, bytes);
    }
    Ok(())
}

/// Prints what REFRESH MATERIALIZED VIEW `name` did: one outcome per view
/// refreshed (CASCADE refreshes what it reads first), the named view last.
async fn refreshed(
    app: &App,
    print_options: &PrintOptions,
    name: Option<&ObjectName>,
    outcomes: &[RefreshOutcome],
    started: Instant,
) -> Result<()> {
    let session = &app.session;
    if structured(print_options) {
        let batch = RefreshOutcome::batch(outcomes);
        print_batches(app, print_options, batch.schema(), &[batch], started)?;
    } else if !print_options.quiet {
        for outcome in outcomes {
            let what = match outcome.mode {
                RefreshMode::NoOp => format!("no_op ({})", outcome.detail),
                RefreshMode::Incremental => format!(
                    "incremental ({}), {} written",
                    outcome.detail,
                    display::rows(outcome.rows_written)
                ),
                mode => format!("{mode}, {} written", display::rows(outcome.rows_written)),
            };
            println!(
                "REFRESH MATERIALIZED VIEW {}: {what} in {:.2} s",
                outcome.view,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let Some(name) = name else { return Ok(()) };
    let name = qualify(session, name)?;
    if let (Some(snapshot), Some(outcome)) = (
        session
            .catalog()
            .entry(&name)
            .await
            .ok()
            .flatten()
            .and_then(|v| v.snapshot),
        outcomes.last(),
    ) {
        warn_if_large(&outcome.view, snapshot.size_bytes);
    }
    Ok(())
}

/// Whether results go to a script (`--format csv|tsv|json|nd-json`):
/// then CREATE and REFRESH print their result rows in that format, not
/// sentences.
fn structured(print_options: &PrintOptions) -> bool {
    !matches!(
        print_options.format,
        PrintFormat::Table | PrintFormat::Automatic
    )
}

/// Warns on stderr when a view's data is larger than the threshold.
fn warn_if_large(view: &str, size_bytes: u64) {
    let threshold = std::env::var("DFMV_WARN_VIEW_SIZE")
        .ok()
        .and_then(|s| display::parse_size(&s, "size").ok())
        .map_or(DEFAULT_WARN_VIEW_SIZE, |n| n as u64);
    if size_bytes > threshold {
        eprintln!(
            "Warning: materialized view {view} holds {} of data (more than {})",
            display::human_size(size_bytes),
            display::human_size(threshold)
        );
    }
}

/// Runs a backslash command: dfmv's own (`\dm`, `\i`, `\adopt`, `\?`) or
/// one of `datafusion-cli`'s.
pub async fn backslash(app: &App, print_options: &mut PrintOptions, line: &str) -> Result<Flow> {
    let command = line.split_whitespace().collect::<Vec<_>>().join(" ");
    let body = command.strip_prefix('\\').unwrap_or(&command);
    let (name, arg) = match body.split_once(' ') {
        Some((name, arg)) => (name, Some(arg)),
        None => (body, None),
    };
    let started = Instant::now();
    match (name, arg) {
        ("dm" | "dm+", pattern) => {
            list_views(app, print_options, pattern, started).await?;
        }
        ("dmh", view) => {
            refresh_history(app, print_options, view, started).await?;
        }
        ("i", Some(file)) => {
            // Boxed: a file can include files.
            if !Box::pin(exec_file(app, print_options, file)).await {
                return Err(format!("{file} did not run cleanly").into());
            }
        }
        ("i", None) => return Err("Required filename argument is missing".into()),
        ("adopt", Some("--run-all")) | ("adopt", None) => {
            return Err("Required folder argument is missing".into());
        }
        ("adopt", Some(arg)) => {
            let (run_all, dir) = match arg.strip_prefix("--run-all ") {
                Some(dir) => (true, dir),
                None => (false, arg),
            };
            let dir = std::path::absolute(dir)?;
            if !crate::adopt::adopt(app, &dir, run_all).await? {
                return Err(format!("not everything in {} was adopted", dir.display()).into());
            }
        }
        ("?", None) => {
            let batch = help();
            print_batches(app, print_options, batch.schema(), &[batch], started)?;
        }
        _ => match body.parse::<Command>() {
            Ok(Command::Quit) => return Ok(Flow::Quit),
            Ok(Command::OutputFormat(None)) => {
                println!("Output format is {:?}.", print_options.format);
            }
            Ok(Command::OutputFormat(Some(setting))) => match setting.parse::<OutputFormat>() {
                Ok(format) => format.execute(print_options)?,
                Err(()) => return Err(not_a_command(body)),
            },
            Ok(command) => {
                command
                    .execute(app.session.context(), print_options)
                    .await?;
                app.follow_quiet(print_options);
            }
            Err(()) => return Err(not_a_command(body)),
        },
    }
    Ok(Flow::Continue)
}

fn not_a_command(body: &str) -> BoxError {
    format!("'\\{body}' is not a valid command, you can use '\\?' to see all commands").into()
}

/// `\dm [pattern]`.
async fn list_views(
    app: &App,
    print_options: &PrintOptions,
    pattern: Option<&str>,
    started: Instant,
) -> Result<()> {
    let catalog = app.session.catalog();
    catalog.reload().await?;
    let parsed = pattern.map(display::Pattern::parse);
    let names: Vec<QualifiedName> = match parsed.as_ref().and_then(display::Pattern::literal) {
        // A name without wildcards is looked up in each schema holding
        // views, without reading the others.
        Some(parts) => catalog
            .schemas()
            .into_iter()
            .filter(|(c, s)| {
                parts.len() <= 3
                    && parts.get(1).is_none_or(|p| p == s)
                    && parts.get(2).is_none_or(|p| p == c)
            })
            .map(|(c, s)| QualifiedName::new(c, s, &parts[0]))
            .collect(),
        None => catalog
            .view_names()?
            .into_iter()
            .filter(|n| parsed.as_ref().is_none_or(|p| p.matches_name(n)))
            .collect(),
    };
    let reads = names.iter().map(|name| catalog.view(name));
    let states: Vec<Option<Arc<datafusion_matview::spec::ViewVersion>>> =
        futures::stream::TryStreamExt::try_collect(futures::stream::iter(reads).buffered(32))
            .await?;
    let views: Vec<&datafusion_matview::spec::ViewEntry> =
        states.iter().flatten().map(|s| &s.view).collect();
    let (default_catalog, _) = context::defaults(app.session.context());
    let batch = display::list_views(
        &views,
        parsed.as_ref(),
        &default_catalog,
        chrono::Utc::now(),
        matches!(
            print_options.format,
            PrintFormat::Csv | PrintFormat::Tsv | PrintFormat::Json | PrintFormat::NdJson
        ),
    );
    if batch.num_rows() == 0 {
        if !print_options.quiet {
            match pattern {
                Some(p) => eprintln!("Did not find any materialized view named \"{p}\"."),
                None => eprintln!("Did not find any materialized views."),
            }
        }
        return Ok(());
    }
    // A listing of the catalog is whole, as SHOW is: --maxrows limits
    // query results, not \dm.
    let mut options = print_options.clone();
    options.maxrows = MaxRows::Unlimited;
    print_batches(app, &options, batch.schema(), &[batch], started)
}

/// `\dmh [view]`: the refresh history of one view, or of every view.
async fn refresh_history(
    app: &App,
    print_options: &PrintOptions,
    view: Option<&str>,
    started: Instant,
) -> Result<()> {
    let (default_catalog, default_schema) = context::defaults(app.session.context());
    let name = view.map(|v| {
        QualifiedName::from(
            datafusion::common::TableReference::parse_str(v)
                .resolve(&default_catalog, &default_schema),
        )
    });
    let attempts = app.session.refresh_history(name.as_ref()).await?;
    if attempts.is_empty() {
        if !print_options.quiet {
            eprintln!("No refresh has been recorded.");
        }
        return Ok(());
    }
    let all = datafusion_matview::history::RefreshHistoryFunction::batch(&attempts)?;
    // The view's name, what happened, when, and what it cost.
    let shown = [2, 4, 5, 6, 7, 9, 11, 12, 13, 15, 17];
    let batch = all.project(&shown)?;
    let mut options = print_options.clone();
    options.maxrows = MaxRows::Unlimited;
    print_batches(app, &options, batch.schema(), &[batch], started)
}

/// The table of `\?`.
fn help() -> RecordBatch {
    let commands: [(&str, &str); 14] = [
        ("\\d", "list tables"),
        ("\\d name", "describe table"),
        (
            "\\dm [pattern]",
            "list materialized views (pattern: * and ? wildcards)",
        ),
        (
            "\\dmh [view]",
            "refresh history of a materialized view (or of all)",
        ),
        ("\\q", "quit dfmv"),
        ("\\?", "help"),
        ("\\i filename", "run the statements of a file"),
        (
            "\\adopt [--run-all] folder",
            "adopt a state.sql + views/manifest.json folder",
        ),
        ("\\h", "function list"),
        ("\\h function", "search function"),
        ("\\quiet (true|false)?", "print or set quiet mode"),
        ("\\pset [NAME [VALUE]]", "set table output option\n(format)"),
        (
            "\\object_store_profiling (disabled|summary|trace)",
            "print or set object store profile mode",
        ),
        ("Ctrl-C", "cancel the running statement"),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("Command", DataType::Utf8, false),
        Field::new("Description", DataType::Utf8, false),
    ]));
    let names = StringArray::from_iter_values(commands.iter().map(|c| c.0));
    let descriptions = StringArray::from_iter_values(commands.iter().map(|c| c.1));
    RecordBatch::try_new(schema, vec![Arc::new(names), Arc::new(descriptions)])
        .expect("columns match the schema")
}
