//! Structured scripts: statements with quoted identifiers, strings with
//! doubled quotes, E'' escapes and dollar quotes (PostgreSQL dialect), and
//! comments holding `;`, separated by `;`. The splitter must find exactly
//! the statements written, each with exactly its text.

#![no_main]

use arbitrary::Arbitrary;
use datafusion_matview::sql::parse_sql_with_text;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Literal {
    Quoted(String),
    Escaped(String),
    Dollar(String),
    Number(i64),
}

#[derive(Arbitrary, Debug)]
enum Comment {
    Line(String),
    Block(String),
}

#[derive(Arbitrary, Debug)]
enum Stmt {
    Select {
        value: Literal,
        alias: String,
    },
    Create {
        name: String,
        value: Literal,
        no_data: bool,
    },
    Refresh {
        name: String,
        full: bool,
    },
    Drop {
        names: Vec<String>,
        if_exists: bool,
    },
    Show {
        pattern: String,
    },
}

#[derive(Arbitrary, Debug)]
struct Script {
    postgres: bool,
    statements: Vec<(Option<Comment>, Stmt)>,
}

/// Characters no literal of these forms can hold (NUL ends C strings in
/// some tools; the rest are handled by the quoting below).
fn clean(s: &str) -> String {
    s.chars().filter(|c| *c != '\0').collect()
}

fn ident(s: &str) -> String {
    let s = clean(s);
    let s = if s.is_empty() { "x".to_string() } else { s };
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn literal(value: &Literal, postgres: bool) -> String {
    match value {
        Literal::Quoted(s) => format!("'{}'", clean(s).replace('\'', "''")),
        Literal::Escaped(s) if postgres => {
            format!("E'{}'", clean(s).replace('\\', "\\\\").replace('\'', "\\'"))
        }
        Literal::Dollar(s) if postgres => format!("$${}$$", clean(s).replace('$', "")),
        Literal::Escaped(s) | Literal::Dollar(s) => format!("'{}'", clean(s).replace('\'', "''")),
        Literal::Number(n) => n.unsigned_abs().to_string(),
    }
}

fn comment(c: &Comment) -> String {
    match c {
        Comment::Line(s) => format!("-- {}\n", clean(s).replace(['\n', '\r'], " ")),
        Comment::Block(s) => format!("/* {} */ ", clean(s).replace(['*', '/'], "")),
    }
}

fn statement(s: &Stmt, postgres: bool) -> String {
    match s {
        Stmt::Select { value, alias } => {
            format!("SELECT {} AS {}", literal(value, postgres), ident(alias))
        }
        Stmt::Create {
            name,
            value,
            no_data,
        } => format!(
            "CREATE MATERIALIZED VIEW {} AS SELECT {} AS v{}",
            ident(name),
            literal(value, postgres),
            if *no_data { " WITH NO DATA" } else { "" }
        ),
        Stmt::Refresh { name, full } => format!(
            "REFRESH MATERIALIZED VIEW {}{}",
            ident(name),
            if *full { " FULL" } else { "" }
        ),
        Stmt::Drop { names, if_exists } => {
            let names: Vec<String> = names.iter().take(4).map(|n| ident(n)).collect();
            let names = if names.is_empty() {
                vec![ident("v")]
            } else {
                names
            };
            format!(
                "DROP MATERIALIZED VIEW {}{}",
                if *if_exists { "IF EXISTS " } else { "" },
                names.join(", ")
            )
        }
        Stmt::Show { pattern } => format!(
            "SHOW MATERIALIZED VIEWS LIKE '{}'",
            clean(pattern).replace('\'', "''")
        ),
    }
}

fuzz_target!(|script: Script| {
    let dialect = if script.postgres {
        "postgresql"
    } else {
        "generic"
    };
    let mut sql = String::new();
    let mut expected = vec![];
    for (c, s) in script.statements.iter().take(8) {
        let text = format!(
            "{}{}",
            c.as_ref().map(comment).unwrap_or_default(),
            statement(s, script.postgres)
        );
        sql.push_str(&text);
        sql.push_str(";\n");
        expected.push(text.trim().to_owned());
    }
    let found = parse_sql_with_text(&sql, dialect, 50)
        .unwrap_or_else(|e| panic!("{sql:?} does not parse: {e}"));
    let texts: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, expected, "in {sql:?}");
});
