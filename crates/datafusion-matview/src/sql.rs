//! Parsing: DataFusion's [`DFParser`] plus the materialized-view statements.
//!
//! sqlparser already parses `CREATE MATERIALIZED VIEW`, `DROP MATERIALIZED
//! VIEW` and `SHOW MATERIALIZED VIEWS`; this module takes those from its AST,
//! parses `REFRESH MATERIALIZED VIEW` and the trailing `WITH [NO] DATA`
//! itself, and hands every other statement to DataFusion unchanged.

use std::collections::HashMap;

use datafusion::error::DataFusionError;
use datafusion::sql::parser::{DFParser, DFParserBuilder, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    CreateTableOptions, Expr as SqlExpr, Ident, ObjectName, ObjectType, Query, ShowStatementFilter,
    ShowStatementFilterPosition, SqlOption, Statement as SQLStatement, Value,
};
use datafusion::sql::sqlparser::dialect::{Dialect, dialect_from_str};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use crate::error::{Error, Result};
use crate::spec::QualifiedName;
pub use crate::spec::quote_ident;

/// `CREATE [OR REPLACE] MATERIALIZED VIEW [IF NOT EXISTS] name [(col, ...)] AS query [WITH [NO] DATA]`
#[derive(Debug, Clone, PartialEq)]
pub struct CreateMaterializedView {
    /// View name.
    pub name: ObjectName,
    /// `OR REPLACE`.
    pub or_replace: bool,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
    /// Column list; renames output columns left to right.
    pub columns: Vec<Ident>,
    /// The defining query.
    pub query: Box<Query>,
    /// `false` for `WITH NO DATA`.
    pub with_data: bool,
    /// `WITH (name = value, ...)` before `AS`: `auto_refresh`,
    /// `target_lag` (see [`crate::spec::AutoRefresh`]), as written.
    pub options: Vec<(String, String)>,
}

/// `ALTER MATERIALIZED VIEW [IF EXISTS] name SET (name = value, ...)` or
/// `... RESET (name, ...)`: the automatic-refresh settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AlterMaterializedView {
    /// The view.
    pub name: ObjectName,
    /// `IF EXISTS`.
    pub if_exists: bool,
    /// `SET (...)`, as written.
    pub set: Vec<(String, String)>,
    /// `RESET (...)`.
    pub reset: Vec<String>,
}

/// `REFRESH MATERIALIZED VIEW name [FULL | INCREMENTAL] [CASCADE]`
#[derive(Debug, Clone, PartialEq)]
pub struct RefreshMaterializedView {
    /// View name.
    pub name: ObjectName,
    /// `FULL`: always recompute.
    pub full: bool,
    /// `INCREMENTAL`: compute only what changed, whatever the cost rule
    /// says, or fail with the reason it cannot be done. Not with `full`.
    pub incremental: bool,
    /// `CASCADE`: first bring up to date the materialized views it reads.
    pub cascade: bool,
}

/// `DROP MATERIALIZED VIEW [IF EXISTS] name [, ...] [CASCADE | RESTRICT]`
#[derive(Debug, Clone, PartialEq)]
pub struct DropMaterializedView {
    /// Views to drop.
    pub names: Vec<ObjectName>,
    /// `IF EXISTS`.
    pub if_exists: bool,
    /// `CASCADE`.
    pub cascade: bool,
}

/// A parsed statement: a view statement or anything DataFusion handles.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// CREATE MATERIALIZED VIEW
    Create(CreateMaterializedView),
    /// REFRESH MATERIALIZED VIEW
    Refresh(RefreshMaterializedView),
    /// `EXPLAIN REFRESH MATERIALIZED VIEW ...`: what a refresh would do.
    ExplainRefresh(RefreshMaterializedView),
    /// DROP MATERIALIZED VIEW
    Drop(DropMaterializedView),
    /// ALTER MATERIALIZED VIEW ... SET / RESET
    Alter(AlterMaterializedView),
    /// `SHOW MATERIALIZED VIEWS [LIKE 'pattern']`
    Show {
        /// The LIKE pattern.
        like: Option<String>,
    },
    /// `VACUUM MATERIALIZED VIEWS`: remove what the retention window no
    /// longer protects, now.
    Vacuum,
    /// Every other statement, for DataFusion.
    DataFusion(Box<DFStatement>),
}

/// Parses one or more `;`-separated statements with the named sqlparser
/// dialect (DataFusion's `datafusion.sql_parser.dialect`) and recursion limit.
pub fn parse_sql(sql: &str, dialect: &str, recursion_limit: usize) -> Result<Vec<Statement>> {
    Ok(parse_sql_with_text(sql, dialect, recursion_limit)?
        .into_iter()
        .map(|(statement, _)| statement)
        .collect())
}

/// [`parse_sql`], also returning each statement's own text as the user
/// wrote it (comments and formatting kept, without the `;`).
pub fn parse_sql_with_text(
    sql: &str,
    dialect: &str,
    recursion_limit: usize,
) -> Result<Vec<(Statement, String)>> {
    parse_from_line(sql, dialect, recursion_limit, 1)
}

/// [`parse_sql_with_text`] of text that begins on line `first_line` of a
/// script: error locations count lines from the script's start.
pub fn parse_from_line(
    sql: &str,
    dialect: &str,
    recursion_limit: usize,
    first_line: u64,
) -> Result<Vec<(Statement, String)>> {
    let dialect = dialect_named(dialect)?;
    let shift = first_line.saturating_sub(1);
    let moved = |mut at: Location| {
        if at.line > 0 {
            at.line += shift;
        }
        at
    };
    let tokens = Tokenizer::new(dialect.as_ref(), sql)
        .tokenize_with_location()
        .map_err(|mut e| {
            e.location = moved(e.location);
            datafusion::sql::sqlparser::parser::ParserError::from(e)
        })?;
    let tokens = tokens
        .into_iter()
        .map(|mut t| {
            t.span.start = moved(t.span.start);
            t.span.end = moved(t.span.end);
            t
        })
        .collect();
    let (tokens, suffixes) = strip_with_data(tokens);
    let offsets = ByteOffsets::new(sql, first_line);
    // A statement's text is the user's own bytes, sliced by token spans:
    // tokens rendered back to text lose escapes (`'O''Brien'` would come
    // back as `'O'Brien'`, and the quote it un-doubled could end the string
    // early and turn the rest of it into statements).
    let text_of = |range: std::ops::Range<usize>, suffix_end: Option<Location>| -> String {
        let Some(first) = tokens.get(range.start) else {
            return String::new();
        };
        let start = offsets.of(first.span.start);
        let end = tokens[range]
            .iter()
            .rev()
            .find(|t| !matches!(t.token, Token::Whitespace(_)))
            .map(|t| t.span.end)
            .into_iter()
            .chain(suffix_end)
            .map(|at| offsets.of(at))
            .max()
            .unwrap_or(start)
            .max(start);
        sql[start..end].trim().to_owned()
    };
    let mut parser = DFParserBuilder::new(tokens.clone())
        .with_dialect(dialect.as_ref())
        .with_recursion_limit(recursion_limit)
        .build()?;
    let mut statements = vec![];
    let mut expecting_delimiter = false;
    loop {
        while parser.parser.consume_token(&Token::SemiColon) {
            expecting_delimiter = false;
        }
        let next = parser.parser.peek_token();
        if next.token == Token::EOF {
            break;
        }
        if expecting_delimiter {
            return Err(expected(&parser, "end of statement"));
        }
        let start = parser.parser.peek_token().span.start;
        let suffix = suffixes.get(&(start.line, start.column)).copied();
        let with_data = suffix.is_none_or(|s| s.with_data);
        let first = parser.parser.index();
        let statement = parse_statement(&mut parser, with_data)?;
        let text = text_of(first..parser.parser.index(), suffix.map(|s| s.end));
        statements.push((statement, text));
        expecting_delimiter = true;
    }
    Ok(statements)
}

/// The sqlparser dialect DataFusion calls `name`.
fn dialect_named(name: &str) -> Result<Box<dyn Dialect>> {
    dialect_from_str(name).ok_or_else(|| {
        Error::DataFusion(DataFusionError::Plan(format!(
            "Unsupported SQL dialect: {name}. Available dialects: Generic, MySQL, PostgreSQL, Hive, SQLite, Snowflake, Redshift, MsSQL, ClickHouse, BigQuery, Ansi, DuckDB, Databricks."
        )))
    })
}

/// The tokens of `sql` in the named dialect, each with the byte range of
/// the input it was read from (so a statement's text, or a literal in it,
/// is a slice of the user's input, never a token rendered back to text).
/// Whitespace and comments are tokens too ([`Token::Whitespace`]).
pub fn tokenize_with_offsets(
    sql: &str,
    dialect: &str,
) -> Result<Vec<(Token, std::ops::Range<usize>)>> {
    let dialect = dialect_named(dialect)?;
    let tokens = Tokenizer::new(dialect.as_ref(), sql)
        .tokenize_with_location()
        .map_err(datafusion::sql::sqlparser::parser::ParserError::from)?;
    let offsets = ByteOffsets::new(sql, 1);
    Ok(tokens
        .into_iter()
        .filter(|t| t.token != Token::EOF)
        .map(|t| {
            let start = offsets.of(t.span.start);
            let end = offsets.of(t.span.end).max(start);
            (t.token, start..end)
        })
        .collect())
}

/// Whether `text` ends with a whole statement: nothing in it is left open
/// (a string, a quoted identifier, a comment) and its last token, comments
/// aside, is `;`. A `;` inside a literal or a comment ends nothing.
pub fn ends_statement(text: &str, dialect: &str) -> bool {
    let Some(dialect) = dialect_from_str(dialect) else {
        return text.trim_end().ends_with(';');
    };
    let Ok(tokens) = Tokenizer::new(dialect.as_ref(), text).tokenize() else {
        // Something is left open (or cannot be read at all): wait for
        // more, so that a part of a literal never runs as a statement.
        return false;
    };
    tokens
        .iter()
        .rev()
        .find(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .is_some_and(|t| *t == Token::SemiColon)
}

/// Whether an option of `CREATE EXTERNAL TABLE ... OPTIONS (...)` carries
/// a secret (an access key, a secret, a token, a password, an encryption
/// key), for every object store datafusion-cli knows and Parquet
/// encryption. A path to a credentials file is not a secret.
pub fn is_secret_option(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    // A per-column option names its column after `::`
    // (`format.crypto.file_decryption.column_key_as_hex::ssn`).
    let key = key.split("::").next().unwrap_or_default();
    if key.is_empty() {
        // A key that could not be read: kept out, as if it were a secret.
        return true;
    }
    if key.ends_with("_path") || key.ends_with("_url") {
        return false;
    }
    let secret_word = key.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| {
        matches!(
            w,
            "secret" | "password" | "passwd" | "token" | "credential" | "credentials"
        )
    });
    secret_word
        || [
            "access_key_id",
            "access_key",
            "account_key",
            "key_as_hex",
            "private_key",
            "api_key",
            "sas_key",
            "master_key",
            "customer_key",
            "encryption_key",
            "key_base64",
            "key_as_base64",
        ]
        .iter()
        .any(|suffix| key.ends_with(suffix))
}

/// The text of one `CREATE EXTERNAL TABLE` statement without the options
/// that carry secrets (see [`is_secret_option`]), and the keys it left
/// out. The rest of the text is the user's own bytes; the `OPTIONS` clause
/// is rebuilt from the slices of the options kept (and left out when none
/// is).
pub fn without_secret_options(sql: &str, dialect: &str) -> Result<(String, Vec<String>)> {
    let dialect = dialect_from_str(dialect).ok_or_else(|| {
        Error::DataFusion(DataFusionError::Plan(format!(
            "Unsupported SQL dialect: {dialect}"
        )))
    })?;
    let tokens = Tokenizer::new(dialect.as_ref(), sql)
        .tokenize_with_location()
        .map_err(datafusion::sql::sqlparser::parser::ParserError::from)?;
    let words: Vec<&TokenWithSpan> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let Some(options) = words
        .iter()
        .position(|t| is_keyword(&t.token, Keyword::OPTIONS))
        .filter(|&i| words.get(i + 1).is_some_and(|t| t.token == Token::LParen))
    else {
        return Ok((sql.to_owned(), vec![]));
    };
    // The options, split at commas outside parentheses, up to the `)`.
    let mut items: Vec<Vec<&TokenWithSpan>> = vec![vec![]];
    let mut depth = 0usize;
    let mut close = None;
    for (i, token) in words.iter().enumerate().skip(options + 2) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => {
                close = Some(i);
                break;
            }
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                items.push(vec![]);
                continue;
            }
            _ => {}
        }
        if let Some(item) = items.last_mut() {
            item.push(token);
        }
    }
    let Some(close) = close else {
        return Ok((sql.to_owned(), vec![]));
    };
    let offsets = ByteOffsets::new(sql, 1);
    let mut kept = vec![];
    let mut withheld = vec![];
    for item in items.iter().filter(|item| !item.is_empty()) {
        // The key as DataFusion reads it, whatever the spelling: every
        // kind of string literal (`'k'`, `E'k'`, `N'k'`, `$$k$$`, ...) or
        // dotted words. Anything else reads as no key, which is withheld.
        let key = match &item[0].token {
            Token::SingleQuotedString(key)
            | Token::DoubleQuotedString(key)
            | Token::TripleSingleQuotedString(key)
            | Token::TripleDoubleQuotedString(key)
            | Token::SingleQuotedByteStringLiteral(key)
            | Token::DoubleQuotedByteStringLiteral(key)
            | Token::TripleSingleQuotedByteStringLiteral(key)
            | Token::TripleDoubleQuotedByteStringLiteral(key)
            | Token::SingleQuotedRawStringLiteral(key)
            | Token::DoubleQuotedRawStringLiteral(key)
            | Token::TripleSingleQuotedRawStringLiteral(key)
            | Token::TripleDoubleQuotedRawStringLiteral(key)
            | Token::NationalStringLiteral(key)
            | Token::EscapedStringLiteral(key)
            | Token::UnicodeStringLiteral(key) => key.clone(),
            Token::DollarQuotedString(key) => key.value.clone(),
            Token::Word(_) => item
                .iter()
                .take_while(|t| {
                    matches!(
                        t.token,
                        Token::Word(_) | Token::Period | Token::Colon | Token::DoubleColon
                    )
                })
                .map(|t| t.token.to_string())
                .collect(),
            _ => String::new(),
        };
        if is_secret_option(&key) {
            withheld.push(key);
        } else {
            let (start, end) = (item[0].span.start, item[item.len() - 1].span.end);
            kept.push(&sql[offsets.of(start)..offsets.of(end)]);
        }
    }
    if withheld.is_empty() {
        return Ok((sql.to_owned(), vec![]));
    }
    let (start, end) = (
        offsets.of(words[options].span.start),
        offsets.of(words[close].span.end),
    );
    let clause = if kept.is_empty() {
        String::new()
    } else {
        format!("OPTIONS ({})", kept.join(", "))
    };
    let text = format!("{}{clause}{}", &sql[..start], &sql[end..]);
    Ok((text.trim().to_owned(), withheld))
}

fn expected(parser: &DFParser, what: &str) -> Error {
    let found = parser.parser.peek_token();
    Error::DataFusion(DataFusionError::SQL(
        Box::new(
            datafusion::sql::sqlparser::parser::ParserError::ParserError(format!(
                "Expected: {what}, found: {found}{}",
                found.span.start
            )),
        ),
        None,
    ))
}

/// Is `token` the unquoted keyword `keyword`?
fn is_keyword(token: &Token, keyword: Keyword) -> bool {
    matches!(token, Token::Word(w) if w.keyword == keyword && w.quote_style.is_none())
}

/// Removes the trailing `WITH [NO] DATA` of every `CREATE [OR REPLACE]
/// MATERIALIZED VIEW` statement before parsing, because sqlparser would
/// read `GROUP BY x WITH` as the start of `WITH ROLLUP`. Returns the tokens
/// left and, keyed by the start (line, column) of each statement that had
/// such a suffix, what it said and where it ended.
fn strip_with_data(
    tokens: Vec<TokenWithSpan>,
) -> (Vec<TokenWithSpan>, HashMap<(u64, u64), DataSuffix>) {
    let mut out = Vec::with_capacity(tokens.len());
    let mut suffixes = HashMap::new();
    let mut statement: Vec<TokenWithSpan> = vec![];
    let mut flush = |statement: &mut Vec<TokenWithSpan>, out: &mut Vec<TokenWithSpan>| {
        let words: Vec<usize> = (0..statement.len())
            .filter(|&i| !matches!(statement[i].token, Token::Whitespace(_)))
            .collect();
        let word = |k: usize| &statement[words[k]].token;
        let head = [
            Keyword::CREATE,
            Keyword::OR,
            Keyword::REPLACE,
            Keyword::MATERIALIZED,
            Keyword::VIEW,
        ];
        let is_create = words.len() >= 3
            && is_keyword(word(0), Keyword::CREATE)
            && (is_keyword(word(1), Keyword::MATERIALIZED)
                || (words.len() >= 5 && (1..5).all(|k| is_keyword(word(k), head[k]))));
        if is_create && words.len() >= 2 && is_keyword(word(words.len() - 1), Keyword::DATA) {
            let n = words.len();
            let cut = if n >= 3
                && is_keyword(word(n - 2), Keyword::NO)
                && is_keyword(word(n - 3), Keyword::WITH)
            {
                Some((words[n - 3], false))
            } else if is_keyword(word(n - 2), Keyword::WITH) {
                Some((words[n - 2], true))
            } else {
                None
            };
            if let Some((cut, with_data)) = cut {
                let start = statement[words[0]].span.start;
                let end = statement[words[n - 1]].span.end;
                suffixes.insert((start.line, start.column), DataSuffix { with_data, end });
                statement.truncate(cut);
            }
        }
        out.append(statement);
    };
    for token in tokens {
        if token.token == Token::SemiColon {
            flush(&mut statement, &mut out);
            out.push(token);
        } else {
            statement.push(token);
        }
    }
    flush(&mut statement, &mut out);
    (out, suffixes)
}

/// A `WITH [NO] DATA` suffix taken off a statement's tokens.
#[derive(Debug, Clone, Copy)]
struct DataSuffix {
    with_data: bool,
    /// Where it ended in the text.
    end: Location,
}

/// Byte offsets of the tokenizer's (line, column) locations, which count
/// characters from 1 (lines from `first_line`, the line the text begins on).
struct ByteOffsets<'a> {
    text: &'a str,
    first_line: u64,
    line_starts: Vec<usize>,
}

impl<'a> ByteOffsets<'a> {
    fn new(text: &'a str, first_line: u64) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            text,
            first_line,
            line_starts,
        }
    }

    fn of(&self, at: Location) -> usize {
        let Some(&line_start) = (at.line as usize)
            .checked_sub(self.first_line.max(1) as usize)
            .and_then(|line| self.line_starts.get(line))
        else {
            return if at.line == 0 { 0 } else { self.text.len() };
        };
        self.text[line_start..]
            .char_indices()
            .map(|(i, _)| line_start + i)
            .chain([self.text.len()])
            .nth((at.column as usize).saturating_sub(1))
            .unwrap_or(self.text.len())
    }
}

fn parse_statement(parser: &mut DFParser, with_data: bool) -> Result<Statement> {
    let is =
        |token: Token, keyword: Keyword| matches!(token, Token::Word(w) if w.keyword == keyword);
    let explain = is(parser.parser.peek_token().token, Keyword::EXPLAIN)
        && is(parser.parser.peek_nth_token(1).token, Keyword::REFRESH);
    if explain {
        parser.parser.next_token();
    }
    if parser
        .parser
        .parse_keywords(&[Keyword::REFRESH, Keyword::MATERIALIZED, Keyword::VIEW])
    {
        let name = parser.parser.parse_object_name(false)?;
        let full = parser.parser.parse_keyword(Keyword::FULL);
        let incremental = !full && parser.parser.parse_keyword(Keyword::INCREMENTAL);
        let cascade = parser.parser.parse_keyword(Keyword::CASCADE);
        let refresh = RefreshMaterializedView {
            name,
            full,
            incremental,
            cascade,
        };
        return Ok(if explain {
            Statement::ExplainRefresh(refresh)
        } else {
            Statement::Refresh(refresh)
        });
    }
    if parser
        .parser
        .parse_keywords(&[Keyword::VACUUM, Keyword::MATERIALIZED, Keyword::VIEWS])
    {
        return Ok(Statement::Vacuum);
    }
    if parser
        .parser
        .parse_keywords(&[Keyword::ALTER, Keyword::MATERIALIZED, Keyword::VIEW])
    {
        let if_exists = parser
            .parser
            .parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = parser.parser.parse_object_name(false)?;
        let (set, reset) = if parser.parser.peek_keyword(Keyword::SET) {
            let options = parser.parser.parse_options(Keyword::SET)?;
            (sql_options(&options)?, vec![])
        } else if parser.parser.parse_keyword(Keyword::RESET) {
            parser.parser.expect_token(&Token::LParen)?;
            let names = parser
                .parser
                .parse_comma_separated(|p| p.parse_identifier())?;
            parser.parser.expect_token(&Token::RParen)?;
            (vec![], names.into_iter().map(|i| i.value).collect())
        } else {
            return Err(expected(
                parser,
                "SET (...) or RESET (...) after ALTER MATERIALIZED VIEW name",
            ));
        };
        return Ok(Statement::Alter(AlterMaterializedView {
            name,
            if_exists,
            set,
            reset,
        }));
    }
    if let Token::Word(w) = parser.parser.peek_token().token
        && w.keyword == Keyword::REFRESH
    {
        parser.parser.next_token();
        return Err(expected(parser, "MATERIALIZED VIEW after REFRESH"));
    }
    let statement = parser.parse_statement()?;
    let DFStatement::Statement(inner) = &statement else {
        return Ok(Statement::DataFusion(Box::new(statement)));
    };
    match inner.as_ref() {
        SQLStatement::CreateView(view) if view.materialized => {
            let unsupported = |what: &str| {
                Err(Error::NotSupported(format!(
                    "{what} is not supported for materialized views"
                )))
            };
            if view.or_alter || view.secure || view.temporary || view.with_no_schema_binding {
                return unsupported("this form of CREATE VIEW");
            }
            let options = match &view.options {
                CreateTableOptions::None => vec![],
                CreateTableOptions::With(options) => sql_options(options)?,
                _ => return unsupported("these options"),
            };
            if !view.cluster_by.is_empty() {
                return unsupported("CLUSTER BY");
            }
            if view.to.is_some()
                || view.comment.is_some()
                || view.params.is_some()
                || view.copy_grants
            {
                return unsupported("this clause");
            }
            if view
                .columns
                .iter()
                .any(|c| c.data_type.is_some() || c.options.is_some())
            {
                return unsupported("a column list with types or options");
            }
            Ok(Statement::Create(CreateMaterializedView {
                name: view.name.clone(),
                or_replace: view.or_replace,
                if_not_exists: view.if_not_exists,
                columns: view.columns.iter().map(|c| c.name.clone()).collect(),
                query: view.query.clone(),
                with_data,
                options,
            }))
        }
        SQLStatement::Drop {
            object_type: ObjectType::MaterializedView,
            if_exists,
            names,
            cascade,
            ..
        } => Ok(Statement::Drop(DropMaterializedView {
            names: names.clone(),
            if_exists: *if_exists,
            cascade: *cascade,
        })),
        SQLStatement::ShowViews {
            materialized: true,
            show_options,
            ..
        } => {
            if show_options.show_in.is_some()
                || show_options.starts_with.is_some()
                || show_options.limit.is_some()
            {
                return Err(Error::NotSupported(
                    "SHOW MATERIALIZED VIEWS supports only a LIKE filter".into(),
                ));
            }
            let like = match &show_options.filter_position {
                None => None,
                Some(ShowStatementFilterPosition::Infix(ShowStatementFilter::Like(p)))
                | Some(ShowStatementFilterPosition::Suffix(ShowStatementFilter::Like(p))) => {
                    Some(p.clone())
                }
                Some(_) => {
                    return Err(Error::NotSupported(
                        "SHOW MATERIALIZED VIEWS supports only a LIKE filter".into(),
                    ));
                }
            };
            Ok(Statement::Show { like })
        }
        _ => Ok(Statement::DataFusion(Box::new(statement))),
    }
}

/// `name = value` options as written: a value is a string, a number, a
/// boolean or a word.
fn sql_options(options: &[SqlOption]) -> Result<Vec<(String, String)>> {
    options
        .iter()
        .map(|option| match option {
            SqlOption::KeyValue { key, value } => {
                let text = match value {
                    SqlExpr::Value(v) => match &v.value {
                        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                        Value::Number(n, _) => n.to_string(),
                        Value::Boolean(b) => b.to_string(),
                        other => other.to_string(),
                    },
                    SqlExpr::Identifier(ident) => ident.value.clone(),
                    other => other.to_string(),
                };
                Ok((key.value.clone(), text))
            }
            other => Err(Error::NotSupported(format!(
                "option {other} is not supported for materialized views: use name = value"
            ))),
        })
        .collect()
}

/// The catalog and schema unqualified names mean in `ctx` now
/// (`datafusion.catalog.default_catalog` / `default_schema`).
pub fn defaults(ctx: &datafusion::prelude::SessionContext) -> (String, String) {
    // Read in place: `ctx.state()` would copy the whole state.
    let state = ctx.state_ref();
    let state = state.read();
    let options = state.config().options();
    (
        options.catalog.default_catalog.clone(),
        options.catalog.default_schema.clone(),
    )
}

/// The SQL dialect and parser recursion limit `ctx` parses with, as
/// [`parse_sql`] takes them.
pub fn parser_settings(ctx: &datafusion::prelude::SessionContext) -> (String, usize) {
    let state = ctx.state_ref();
    let state = state.read();
    let options = state.config().options();
    (
        options.sql_parser.dialect.as_ref().to_owned(),
        options.sql_parser.recursion_limit.get(),
    )
}

/// The fully qualified name `name` (as written in a statement) means in
/// `ctx` now: identifiers normalized as DataFusion does, defaults filled in.
pub fn qualify(
    ctx: &datafusion::prelude::SessionContext,
    name: &ObjectName,
) -> Result<QualifiedName> {
    let normalize = ctx
        .state_ref()
        .read()
        .config()
        .options()
        .sql_parser
        .enable_ident_normalization;
    let reference =
        datafusion::sql::planner::object_name_to_table_reference(name.clone(), normalize)?;
    let (catalog, schema) = defaults(ctx);
    Ok(reference.resolve(&catalog, &schema).into())
}

#[cfg(test)]
mod tests;
