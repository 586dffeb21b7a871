//! Arbitrary bytes as a manifest version or a snapshot marker: a typed
//! error or a value, never a panic; a manifest that decodes encodes back
//! to the same manifest, and what is derived from it does not panic.

#![no_main]

use datafusion_matview::catalog::parse_manifest;
use datafusion_matview::spec::SnapshotMarker;
use libfuzzer_sys::fuzz_target;
use object_store::path::Path;

fuzz_target!(|data: &[u8]| {
    let path = Path::from("cat/_matview/log/00000000000000000007.json");
    match parse_manifest(&path, data, 7) {
        Ok(manifest) => {
            assert_eq!(manifest.version, 7);
            let json = serde_json::to_vec(&manifest).expect("a decoded manifest encodes");
            let again = parse_manifest(&path, &json, 7).expect("and decodes again");
            assert_eq!(again, manifest);
            let _ = manifest.known_snapshot_dirs();
            for view in &manifest.views {
                let _ = view.data_dirs();
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains(path.as_ref()), "{message}");
        }
    }
    if let Ok(marker) = serde_json::from_slice::<SnapshotMarker>(data) {
        let _ = marker.view.data_dirs();
        let _ = serde_json::to_vec(&marker).expect("a decoded marker encodes");
    }
});
