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
        datafusion_matview::slt::main_with_args(args, Some(suite.clone())).await,
        2
    );
    // A filter that matches runs (and passes).
    let args = ["basic".to_string()];
    assert_eq!(
        datafusion_matview::slt::main_with_args(args, Some(suite)).await,
        0
    );
}
