//! The interactive prompt: `datafusion-cli`'s (history in `.history`,
//! file-name completion inside quotes, highlighting with `--color`,
//! statements ending at `;`), with a validator that knows the
//! materialized-view statements.
//!
//! Follows datafusion-cli 55.2.0 `src/exec.rs` (`exec_from_repl`) and
//! `src/helper.rs` (`CliHelper`, whose validator cannot know the view
//! statements: `DfmvHelper` is a copy with dfmv's validator, using the
//! library's highlighters).

use std::borrow::Cow;
use std::cell::Cell;

use datafusion::config::Dialect;
use datafusion_cli::highlighter::{NoSyntaxHighlighter, SyntaxHighlighter};
use datafusion_cli::print_options::PrintOptions;
use datafusion_matview::sql::{ends_statement, parse_sql_with_text};
use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::{CmdKind, Highlighter};
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};

use crate::exec::{self, App, Flow};

const HISTORY_FILE: &str = ".history";
const HINT: &str = " \\? for help, \\q to quit";

/// Validation, hints, highlighting and completion of the prompt.
pub struct DfmvHelper {
    completer: FilenameCompleter,
    highlighter: Box<dyn Highlighter>,
    dialect: Dialect,
    recursion_limit: usize,
    show_hint: Cell<bool>,
}

impl DfmvHelper {
    pub fn new(dialect: Dialect, recursion_limit: usize, color: bool) -> Self {
        let highlighter: Box<dyn Highlighter> = if color {
            Box::new(SyntaxHighlighter::new(&dialect))
        } else {
            Box::new(NoSyntaxHighlighter {})
        };
        Self {
            completer: FilenameCompleter::new(),
            highlighter,
            dialect,
            recursion_limit,
            show_hint: Cell::new(true),
        }
    }

    /// Follows `SET datafusion.sql_parser.dialect`.
    pub fn set_dialect(&mut self, dialect: Dialect) {
        self.dialect = dialect;
    }

    /// Input is complete when it is a backslash command or ends with a
    /// statement's `;` (a `;` inside a string, a quoted identifier or a
    /// comment ends nothing: the prompt waits for the rest, as psql's
    /// does); complete input that does not parse stays in the editor with
    /// the parser's message, as in `datafusion-cli`.
    pub fn validate_input(&self, input: &str) -> ValidationResult {
        if input.starts_with('\\') {
            return ValidationResult::Valid(None);
        }
        if !ends_statement(input, self.dialect.as_ref()) {
            return ValidationResult::Incomplete;
        }
        match parse_sql_with_text(input, self.dialect.as_ref(), self.recursion_limit) {
            Ok(statements) if statements.is_empty() => {
                ValidationResult::Invalid(Some("  🤔 You entered an empty statement".to_owned()))
            }
            Ok(_) => ValidationResult::Valid(None),
            Err(e) => ValidationResult::Invalid(Some(format!("  🤔 Invalid statement: {e}"))),
        }
    }
}

/// Whether the cursor is inside a single-quoted string (a file name, most likely).
fn in_quotes(line: &str, pos: usize) -> bool {
    line.get(..pos)
        .is_some_and(|before| before.chars().filter(|c| *c == '\'').count() % 2 == 1)
}

impl Completer for DfmvHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &Context<'_>,
    ) -> Result<(usize, Vec<Pair>), ReadlineError> {
        if in_quotes(line, pos) {
            self.completer.complete(line, pos, ctx)
        } else {
            Ok((0, vec![]))
        }
    }
}

impl Hinter for DfmvHelper {
    type Hint = String;

    fn hint(&self, line: &str, _pos: usize, _ctx: &Context<'_>) -> Option<String> {
        if !line.is_empty() {
            self.show_hint.set(false);
        }
        (self.show_hint.get() && line.trim().is_empty()).then(|| HINT.to_owned())
    }
}

impl Highlighter for DfmvHelper {
    fn highlight<'l>(&self, line: &'l str, pos: usize) -> Cow<'l, str> {
        self.highlighter.highlight(line, pos)
    }

    fn highlight_char(&self, line: &str, pos: usize, kind: CmdKind) -> bool {
        self.highlighter.highlight_char(line, pos, kind)
    }

    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        format!("\x1b[90m{hint}\x1b[0m").into()
    }
}

impl Validator for DfmvHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let result = self.validate_input(ctx.input().trim_end());
        self.show_hint.set(true);
        Ok(result)
    }
}

impl Helper for DfmvHelper {}

fn settings(app: &App) -> (Dialect, usize) {
    let state = app.session.context().state();
    let options = state.config().options();
    (
        options.sql_parser.dialect,
        options.sql_parser.recursion_limit.get(),
    )
}

/// Reads and runs statements until `\q` or end of input; errors are
/// printed and the prompt goes on.
pub async fn run(app: &App, print_options: &mut PrintOptions) -> rustyline::Result<()> {
    let mut rl: Editor<DfmvHelper, DefaultHistory> = Editor::new()?;
    let (dialect, recursion_limit) = settings(app);
    rl.set_helper(Some(DfmvHelper::new(
        dialect,
        recursion_limit,
        print_options.color,
    )));
    rl.load_history(HISTORY_FILE).ok();
    loop {
        match rl.readline("> ") {
            Ok(line) if line.trim_start().starts_with('\\') => {
                rl.add_history_entry(line.trim_end())?;
                match exec::backslash(app, print_options, line.trim()).await {
                    Ok(Flow::Quit) => break,
                    Ok(Flow::Continue) => {}
                    Err(e) => eprintln!("Error: {e}"),
                }
            }
            Ok(line) => {
                rl.add_history_entry(line.trim_end())?;
                tokio::select! {
                    result = exec::exec_sql(app, print_options, &line) => {
                        if let Err(e) = result {
                            eprintln!("Error: {e}");
                        }
                    }
                    _ = tokio::signal::ctrl_c() => println!("^C"),
                }
                app.progress.clear();
                let (dialect, _) = settings(app);
                if let Some(helper) = rl.helper_mut() {
                    helper.set_dialect(dialect);
                }
            }
            Err(ReadlineError::Interrupted) => {
                println!("^C");
                if let Some(helper) = rl.helper() {
                    helper.show_hint.set(true);
                }
            }
            Err(ReadlineError::Eof) => {
                println!("\\q");
                break;
            }
            Err(e) => {
                eprintln!("Unknown error happened {e:?}");
                break;
            }
        }
    }
    rl.save_history(HISTORY_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(input: &str) -> ValidationResult {
        DfmvHelper::new(Dialect::Generic, 50, false).validate_input(input)
    }

    #[test]
    fn refresh_is_a_statement() {
        assert!(matches!(
            validate("REFRESH MATERIALIZED\n VIEW v;"),
            ValidationResult::Valid(None)
        ));
        assert!(matches!(
            validate("REFRESH MATERIALIZED\n VIEW v"),
            ValidationResult::Incomplete
        ));
        assert!(matches!(validate("\\dm"), ValidationResult::Valid(None)));
        assert!(matches!(
            validate("SELEC 1;"),
            ValidationResult::Invalid(Some(m)) if m.contains("Invalid statement")
        ));
        assert!(matches!(validate(";"), ValidationResult::Invalid(Some(m)) if m.contains("empty")));
    }

    #[test]
    fn a_semicolon_inside_a_string_or_comment_ends_nothing() {
        for open in [
            "SELECT 'x'';",
            "SELECT 'x;\n'';",
            "SELECT \"a;",
            "SELECT 1 /* ;",
            "SELECT 1 -- ;",
        ] {
            assert!(
                matches!(validate(open), ValidationResult::Incomplete),
                "{open}"
            );
        }
        assert!(matches!(
            validate("SELECT 'x''; DROP MATERIALIZED VIEW v; SELECT ''y' AS s;"),
            ValidationResult::Valid(None)
        ));
        assert!(matches!(
            validate("SELECT 'a;\nb' AS s; -- done"),
            ValidationResult::Valid(None)
        ));
    }

    #[test]
    fn completes_file_names_inside_quotes() {
        let line = "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'da";
        assert!(in_quotes(line, line.len()));
        assert!(!in_quotes("SELECT 'a' FROM t", 17));
    }
}
