//! Arbitrary text through the statement splitter: it never panics, and
//! every statement it finds is a slice of the input that, parsed on its
//! own, is that same one statement with the same text.

#![no_main]

use datafusion_matview::sql::parse_sql_with_text;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    for dialect in ["generic", "postgresql"] {
        let Ok(statements) = parse_sql_with_text(sql, dialect, 50) else {
            continue;
        };
        for (statement, text) in &statements {
            assert!(
                sql.contains(text.as_str()),
                "{text:?} is not a slice of {sql:?}"
            );
            let again = parse_sql_with_text(text, dialect, 50)
                .unwrap_or_else(|e| panic!("{text:?} alone does not parse: {e}"));
            assert_eq!(
                again.len(),
                1,
                "{text:?} alone is {} statements",
                again.len()
            );
            assert_eq!(
                &again[0].0, statement,
                "{text:?} alone is another statement"
            );
            assert_eq!(&again[0].1, text);
        }
    }
});
