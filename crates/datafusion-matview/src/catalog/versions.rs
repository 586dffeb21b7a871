//! Parsing a format 1 manifest: the whole catalog in one version.

use super::*;

/// Parses and checks one format 1 manifest file (`path` names it in
/// errors): a newer format than this build reads, bytes that are not a
/// manifest, and a version that is not the one its name says are typed
/// errors.
pub fn parse_manifest(path: &str, bytes: &[u8], expected_version: u64) -> Result<Manifest> {
    let corrupt = |reason: String| Error::CorruptManifest {
        path: path.to_string(),
        reason,
    };
    let format = format_of(path, bytes)?;
    if format > 1 {
        return Err(corrupt(format!(
            "it is a format {format} index version, not a whole manifest"
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

/// The `format_version` of a metadata file (`path` names it in errors):
/// bytes that are not JSON with one, and a newer format than this build
/// reads, are typed errors.
pub(super) fn format_of(path: &str, bytes: &[u8]) -> Result<u32> {
    #[derive(serde::Deserialize)]
    struct FormatOnly {
        format_version: u32,
    }
    let format: FormatOnly = serde_json::from_slice(bytes).map_err(|e| Error::CorruptManifest {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    if format.format_version > MANIFEST_FORMAT {
        return Err(Error::UnsupportedFormat {
            path: path.to_string(),
            found: format.format_version,
            supported: MANIFEST_FORMAT,
        });
    }
    Ok(format.format_version)
}
