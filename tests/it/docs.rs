//! The README and `docs/` name things that exist: every link to a file or
//! to a section resolves, every source file named is there, and every
//! `cargo` command names a real test target, module, test, bench, example
//! and binary. A rename that leaves the documentation behind fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page under docs/, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces
/// as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.insert(slug(line));
        }
    }
    found
}

/// The targets of `[text](target)` links.
fn links(text: &str) -> Vec<String> {
    let mut found = vec![];
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].to_owned());
        }
    }
    found
}

#[test]
fn every_link_resolves_to_a_file_and_a_section() {
    let mut broken = vec![];
    for (page, text) in pages() {
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match link.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}", page.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&target).unwrap();
                if !anchors(&text).contains(anchor) {
                    broken.push(format!("{}: {link} (no such section)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Words of the pages that look like repository paths of source files.
fn source_paths(text: &str) -> BTreeSet<String> {
    text.split(|c: char| c.is_whitespace() || "`()[],;:".contains(c))
        .map(|w| w.trim_start_matches("../"))
        .filter(|w| {
            ["src/", "crates/", "tests/", "benches/", "examples/"]
                .iter()
                .any(|p| w.starts_with(p))
                && w.ends_with(".rs")
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_source_file_named_exists() {
    let mut missing = vec![];
    for (page, text) in pages() {
        for path in source_paths(&text) {
            if !root().join(&path).exists() {
                missing.push(format!("{}: {path}", page.display()));
            }
        }
    }
    assert!(missing.is_empty(), "missing:\n{}", missing.join("\n"));
}

/// The value after `flag` in `command`, if any.
fn after<'a>(command: &'a str, flag: &str) -> Option<&'a str> {
    let mut words = command.split_whitespace();
    words.find(|w| *w == flag)?;
    words.next()
}

fn names_in(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(root().join(dir))
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "rs").then(|| path.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect()
}

/// The features of the package whose manifest is `manifest` (relative
/// to the root): the keys of its `[features]` table.
fn features_of(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(manifest)).unwrap();
    let mut found = BTreeSet::new();
    let mut in_features = false;
    for line in text.lines() {
        if line.starts_with('[') {
            in_features = line == "[features]";
        } else if in_features && let Some((key, _)) = line.split_once(" = ") {
            found.insert(key.trim().to_owned());
        }
    }
    found
}

/// The workspace's packages, each with its features: the root package
/// and every crate under crates/, by the name its manifest gives.
fn packages() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut manifests = vec!["Cargo.toml".to_owned()];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().file_name().into_string().unwrap();
        manifests.push(format!("crates/{dir}/Cargo.toml"));
    }
    manifests
        .into_iter()
        .map(|manifest| {
            let text = std::fs::read_to_string(root().join(&manifest)).unwrap();
            let package = text.split("[package]").nth(1).expect("a [package] table");
            let name = package
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .expect("a package name")
                .to_owned();
            (name, features_of(&manifest))
        })
        .collect()
}

/// The `mod` lines of tests/it/main.rs.
fn areas() -> BTreeSet<String> {
    std::fs::read_to_string(root().join("tests/it/main.rs"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_cargo_command_names_real_targets() {
    let tests: BTreeSet<String> = ["it", "sqllogictests", "ballista"]
        .map(str::to_owned)
        .into();
    let benches = names_in("benches");
    let examples = names_in("examples");
    let bins: BTreeSet<String> = ["dfmv", "dfmv-slt"].map(str::to_owned).into();
    let areas = areas();
    // The workspace's packages (`-p`), each with its features; no `-p`
    // means the root package, dfmv.
    let packages = packages();
    let mut wrong = vec![];
    for (page, text) in pages() {
        let commands = text
            .lines()
            .flat_map(|line| line.match_indices("cargo ").map(move |(at, _)| &line[at..]));
        for command in commands {
            let command = command.split('`').next().unwrap_or_default();
            let mut check = |what: &str, name: Option<&str>, known: &BTreeSet<String>| {
                if let Some(name) = name.filter(|n| !n.starts_with('-') && *n != "NAME")
                    && !known.contains(name)
                {
                    wrong.push(format!("{}: {command}: no {what} {name}", page.display()));
                }
            };
            check("test target", after(command, "--test"), &tests);
            check("bench", after(command, "--bench"), &benches);
            check("example", after(command, "--example"), &examples);
            check("binary", after(command, "--bin"), &bins);
            let package = after(command, "-p").unwrap_or("dfmv");
            match packages.get(package) {
                None => wrong.push(format!(
                    "{}: {command}: no package {package}",
                    page.display()
                )),
                Some(features) => {
                    for feature in after(command, "--features")
                        .into_iter()
                        .flat_map(|f| f.split(','))
                    {
                        if !features.contains(feature) {
                            wrong.push(format!(
                                "{}: {command}: {package} has no feature {feature}",
                                page.display()
                            ));
                        }
                    }
                }
            }
            // `--test it area::name`: the area is a module, the name a
            // substring of one of its tests.
            if after(command, "--test") == Some("it")
                && let Some(filter) = after(command, "it").filter(|f| f.contains("::"))
            {
                let (area, name) = filter.split_once("::").unwrap();
                if !areas.contains(area) {
                    wrong.push(format!("{}: {command}: no area {area}", page.display()));
                } else if !name.is_empty() && name != "NAME" {
                    let source =
                        std::fs::read_to_string(root().join(format!("tests/it/{area}.rs")))
                            .unwrap();
                    if !source.contains(&format!("fn {name}")) {
                        wrong.push(format!("{}: {command}: no test {name}", page.display()));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_checks_find_what_is_wrong() {
    assert_eq!(slug("## Catalog scale"), "catalog-scale");
    assert_eq!(slug("# DataFusion's own suite"), "datafusions-own-suite");
    assert_eq!(
        links("see [a](b.md#c) and [d](https://e)"),
        ["b.md#c", "https://e"]
    );
    assert_eq!(
        source_paths("(`tests/it/server.rs`) and ../src/lib.rs, not src/ alone"),
        ["src/lib.rs".to_owned(), "tests/it/server.rs".to_owned()].into()
    );
    assert_eq!(
        after("cargo test --test it catalog::", "it"),
        Some("catalog::")
    );
    assert!(Path::new(&root()).join("tests/it/main.rs").exists());
    assert!(features_of("Cargo.toml").contains("ballista"));
    assert!(features_of("crates/datafusion-matview-server/Cargo.toml").contains("flight-sql"));
    assert!(!features_of("Cargo.toml").contains("testing"));
    let packages = packages();
    assert!(packages["dfmv"].contains("ballista"));
    assert!(packages["datafusion-matview-server"].contains("flight-sql"));
    assert_eq!(packages.len(), 6);
}
