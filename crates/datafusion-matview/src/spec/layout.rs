//! Where things live under a catalog's root: folder names made safe for
//! every store, and the shapes of the ids and file names the catalog writes.

use super::*;

/// Turns one name part into a directory name that is safe on every object
/// store and file system: ASCII letters, digits and `_` stay, everything else
/// (including `.`, `/`, `%` and control characters) becomes `-xx` hex bytes,
/// and so does a leading `_`, which keeps names starting with `_` (such as
/// the catalog's own `_matview` folder) for the catalog.
/// The mapping is injective, so two names never share a directory. An
/// encoding longer than [`MAX_PATH_PART`] bytes (file systems limit a name
/// to 255) is cut and completed with `.` (which the encoding never
/// produces otherwise) and a 64-bit hash of the name. Only characters that
/// neither object-store paths nor URLs escape are used.
pub fn encode_path_part(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for (i, b) in part.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || (b == b'_' && i > 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("-{b:02x}"));
        }
    }
    if out.is_empty() {
        out.push('-');
    }
    if out.len() > MAX_PATH_PART {
        // FNV-1a: stable across versions and platforms.
        let hash = part.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        out.truncate(MAX_PATH_PART - 17);
        out.push_str(&format!(".{hash:016x}"));
    }
    out
}

/// Whether `id` has the form of the snapshot ids this crate makes (a
/// UUID as 32 lowercase hex digits).
pub fn is_snapshot_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a file name this crate writes into a snapshot
/// directory: a Parquet data file or the [`SNAPSHOT_MARKER`].
pub fn is_snapshot_file_name(name: &str) -> bool {
    name == SNAPSHOT_MARKER
        || name
            .strip_suffix(".parquet")
            .is_some_and(|stem| !stem.is_empty() && !stem.contains('/'))
}

/// Longest directory name [`encode_path_part`] produces.
pub const MAX_PATH_PART: usize = 100;

/// Storage directory of a view relative to the catalog root: `<schema>/<view>`.
/// The catalog part is included only when it is not `datafusion`.
pub fn view_dir(name: &QualifiedName) -> String {
    if name.catalog == "datafusion" {
        format!(
            "{}/{}",
            encode_path_part(&name.schema),
            encode_path_part(&name.name)
        )
    } else {
        format!(
            "{}/{}/{}",
            encode_path_part(&name.catalog),
            encode_path_part(&name.schema),
            encode_path_part(&name.name)
        )
    }
}
