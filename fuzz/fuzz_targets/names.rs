//! Name escaping: every name part becomes one safe directory name, two
//! different names never share one, and a view's folder is always two or
//! three plain parts under the catalog root (never `.`, `..`, empty, or
//! the catalog's own `_`-names).

#![no_main]

use datafusion_matview::spec::{MAX_PATH_PART, QualifiedName, encode_path_part, view_dir};
use libfuzzer_sys::fuzz_target;
use object_store::path::Path;

fn check_part(part: &str, encoded: &str) {
    assert!(!encoded.is_empty(), "{part:?}");
    assert!(encoded.len() <= MAX_PATH_PART, "{part:?} -> {encoded:?}");
    assert!(
        encoded
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')),
        "{part:?} -> {encoded:?}"
    );
    assert!(
        !encoded.starts_with('_') && !encoded.starts_with('.'),
        "{part:?} -> {encoded:?}"
    );
}

fuzz_target!(|parts: (String, String, String, String)| {
    let (catalog, schema, name, other) = parts;
    for part in [&catalog, &schema, &name, &other] {
        check_part(part, &encode_path_part(part));
    }
    if name != other {
        assert_ne!(
            encode_path_part(&name),
            encode_path_part(&other),
            "{name:?} and {other:?}"
        );
    }
    let dir = view_dir(&QualifiedName::new(&catalog, &schema, &name));
    let path = Path::parse(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
    let count = path.parts().count();
    assert!(count == 2 || count == 3, "{dir:?}");
    assert_eq!(path.as_ref(), dir, "object_store rewrote {dir:?}");
});
