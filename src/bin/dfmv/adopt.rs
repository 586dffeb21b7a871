//! `dfmv adopt DIR`: takes over a folder made the old way, a `state.sql`
//! that creates the source tables and a `views/manifest.json` that lists
//! each view's query and the Parquet data it was last computed into.
//!
//! state.sql runs first (so its tables are remembered by the catalog,
//! with relative LOCATIONs made absolute); then every view becomes a
//! materialized view whose first snapshot is a copy of its Parquet data,
//! after the library has checked the columns. Each view is reported as
//! adopted or not, and why.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{ObjectName, Statement as SQLStatement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use datafusion_matview::spec::QualifiedName;
use datafusion_matview::sql::{Statement, parse_sql_with_text, quote_ident};

use crate::context;
use crate::display;
use crate::exec::{App, Result, qualify};

/// One view of `views/manifest.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct OldView {
    pub name: String,
    pub sql: Option<String>,
    pub parquet_path: Option<String>,
}

/// Reads `{"views": {"name": {"sql": ..., "parquet_path": ...}, ...}}`
/// (a list of objects with a `name` is accepted too), sorted by name.
pub fn read_manifest(text: &str) -> Result<Vec<OldView>> {
    let json: serde_json::Value = serde_json::from_str(text)?;
    let field =
        |v: &serde_json::Value, key: &str| v.get(key).and_then(|s| s.as_str()).map(str::to_owned);
    let mut views = match json.get("views") {
        Some(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(name, v)| OldView {
                name: name.clone(),
                sql: field(v, "sql"),
                parquet_path: field(v, "parquet_path"),
            })
            .collect::<Vec<_>>(),
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .map(|v| OldView {
                name: field(v, "name").unwrap_or_default(),
                sql: field(v, "sql"),
                parquet_path: field(v, "parquet_path"),
            })
            .collect(),
        _ => return Err("it has no \"views\" object".into()),
    };
    views.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(views)
}

/// A relative path as the old scripts meant it: under the first of
/// `bases` where it exists (else under the first base).
fn resolve(path: &str, bases: &[&Path]) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    bases
        .iter()
        .map(|base| base.join(p))
        .find(|candidate| candidate.exists())
        .unwrap_or_else(|| bases[0].join(p))
}

/// The statement text with a relative `LOCATION '...'` made absolute, so
/// the remembered table is found from any working directory.
fn absolute_locations(text: &str, dialect: &str, bases: &[&Path]) -> String {
    let Some(dialect) = dialect_from_str(dialect) else {
        return text.to_owned();
    };
    let Ok(mut tokens) = Tokenizer::new(dialect.as_ref(), text)
        .with_unescape(false)
        .tokenize()
    else {
        return text.to_owned();
    };
    let mut after_location = false;
    for token in &mut tokens {
        match token {
            Token::Whitespace(_) => continue,
            Token::Word(w) if w.keyword == Keyword::LOCATION => {
                after_location = true;
                continue;
            }
            Token::SingleQuotedString(location)
                if after_location
                    && !context::is_remote(location)
                    && !Path::new(location.as_str()).is_absolute() =>
            {
                let path = resolve(&location.replace("''", "'"), bases);
                *location = path.to_string_lossy().replace('\'', "''");
            }
            _ => {}
        }
        after_location = false;
    }
    tokens.iter().map(ToString::to_string).collect()
}

/// Splits a script into statements as `dfmv -f` does (a statement ends at
/// a line ending with `;`; `--` and `#!` lines are skipped).
fn script_chunks(text: &str) -> Vec<String> {
    let mut chunks = vec![];
    let mut chunk = String::new();
    for line in text.as_bytes().lines().map_while(std::result::Result::ok) {
        if line.starts_with("--") || line.starts_with("#!") {
            continue;
        }
        let line = line.trim_end();
        chunk.push_str(line);
        chunk.push('\n');
        if line.ends_with(';') {
            chunks.push(std::mem::take(&mut chunk));
        }
    }
    if !chunk.trim().is_empty() {
        chunks.push(chunk);
    }
    chunks
}

/// What a statement of state.sql creates, if it is a table or view.
fn created_name(statement: &Statement) -> Option<&ObjectName> {
    match statement {
        Statement::DataFusion(s) => match s.as_ref() {
            DFStatement::CreateExternalTable(c) => Some(&c.name),
            DFStatement::Statement(inner) => match inner.as_ref() {
                SQLStatement::CreateView(v) if !v.materialized => Some(&v.name),
                SQLStatement::CreateTable(t) => Some(&t.name),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// Runs state.sql; returns whether every statement ran (or was skipped).
async fn run_state(app: &App, dir: &Path, text: &str, views: &[QualifiedName]) -> bool {
    let session = &app.session;
    let (dialect, recursion_limit) = context::parser_settings(session.context());
    let cwd = std::env::current_dir().unwrap_or_else(|_| dir.to_path_buf());
    let bases = [dir, cwd.as_path()];
    let (mut ran, mut skipped, mut failed) = (0, vec![], 0);
    for chunk in script_chunks(text) {
        let statements = match parse_sql_with_text(&chunk, &dialect, recursion_limit) {
            Ok(statements) => statements,
            Err(e) => {
                println!("state.sql: {e}");
                failed += 1;
                continue;
            }
        };
        for (statement, text) in statements {
            if let Some(name) = created_name(&statement) {
                let Ok(name) = qualify(session, name) else {
                    continue;
                };
                let (catalog, schema) = context::defaults(session.context());
                let short = name.short(&catalog, &schema);
                if views.contains(&name) {
                    skipped.push(format!("{short} (adopted as a materialized view)"));
                    continue;
                }
                if session
                    .context()
                    .table_exist(name.to_table_reference())
                    .unwrap_or(false)
                {
                    skipped.push(format!("{short} (already exists)"));
                    continue;
                }
            }
            let text = absolute_locations(&text, &dialect, &bases);
            let result = async {
                if let Statement::DataFusion(s) = &statement {
                    context::prepare_stores(session.context(), s).await?;
                }
                session.sql(&text).await?.collect().await?;
                Ok::<_, crate::exec::BoxError>(())
            }
            .await;
            match result {
                Ok(()) => ran += 1,
                Err(e) => {
                    println!("state.sql: {e}");
                    failed += 1;
                }
            }
        }
    }
    let mut line = format!(
        "state.sql: {ran} statement{} run",
        if ran == 1 { "" } else { "s" }
    );
    if failed > 0 {
        line.push_str(&format!(", {failed} failed"));
    }
    if !skipped.is_empty() {
        line.push_str(&format!("; skipped {}", skipped.join(", ")));
    }
    println!("{line}");
    failed == 0
}

/// The Parquet files of a view: the file itself, or every `.parquet` file
/// under the folder, sorted.
fn parquet_files(path: &Path) -> Result<Vec<String>, String> {
    if !path.exists() {
        return Err(format!("Parquet data not found: {}", path.display()));
    }
    if path.is_file() {
        return Ok(vec![path.to_string_lossy().into_owned()]);
    }
    let mut files = vec![];
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries =
            std::fs::read_dir(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| e.to_string())?;
            let p = entry.path();
            if p.is_dir() {
                folders.push(p);
            } else if p.extension().is_some_and(|e| e == "parquet") {
                files.push(p.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!("no Parquet files in {}", path.display()));
    }
    Ok(files)
}

/// Adopts `dir`; prints one line per view and a summary. Returns whether
/// everything was adopted.
pub async fn adopt(app: &App, dir: &Path) -> Result<bool> {
    let session = &app.session;
    let views_dir = dir.join("views");
    let manifest_path = views_dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest_path)
        .map_err(|e| format!("cannot read {}: {e}", manifest_path.display()))?;
    let views = read_manifest(&text)
        .map_err(|e| format!("cannot read {}: {e}", manifest_path.display()))?;
    let (catalog, schema) = context::defaults(session.context());
    let qualified = |name: &str| QualifiedName::new(&catalog, &schema, name);

    let mut ok = true;
    let state_path = dir.join("state.sql");
    if state_path.exists() {
        let state = std::fs::read_to_string(&state_path)
            .map_err(|e| format!("cannot read {}: {e}", state_path.display()))?;
        let names: Vec<QualifiedName> = views.iter().map(|v| qualified(&v.name)).collect();
        ok &= run_state(app, dir, &state, &names).await;
    }

    let (mut adopted, mut failed) = (0, 0);
    for view in &views {
        let name = qualified(&view.name);
        let display = name.short(&catalog, &schema);
        let outcome: Result<String, String> = async {
            if view.name.is_empty() {
                return Err("the view has no name".to_owned());
            }
            if session.catalog().current().view(&name).is_some() {
                return Ok("already in the catalog".to_owned());
            }
            let sql = view
                .sql
                .as_deref()
                .map(|s| s.trim().trim_end_matches(';').trim_end())
                .filter(|s| !s.is_empty())
                .ok_or("no \"sql\" in the manifest")?;
            let path = view
                .parquet_path
                .as_deref()
                .ok_or("no \"parquet_path\" in the manifest")?;
            let files = if context::is_remote(path) {
                vec![path.to_owned()]
            } else {
                parquet_files(&resolve(path, &[&views_dir, dir]))?
            };
            session
                .adopt(&quote_ident(&view.name), sql, &files)
                .await
                .map_err(|e| e.to_string())?;
            let manifest = session.catalog().current();
            let rows = manifest
                .view(&name)
                .and_then(|v| v.snapshot.as_ref())
                .map_or(0, |s| s.row_count);
            Ok(display::rows(rows))
        }
        .await;
        match outcome {
            Ok(what) => {
                adopted += 1;
                println!("adopted {display} ({what})");
            }
            Err(why) => {
                failed += 1;
                println!("not adopted {display}: {why}");
            }
        }
    }
    let total = views.len();
    let mut summary = format!(
        "{adopted} of {total} view{} adopted",
        if total == 1 { "" } else { "s" }
    );
    if failed > 0 {
        summary.push_str(&format!(", {failed} not adopted"));
    }
    println!("{summary}");
    Ok(ok && failed == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_views_are_read_in_name_order() {
        let views = read_manifest(
            r#"{"views": {"b": {"sql": "SELECT 1", "parquet_path": "b.parquet", "created_at": "x"},
                          "a": {"sql": "SELECT 2"}}}"#,
        )
        .unwrap();
        assert_eq!(views.len(), 2);
        assert_eq!(views[0].name, "a");
        assert_eq!(views[0].parquet_path, None);
        assert_eq!(views[1].parquet_path.as_deref(), Some("b.parquet"));
        assert!(read_manifest("{}").is_err());
        assert!(read_manifest("not json").is_err());
    }

    #[test]
    fn names_are_quoted_when_needed() {
        assert_eq!(quote_ident("daily_totals"), "daily_totals");
        assert_eq!(quote_ident("Daily"), "\"Daily\"");
        assert_eq!(quote_ident("my view"), "\"my view\"");
    }

    #[test]
    fn relative_locations_become_absolute() {
        let base = Path::new("/data/project");
        let sql = "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'src/orders.csv' OPTIONS ('format.has_header' 'true')";
        assert_eq!(
            absolute_locations(sql, "generic", &[base]),
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/data/project/src/orders.csv' OPTIONS ('format.has_header' 'true')"
        );
        let remote = "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 's3://b/k.csv'";
        assert_eq!(absolute_locations(remote, "generic", &[base]), remote);
    }

    #[test]
    fn scripts_split_at_line_ending_semicolons() {
        let chunks = script_chunks("-- comment\nCREATE TABLE a\n AS VALUES (1);\nSELECT 1;\n");
        assert_eq!(chunks, ["CREATE TABLE a\n AS VALUES (1);\n", "SELECT 1;\n"]);
    }
}
