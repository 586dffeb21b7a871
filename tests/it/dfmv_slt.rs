//! End-to-end runs of the `dfmv-slt` binary.

use std::process::Command;

fn run(args: &[&std::path::Path]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dfmv-slt"))
        .args(args)
        .output()
        .expect("dfmv-slt runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn runs_files_and_folders_and_reports_failures_with_location() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.slt");
    std::fs::write(
        &good,
        "statement ok\nCREATE TABLE t AS VALUES (1), (2);\n\n\
         statement ok\nCREATE MATERIALIZED VIEW v AS SELECT column1 * 2 AS x FROM t;\n\n\
         query I rowsort\nSELECT x FROM v;\n----\n2\n4\n",
    )
    .unwrap();
    let bad = dir.path().join("sub").join("bad.slt");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(
        &bad,
        "statement ok\nCREATE TABLE t AS VALUES (1);\n\nquery I\nSELECT column1 FROM t;\n----\n2\n",
    )
    .unwrap();

    let (code, out) = run(&[&good]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("1 passed, 0 failed\n"), "{out}");

    // A folder is searched recursively; each file gets its own catalog, so
    // both can create `t`.
    let (code, out) = run(&[dir.path()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("FAILED  {}", bad.display())), "{out}");
    assert!(out.contains(&format!("at {}:4", bad.display())), "{out}");
    assert!(out.ends_with("1 passed, 1 failed\n"), "{out}");
}

#[test]
fn complete_rewrites_expected_output() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.slt");
    std::fs::write(&file, "statement ok\nCREATE MATERIALIZED VIEW v AS SELECT 41 + 1 AS x;\n\nquery I\nSELECT x FROM v;\n----\n0\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dfmv-slt"))
        .arg("--complete")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("----\n42\n")
    );
    let (code, out) = run(&[&file]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_missing_path_is_an_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_dfmv-slt"))
        .arg("/nonexistent/x.slt")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "/nonexistent/x.slt: no such file\n"
    );
}

#[tokio::test]
async fn running_no_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // An empty folder, a folder without .slt files, a path that does not exist.
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
    let (code, _) = run(&[dir.path()]);
    assert_eq!(code, 2);
    let (code, _) = run(&[&dir.path().join("missing.slt")]);
    assert_eq!(code, 2);
    // The test harness's form: a filter that matches no file.
    let suite = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sqllogictest");
    let args = ["--complete-typo-is-ignored", "no-such-file-typo"].map(String::from);
    assert_eq!(
        datafusion_matview_slt::main_with_args(args, Some(suite.clone())).await,
        2
    );
    // A filter that matches runs (and passes).
    let args = ["basic".to_string()];
    assert_eq!(
        datafusion_matview_slt::main_with_args(args, Some(suite)).await,
        0
    );
}

/// Runs `dfmv-slt ARGS` in `dir`.
fn run_in(dir: &std::path::Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dfmv-slt"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("dfmv-slt runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn reports_every_failing_record_of_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.slt");
    std::fs::write(
        &file,
        "query I\nSELECT 1;\n----\n2\n\n\
         query I\nSELECT 1;\n----\n1\n\n\
         statement ok\nSELECT * FROM nope;\n",
    )
    .unwrap();
    let (code, out) = run(&[&file]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("2 errors in file {}", file.display())),
        "{out}"
    );
    assert!(out.contains("1. query result mismatch"), "{out}");
    assert!(out.contains(&format!("at {}:1", file.display())), "{out}");
    assert!(out.contains(&format!("at {}:11", file.display())), "{out}");
    assert!(!out.contains(&format!("at {}:6", file.display())), "{out}");
}

/// A file of a DataFusion-style tree (`<root>/datafusion/sqllogictest/
/// test_files/`), run from the crate folder as upstream's runner runs its
/// files: upstream's error text, configuration, path normalisation and
/// scratch folder.
#[test]
fn runs_files_as_datafusions_own_runner_does() {
    let root = tempfile::tempdir().unwrap();
    let krate = root.path().join("datafusion").join("sqllogictest");
    let files = krate.join("test_files");
    let scratch = files.join("scratch").join("drop_in");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("stale.csv"), "left by an earlier run").unwrap();
    std::fs::write(
        files.join("drop_in.slt"),
        r#"# DataFusion's errors as upstream's engine prints them.
statement error
SELECT * FROM nope;
----
DataFusion error: Error during planning: table 'datafusion.public.nope' not found


# information_schema is off unless the file turns it on.
statement error DataFusion error: Error during planning: SHOW TABLES is not supported unless information_schema is enabled
SHOW TABLES;

statement ok
SET datafusion.catalog.information_schema = true;

# target_partitions is pinned to 4, whatever the machine.
query TT
SHOW datafusion.execution.target_partitions;
----
datafusion.execution.target_partitions 4

statement ok
SET datafusion.catalog.information_schema = false;

# The scratch folder was emptied before the file ran.
statement ok
CREATE EXTERNAL TABLE stale (line VARCHAR) STORED AS CSV LOCATION 'test_files/scratch/drop_in/'
OPTIONS ('format.has_header' 'false');

query I
SELECT count(*) FROM stale;
----
0

query I
COPY (VALUES (1), (2)) TO 'test_files/scratch/drop_in/a.csv' STORED AS CSV;
----
2

statement ok
CREATE EXTERNAL TABLE a STORED AS CSV LOCATION 'test_files/scratch/drop_in/a.csv'
OPTIONS ('format.has_header' 'true');

# Paths in plans are printed from WORKSPACE_ROOT.
query TT
EXPLAIN SELECT column1 FROM a;
----
logical_plan TableScan: a projection=[column1]
physical_plan DataSourceExec: file_groups={1 group: [[WORKSPACE_ROOT/datafusion/sqllogictest/test_files/scratch/drop_in/a.csv]]}, projection=[column1], file_type=csv, has_header=true

# View statements keep PostgreSQL's wording.
statement ok
CREATE MATERIALIZED VIEW m AS SELECT column1 FROM a;

statement error
CREATE MATERIALIZED VIEW m AS SELECT 1;
----
relation "m" already exists
"#,
    )
    .unwrap();
    // Twice: the second run finds the first one's files and empties them.
    for _ in 0..2 {
        let (code, out) = run_in(&krate, &["test_files/drop_in.slt"]);
        assert_eq!(code, 0, "{out}");
        assert!(!scratch.join("stale.csv").exists());
        std::fs::write(scratch.join("stale.csv"), "left by an earlier run").unwrap();
    }
}

/// `--upstream-setup` configures each file as upstream's runner does: a
/// file under `spark/` gets the Spark functions and Spark's float format.
#[test]
fn upstream_setup_gives_spark_files_the_spark_functions() {
    let root = tempfile::tempdir().unwrap();
    let krate = root.path().join("datafusion").join("sqllogictest");
    let spark = krate.join("test_files").join("spark");
    std::fs::create_dir_all(&spark).unwrap();
    std::fs::write(
        spark.join("expm1.slt"),
        "query R\nSELECT expm1(1::INT);\n----\n1.718281828459045\n",
    )
    .unwrap();
    let (code, out) = run_in(&krate, &["test_files/spark/expm1.slt"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Invalid function 'expm1'"), "{out}");
    let (code, out) = run_in(&krate, &["--upstream-setup", "test_files/spark/expm1.slt"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("1 passed, 0 failed\n"), "{out}");
}

/// `skipif` / `onlyif` see the labels upstream's runner gives its engine.
#[test]
fn conditions_see_upstreams_engine_labels() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("labels.slt");
    std::fs::write(
        &file,
        "skipif Datafusion\nquery I\nSELECT 1;\n----\n2\n\n\
         skipif DataFusion\nquery I\nSELECT 1;\n----\n2\n\n\
         onlyif postgres\nquery I\nSELECT 1;\n----\n2\n\n\
         onlyif Datafusion\nquery I\nSELECT 1;\n----\n1\n",
    )
    .unwrap();
    let (code, out) = run(&[&file]);
    assert_eq!(code, 0, "{out}");
}
