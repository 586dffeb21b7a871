//! `dfmv adopt DIR`: takes over a folder made the old way, a `state.sql`
//! that creates the source tables and a `views/manifest.json` that lists
//! each view's query and the Parquet data it was last computed into.
//!
//! What state.sql defines runs first (CREATE EXTERNAL TABLE, CREATE VIEW
//! and SET, read as `dfmv -f` reads a script; the rest only with
//! `--run-all`), so its tables are remembered by the catalog, with
//! relative LOCATIONs made absolute; then every view becomes a
//! materialized view whose first snapshot is a copy of its Parquet data,
//! after the library has checked the columns. Its freshness is unknown
//! until its first REFRESH, which is full. Each view is reported as
//! adopted or not, and why.

use std::path::{Path, PathBuf};

use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{ObjectName, Statement as SQLStatement};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use datafusion_matview::spec::QualifiedName;
use datafusion_matview::sql::{Statement, parse_sql, quote_ident, tokenize_with_offsets};

use crate::context;
use crate::display;
use crate::exec::{App, Result, qualify};
use crate::script::ScriptSplitter;

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
/// the remembered table is found from any working directory. Only that
/// literal is replaced; every other byte is the user's.
fn absolute_locations(text: &str, dialect: &str, bases: &[&Path]) -> String {
    let Ok(tokens) = tokenize_with_offsets(text, dialect) else {
        return text.to_owned();
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut after_location = false;
    for (token, range) in tokens {
        match &token {
            Token::Whitespace(_) => continue,
            Token::Word(w) if w.keyword == Keyword::LOCATION && w.quote_style.is_none() => {
                after_location = true;
                continue;
            }
            // The tokenizer has undone the doubled quotes of the literal.
            Token::SingleQuotedString(location)
                if after_location
                    && !context::is_remote(location)
                    && !Path::new(location.as_str()).is_absolute() =>
            {
                let path = resolve(location, bases);
                out.push_str(&text[copied..range.start]);
                out.push('\'');
                out.push_str(&path.to_string_lossy().replace('\'', "''"));
                out.push('\'');
                copied = range.end;
            }
            _ => {}
        }
        after_location = false;
    }
    out.push_str(&text[copied..]);
    out
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

/// Whether adopting needs `statement`: what defines the sources of the
/// views (CREATE EXTERNAL TABLE, CREATE VIEW) and settings (SET).
/// Anything else (COPY, INSERT, DROP, ...) could change or remove data.
fn needed_to_adopt(statement: &Statement) -> bool {
    let Statement::DataFusion(statement) = statement else {
        return false;
    };
    match statement.as_ref() {
        DFStatement::CreateExternalTable(_) => true,
        DFStatement::Statement(inner) => {
            matches!(
                inner.as_ref(),
                SQLStatement::CreateView(v) if !v.materialized
            ) || matches!(inner.as_ref(), SQLStatement::Set(_))
        }
        _ => false,
    }
}

/// One line for a statement in a message: its text with runs of
/// whitespace as one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs state.sql (only what adopting needs, unless `run_all`); returns
/// whether every statement ran or was skipped on purpose.
async fn run_state(
    app: &App,
    dir: &Path,
    text: &str,
    views: &[QualifiedName],
    run_all: bool,
) -> bool {
    let session = &app.session;
    let cwd = std::env::current_dir().unwrap_or_else(|_| dir.to_path_buf());
    let bases = [dir, cwd.as_path()];
    let (mut ran, mut skipped, mut not_run, mut failed) = (0, vec![], 0, 0);
    // Read as `dfmv -f` reads a script; each statement runs as the user's
    // exact bytes (only a relative LOCATION is made absolute).
    let mut splitter = ScriptSplitter::new();
    let mut lines = text.split_inclusive('\n');
    loop {
        // The dialect in force now: a SET of the script can change it.
        let (dialect, recursion_limit) = context::parser_settings(session.context());
        let chunk = match lines.next() {
            Some(line) => match splitter.push_line(line, &dialect) {
                Some(chunk) => chunk,
                None => continue,
            },
            None => match splitter.finish() {
                Some(chunk) => chunk,
                None => break,
            },
        };
        let statements = match chunk.parse(&dialect, recursion_limit) {
            Ok(statements) => statements,
            Err(e) => {
                println!("state.sql: {e}");
                failed += 1;
                continue;
            }
        };
        for (statement, text) in statements {
            if !run_all && !needed_to_adopt(&statement) {
                println!(
                    "state.sql: not run (adopting runs only CREATE EXTERNAL TABLE, CREATE VIEW and SET; --run-all runs everything): {}",
                    one_line(&text)
                );
                not_run += 1;
                continue;
            }
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
                    context::prepare_stores(session.context(), s, false).await?;
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
    if not_run > 0 {
        line.push_str(&format!(", {not_run} not run"));
    }
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
pub async fn adopt(app: &App, dir: &Path, run_all: bool) -> Result<bool> {
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
        ok &= run_state(app, dir, &state, &names, run_all).await;
    }

    let (mut adopted, mut failed) = (0, 0);
    for view in &views {
        let name = qualified(&view.name);
        let display = name.short(&catalog, &schema);
        let outcome: Result<String, String> = async {
            if view.name.is_empty() {
                return Err("the view has no name".to_owned());
            }
            if session.catalog().index().view(&name).is_some() {
                return Ok("already in the catalog".to_owned());
            }
            let sql = view
                .sql
                .as_deref()
                .map(|s| s.trim().trim_end_matches(';').trim_end())
                .filter(|s| !s.is_empty())
                .ok_or("no \"sql\" in the manifest")?;
            // Parsed here too, so a syntax error's columns count from the
            // manifest's own text.
            let (dialect, recursion_limit) = context::parser_settings(session.context());
            let parsed = parse_sql(sql, &dialect, recursion_limit).map_err(|e| e.to_string())?;
            if !matches!(parsed.as_slice(), [Statement::DataFusion(s)]
                if matches!(s.as_ref(), DFStatement::Statement(q) if matches!(q.as_ref(), SQLStatement::Query(_))))
            {
                return Err("the query must be a single SELECT".to_owned());
            }
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
            let rows = session
                .catalog()
                .entry(&name)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|v| v.snapshot)
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
    fn a_location_with_a_doubled_quote_is_made_absolute_and_the_rest_kept() {
        let base = Path::new("/data/it's");
        let sql = "CREATE EXTERNAL TABLE \"x\"\"y\" STORED AS CSV LOCATION 'it''s data/' /* 'c' */ OPTIONS ('format.delimiter' ';')";
        assert_eq!(
            absolute_locations(sql, "generic", &[base]),
            "CREATE EXTERNAL TABLE \"x\"\"y\" STORED AS CSV LOCATION '/data/it''s/it''s data/' /* 'c' */ OPTIONS ('format.delimiter' ';')"
        );
    }

    #[test]
    fn only_what_defines_sources_is_needed() {
        let needed = |sql: &str| {
            let mut v = datafusion_matview::sql::parse_sql(sql, "generic", 50).unwrap();
            needed_to_adopt(&v.remove(0))
        };
        assert!(needed(
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x.csv'"
        ));
        assert!(needed("CREATE OR REPLACE VIEW v AS SELECT 1"));
        assert!(needed("SET datafusion.execution.batch_size = 1024"));
        assert!(!needed("COPY (SELECT 1) TO 'x.parquet'"));
        assert!(!needed("INSERT INTO t VALUES (1)"));
        assert!(!needed("DROP TABLE t"));
        assert!(!needed("DROP MATERIALIZED VIEW v"));
        assert!(!needed("CREATE MATERIALIZED VIEW m AS SELECT 1"));
        assert!(!needed("CREATE TABLE t AS VALUES (1)"));
    }
}
