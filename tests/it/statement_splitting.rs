//! The statements dfmv runs from a script are exactly the ones DataFusion's
//! parser finds in it, each with the user's own text: a property over
//! generated scripts full of quotes, doubled quotes, `E'...'` escapes,
//! dollar-quoted strings, comments holding `;` and quoted identifiers,
//! checked against the splitter dfmv uses and against the `dfmv` binary.

use std::io::Write;
use std::process::{Command, Stdio};

use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion_matview::sql::{Statement, parse_sql};

#[path = "../../src/bin/dfmv/script.rs"]
#[allow(dead_code)]
mod script;
use script::ScriptSplitter;

/// xorshift64*: small, deterministic, and enough to explore.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Dialect {
    Generic,
    PostgreSql,
    MySql,
}

impl Dialect {
    fn name(self) -> &'static str {
        match self {
            Dialect::Generic => "generic",
            Dialect::PostgreSql => "postgresql",
            Dialect::MySql => "mysql",
        }
    }
}

/// Text inside literals that looks like the end of a statement, or of
/// the literal, or like something else to run.
const TRAPS: [&str; 10] = [
    "a",
    ";",
    ";\n",
    "\n",
    " DROP MATERIALIZED VIEW victim; SELECT ",
    "-- ",
    "/*",
    "*/",
    "é€",
    " ",
];

/// A string literal as SQL, and the string it means.
fn string_literal(rng: &mut Rng, dialect: Dialect) -> (String, String) {
    let kinds = if dialect == Dialect::MySql { 1 } else { 4 };
    let parts = rng.below(6);
    let (mut sql, mut value) = (String::new(), String::new());
    let mut add = |sql_part: &str, value_part: &str| {
        sql.push_str(sql_part);
        value.push_str(value_part);
    };
    match rng.below(kinds) {
        // '...' with doubled quotes (and MySQL's backslash escapes)
        0 => {
            add("'", "");
            for _ in 0..parts {
                match rng.below(4) {
                    0 => add("''", "'"),
                    1 if dialect == Dialect::MySql => {
                        let (s, v) = rng.pick(&[("\\'", "'"), ("\\\\", "\\"), ("\\n", "\n")]);
                        add(s, v)
                    }
                    1 => add("\\", "\\"),
                    _ => {
                        let trap = rng.pick(&TRAPS);
                        add(trap, trap)
                    }
                }
            }
            add("'", "");
        }
        // E'...' with backslash escapes
        1 => {
            add(rng.pick(&["E'", "e'"]), "");
            for _ in 0..parts {
                match rng.below(3) {
                    0 => {
                        let (s, v) = rng.pick(&[
                            ("\\'", "'"),
                            ("''", "'"),
                            ("\\\\", "\\"),
                            ("\\n", "\n"),
                            ("\\\\'';", "\\';"),
                        ]);
                        add(s, v)
                    }
                    _ => {
                        let trap = rng.pick(&TRAPS);
                        add(trap, trap)
                    }
                }
            }
            add("'", "");
        }
        // $$...$$ and $tag$...$tag$: nothing inside is special
        _ => {
            let tag = rng.pick(&["$$", "$q$"]);
            add(tag, "");
            for _ in 0..parts {
                let part = rng.pick(&["'", "''", "\\", "\"", ";\n", "E'", "-- ;\n"]);
                let part = if rng.chance(50) {
                    part
                } else {
                    rng.pick(&TRAPS)
                };
                add(part, part);
            }
            add(tag, "");
        }
    }
    (sql, value)
}

/// An identifier, quoted (with doubled quotes inside) or not.
fn identifier(rng: &mut Rng, dialect: Dialect) -> String {
    if rng.chance(40) {
        return rng.pick(&["a", "b1", "s"]).to_owned();
    }
    let quote = if dialect == Dialect::MySql { '`' } else { '"' };
    let mut out = String::from(quote);
    for _ in 0..1 + rng.below(4) {
        match rng.below(3) {
            0 => {
                out.push(quote);
                out.push(quote);
            }
            _ => out.push_str(rng.pick(&["x", ";", " ", "'", ";\n", "é", "--", "/*"])),
        }
    }
    out.push(quote);
    out
}

/// What separates two tokens: whitespace, or comments holding `;`, quotes
/// and line ends.
fn gap(rng: &mut Rng, dialect: Dialect) -> String {
    if rng.chance(60) {
        return " ".to_owned();
    }
    let mut choices = vec![
        "\n",
        "\t",
        "\r\n",
        "  \n  ",
        " -- ; 'x\n",
        "\n-- a line; of comment\n",
        " /* ; ' \" */ ",
        "/*;\n*/",
    ];
    match dialect {
        Dialect::Generic | Dialect::PostgreSql => choices.push(" /* a /* ; */ b; */ "),
        Dialect::MySql => choices.push(" # ; 'x\n"),
    }
    rng.pick(&choices).to_owned()
}

/// A statement made of `parts` with random gaps between them.
fn join(rng: &mut Rng, dialect: Dialect, parts: &[String]) -> String {
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str(&gap(rng, dialect));
        }
        out.push_str(part);
    }
    out
}

/// One statement DataFusion parses.
fn statement(rng: &mut Rng, dialect: Dialect) -> String {
    let s = |x: &str| x.to_owned();
    let parts: Vec<String> = match rng.below(5) {
        0 | 1 => {
            let mut parts = vec![s("SELECT")];
            for i in 0..1 + rng.below(2) {
                if i > 0 {
                    parts.push(s(","));
                }
                parts.push(string_literal(rng, dialect).0);
                parts.push(s("AS"));
                parts.push(identifier(rng, dialect));
            }
            parts
        }
        2 => vec![
            s("CREATE"),
            s("VIEW"),
            identifier(rng, dialect),
            s("AS"),
            s("SELECT"),
            string_literal(rng, dialect).0,
            s("AS"),
            identifier(rng, dialect),
        ],
        3 => {
            let location = loop {
                let (sql, _) = string_literal(rng, dialect);
                if sql.starts_with('\'') {
                    break sql;
                }
            };
            vec![
                s("CREATE"),
                s("EXTERNAL"),
                s("TABLE"),
                identifier(rng, dialect),
                s("STORED"),
                s("AS"),
                s("CSV"),
                s("LOCATION"),
                location,
            ]
        }
        _ => vec![
            s("DROP"),
            s("VIEW"),
            s("IF"),
            s("EXISTS"),
            identifier(rng, dialect),
        ],
    };
    join(rng, dialect, &parts)
}

/// A script of statements; some share a line, some end a line, some have
/// comments before them, the last may lack its `;`.
fn script(rng: &mut Rng, dialect: Dialect) -> String {
    let mut out = String::new();
    if rng.chance(30) {
        out.push_str("-- a script; of statements\n");
    }
    let n = 1 + rng.below(8);
    for i in 0..n {
        out.push_str(&statement(rng, dialect));
        if i + 1 == n && rng.chance(30) {
            break;
        }
        out.push_str(rng.pick(&[
            ";\n",
            ";\n",
            ";\n",
            "; ",
            ";",
            ";;\n",
            " ;\n\n",
            "; -- done;\n",
            ";\n\n-- between; statements\n\n",
        ]));
    }
    out
}

/// The statements dfmv runs from `script`: line by line through the
/// splitter, each run parsed with its text.
fn dfmv_statements(script: &str, dialect: &str) -> Vec<(Statement, String)> {
    let mut splitter = ScriptSplitter::new();
    let mut chunks = vec![];
    for line in script.split_inclusive('\n') {
        chunks.extend(splitter.push_line(line, dialect));
    }
    chunks.extend(splitter.finish());
    chunks
        .iter()
        .flat_map(|chunk| {
            // Each run is a slice of the script, beginning on its line.
            let lines_before = script
                .split_inclusive('\n')
                .take(chunk.first_line as usize - 1);
            let at: usize = lines_before.map(str::len).sum();
            assert!(
                script[at..].starts_with(&chunk.text),
                "{chunk:?} of {script:?}"
            );
            chunk
                .parse(dialect, 50)
                .unwrap_or_else(|e| panic!("{e}\nin the run {chunk:?}\nof the script {script:?}"))
        })
        .collect()
}

fn df_parse(sql: &str, dialect: &str) -> Vec<DFStatement> {
    let dialect = dialect_from_str(dialect).unwrap();
    DFParser::parse_sql_with_dialect(sql, dialect.as_ref())
        .unwrap_or_else(|e| panic!("{e}\nparsing {sql:?}"))
        .into_iter()
        .collect()
}

/// Checks the property for one script.
fn check(script: &str, dialect: Dialect) {
    let name = dialect.name();
    let expected = df_parse(script, name);
    let ours = dfmv_statements(script, name);
    assert_eq!(
        ours.len(),
        expected.len(),
        "{name}: statements of {script:?}:\n{ours:#?}"
    );
    let mut at = 0;
    for ((statement, text), expected) in ours.iter().zip(&expected) {
        // The same statement as DataFusion's parser finds...
        assert_eq!(
            statement,
            &Statement::DataFusion(Box::new(expected.clone())),
            "{name}: {script:?}"
        );
        // ...its text is a slice of the script, in order...
        let found = script[at..]
            .find(text.as_str())
            .unwrap_or_else(|| panic!("{name}: {text:?} is not in {script:?} after byte {at}"));
        at += found + text.len();
        // ...and the text alone means the same statement.
        assert_eq!(
            df_parse(text, name),
            std::slice::from_ref(expected),
            "{name}: {text:?} of {script:?}"
        );
        assert_eq!(
            parse_sql(text, name, 50).unwrap(),
            std::slice::from_ref(statement),
            "{name}: {text:?}"
        );
    }
}

#[test]
fn the_statements_run_are_those_datafusion_finds_with_the_same_text() {
    let mut statements = 0;
    for dialect in [Dialect::Generic, Dialect::PostgreSql, Dialect::MySql] {
        for seed in 0..400 {
            let mut rng = Rng::new(seed);
            let script = script(&mut rng, dialect);
            check(&script, dialect);
            statements += df_parse(&script, dialect.name()).len();
        }
    }
    assert!(statements > 3000, "the generator makes statements");
}

#[test]
fn the_generator_makes_the_hard_cases() {
    let mut all = String::new();
    for dialect in [Dialect::Generic, Dialect::PostgreSql, Dialect::MySql] {
        for seed in 0..400 {
            all.push_str(&script(&mut Rng::new(seed), dialect));
        }
    }
    for needle in [
        "''", "E'", "\\'", "$$", "$q$", "\"\"", "``", ";\n'", "/* ; ", " -- ; ", "# ;",
    ] {
        assert!(all.contains(needle), "no {needle:?} generated");
    }
}

/// Known cases, each once.
#[test]
fn examples_split_as_datafusion_does() {
    for (script, dialect) in [
        (
            "SELECT 'x''; DROP MATERIALIZED VIEW victim; SELECT ''y' AS s",
            Dialect::Generic,
        ),
        (
            "SELECT 'x'';\nDROP VIEW v;\nSELECT ''y' AS s;\n",
            Dialect::Generic,
        ),
        (
            "SELECT E'a\\';\nDROP VIEW v; --' AS s;\nSELECT 2;",
            Dialect::PostgreSql,
        ),
        (
            "SELECT $$;\n$$ AS s; SELECT $q$ $$; $q$;\n",
            Dialect::PostgreSql,
        ),
        ("SELECT 'a\\';\nDROP VIEW v; --' AS s;\n", Dialect::MySql),
        (
            "SELECT 1 AS \"x\"\"y;\n\";\nSELECT /* ;\n */ 2;",
            Dialect::Generic,
        ),
        ("SELECT 1 -- ;\n;\n-- done;\n", Dialect::Generic),
    ] {
        check(script, dialect);
    }
}

// ---- through the dfmv binary ------------------------------------------------------

/// A script of `SELECT <literal> AS s` statements, and the strings they
/// return.
fn select_script(rng: &mut Rng, dialect: Dialect, n: usize) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut values = vec![];
    for _ in 0..n {
        let (literal, value) = string_literal(rng, dialect);
        out.push_str(&join(
            rng,
            dialect,
            &["SELECT".into(), literal, "AS".into(), "s".into()],
        ));
        out.push_str(rng.pick(&[";\n", "; ", ";\n-- next; one\n", " /* ; */;\n"]));
        values.push(value);
    }
    (out, values)
}

/// Runs dfmv in `dir` with its catalog there, feeding `stdin` when given.
fn dfmv(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dfmv"))
        .args(args)
        .current_dir(dir)
        .env("DFMV_CATALOG", dir.join("catalog"))
        .env("HOME", dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dfmv runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("stdin written");
    }
    drop(input);
    let output = child.wait_with_output().expect("dfmv ends");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `s` of each line of nd-json output.
fn strings_of(nd_json: &str) -> Vec<String> {
    nd_json
        .lines()
        .map(|line| {
            let row: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
            row["s"]
                .as_str()
                .unwrap_or_else(|| panic!("no s in {line:?}"))
                .to_owned()
        })
        .collect()
}

#[test]
fn dfmv_runs_generated_scripts_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (ok, _, stderr) = dfmv(
        dir,
        &[
            "-q",
            "-c",
            "CREATE MATERIALIZED VIEW victim AS SELECT 1 AS x",
        ],
        None,
    );
    assert!(ok, "{stderr}");
    for (seed, dialect) in [(1, Dialect::Generic), (2, Dialect::PostgreSql)] {
        let mut rng = Rng::new(seed);
        let (body, expected) = select_script(&mut rng, dialect, 60);
        let script = match dialect {
            Dialect::PostgreSql => {
                format!("SET datafusion.sql_parser.dialect = 'PostgreSQL';\n{body}")
            }
            _ => body,
        };
        std::fs::write(dir.join("script.sql"), &script).unwrap();
        let args = ["-q", "--format", "nd-json", "-f", "script.sql"];
        let (ok, stdout, stderr) = dfmv(dir, &args, None);
        assert!(ok && stderr.is_empty(), "{script}\n{stderr}");
        assert_eq!(strings_of(&stdout), expected, "-f {script}");
        // The same statements piped to dfmv.
        let args = ["-q", "--format", "nd-json"];
        let (ok, stdout, stderr) = dfmv(dir, &args, Some(&script));
        assert!(ok && stderr.is_empty(), "{script}\n{stderr}");
        assert_eq!(strings_of(&stdout), expected, "stdin {script}");
    }
    let (ok, stdout, stderr) = dfmv(
        dir,
        &["-q", "--format", "csv", "-c", "SELECT x FROM victim"],
        None,
    );
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "x\n1\n", "the view no string dropped");
}
