//! How `dfmv -f` and piped input split a script into statements: by
//! lines, as datafusion-cli reads them, keeping each statement's exact
//! text. A part of the command line, not of the library; the tests and
//! the catalog-scale benchmark include this file as a module.

use datafusion_matview::Result;
use datafusion_matview::sql::{Statement, ends_statement, parse_from_line};

/// Splits a script read line by line into runs of whole statements, as
/// `dfmv -f` reads files: a statement ends at the end of a line with a `;`
/// followed by nothing or a comment, when that line leaves it complete
/// (see [`datafusion_matview::sql::ends_statement`]), so a `;` at the end of a line inside a
/// string, a quoted identifier or a comment ends nothing. Between
/// statements, lines starting with `--` or `#!` are skipped. Each run is
/// the user's exact bytes, for [`ScriptChunk::parse`]. A string left open
/// takes the rest of the script into its statement, whose error is then
/// reported: no part of a literal ever runs as a statement.
#[derive(Debug, Default)]
pub struct ScriptSplitter {
    pending: String,
    /// Lines pushed so far.
    lines: u64,
    /// The line `pending` begins on.
    first_line: u64,
}

impl ScriptSplitter {
    /// A splitter between statements.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no statement has begun (only blank lines since the last).
    pub fn is_between_statements(&self) -> bool {
        self.pending.trim().is_empty()
    }

    /// Adds one line as read, with its line ending (only the last line of
    /// a script may have none); returns the statements it completes, if
    /// it completes any. `dialect` is the one in force now (a script can
    /// change it).
    pub fn push_line(&mut self, line: &str, dialect: &str) -> Option<ScriptChunk> {
        self.lines += 1;
        if self.is_between_statements() && (line.starts_with("--") || line.starts_with("#!")) {
            // Blank lines before it are dropped with it: the next
            // statement's text begins on the line after it.
            self.pending.clear();
            return None;
        }
        if self.pending.is_empty() {
            self.first_line = self.lines;
        }
        self.pending.push_str(line);
        if may_end_statement(line) && ends_statement(&self.pending, dialect) {
            return self.take();
        }
        None
    }

    /// Skips a line that is not SQL (a backslash command between
    /// statements), keeping the count of lines.
    pub fn skip_line(&mut self) {
        self.lines += 1;
        self.pending.clear();
    }

    /// What is left at the end of the script, if it holds anything.
    pub fn finish(&mut self) -> Option<ScriptChunk> {
        if self.is_between_statements() {
            self.pending.clear();
            return None;
        }
        self.take()
    }

    fn take(&mut self) -> Option<ScriptChunk> {
        Some(ScriptChunk {
            text: std::mem::take(&mut self.pending),
            first_line: self.first_line,
        })
    }
}

/// Whether a line can be the last of a statement: a `;` in it is followed
/// by nothing or a comment. Only then is the statement tokenized (a long
/// INSERT whose values hold `;` is not tokenized at every line).
fn may_end_statement(line: &str) -> bool {
    line.match_indices(';').any(|(at, _)| {
        let rest = line[at + 1..].trim_start();
        rest.is_empty() || rest.starts_with("--") || rest.starts_with("/*") || rest.starts_with('#')
    })
}

/// Whole statements of a script, as [`ScriptSplitter`] yields them.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptChunk {
    /// The user's bytes.
    pub text: String,
    /// The line of the script the text begins on, from 1.
    pub first_line: u64,
}

impl ScriptChunk {
    /// [`parse_sql_with_text`](datafusion_matview::sql::parse_sql_with_text)
    /// of the chunk, with the lines of error locations counted from the
    /// start of the script.
    pub fn parse(&self, dialect: &str, recursion_limit: usize) -> Result<Vec<(Statement, String)>> {
        parse_from_line(&self.text, dialect, recursion_limit, self.first_line)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_script_splits_at_lines_that_complete_a_statement() {
        use super::*;
        let script = "-- head; er\nSELECT 'a;\n' AS s;\n\n-- c;\n\nSELECT\n  1; -- one; two\nSELECT 2; /* ; */\n#! no\nSELECT $$;\n$$";
        let mut splitter = ScriptSplitter::new();
        let mut chunks = vec![];
        for line in script.split_inclusive('\n') {
            chunks.extend(splitter.push_line(line, "postgresql"));
        }
        chunks.extend(splitter.finish());
        let chunk = |text: &str, first_line| ScriptChunk {
            text: text.into(),
            first_line,
        };
        assert_eq!(
            chunks,
            [
                chunk("SELECT 'a;\n' AS s;\n", 2),
                chunk("\nSELECT\n  1; -- one; two\n", 6),
                chunk("SELECT 2; /* ; */\n", 9),
                chunk("SELECT $$;\n$$", 11),
            ]
        );
        assert!(may_end_statement("  1; -- x\n") && may_end_statement("x;/* y */"));
        assert!(!may_end_statement("('a;b'),\n") && !may_end_statement("SELECT 1\n"));
    }
}
