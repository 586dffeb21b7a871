//! DataFusion 55.2's own sqllogictest suite through `dfmv-slt`.
//!
//! ```text
//! cargo test --test it upstream_slt::                          # a quarter of the files (~1 min)
//! DFMV_UPSTREAM_SLT=all cargo test --test it upstream_slt::    # all 504 (~5 min in a debug build)
//! DFMV_UPSTREAM_SLT_DIR=/path/to/datafusion/datafusion/sqllogictest \
//!     DFMV_UPSTREAM_SLT=all cargo test --test it upstream_slt::  # a checkout, with its test data
//! ```
//!
//! The files are the `test_files/` of the `datafusion-sqllogictest` 55.2.0
//! crate, found with `cargo metadata` (or under `$CARGO_HOME/registry/src`),
//! copied with the crate's `data/` to
//! `<tmp>/datafusion/sqllogictest/` (upstream's layout: the files name
//! their data relative to it, and EXPLAIN prints it as `WORKSPACE_ROOT`),
//! and run from there with `dfmv-slt --upstream-setup` (upstream's per-file
//! setup: Spark functions for `spark/`, the tables and functions its runner
//! registers for some files). `DFMV_UPSTREAM_SLT_DIR` runs another folder of
//! that layout in place instead, such as a DataFusion checkout's
//! `datafusion/sqllogictest` with its `testing` and `parquet-testing`
//! submodules.
//!
//! The failing files must be exactly those listed in
//! `sqllogictest/upstream-expected-failures.txt`, each with its reason: the
//! test fails when a file outside the list fails, or a file on the list
//! passes. Entries whose reason starts with `data:` need test data the
//! published crate does not ship; with `DFMV_UPSTREAM_SLT_DIR` they may
//! pass. Entries whose reason starts with `skipped:` are files upstream's
//! setup skips in this build.
//!
//! By default every fourth file (in sorted order) runs; `DFMV_UPSTREAM_SLT=all`
//! runs them all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const CRATE: &str = "datafusion-sqllogictest";
const VERSION: &str = "55.2.0";

/// The `datafusion-sqllogictest` crate folder this project depends on.
fn upstream_crate_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    if let Ok(out) = out
        && out.status.success()
        && let Ok(meta) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        && let Some(packages) = meta["packages"].as_array()
    {
        for p in packages {
            if p["name"] == CRATE
                && p["version"] == VERSION
                && let Some(manifest) = p["manifest_path"].as_str()
                && let Some(dir) = Path::new(manifest).parent()
            {
                return dir.to_owned();
            }
        }
    }
    // Without cargo metadata: the registry's unpacked sources.
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME is set");
    let src = home.join("registry").join("src");
    for registry in std::fs::read_dir(&src).expect("cargo registry sources") {
        let dir = registry.unwrap().path().join(format!("{CRATE}-{VERSION}"));
        if dir.join("test_files").is_dir() {
            return dir;
        }
    }
    panic!(
        "{CRATE} {VERSION} not found by cargo metadata nor under {}",
        src.display()
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `relative path -> reason` from the checked-in list.
fn expected_failures() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sqllogictest")
        .join("upstream-expected-failures.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (file, reason) = line
            .split_once(char::is_whitespace)
            .unwrap_or_else(|| panic!("{}: `{line}` has no reason", path.display()));
        let reason = reason.trim();
        assert!(
            !reason.is_empty(),
            "{}: `{line}` has no reason",
            path.display()
        );
        assert!(
            out.insert(file.to_owned(), reason.to_owned()).is_none(),
            "{}: {file} is listed twice",
            path.display()
        );
    }
    out
}

#[test]
fn datafusion_suite_passes_but_for_the_listed_files() {
    let given = std::env::var_os("DFMV_UPSTREAM_SLT_DIR").map(PathBuf::from);
    let _tmp;
    let crate_dir = match &given {
        Some(dir) => dir.clone(),
        None => {
            let upstream = upstream_crate_dir();
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("datafusion").join("sqllogictest");
            copy_dir(&upstream.join("test_files"), &dir.join("test_files"));
            if upstream.join("data").is_dir() {
                copy_dir(&upstream.join("data"), &dir.join("data"));
            }
            _tmp = tmp;
            dir
        }
    };
    let test_files = crate_dir.join("test_files");
    let mut files: Vec<String> = vec![];
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "slt") {
                out.push(
                    path.strip_prefix(base)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    walk(&test_files, &test_files, &mut files);
    files.sort();
    let expected = expected_failures();
    for file in expected.keys() {
        assert!(
            files.contains(file),
            "upstream-expected-failures.txt lists {file}, which is not in {}",
            test_files.display()
        );
    }
    let all = std::env::var("DFMV_UPSTREAM_SLT").is_ok_and(|v| v == "all");
    let selected: Vec<&String> = files
        .iter()
        .enumerate()
        .filter(|(i, _)| all || i % 4 == 0)
        .map(|(_, f)| f)
        .collect();

    let out = Command::new(env!("CARGO_BIN_EXE_dfmv-slt"))
        .arg("--upstream-setup")
        .args(selected.iter().map(|f| Path::new("test_files").join(f)))
        .current_dir(&crate_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut failed = BTreeSet::new();
    let mut skipped = BTreeSet::new();
    let mut passed = BTreeSet::new();
    for line in stdout.lines() {
        let strip = |p: &str| p.trim().trim_start_matches("test_files/").to_owned();
        if let Some(f) = line.strip_prefix("FAILED  ") {
            failed.insert(strip(f));
        } else if let Some(f) = line.strip_prefix("skipped ") {
            skipped.insert(strip(f.split(": ").next().unwrap_or(f)));
        } else if let Some(f) = line.strip_prefix("ok      ") {
            passed.insert(strip(f));
        }
    }
    assert_eq!(
        failed.len() + skipped.len() + passed.len(),
        selected.len(),
        "dfmv-slt did not report every file:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut problems = vec![];
    for file in &selected {
        let file = file.as_str();
        let listed = expected.get(file);
        let may_pass = given.is_some() && listed.is_some_and(|r| r.starts_with("data:"));
        let expect_skip = listed.is_some_and(|r| r.starts_with("skipped:"));
        if failed.contains(file) && listed.is_none_or(|_| expect_skip) {
            problems.push(format!("{file} fails and is not listed"));
        } else if skipped.contains(file) && !expect_skip {
            problems.push(format!("{file} is skipped and not listed as skipped"));
        } else if passed.contains(file) && listed.is_some() && !may_pass {
            problems.push(format!(
                "{file} passes: remove it from upstream-expected-failures.txt"
            ));
        }
    }
    println!(
        "{} files run: {} passed, {} failed, {} skipped",
        selected.len(),
        passed.len(),
        failed.len(),
        skipped.len()
    );
    assert!(
        problems.is_empty(),
        "{}\n\ndfmv-slt output:\n{stdout}",
        problems.join("\n")
    );
}
