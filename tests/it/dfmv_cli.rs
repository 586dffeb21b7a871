//! End-to-end tests of the `dfmv` binary: scripts, commands, the prompt
//! in a pseudo-terminal, errors and exit codes, adoption, progress.
//!
//! Each test has its own temporary folder as working directory, home
//! (so no ~/.datafusionrc is read) and catalog (`catalog/` in it).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use common::http;

const BIN: &str = env!("CARGO_BIN_EXE_dfmv");

/// A test's folder.
struct Dir {
    tmp: tempfile::TempDir,
}

/// What one run of dfmv did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Dir {
    fn new() -> Self {
        Self {
            tmp: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn join(&self, relative: &str) -> PathBuf {
        self.path().join(relative)
    }

    fn write(&self, relative: &str, content: &str) {
        let path = self.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// dfmv with `args`, run in this folder with its own catalog.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(self.path())
            .env("DFMV_CATALOG", self.join("catalog"))
            .env("HOME", self.path())
            .env_remove("RUST_LOG")
            .env_remove("DFMV_WARN_VIEW_SIZE")
            .env_remove("DFMV_PROGRESS_DELAY_MS");
        command
    }

    fn dfmv(&self, args: &[&str]) -> Run {
        let output = self.command(args).output().expect("dfmv runs");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// dfmv with `args`, which must succeed; its normalized stdout.
    fn ok(&self, args: &[&str]) -> String {
        let run = self.dfmv(args);
        assert_eq!(run.code, 0, "dfmv {args:?} failed: {run:#?}");
        normalize(&run.stdout)
    }
}

fn banner() -> String {
    format!(
        "dfmv v{} (DataFusion CLI v55.2.0)\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// Masks what changes from run to run: elapsed times, timestamps, and the
/// digits of sizes (so `3.7 KiB` reads `9.9 KiB`, keeping table widths).
fn normalize(text: &str) -> String {
    text.split_inclusive('\n').map(normalize_line).collect()
}

fn normalize_line(line: &str) -> String {
    if line.starts_with("Elapsed ") && line.trim_end().ends_with(" seconds.") {
        return "Elapsed X seconds.\n".to_owned();
    }
    let mut chars: Vec<char> = line.chars().collect();
    // "... written in 0.52 s"
    let text: String = chars.iter().collect();
    if let Some(at) = text.find(" written in ") {
        let start = text[..at].chars().count() + " written in ".len();
        let end = chars[start..]
            .iter()
            .position(|c| !(c.is_ascii_digit() || *c == '.'))
            .map_or(chars.len(), |n| start + n);
        chars.splice(start..end, ['X']);
    }
    // 2026-12-02 10:03:18 UTC
    const SHAPE: &str = "0000-00-00 00:00:00 UTC";
    const MASK: &str = "YYYY-MM-DD HH:MM:SS UTC";
    let shape: Vec<char> = SHAPE.chars().collect();
    let mut i = 0;
    while i + shape.len() <= chars.len() {
        let fits = shape.iter().zip(&chars[i..]).all(|(s, c)| match s {
            '0' => c.is_ascii_digit(),
            s => s == c,
        });
        if fits {
            chars.splice(i..i + shape.len(), MASK.chars());
            i += shape.len();
        } else {
            i += 1;
        }
    }
    // 812 B, 3.7 KiB, 1.2 GiB
    for unit in [" B", " KiB", " MiB", " GiB"] {
        let unit: Vec<char> = unit.chars().collect();
        let mut i = 0;
        while i + unit.len() <= chars.len() {
            let after = chars.get(i + unit.len());
            let ends =
                after.is_none_or(|c| c.is_whitespace() || *c == '|' || *c == ',' || *c == ')');
            if chars[i..i + unit.len()] == unit[..] && ends {
                let mut j = i;
                while j > 0 && (chars[j - 1].is_ascii_digit() || chars[j - 1] == '.') {
                    j -= 1;
                }
                if j < i && (j == 0 || !chars[j - 1].is_alphanumeric()) {
                    for c in &mut chars[j..i] {
                        if c.is_ascii_digit() {
                            *c = '9';
                        }
                    }
                }
            }
            i += 1;
        }
    }
    chars.into_iter().collect()
}

#[test]
fn normalize_masks_what_changes() {
    assert_eq!(
        normalize("Elapsed 0.012 seconds.\n"),
        "Elapsed X seconds.\n"
    );
    assert_eq!(
        normalize("REFRESH MATERIALIZED VIEW v: full, 3 rows written in 0.52 s\n"),
        "REFRESH MATERIALIZED VIEW v: full, 3 rows written in X s\n"
    );
    assert_eq!(
        normalize("| 2026-12-02 10:03:18 UTC | 3.7 KiB | 812 B |\n"),
        "| YYYY-MM-DD HH:MM:SS UTC | 9.9 KiB | 999 B |\n"
    );
}

// ---- a script, then a second process --------------------------------------

#[test]
fn script_then_refresh_and_query_in_a_second_process() {
    let dir = Dir::new();
    dir.write("src/jan.csv", "region,amount\nnorth,10\nsouth,5\nnorth,2\n");
    dir.write(
        "setup.sql",
        "-- sources and a view\n\
         CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION 'src/';\n\
         CREATE MATERIALIZED VIEW totals AS\n\
         \x20 SELECT region, count(*) AS n, sum(amount) AS total\n\
         \x20 FROM orders GROUP BY region;\n",
    );
    assert_eq!(
        dir.ok(&["-f", "setup.sql"]),
        format!(
            "{}0 row(s) fetched. \nElapsed X seconds.\n\n\
             CREATE MATERIALIZED VIEW totals: full, 2 rows written in X s\n",
            banner()
        )
    );

    // The source changes; a new process refreshes and queries the view.
    dir.write("src/feb.csv", "region,amount\neast,7\nnorth,1\n");
    let out = dir.ok(&[
        "-c",
        "SELECT * FROM totals ORDER BY region",
        "-c",
        "REFRESH MATERIALIZED VIEW totals",
        "-c",
        "SELECT * FROM totals ORDER BY region",
    ]);
    let expected = format!(
        "{}\
+--------+---+-------+
| region | n | total |
+--------+---+-------+
| north  | 2 | 12    |
| south  | 1 | 5     |
+--------+---+-------+
2 row(s) fetched. 
Elapsed X seconds.

REFRESH MATERIALIZED VIEW totals: incremental (orders: 1 file(s) appended; merged into the existing groups), 3 rows written in X s
+--------+---+-------+
| region | n | total |
+--------+---+-------+
| east   | 1 | 7     |
| north  | 3 | 13    |
| south  | 1 | 5     |
+--------+---+-------+
3 row(s) fetched. 
Elapsed X seconds.

",
        banner()
    );
    assert_eq!(out, expected);

    // The catalog is where DFMV_CATALOG says, and --catalog wins over it.
    assert!(dir.join("catalog/_matview").is_dir());
    let elsewhere = dir.join("other");
    let run = dir.dfmv(&["--catalog", elsewhere.to_str().unwrap(), "-q", "-c", "\\dm"]);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""));
    assert_eq!(run.stderr, "");
}

// ---- every statement, through -c and through -f ----------------------------

const STATEMENTS: [&str; 11] = [
    "CREATE TABLE t AS VALUES (1, 'a'), (2, 'b'), (3, 'a')",
    "CREATE MATERIALIZED VIEW v AS SELECT column2 AS k, count(*) AS n FROM t GROUP BY column2",
    "CREATE MATERIALIZED VIEW empty_v AS SELECT column1 AS x FROM t WITH NO DATA",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS v AS SELECT 1 AS one",
    "REFRESH MATERIALIZED VIEW v",
    "SELECT * FROM v ORDER BY k",
    "\\dm",
    "\\dm e*",
    "SHOW MATERIALIZED VIEWS LIKE 'v'",
    "DROP MATERIALIZED VIEW empty_v",
    "\\dm empty*",
];

fn statements_expected() -> String {
    format!(
        "{}\
0 row(s) fetched. 
Elapsed X seconds.

CREATE MATERIALIZED VIEW v: full, 2 rows written in X s
CREATE MATERIALIZED VIEW empty_v: not populated (WITH NO DATA); use REFRESH MATERIALIZED VIEW empty_v
REFRESH MATERIALIZED VIEW v: full, 2 rows written in X s
+---+---+
| k | n |
+---+---+
| a | 2 |
| b | 1 |
+---+---+
2 row(s) fetched. 
Elapsed X seconds.

+--------+---------+------+---------+------------------------+
| Schema | Name    | Rows | Size    | Last refreshed         |
+--------+---------+------+---------+------------------------+
| public | empty_v |      |         | not populated          |
| public | v       | 2    | 9.9 KiB | less than a minute ago |
+--------+---------+------+---------+------------------------+
2 row(s) fetched. 
Elapsed X seconds.

+--------+---------+------+------+----------------+
| Schema | Name    | Rows | Size | Last refreshed |
+--------+---------+------+------+----------------+
| public | empty_v |      |      | not populated  |
+--------+---------+------+------+----------------+
1 row(s) fetched. 
Elapsed X seconds.

+---------------+--------------+------------+------------------------------------------------------------+-----------+-----------+---------+-------------------------+-------------------------+-----------+-----------------+-------+--------------+------------+--------------------+
| table_catalog | table_schema | table_name | definition                                                 | populated | row_count | size    | last_refreshed          | created_at              | freshness | changed_sources | error | auto_refresh | target_lag | lag                |
+---------------+--------------+------------+------------------------------------------------------------+-----------+-----------+---------+-------------------------+-------------------------+-----------+-----------------+-------+--------------+------------+--------------------+
| datafusion    | public       | v          | SELECT column2 AS k, count(*) AS n FROM t GROUP BY column2 | true      | 2         | 9.9 KiB | YYYY-MM-DD HH:MM:SS UTC | YYYY-MM-DD HH:MM:SS UTC | unknown   | t               | NULL  | false        | NULL       | less than a minute |
+---------------+--------------+------------+------------------------------------------------------------+-----------+-----------+---------+-------------------------+-------------------------+-----------+-----------------+-------+--------------+------------+--------------------+
1 row(s) fetched. 
Elapsed X seconds.

0 row(s) fetched. 
Elapsed X seconds.

",
        banner()
    )
}

#[test]
fn every_statement_through_c() {
    let dir = Dir::new();
    let mut args = vec![];
    for statement in STATEMENTS {
        args.extend(["-c", statement]);
    }
    let run = dir.dfmv(&args);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(normalize(&run.stdout), statements_expected());
    assert_eq!(
        run.stderr,
        "NOTICE: relation \"v\" already exists, skipping\n\
         Did not find any materialized view named \"empty*\".\n"
    );
}

#[test]
fn every_statement_through_f() {
    let dir = Dir::new();
    let script: String = STATEMENTS
        .iter()
        .map(|s| {
            if s.starts_with('\\') {
                format!("{s}\n")
            } else {
                format!("{s};\n")
            }
        })
        .collect();
    dir.write("all.sql", &script);
    let run = dir.dfmv(&["-f", "all.sql"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(normalize(&run.stdout), statements_expected());
    assert_eq!(
        run.stderr,
        "NOTICE: relation \"v\" already exists, skipping\n\
         Did not find any materialized view named \"empty*\".\n"
    );
}

// ---- the prompt ---------------------------------------------------------------

#[test]
fn the_prompt_runs_multi_line_statements_and_survives_errors() {
    let dir = Dir::new();
    dir.write("src/a.csv", "k,x\na,1\nb,2\na,3\n");
    dir.ok(&[
        "-c",
        "CREATE EXTERNAL TABLE src STORED AS CSV LOCATION 'src/'",
        "-c",
        "CREATE MATERIALIZED VIEW v AS SELECT k, sum(x) AS s FROM src GROUP BY k",
    ]);
    dir.write("src/b.csv", "k,x\nc,4\n");

    let mut command = dir.command(&[]);
    command.env("TERM", "xterm");
    let options = rexpect::reader::Options::new()
        .timeout_ms(Some(60_000))
        .strip_ansi_escape_codes(true);
    let mut p = rexpect::session::spawn_with_options(command, options).expect("pty");
    p.exp_string("> ").unwrap();
    p.send_line("REFRESH MATERIALIZED").unwrap();
    p.send_line(" VIEW v;").unwrap();
    p.exp_string(
        "REFRESH MATERIALIZED VIEW v: incremental (src: 1 file(s) appended; merged into the existing groups), 3 rows written in ",
    )
        .unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("\\dm").unwrap();
    p.exp_string("| Schema | Name | Rows | Size ").unwrap();
    p.exp_string("| public | v    | 3    | ").unwrap();
    p.exp_string("1 row(s) fetched.").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("REFRESH MATERIALIZED VIEW nope;").unwrap();
    p.exp_string("Error: materialized view \"nope\" does not exist")
        .unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("SELECT count(*) AS views FROM materialized_views();")
        .unwrap();
    p.exp_string("| views |").unwrap();
    p.exp_string("| 1     |").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("\\q").unwrap();
    p.exp_eof().unwrap();
    // The prompt keeps datafusion-cli's history file.
    let history = std::fs::read_to_string(dir.join(".history")).unwrap();
    assert!(history.contains("\\dm"), "{history}");
}

// ---- bad input -------------------------------------------------------------------

/// Runs `sql` once with -c and once as a script with -f; both must fail
/// with a message containing `message` (stdout for -c, stderr for -f).
fn fails_both_ways(dir: &Dir, sql: &str, message: &str) {
    let run = dir.dfmv(&["-q", "-c", sql]);
    assert_ne!(run.code, 0, "-c {sql}: {run:#?}");
    assert!(
        run.stdout.contains(&format!("Error: {message}")),
        "-c {sql}: {run:#?}"
    );
    dir.write(
        "bad.sql",
        &format!("SELECT 1 AS before;\n{sql};\nSELECT 2 AS after;\n"),
    );
    let run = dir.dfmv(&["-q", "-f", "bad.sql"]);
    assert_ne!(run.code, 0, "-f {sql}: {run:#?}");
    assert!(
        run.stderr.contains(&format!("Error: {message}")),
        "-f {sql}: {run:#?}"
    );
    // The script went on after the error, as datafusion-cli's does.
    assert!(run.stdout.contains("| after |"), "-f {sql}: {run:#?}");
}

#[test]
fn bad_input_fails_with_a_clear_message_and_status() {
    let dir = Dir::new();
    fails_both_ways(
        &dir,
        "REFRESH MATERIALIZED VIEW",
        "SQL error: ParserError(\"Expected: identifier, found: ",
    );
    fails_both_ways(
        &dir,
        "SELEC 1",
        "SQL error: ParserError(\"Expected: an SQL statement, found: SELEC",
    );
    fails_both_ways(
        &dir,
        "REFRESH MATERIALIZED VIEW nope",
        "materialized view \"nope\" does not exist",
    );
    fails_both_ways(
        &dir,
        "CREATE EXTERNAL TABLE gone STORED AS CSV LOCATION 'missing.csv'",
        "Error during planning: No files found at file://",
    );

    // A source whose files disappeared: the table is still there, as it
    // was created (no schema is inferred again, so none is missing), and
    // lists no file, as it would in the process that created it.
    dir.write("src/a.csv", "k\n1\n");
    dir.ok(&[
        "-c",
        "CREATE EXTERNAL TABLE src STORED AS CSV LOCATION 'src/'",
        "-c",
        "CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n FROM src",
    ]);
    std::fs::remove_file(dir.join("src/a.csv")).unwrap();
    let run = dir.dfmv(&["-q", "-c", "REFRESH MATERIALIZED VIEW v"]);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:#?}");
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT n FROM v"]),
        "n\n0\n"
    );

    // Unknown backslash commands and files.
    let run = dir.dfmv(&["-q", "-c", "\\nope"]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stdout,
        "Error: '\\nope' is not a valid command, you can use '\\?' to see all commands\n"
    );
    let run = dir.dfmv(&["-q", "-f", "no-such-file.sql"]);
    assert_eq!(run.code, 2, "clap refuses it: {run:#?}");
    assert!(
        run.stderr.contains("Invalid file 'no-such-file.sql'"),
        "{run:#?}"
    );
}

#[test]
fn script_errors_name_the_line_of_the_script() {
    let dir = Dir::new();
    dir.write(
        "lines.sql",
        "SELECT 1 AS a;\n-- two\n\nSELECT 'x;\ny' AS b,\n  (1 +) AS c;\nSELECT 2 AS d;\n",
    );
    let run = dir.dfmv(&["-q", "--format", "csv", "-f", "lines.sql"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.stdout, "a\n1\nd\n2\n");
    assert_eq!(
        run.stderr,
        "Error: SQL error: ParserError(\"Expected: an expression, found: ) at Line: 6, Column: 7\")\n"
    );
}

// ---- a statement's text is the user's bytes ---------------------------------------

/// A string literal whose doubled quotes enclose what looks like statements.
const INJECTION: &str = "SELECT 'x''; DROP MATERIALIZED VIEW victim; SELECT ''y' AS s";
/// What it returns, as nd-json.
const INJECTED: &str = r#"{"s":"x'; DROP MATERIALIZED VIEW victim; SELECT 'y"}"#;
/// The same across lines, each ending with `;` inside the string.
const INJECTION_LINES: &str = "SELECT 'x'';\nDROP MATERIALIZED VIEW victim;\nSELECT ''y' AS s;\n";
const INJECTED_LINES: &str = r#"{"s":"x';\nDROP MATERIALIZED VIEW victim;\nSELECT 'y"}"#;

impl Dir {
    /// dfmv with `args` and `input` piped to it.
    fn dfmv_stdin(&self, args: &[&str], input: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("dfmv runs");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let output = child.wait_with_output().unwrap();
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    fn create_victim(&self) {
        self.ok(&[
            "-q",
            "-c",
            "CREATE MATERIALIZED VIEW victim AS SELECT 1 AS x",
        ]);
    }

    fn assert_victim_survived(&self) {
        assert_eq!(
            self.ok(&["-q", "--format", "csv", "-c", "SELECT x FROM victim"]),
            "x\n1\n"
        );
    }
}

#[test]
fn a_doubled_quote_never_ends_a_string_through_c_f_stdin_and_i() {
    let dir = Dir::new();
    dir.create_victim();
    let json = ["-q", "--format", "nd-json"];

    let run = dir.dfmv(&[&json[..], &["-c", INJECTION]].concat());
    assert_eq!((run.code, run.stdout.trim_end()), (0, INJECTED), "{run:#?}");

    let script = format!("{INJECTION};\n{INJECTION_LINES}");
    let expected = format!("{INJECTED}\n{INJECTED_LINES}\n");
    dir.write("inject.sql", &script);
    let run = dir.dfmv(&[&json[..], &["-f", "inject.sql"]].concat());
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, expected.as_str(), ""),
        "-f"
    );
    let run = dir.dfmv(&[&json[..], &["-c", "\\i inject.sql"]].concat());
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, expected.as_str(), ""),
        "\\i"
    );
    let run = dir.dfmv_stdin(&json, &script);
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, expected.as_str(), ""),
        "stdin"
    );
    dir.assert_victim_survived();
}

#[test]
fn the_prompt_waits_for_the_end_of_a_string() {
    let dir = Dir::new();
    dir.create_victim();
    let mut command = dir.command(&["--format", "nd-json"]);
    command.env("TERM", "xterm");
    let options = rexpect::reader::Options::new()
        .timeout_ms(Some(60_000))
        .strip_ansi_escape_codes(true);
    let mut p = rexpect::session::spawn_with_options(command, options).expect("pty");
    p.exp_string("> ").unwrap();
    p.send_line(&format!("{INJECTION};")).unwrap();
    p.exp_string(INJECTED).unwrap();
    p.exp_string("> ").unwrap();
    // Each line ends with `;` inside the string: the prompt waits for more.
    for line in INJECTION_LINES.lines() {
        p.send_line(line).unwrap();
    }
    p.exp_string(INJECTED_LINES).unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("SELECT count(*) AS s FROM victim;").unwrap();
    p.exp_string(r#"{"s":1}"#).unwrap();
    p.send_line("\\q").unwrap();
    p.exp_eof().unwrap();
    dir.assert_victim_survived();
}

#[test]
fn escaped_quotes_keep_their_meaning() {
    let dir = Dir::new();
    assert_eq!(
        dir.ok(&["-q", "-c", "SELECT 'O''Brien' AS n"]),
        "+---------+\n| n       |\n+---------+\n| O'Brien |\n+---------+\n"
    );
    assert_eq!(
        dir.ok(&["-q", "-c", "SELECT 1 AS \"x\"\"y\""]),
        "+-----+\n| x\"y |\n+-----+\n| 1   |\n+-----+\n"
    );
    // A materialized view keeps them too.
    dir.write(
        "quotes.sql",
        "CREATE MATERIALIZED VIEW \"m\"\"v\" AS\n  SELECT 'O''Brien' AS n, 'a;\nb' AS \"x\"\"y\";\n\
         SELECT * FROM \"m\"\"v\";\n",
    );
    assert_eq!(
        dir.ok(&["-q", "--format", "nd-json", "-f", "quotes.sql"]),
        "{\"view\":\"m\\\"v\",\"action\":\"created\",\"populated\":true,\"rows_written\":1,\"version\":1}\n\
         {\"n\":\"O'Brien\",\"x\\\"y\":\"a;\\nb\"}\n"
    );
}

#[test]
fn a_location_and_names_with_quotes_are_remembered_as_written() {
    let dir = Dir::new();
    dir.write("it's data/a.csv", "k,v\nx,1\ny,2\n");
    dir.ok(&[
        "-q",
        "-c",
        "CREATE EXTERNAL TABLE \"q\"\"t\" STORED AS CSV LOCATION 'it''s data/' \
         OPTIONS ('format.has_header' 'true')",
        "-c",
        "CREATE VIEW \"x\"\"y\" AS SELECT 'O''Brien' AS n, sum(v) AS total FROM \"q\"\"t\"",
        "-c",
        "CREATE MATERIALIZED VIEW m AS SELECT * FROM \"x\"\"y\"",
    ]);
    // A second process restores the table and the view from the catalog,
    // with no warning, and reads the files added since.
    dir.write("it's data/b.csv", "k,v\nz,4\n");
    let run = dir.dfmv(&[
        "--format",
        "csv",
        "-c",
        "SELECT * FROM \"x\"\"y\"",
        "-c",
        "SELECT * FROM m",
        "-c",
        "REFRESH MATERIALIZED VIEW m",
        "-c",
        "SELECT * FROM m",
    ]);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:#?}");
    let fetched = "1 row(s) fetched. \nElapsed X seconds.\n\n";
    assert_eq!(
        normalize(&run.stdout),
        format!(
            "{}n,total\nO'Brien,7\n{fetched}\
             n,total\nO'Brien,3\n{fetched}\
             view,mode,rows_written,version,rows_deleted,detail\n\
             m,full,1,2,1,\"changed: x\"\"y; q\"\"t: 1 file(s) appended; the view filters or computes columns \
             over its aggregate, and keeps no partial aggregates to recompute it from\"\n{fetched}\
             n,total\nO'Brien,7\n{fetched}",
            banner()
        )
    );
}

#[test]
fn drop_cascade_says_what_it_dropped() {
    let dir = Dir::new();
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW base AS SELECT 1 AS x",
        "-c",
        "CREATE VIEW \"pl\"\"ain\" AS SELECT x FROM base",
        "-c",
        "CREATE MATERIALIZED VIEW top AS SELECT x FROM \"pl\"\"ain\"",
        "-c",
        "CREATE MATERIALIZED VIEW other AS SELECT 2 AS y",
    ]);
    let run = dir.dfmv(&["-c", "DROP MATERIALIZED VIEW base CASCADE"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(
        run.stderr,
        "NOTICE: drop cascades to view \"pl\"\"ain\"\n\
         NOTICE: drop cascades to materialized view top\n"
    );
    assert_eq!(
        normalize(&run.stdout),
        format!("{}0 row(s) fetched. \nElapsed X seconds.\n\n", banner())
    );
    assert_eq!(
        dir.ok(&[
            "-q",
            "--format",
            "csv",
            "-c",
            "SELECT table_name FROM materialized_views()",
            "-c",
            "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 'pl\"ain'",
        ]),
        "table_name\nother\nn\n0\n"
    );
    // Without dependents there is nothing to say; --quiet says nothing.
    let run = dir.dfmv(&["-c", "DROP MATERIALIZED VIEW other CASCADE"]);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:#?}");
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW a AS SELECT 1 AS x",
        "-c",
        "CREATE MATERIALIZED VIEW b AS SELECT x FROM a",
    ]);
    let run = dir.dfmv(&["-q", "-c", "DROP MATERIALIZED VIEW a CASCADE"]);
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, "", "")
    );
}

#[test]
fn a_catalog_location_that_cannot_be_one_says_why() {
    let dir = Dir::new();
    dir.write("afile", "not a catalog");
    let file = dir.join("afile").display().to_string();
    let under = dir.join("afile/sub").display().to_string();
    let url = format!("file://{file}");
    let cases = [
        (
            "bogus://x/y",
            "Error: catalog location \"bogus://x/y\" has an unknown scheme \"bogus\"; \
             use a folder or a URL of s3://, gs://, gcs://, oss://, cos://, http(s):// or memory://\n"
                .to_owned(),
        ),
        (
            file.as_str(),
            format!("Error: catalog location \"{file}\" is not a folder\n"),
        ),
        (
            url.as_str(),
            format!("Error: catalog location \"{url}\" is not a folder\n"),
        ),
        (
            under.as_str(),
            format!("Error: catalog location \"{under}\" is not a folder: \"{file}\" is a file\n"),
        ),
    ];
    for (catalog, expected) in &cases {
        for args in [
            &["--catalog", catalog, "-q", "-c", "SELECT 1"][..],
            &["--catalog", catalog, "recover"][..],
        ] {
            let run = dir.dfmv(args);
            assert_eq!(
                (run.code, run.stdout.as_str()),
                (1, expected.as_str()),
                "{args:?}"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a catalog");
    // memory:// is a catalog for one process.
    assert_eq!(
        dir.ok(&[
            "--catalog",
            "memory:///c",
            "-q",
            "--format",
            "csv",
            "-c",
            "SELECT 1 AS one"
        ]),
        "one\n1\n"
    );
}

// ---- adoption ---------------------------------------------------------------------

#[test]
fn adopts_the_old_layout_and_refreshes_in_a_new_process() {
    let dir = Dir::new();
    dir.write(
        "legacy/data/orders.csv",
        "day,amount\n2026-01-01,10\n2026-01-01,5\n2026-01-02,7\n",
    );
    // Make the Parquet data the old way (COPY ... TO), with a scratch catalog.
    dir.ok(&[
        "--catalog",
        dir.join("scratch").to_str().unwrap(),
        "-q",
        "-c",
        "CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION 'legacy/data/orders.csv'",
        "-c",
        "COPY (SELECT day, sum(amount) AS total FROM orders GROUP BY day ORDER BY day) \
         TO 'legacy/views/daily/part-0.parquet' STORED AS PARQUET",
    ]);
    dir.write(
        "legacy/state.sql",
        "-- the old set-up script\n\
         CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION 'data/orders.csv';\n\
         CREATE EXTERNAL TABLE daily STORED AS PARQUET LOCATION 'views/daily/';\n",
    );
    dir.write(
        "legacy/views/manifest.json",
        r#"{
  "views": {
    "daily": {
      "sql": "SELECT day, sum(amount) AS total FROM orders GROUP BY day",
      "parquet_path": "daily",
      "created_at": "2026-01-03T00:00:00Z",
      "last_refreshed": "2026-01-03T00:00:00Z"
    },
    "stale": {
      "sql": "SELECT count(*) AS n FROM orders",
      "parquet_path": "stale.parquet",
      "created_at": "2026-01-03T00:00:00Z",
      "last_refreshed": "2026-01-03T00:00:00Z"
    }
  }
}"#,
    );
    let run = dir.dfmv(&["adopt", "legacy"]);
    assert_eq!(run.code, 1, "one view was not adopted: {run:#?}");
    assert_eq!(
        run.stdout,
        format!(
            "state.sql: 1 statement run; skipped daily (adopted as a materialized view)\n\
             adopted daily (2 rows)\n\
             not adopted stale: Parquet data not found: {}\n\
             1 of 2 views adopted, 1 not adopted\n",
            dir.join("legacy/views/stale.parquet").display()
        )
    );
    assert_eq!(run.stderr, "");

    // Adopting again changes nothing and fails no more than before.
    let run = dir.dfmv(&["adopt", "legacy"]);
    assert_eq!(
        run.stdout,
        format!(
            "state.sql: 0 statements run; skipped orders (already exists), daily (adopted as a materialized view)\n\
             adopted daily (already in the catalog)\n\
             not adopted stale: Parquet data not found: {}\n\
             1 of 2 views adopted, 1 not adopted\n",
            dir.join("legacy/views/stale.parquet").display()
        ),
        "{run:#?}"
    );

    // A new process, in another working directory: the adopted view has the
    // old data, and refreshes from the remembered source.
    std::fs::write(
        dir.join("legacy/data/orders.csv"),
        "day,amount\n2026-01-01,10\n2026-01-01,5\n2026-01-02,7\n2026-01-03,1\n",
    )
    .unwrap();
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let output = dir
        .command(&[
            "-q",
            "--format",
            "csv",
            "-c",
            "SELECT * FROM daily ORDER BY day",
            "-c",
            "REFRESH MATERIALIZED VIEW daily",
            "-c",
            "SELECT * FROM daily ORDER BY day",
        ])
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:#?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "day,total\n2026-01-01,15\n2026-01-02,7\n\
         view,mode,rows_written,version,rows_deleted,detail\n\
         daily,full,3,2,2,cannot tell whether orders changed\n\
         day,total\n2026-01-01,15\n2026-01-02,7\n2026-01-03,1\n"
    );
}

#[test]
fn adoption_reports_views_it_cannot_take() {
    let dir = Dir::new();
    dir.write("legacy/data/t.csv", "a,b\n1,x\n");
    dir.ok(&[
        "--catalog",
        dir.join("scratch").to_str().unwrap(),
        "-q",
        "-c",
        "COPY (SELECT 1 AS other) TO 'legacy/views/wrong.parquet' STORED AS PARQUET",
    ]);
    dir.write(
        "legacy/state.sql",
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'data/t.csv';\n\
         \n-- a view\nCREATE VIEW w AS SELEC 1;\n",
    );
    dir.write(
        "legacy/views/manifest.json",
        r#"{"views": {
            "bad_sql": {"sql": "SELECT a FRM t", "parquet_path": "wrong.parquet"},
            "no_path": {"sql": "SELECT a FROM t"},
            "two": {"sql": "SELECT a FROM t; DROP TABLE t", "parquet_path": "wrong.parquet"},
            "wrong": {"sql": "SELECT a FROM t", "parquet_path": "wrong.parquet"}
        }}"#,
    );
    let run = dir.dfmv(&["-q", "adopt", "legacy"]);
    assert_eq!(run.code, 1, "{run:#?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    // Syntax errors are located in the user's text: state.sql's line, and
    // the column in the manifest's query.
    assert_eq!(
        lines[0],
        "state.sql: SQL error: ParserError(\"Expected: SELECT, VALUES, or a subquery in the query body, found: SELEC at Line: 4, Column: 18\")"
    );
    assert_eq!(lines[1], "state.sql: 1 statement run, 1 failed");
    assert_eq!(
        lines[2],
        "not adopted bad_sql: SQL error: ParserError(\"Expected: end of statement, found: t at Line: 1, Column: 14\")"
    );
    assert_eq!(
        lines[3],
        "not adopted no_path: no \"parquet_path\" in the manifest"
    );
    assert_eq!(
        lines[4],
        "not adopted two: the query must be a single SELECT"
    );
    assert!(
        lines[5].starts_with("not adopted wrong: the columns of ")
            && lines[5].contains("(other Int64) are not those of the view's query (a Int64)"),
        "{lines:?}"
    );
    assert_eq!(lines[6], "0 of 4 views adopted, 4 not adopted");
    // The second statement of "two" did not run.
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT a FROM t"]),
        "a\n1\n"
    );
    // Nothing half-adopted is left behind.
    assert_eq!(dir.ok(&["-q", "-c", "\\dm"]), "");
}

/// A legacy folder whose view `n` counted the rows of `it's data/` when
/// it held only a.csv; b.csv came later. state.sql also holds what adopting
/// must not run unasked (a COPY that would overwrite the view's data, a
/// DROP).
fn legacy_with_a_stale_count(dir: &Dir) {
    dir.write("legacy/it's data/a.csv", "x\n1\n2\n");
    dir.ok(&[
        "--catalog",
        dir.join("scratch").to_str().unwrap(),
        "-q",
        "-c",
        "CREATE EXTERNAL TABLE src STORED AS CSV LOCATION 'legacy/it''s data/'",
        "-c",
        "COPY (SELECT count(*) AS n FROM src) TO 'legacy/views/n.parquet' STORED AS PARQUET",
    ]);
    dir.write("legacy/it's data/b.csv", "x\n3\n");
    dir.write(
        "legacy/state.sql",
        "-- set-up; the old way\n\
         CREATE EXTERNAL TABLE src STORED AS CSV /* ; */ LOCATION 'it''s data/';\n\
         COPY (SELECT count(*) AS n FROM src)\n  TO 'views/n.parquet' STORED AS PARQUET;\n\
         DROP TABLE IF EXISTS old_src;\n",
    );
    dir.write(
        "legacy/views/manifest.json",
        r#"{"views": {"n": {"sql": "SELECT count(*) AS n FROM src", "parquet_path": "n.parquet"}}}"#,
    );
}

#[test]
fn adopt_runs_only_definitions_and_adopted_views_start_unknown() {
    let dir = Dir::new();
    legacy_with_a_stale_count(&dir);
    let run = dir.dfmv(&["adopt", "legacy"]);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:#?}");
    let not_run = "state.sql: not run (adopting runs only CREATE EXTERNAL TABLE, CREATE VIEW and SET; --run-all runs everything):";
    assert_eq!(
        run.stdout,
        format!(
            "{not_run} COPY (SELECT count(*) AS n FROM src) TO 'views/n.parquet' STORED AS PARQUET\n\
             {not_run} DROP TABLE IF EXISTS old_src\n\
             state.sql: 1 statement run, 2 not run\n\
             adopted n (1 row)\n\
             1 of 1 view adopted\n"
        )
    );
    // The COPY did not run: the view holds the old count, and nothing says
    // it is fresh; its first REFRESH is full and counts b.csv too.
    let run = dir.dfmv(&[
        "-q",
        "--format",
        "csv",
        "-c",
        "SELECT n FROM n",
        "-c",
        "SELECT freshness FROM materialized_views()",
    ]);
    assert_eq!(run.stdout, "n\n2\nfreshness\nunknown\n", "{run:#?}");
    let run = dir.dfmv(&["-c", "REFRESH MATERIALIZED VIEW n"]);
    assert_eq!(
        normalize(&run.stdout),
        format!(
            "{}REFRESH MATERIALIZED VIEW n: full, 1 row written in X s\n",
            banner()
        ),
        "{run:#?}"
    );
    let run = dir.dfmv(&[
        "-q",
        "--format",
        "csv",
        "-c",
        "SELECT n FROM n",
        "-c",
        "SELECT freshness FROM materialized_views()",
        "-c",
        "REFRESH MATERIALIZED VIEW n",
    ]);
    assert_eq!(
        run.stdout,
        "n\n3\nfreshness\nfresh\n\
         view,mode,rows_written,version,rows_deleted,detail\n\
         n,no_op,0,2,0,sources unchanged\n",
        "{run:#?}"
    );
}

#[test]
fn adopt_run_all_runs_every_statement_of_state_sql() {
    let dir = Dir::new();
    legacy_with_a_stale_count(&dir);
    // Run in the folder, where its relative COPY target means what it meant.
    let output = dir
        .command(&["-q", "adopt", "--run-all", "."])
        .current_dir(dir.join("legacy"))
        .output()
        .unwrap();
    let run = Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (
            0,
            "state.sql: 3 statements run\nadopted n (1 row)\n1 of 1 view adopted\n"
        ),
        "{run:#?}"
    );
    // The COPY ran first and rewrote the data adopted.
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT n FROM n"]),
        "n\n3\n"
    );
}

// ---- progress and quiet ------------------------------------------------------------

/// A view that takes a while to compute in a debug build.
const SLOW_VIEW: &str = "CREATE MATERIALIZED VIEW slow AS \
    SELECT value AS v, value * 2 AS w FROM generate_series(1, 3000000)";

#[test]
fn no_progress_indicator_when_piped_and_quiet_prints_only_results() {
    let dir = Dir::new();
    let run = dir.dfmv(&["-c", SLOW_VIEW, "-c", "REFRESH MATERIALIZED VIEW slow"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(
        normalize(&run.stdout),
        format!(
            "{}CREATE MATERIALIZED VIEW slow: full, 3000000 rows written in X s\n\
             REFRESH MATERIALIZED VIEW slow: full, 3000000 rows written in X s\n",
            banner()
        )
    );
    assert_eq!(run.stderr, "", "no indicator, no escape codes");

    let run = dir.dfmv(&[
        "--quiet",
        "-c",
        "REFRESH MATERIALIZED VIEW slow",
        "-c",
        "SELECT count(*) AS n FROM slow",
        "-c",
        "DROP MATERIALIZED VIEW slow",
    ]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(
        run.stdout,
        "+---------+\n| n       |\n+---------+\n| 3000000 |\n+---------+\n"
    );
    assert_eq!(run.stderr, "");
}

#[test]
fn progress_indicator_on_a_terminal() {
    let dir = Dir::new();
    let mut command = dir.command(&["-c", SLOW_VIEW]);
    // Shown from the first report (at once), however fast the machine and
    // the build: no race with the end of the work.
    command
        .env("TERM", "xterm")
        .env("DFMV_PROGRESS_DELAY_MS", "0");
    let options = rexpect::reader::Options::new()
        .timeout_ms(Some(120_000))
        .strip_ansi_escape_codes(true);
    let mut p = rexpect::session::spawn_with_options(command, options).expect("pty");
    p.exp_string("slow: ").unwrap();
    p.exp_string(" rows so far, ").unwrap();
    let rest = p.exp_eof().unwrap();
    assert!(
        rest.contains("CREATE MATERIALIZED VIEW slow: full, 3000000 rows written in "),
        "{rest}"
    );
}

#[test]
fn large_views_are_warned_about() {
    let dir = Dir::new();
    let run = dir
        .command(&[
            "-q",
            "-c",
            "CREATE MATERIALIZED VIEW v AS SELECT value FROM generate_series(1, 1000)",
        ])
        .env("DFMV_WARN_VIEW_SIZE", "1k")
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:#?}");
    let stderr = normalize(&String::from_utf8_lossy(&run.stderr));
    assert_eq!(
        stderr,
        "Warning: materialized view v holds 9.9 KiB of data (more than 9.9 KiB)\n"
    );
}

// ---- the README's demo -------------------------------------------------------------

#[test]
fn the_demo_script_runs_and_runs_again() {
    let dir = Dir::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    std::os::unix::fs::symlink(examples, dir.join("examples")).unwrap();
    for _ in 0..2 {
        let run = dir.dfmv(&["-q", "--format", "csv", "-f", "examples/demo.sql"]);
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:#?}");
        let before = "region,orders,total\n\
                      east,2,460.0\nnorth,3,250.25\nsouth,2,100.49\nwest,1,65.75\n";
        let after = "region,orders,total\n\
                     east,3,559.9\nnorth,4,305.25\nsouth,3,230.74\nwest,3,318.25\n";
        // CREATE and REFRESH print their result rows (CSV: a header and
        // a row each); the first run creates, a later one replaces.
        let mut lines = run.stdout.lines();
        let mut rest = vec![];
        let mut results = vec![];
        while let Some(line) = lines.next() {
            if line.starts_with("view,action,") || line.starts_with("view,mode,") {
                results.push(lines.next().unwrap_or_default().to_string());
            } else {
                rest.push(line);
            }
        }
        let rest = rest.join("\n") + "\n";
        let expected = format!("count\n8\ncount\n0\n{before}count\n5\n{before}{after}");
        assert!(rest.starts_with(&expected), "{}", run.stdout);
        assert_eq!(results.len(), 2, "{}", run.stdout);
        assert!(
            results[0].starts_with("demo_sales_by_region,created,true,4,")
                || results[0].starts_with("demo_sales_by_region,replaced,true,4,"),
            "{}",
            run.stdout
        );
        assert!(
            results[1].starts_with("demo_sales_by_region,incremental,4,"),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout.contains("public,demo_sales_by_region,4,"),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn recover_rebuilds_a_lost_log() {
    let dir = Dir::new();
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW kept AS SELECT 1 AS x UNION ALL SELECT 2",
    ]);
    std::fs::remove_dir_all(dir.join("catalog/_matview")).unwrap();
    let run = dir.dfmv(&["recover"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(
        run.stdout,
        format!(
            "recovered catalog {} as version 1\n  view datafusion.public.kept (2 rows)\n  not recovered: the tables and views the catalog remembered: no version of the log is readable; create them again (views dropped within the retention window may also come back)\n",
            dir.join("catalog").display()
        )
    );
    let run = dir.dfmv(&["-q", "-c", "SELECT sum(x) AS s FROM kept"]);
    assert_eq!(
        run.stdout, "+---+\n| s |\n+---+\n| 3 |\n+---+\n",
        "{run:#?}"
    );
    // Healthy now: recover says so and adds no version.
    let run = dir.dfmv(&["recover"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(
        run.stdout,
        format!(
            "catalog {} is readable at version 1: nothing to recover\n",
            dir.join("catalog").display()
        )
    );
    assert!(
        !dir.join("catalog/_matview/log/00000000000000000002.json")
            .exists()
    );
    // A mistyped location holds no catalog, and recover does not make one.
    let run = dir.dfmv(&["--catalog", "catalgo", "recover"]);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains("holds no catalog"), "{run:#?}");
    assert!(!dir.join("catalgo/_matview").exists());
}

#[test]
fn a_gap_in_the_log_is_named_and_never_committed_over() {
    let dir = Dir::new();
    for sql in [
        "CREATE MATERIALIZED VIEW a AS SELECT 1 AS x",
        "CREATE MATERIALIZED VIEW b AS SELECT 2 AS x",
        "CREATE MATERIALIZED VIEW c AS SELECT 3 AS x",
    ] {
        dir.ok(&["-q", "-c", sql]);
    }
    let log = dir.join("catalog/_matview/log");
    let mut versions: Vec<String> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort();
    let (before, middle) = (&versions[versions.len() - 3], &versions[versions.len() - 2]);
    std::fs::remove_file(log.join(middle)).unwrap();
    // The pointer lags behind the gap, as a background write may leave it.
    let before: u64 = before.trim_end_matches(".json").parse().unwrap();
    std::fs::write(
        dir.join("catalog/_matview/_latest.json"),
        format!(r#"{{"version":{before}}}"#),
    )
    .unwrap();
    let run = dir.dfmv(&["-q", "-c", "CREATE MATERIALIZED VIEW d AS SELECT 4 AS x"]);
    assert_ne!(run.code, 0, "{run:#?}");
    let absolute = std::fs::canonicalize(&log).unwrap();
    assert!(
        run.stdout
            .contains(&format!("{}/{middle} is missing", absolute.display()))
            && run.stdout.contains("dfmv recover"),
        "{run:#?}"
    );
    assert_eq!(
        std::fs::read_dir(&log).unwrap().count(),
        versions.len() - 1,
        "something was committed"
    );
    // recover rebuilds past the gap; every view is there.
    dir.ok(&["recover"]);
    let run = dir.dfmv(&[
        "-q",
        "--format",
        "csv",
        "-c",
        "SELECT (SELECT x FROM a) + (SELECT x FROM b) + (SELECT x FROM c) AS s",
    ]);
    assert_eq!(run.stdout, "s\n6\n", "{run:#?}");
}

#[test]
fn a_view_named_like_a_file_in_the_folder_is_not_taken() {
    let dir = Dir::new();
    dir.write("zz.csv", "a\n1\n");
    // datafusion-cli's dynamic file catalog reads `"zz.csv"` as the file...
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT a FROM \"zz.csv\""]),
        "a\n1\n"
    );
    // ...but the name is free for a view, which then wins over the file.
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW \"zz.csv\" AS SELECT 2 AS b",
    ]);
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT b FROM \"zz.csv\""]),
        "b\n2\n"
    );
}

#[test]
fn empty_and_control_character_names_are_rejected() {
    let dir = Dir::new();
    let run = dir.dfmv(&["-q", "-c", "CREATE MATERIALIZED VIEW \"\" AS SELECT 1"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(
        run.stdout,
        "Error: zero-length delimited identifier at or near \"\"\"\"\n"
    );
    let run = dir.dfmv(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW \"a\u{1}b\" AS SELECT 1",
    ]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(
        run.stdout,
        "Error: invalid character U+0001 in identifier \"a\\u{1}b\"\n"
    );
    assert_eq!(
        dir.ok(&[
            "-q",
            "--format",
            "csv",
            "-c",
            "SELECT count(*) AS n FROM materialized_views()"
        ]),
        "n\n0\n"
    );
}

#[test]
fn dm_lists_every_view_whatever_maxrows_says() {
    let dir = Dir::new();
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW a AS SELECT 1 AS x",
        "-c",
        "CREATE MATERIALIZED VIEW b AS SELECT 2 AS x",
        "-c",
        "CREATE MATERIALIZED VIEW c AS SELECT 3 AS x",
    ]);
    // The table format is the one --maxrows cuts.
    let out = dir.ok(&["-q", "--maxrows", "1", "-c", "\\dm"]);
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("| public | "))
        .map(|l| l.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(names, ["a", "b", "c"], "{out}");
    assert!(!out.contains("| . "), "{out}");
    // --maxrows still limits a query.
    let out = dir.ok(&[
        "-q",
        "--maxrows",
        "1",
        "-c",
        "SELECT x FROM a UNION ALL SELECT x FROM a",
    ]);
    assert_eq!(out.matches("| 1 |").count(), 1, "{out}");
    assert!(out.contains("| . |"), "{out}");
}

#[test]
fn dm_numbers_are_numbers_in_machine_formats() {
    let dir = Dir::new();
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW a AS SELECT 1 AS x UNION ALL SELECT 2",
        "-c",
        "CREATE MATERIALIZED VIEW b AS SELECT 1 AS x WITH NO DATA",
    ]);
    let out = dir.ok(&["-q", "--format", "nd-json", "-c", "\\dm"]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows[0]["Name"], "a");
    assert_eq!(rows[0]["Rows"], 2);
    assert!(rows[0]["Size"].as_u64().is_some_and(|n| n > 0), "{out}");
    assert_eq!(
        rows[1],
        serde_json::json!({"Schema": "public", "Name": "b"})
    );
}

#[test]
fn create_and_refresh_print_rows_in_machine_formats() {
    let dir = Dir::new();
    let out = dir.ok(&[
        "-q",
        "--format",
        "nd-json",
        "-c",
        "CREATE MATERIALIZED VIEW a AS SELECT 1 AS x UNION ALL SELECT 2",
        "-c",
        "CREATE MATERIALIZED VIEW IF NOT EXISTS a AS SELECT 1 AS x",
        "-c",
        "CREATE MATERIALIZED VIEW b AS SELECT x FROM a WITH NO DATA",
        "-c",
        "REFRESH MATERIALIZED VIEW b",
        "-c",
        "REFRESH MATERIALIZED VIEW b",
    ]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    let refresh = |view: &str, mode: &str, rows: u64, version: u64, detail: &str| {
        serde_json::json!({"view": view, "mode": mode, "rows_written": rows,
            "version": version, "rows_deleted": 0, "detail": detail})
    };
    // CREATE: what it did; rows_written is null (left out) when not
    // populated.
    assert_eq!(
        rows,
        [
            serde_json::json!({"view": "a", "action": "created", "populated": true,
                "rows_written": 2, "version": 1}),
            serde_json::json!({"view": "a", "action": "skipped", "populated": false,
                "version": 1}),
            serde_json::json!({"view": "b", "action": "created", "populated": false,
                "version": 1}),
            refresh("b", "full", 2, 2, "first refresh"),
            refresh("b", "no_op", 0, 2, "sources unchanged"),
        ],
        "{out}"
    );
    // CSV: a header and one row a statement; the table format keeps the
    // sentence.
    let out = dir.ok(&[
        "-q",
        "--format",
        "csv",
        "-c",
        "REFRESH MATERIALIZED VIEW a FULL",
    ]);
    assert_eq!(
        out,
        "view,mode,rows_written,version,rows_deleted,detail\na,full,2,2,2,FULL requested\n"
    );
    let out = dir.ok(&["-c", "REFRESH MATERIALIZED VIEW a"]);
    assert!(
        out.contains("REFRESH MATERIALIZED VIEW a: no_op (sources unchanged) in "),
        "{out}"
    );
}

/// Runs `command` as a user who may not write what this process made:
/// itself when it is not root (file modes bind it), else `nobody` through
/// `setpriv` (root ignores file modes), with a copy of dfmv that user may
/// run when the build folder is closed to it.
fn as_other_user(dir: &Dir, command: Command) -> Command {
    let uid = Command::new("id").arg("-u").output().expect("id runs");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return command;
    }
    let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let runs = |bin: &Path| {
        Command::new("setpriv")
            .args(nobody)
            .arg(bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut bin = PathBuf::from(command.get_program());
    if !runs(&bin) {
        let copy = dir.join("dfmv-copy");
        std::fs::copy(&bin, &copy).unwrap();
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        bin = copy;
        assert!(runs(&bin), "setpriv cannot run dfmv as nobody");
    }
    let mut other = Command::new("setpriv");
    other.args(nobody).arg(bin).args(command.get_args());
    other.current_dir(command.get_current_dir().unwrap());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => other.env(key, value),
            None => other.env_remove(key),
        };
    }
    other
}

#[test]
fn a_read_only_catalog_folder_serves_queries_and_refuses_changes() {
    let dir = Dir::new();
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW v AS SELECT 1 AS x",
        "-c",
        "CREATE VIEW p AS SELECT 2 AS y",
    ]);
    let catalog = dir.join("catalog");
    let listing = |path: &Path| -> Vec<PathBuf> {
        let mut all = vec![];
        let mut stack = vec![path.to_path_buf()];
        while let Some(p) = stack.pop() {
            all.push(p.clone());
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            }
        }
        all.sort();
        all
    };
    let before = listing(&catalog);
    let set_mode = |path: &Path, dirs: u32, files: u32| {
        for p in listing(path) {
            let mode = if p.is_dir() { dirs } else { files };
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        }
    };
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    set_mode(&catalog, 0o555, 0o444);
    let run = |args: &[&str]| {
        let output = as_other_user(&dir, dir.command(args)).output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (code, out) = run(&[
        "-q",
        "--format",
        "csv",
        "-c",
        "SELECT x FROM v",
        "-c",
        "SELECT y FROM p",
        "-c",
        "SHOW MATERIALIZED VIEWS",
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("x\n1\ny\n2\n"), "{out}");
    let location = catalog.display().to_string();
    for (statement, command) in [
        (
            "REFRESH MATERIALIZED VIEW v FULL",
            "REFRESH MATERIALIZED VIEW",
        ),
        ("DROP MATERIALIZED VIEW v", "DROP MATERIALIZED VIEW"),
        (
            "CREATE MATERIALIZED VIEW w AS SELECT 1 AS z",
            "CREATE MATERIALIZED VIEW",
        ),
        ("DROP VIEW p", "DROP VIEW"),
    ] {
        let (code, out) = run(&["-q", "-c", statement]);
        assert_eq!(code, Some(1), "{statement}: {out}");
        assert!(
            out.starts_with(&format!(
                "Error: cannot execute {command}: catalog \"{location}\" is read-only\nDETAIL: "
            )),
            "{statement}: {out}"
        );
        assert!(
            out.contains("Permission denied")
                && out.ends_with(
                    "\nHINT: Open a catalog you may write to; queries of this one still work.\n"
                ),
            "{statement}: {out}"
        );
    }
    set_mode(&catalog, 0o755, 0o644);
    assert_eq!(listing(&catalog), before, "the catalog changed");
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT x FROM v"]),
        "x\n1\n"
    );
}

#[test]
fn a_corrupt_file_of_a_view_is_named_with_what_to_do() {
    let dir = Dir::new();
    dir.ok(&[
        "-q",
        "-c",
        "CREATE MATERIALIZED VIEW \"My W\" AS SELECT v, 'str' || v AS s \
         FROM generate_series(1, 100000) t(v)",
        "-c",
        "CREATE VIEW p AS SELECT * FROM \"My W\"",
    ]);
    let mut files = vec![];
    let mut stack = vec![dir.join("catalog")];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if p.extension().is_some_and(|e| e == "parquet") {
            files.push(p);
        }
    }
    assert!(!files.is_empty());
    // Garbles the data pages, leaving the footer: the scan fails while
    // decoding, with an error that names no file.
    for file in &files {
        let mut bytes = std::fs::read(file).unwrap();
        let n = bytes.len();
        for b in &mut bytes[n / 10..n / 2] {
            *b ^= 0x5a;
        }
        std::fs::write(file, bytes).unwrap();
    }
    // Through a plain view too.
    let run = dir.dfmv(&["-q", "-c", "SELECT sum(v), max(s) FROM p"]);
    assert_eq!(run.code, 1, "{run:#?}");
    let (first, rest) = run.stdout.split_once('\n').unwrap();
    assert!(
        first.starts_with("Error: ") && !first.contains(".parquet"),
        "{run:#?}"
    );
    let named = files.iter().find(|f| {
        rest.contains(&format!(
            "DETAIL: file {} of materialized view \"My W\" cannot be read: ",
            f.display()
        ))
    });
    assert!(named.is_some(), "{run:#?}");
    assert!(
        rest.ends_with(
            "\nHINT: REFRESH MATERIALIZED VIEW \"My W\" FULL writes it again from its sources.\n"
        ),
        "{run:#?}"
    );
    // Which is what repairs it.
    dir.ok(&["-q", "-c", "REFRESH MATERIALIZED VIEW \"My W\" FULL"]);
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT sum(v) AS s FROM p"]),
        "s\n5000050000\n"
    );
}

/// A file added to a remembered table with another type for a column:
/// the query fails naming the file and the column, and the table stays.
#[test]
fn a_source_file_of_another_type_is_named_with_what_to_do() {
    let dir = Dir::new();
    let folder = dir.join("t");
    dir.ok(&[
        "-q",
        "-c",
        &format!(
            "COPY (SELECT 1 AS k, 10 AS c) TO '{}/a.parquet'",
            folder.display()
        ),
        "-c",
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}/'",
            folder.display()
        ),
    ]);
    dir.ok(&[
        "-q",
        "-c",
        &format!(
            "COPY (SELECT 2 AS k, 'x' AS c) TO '{}/b.parquet'",
            folder.display()
        ),
    ]);
    let run = dir.dfmv(&["-q", "-c", "SELECT sum(c) FROM t"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains(&format!(
            "\nDETAIL: file file://{}/b.parquet of table \"t\" has column \"c\" as Utf8",
            folder.display()
        )) && run.stdout.contains(
            "but the table reads it as Int64.\nHINT: Correct or remove the file, or re-create the table"
        ),
        "{run:#?}"
    );
    std::fs::remove_file(folder.join("b.parquet")).unwrap();
    assert_eq!(
        dir.ok(&["-q", "--format", "csv", "-c", "SELECT sum(c) AS s FROM t"]),
        "s\n10\n"
    );
}

// ---- LOCATION '/dev/stdin', as in datafusion-cli ----------------------------

#[test]
fn a_table_over_piped_data_feeds_a_view_and_is_not_remembered() {
    let dir = Dir::new();
    let run = dir.dfmv_stdin(
        &[
            "-q",
            "--format",
            "csv",
            "-c",
            "CREATE EXTERNAL TABLE piped STORED AS CSV LOCATION '/dev/stdin'",
            "-c",
            "CREATE MATERIALIZED VIEW from_pipe AS SELECT region, sum(amount) AS total FROM piped GROUP BY region",
            "-c",
            "SELECT * FROM from_pipe ORDER BY region",
            "-c",
            // Read once, kept for the session: a second table in the same
            // format sees the same data; another format is refused.
            "CREATE EXTERNAL TABLE again STORED AS CSV LOCATION '/dev/stdin'",
            "-c",
            "SELECT count(*) AS n FROM again",
            "-c",
            "CREATE EXTERNAL TABLE as_json STORED AS JSON LOCATION '/dev/stdin'",
        ],
        "region,amount\nnorth,1.5\nsouth,2\nnorth,3\n",
    );
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout
            .contains("view,action,populated,rows_written,version\nfrom_pipe,created,true,2,"),
        "{run:#?}"
    );
    assert!(
        run.stdout
            .contains("region,total\nnorth,4.5\nsouth,2.0\nn\n3\n"),
        "{run:#?}"
    );
    assert!(
        run.stdout.contains(
            "Error: Execution error: standard input was read as stdin.csv by an earlier \
             statement and can be read only once; tables over /dev/stdin in one session \
             must all be STORED AS the same format"
        ),
        "{run:#?}"
    );
    // A later process has the view, and no broken table to restore.
    let run = dir.dfmv(&[
        "-q",
        "--format",
        "csv",
        "-c",
        "SELECT * FROM from_pipe ORDER BY region",
    ]);
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (0, "region,total\nnorth,4.5\nsouth,2.0\n", ""),
        "{run:#?}"
    );
    let run = dir.dfmv(&["-q", "-c", "SELECT * FROM piped"]);
    assert!(
        run.stdout
            .contains("table 'datafusion.public.piped' not found"),
        "{run:#?}"
    );
}

#[test]
fn stdin_that_carries_the_sql_cannot_carry_table_data() {
    let dir = Dir::new();
    let run = dir.dfmv_stdin(
        &["-q"],
        "CREATE EXTERNAL TABLE piped STORED AS CSV LOCATION '/dev/stdin';\n",
    );
    assert!(
        run.stderr.contains(
            "standard input carries this session's SQL, so it cannot also carry table data"
        ),
        "{run:#?}"
    );
}

#[test]
fn migrate_moves_a_catalog_of_the_previous_build_once() {
    let dir = Dir::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    common::copy_dir(&fixture.join("format1-catalog"), &dir.join("catalog"));
    // The remembered external table's location is relative to where dfmv runs.
    common::copy_dir(
        &fixture.join("format1-source"),
        &dir.join("tests/data/format1-source"),
    );
    let catalog = std::fs::canonicalize(dir.join("catalog")).unwrap();
    let run = dir.dfmv(&["migrate"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(
        run.stdout,
        format!(
            "catalog {} moved to format {} at version 10\n",
            catalog.display(),
            datafusion_matview::spec::MANIFEST_FORMAT
        )
    );
    let run = dir.dfmv(&["migrate"]);
    assert_eq!(
        run.stdout,
        format!(
            "catalog {} is already in format 2 or later: nothing to migrate\n",
            catalog.display()
        )
    );
    assert_eq!(
        dir.ok(&[
            "-q",
            "--format",
            "csv",
            "-c",
            "SELECT day, total FROM daily ORDER BY day",
            "-c",
            "SELECT * FROM recent ORDER BY day",
        ]),
        "day,total\n2026-01-01,15\n2026-01-02,7\n2026-01-03,1\n\
         day,total\n2026-01-02,7\n2026-01-03,1\n"
    );
    let run = dir.dfmv(&["-c", "SELECT 1", "-q", "migrate"]);
    assert_ne!(run.code, 0);
    assert!(run.stdout.contains("migrate runs alone"), "{run:#?}");
}

// ---- dfmv serve --------------------------------------------------------------

/// Waits for a job of `dfmv serve` to finish; its description.
fn wait_job(addr: &str, job: &serde_json::Value) -> serde_json::Value {
    let body = serde_json::json!({ "job_id": job["job_id"] }).to_string();
    for _ in 0..600 {
        let (status, state) = http(addr, "POST", "/v1/jobs/describe", &body);
        assert_eq!(status, 200, "{state}");
        if state["job_state"] != "IN_PROGRESS" {
            return state;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("job {job} did not finish in 30 s");
}

#[test]
fn serve_answers_rest_over_the_remembered_catalog_and_stops_on_sigterm() {
    use std::io::BufRead;
    use std::process::Stdio;
    let dir = Dir::new();
    dir.write("src/jan.csv", "region,amount\nnorth,10\nsouth,5\nnorth,2\n");
    dir.ok(&[
        "-q",
        "-c",
        "CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION 'src/'",
        "-c",
        "CREATE MATERIALIZED VIEW totals AS SELECT region, sum(amount) AS total \
         FROM orders GROUP BY region",
    ]);
    let mut child = dir
        .command(&[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--flight-sql",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut banner = vec![];
    while banner.len() < 3 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "dfmv serve ended: {banner:?}"
        );
        banner.push(line.trim_end().to_owned());
    }
    let catalog = dir.join("catalog");
    assert_eq!(
        banner[0],
        format!("dfmv serve: catalog {}", catalog.display())
    );
    let addr = banner[1]
        .strip_prefix("REST on http://")
        .expect("the REST address")
        .to_owned();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    assert!(
        banner[2].starts_with("Flight SQL on grpc://127.0.0.1:"),
        "{banner:?}"
    );

    assert_eq!(
        http(&addr, "GET", "/healthz", ""),
        (200, serde_json::json!({ "status": "ok" }))
    );
    // The remembered table and view are there.
    let query = r#"{"sql": "SELECT * FROM totals ORDER BY region"}"#;
    assert_eq!(
        http(&addr, "POST", "/v1/sql", query),
        (
            200,
            serde_json::json!([{ "region": "north", "total": 12 }, { "region": "south", "total": 5 }])
        )
    );
    // A source change, a refresh job, its typed result.
    dir.write("src/feb.csv", "region,amount\neast,7\nnorth,1\n");
    let (status, job) = http(&addr, "POST", "/v1/materialized_view/totals/refresh", "{}");
    assert_eq!(status, 202, "{job}");
    let done = wait_job(&addr, &job);
    assert_eq!(done["job_state"], "DONE", "{done}");
    assert_eq!(done["result"]["mode"], "incremental", "{done}");
    assert_eq!(done["result"]["rows_written"], 3, "{done}");
    assert_eq!(
        http(&addr, "POST", "/v1/sql", query).1,
        serde_json::json!([
            { "region": "east", "total": 7 },
            { "region": "north", "total": 13 },
            { "region": "south", "total": 5 }
        ])
    );
    let (status, error) = http(&addr, "POST", "/v1/materialized_view/nope/describe", "");
    assert_eq!(status, 404);
    assert_eq!(
        error["error"], "materialized view \"nope\" does not exist",
        "{error}"
    );

    // Started as docs/server.md shows, it answers no web page: a foreign
    // Origin, a rebound Host name, a body a form can send; and it reads
    // no file it was not given.
    let copy = format!(
        r#"{{"sql": "COPY (SELECT 1 AS x) TO '{}'"}}"#,
        dir.join("stolen.csv").display()
    );
    let forged: [&[(&str, &str)]; 3] = [
        &[("Origin", "https://evil.example")],
        &[("Host", "rebind.evil.example")],
        &[("Content-Type", "text/plain")],
    ];
    for (headers, (status, code)) in forged.into_iter().zip([(403, 15), (421, 15), (415, 13)]) {
        let (got, error) = common::http_with(&addr, "POST", "/v1/sql", headers, &copy);
        assert_eq!(
            (got, &error["code"]),
            (status, &serde_json::json!(code)),
            "{headers:?}: {error}"
        );
    }
    let (status, error) = common::http(&addr, "POST", "/v1/sql", &copy);
    assert_eq!(status, 403, "{error}");
    assert_eq!(error["condition"], "insufficient_privilege", "{error}");
    assert!(!dir.join("stolen.csv").exists());

    // SIGTERM: a clean stop, and one log line per request.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.ends_with("dfmv serve: stopped\n"), "{stderr}");
    let logged: Vec<String> = stderr
        .lines()
        .filter(|line| line.contains(" /v1/") || line.contains(" /healthz "))
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            format!("{} {} {}", fields[1], fields[2], fields[3])
        })
        .collect();
    let polls = logged
        .iter()
        .filter(|l| l.as_str() == "POST /v1/jobs/describe 200")
        .count();
    assert!(polls >= 1);
    let others: Vec<&str> = logged
        .iter()
        .map(String::as_str)
        .filter(|l| *l != "POST /v1/jobs/describe 200")
        .collect();
    assert_eq!(
        others,
        [
            "GET /healthz 200",
            "POST /v1/sql 200",
            "POST /v1/materialized_view/totals/refresh 202",
            "POST /v1/sql 200",
            "POST /v1/materialized_view/nope/describe 404",
            "POST /v1/sql 403",
            "POST /v1/sql 421",
            "POST /v1/sql 415",
            "POST /v1/sql 403",
        ]
    );
    // The view the server refreshed is what a later dfmv reads.
    let run = dir.dfmv(&["-q", "-c", "SELECT total FROM totals WHERE region = 'east'"]);
    assert!(run.stdout.contains("| 7     |"), "{run:?}");
}

/// Issue 37: DataFusion keeps a table's listing for the life of a session;
/// dfmv lists afresh for each statement, so a file that lands between two
/// statements of one process is seen, unless the user sets a listing cache
/// TTL (then the cache works as DataFusion's does).
#[test]
fn a_statement_sees_the_files_that_are_there_now() {
    let dir = Dir::new();
    dir.write("f/a.csv", "k\n1\n2\n");
    let counts = |extra: &[&str]| {
        let mut args = vec!["-q", "--format", "csv"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "-c",
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'f/'",
            "-c",
            "SELECT count(*) AS n FROM t",
            // A new file in the folder, written by this process.
            "-c",
            "COPY (SELECT 3 AS k) TO 'f/b.csv' STORED AS CSV",
            "-c",
            "SELECT count(*) AS n FROM t",
            "-c",
            "SELECT count(*) AS n FROM 'f/'",
            "-c",
            "DROP TABLE t",
        ]);
        dir.ok(&args)
    };
    let out = counts(&[]);
    assert_eq!(
        out.lines()
            .filter(|l| l.bytes().all(|b| b.is_ascii_digit()))
            .collect::<Vec<_>>(),
        ["2", "1", "3", "3"],
        "{out}"
    );
    std::fs::remove_file(dir.join("f/b.csv")).unwrap();
    // Opting in to DataFusion's cache keeps the first listing.
    let out = counts(&["-c", "SET datafusion.runtime.list_files_cache_ttl = '60m'"]);
    assert_eq!(
        out.lines()
            .filter(|l| l.bytes().all(|b| b.is_ascii_digit()))
            .collect::<Vec<_>>(),
        ["2", "1", "2", "3"],
        "{out}"
    );
}

/// `\dmh v` lists the view's refresh attempts, oldest first, with what
/// started each, how it ended and what it wrote; a second process sees
/// them, and `\dmh` alone lists every view's.
#[test]
fn dmh_lists_the_refresh_history() {
    let dir = Dir::new();
    dir.write("src/jan.csv", "region,amount\nnorth,10\nsouth,5\n");
    dir.ok(&[
        "-q",
        "-c",
        "CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION 'src/'",
        "-c",
        "CREATE MATERIALIZED VIEW totals AS SELECT region, sum(amount) AS total FROM orders GROUP BY region",
        "-c",
        "CREATE MATERIALIZED VIEW later AS SELECT region FROM orders WITH NO DATA",
    ]);
    dir.write("src/feb.csv", "region,amount\neast,7\n");
    dir.ok(&["-q", "-c", "REFRESH MATERIALIZED VIEW totals"]);
    let out = dir.ok(&["-q", "--format", "csv", "-c", "\\dmh totals"]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .collect();
    assert_eq!(
        rows[0],
        [
            "table_name",
            "version",
            "state",
            "trigger",
            "mode",
            "started_at",
            "duration_ms",
            "rows_written",
            "rows_deleted",
            "bytes_read",
            "error"
        ],
        "{out}"
    );
    let fields = |row: &[&str]| -> Vec<String> {
        [0, 1, 2, 3, 4, 7, 8, 10]
            .iter()
            .map(|&i| row[i].to_owned())
            .collect()
    };
    assert_eq!(rows.len(), 3, "{out}");
    assert_eq!(
        fields(&rows[1]),
        ["totals", "1", "succeeded", "create", "full", "2", "0", ""]
    );
    assert_eq!(
        fields(&rows[2]),
        [
            "totals",
            "2",
            "succeeded",
            "statement",
            "incremental",
            "3",
            "2",
            ""
        ]
    );
    assert!(rows[2][9].parse::<u64>().unwrap() > 0, "{out}");
    let all = dir.ok(&["-q", "--format", "csv", "-c", "\\dmh"]);
    assert_eq!(all.lines().count(), 3, "later has no attempt yet: {all}");
    let run = dir.dfmv(&["-q", "-c", "\\dmh nope"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(
        run.stdout, "Error: materialized view \"nope\" does not exist\n",
        "as dfmv prints every error of -c"
    );
}

/// A query over a view's source, in a `dfmv` process other than the one
/// that made the view, is answered from it while it is fresh, with the
/// appended file once one lands, and not when the session says off.
#[test]
fn queries_are_answered_from_views_across_processes() {
    let dir = Dir::new();
    dir.write("src/jan.csv", "region,amount\nnorth,10\nsouth,5\nnorth,1\n");
    dir.ok(&[
        "-q",
        "-c",
        "CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION 'src/'",
        "-c",
        "CREATE MATERIALIZED VIEW totals AS SELECT region, sum(amount) AS total FROM orders GROUP BY region",
    ]);
    let query = "SELECT region, sum(amount) AS s FROM orders GROUP BY region ORDER BY region";
    let explain = format!("EXPLAIN FORMAT INDENT {query}");
    let plan = dir.ok(&["-q", "--format", "csv", "-c", &explain]);
    assert!(plan.contains("MatviewRewrite: totals (fresh)"), "{plan}");
    // dfmv's EXPLAIN draws the physical plan as a tree; a row above it
    // names the view.
    let tree = dir.ok(&["-q", "--format", "csv", "-c", &format!("EXPLAIN {query}")]);
    assert!(
        tree.contains("logical_plan,MatviewRewrite: totals (fresh)"),
        "{tree}"
    );
    let out = dir.ok(&["-q", "--format", "csv", "-c", query]);
    assert_eq!(out.trim(), "region,s\nnorth,11\nsouth,5", "{out}");
    dir.write("src/feb.csv", "region,amount\neast,7\nnorth,2\n");
    let plan = dir.ok(&["-q", "--format", "csv", "-c", &explain]);
    assert!(
        plan.contains(
            "MatviewRewrite: totals (stale: orders: 1 file(s) appended; merged into the existing groups)"
        ),
        "{plan}"
    );
    let out = dir.ok(&["-q", "--format", "csv", "-c", query]);
    assert_eq!(out.trim(), "region,s\neast,7\nnorth,13\nsouth,5", "{out}");
    let plan = dir.ok(&[
        "-q",
        "--format",
        "csv",
        "-c",
        "SET matview.rewrite = 'off'",
        "-c",
        &explain,
    ]);
    assert!(!plan.contains("MatviewRewrite"), "{plan}");
}
