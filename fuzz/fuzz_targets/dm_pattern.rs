//! dfmv's `\dm` patterns (psql's rules: `*`/`%` any run, `?`/`_` one
//! character, unquoted letters fold to lower case, `"..."` quotes, `.`
//! separates catalog, schema and name) against a plain backtracking
//! matcher, and quoting any name gives a pattern that matches it exactly.

#![no_main]

#[path = "../../src/bin/dfmv/display.rs"]
#[allow(dead_code)]
mod display;

use chrono::Utc;
use datafusion::arrow::datatypes::Schema;
use datafusion_matview::spec::{Definition, QualifiedName, ViewEntry};
use display::Pattern;
use libfuzzer_sys::fuzz_target;

fn view(name: &str) -> ViewEntry {
    let name = QualifiedName::new("datafusion", "public", name);
    ViewEntry {
        dir: datafusion_matview::spec::view_dir(&name),
        name,
        id: String::new(),
        definition: Definition {
            format: 1,
            sql: String::new(),
            column_names: vec![],
            default_catalog: "datafusion".into(),
            default_schema: "public".into(),
            schema: Schema::empty(),
            sources: vec![],
            not_reproducible: None,
        },
        created_at: Utc::now(),
        snapshot: None,
    }
}

/// The oracle for one unquoted part: backtracking over characters,
/// remembering what it has tried (plain backtracking takes exponential time
/// on patterns of many `*`: the first 10-minute run spent 490 s on one).
fn glob(pattern: &[char], text: &[char]) -> bool {
    fn go(
        pattern: &[char],
        text: &[char],
        seen: &mut std::collections::HashMap<(usize, usize), bool>,
    ) -> bool {
        let key = (pattern.len(), text.len());
        if let Some(&known) = seen.get(&key) {
            return known;
        }
        let result = match pattern.split_first() {
            None => text.is_empty(),
            Some(('*' | '%', rest)) => (0..=text.len()).any(|i| go(rest, &text[i..], seen)),
            Some(('?' | '_', rest)) => !text.is_empty() && go(rest, &text[1..], seen),
            Some((c, rest)) => {
                let lower: Vec<char> = c.to_lowercase().collect();
                text.len() >= lower.len()
                    && text[..lower.len()] == lower[..]
                    && go(rest, &text[lower.len()..], seen)
            }
        };
        seen.insert(key, result);
        result
    }
    go(pattern, text, &mut std::collections::HashMap::new())
}

fuzz_target!(|input: (String, String)| {
    let (pattern, name) = input;
    if pattern.chars().count() > 24 || name.chars().count() > 24 {
        return;
    }
    let v = view(&name);
    if !pattern.contains(['.', '"']) {
        let p: Vec<char> = pattern.chars().collect();
        let n: Vec<char> = name.chars().collect();
        assert_eq!(
            Pattern::parse(&pattern).matches(&v),
            glob(&p, &n),
            "{pattern:?} against {name:?}"
        );
    }
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    assert!(
        Pattern::parse(&quoted).matches(&v),
        "{quoted:?} against {name:?}"
    );
    assert!(Pattern::parse(&format!("public.{quoted}")).matches(&v));
});
