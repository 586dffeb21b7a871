//! Parsing a format 1 manifest: the whole catalog in one version.

use super::*;

/// Parses and checks one format 1 manifest file (`path` names it in
/// errors): a newer format than this build reads, bytes that are not a
/// manifest, and a version that is not the one its name says are typed
/// errors.
pub fn parse_manifest(path: &str, bytes: &[u8], expected_version: u64) -> Result<Manifest> {
    #[derive(serde::Deserialize)]
    struct FormatOnly {
        format_version: u32,
    }
    let corrupt = |reason: String| Error::CorruptManifest {
        path: path.to_string(),
        reason,
    };
    let format: FormatOnly = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if format.format_version > MANIFEST_FORMAT {
        return Err(Error::UnsupportedFormat {
            path: path.to_string(),
            found: format.format_version,
            supported: MANIFEST_FORMAT,
        });
    }
    if format.format_version > 1 {
        return Err(corrupt(format!(
            "it is a format {} index version, not a whole manifest",
            format.format_version
        )));
    }
    let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if manifest.version != expected_version {
        return Err(corrupt(format!(
            "it says version {}, its name says {expected_version}",
            manifest.version
        )));
    }
    Ok(manifest)
}
