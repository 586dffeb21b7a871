//! Fingerprints of files on the local file system: the store's e-tag
//! and each file's status change time, and a listing of a directory
//! that looks at each file once.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};

use super::store_version;

/// How `object_store` shows the local file system rooted at `/`, the
/// store DataFusion registers for `file://` URLs.
const ROOT_STORE: &str = "LocalFileSystem(file:///)";

/// The versions of local files: the store's e-tag (inode, modification
/// time, size) and the file's status change time, which no `touch -r`,
/// `cp -p` or `rsync -t` can set back, so a file rewritten in place with
/// its size and modification time restored is still seen as changed.
/// A file whose size or modification time differs from its listing (it
/// changed between the two looks, or the store is not the local file
/// system at this path) gets an unknown version.
pub(super) async fn versions(metas: &[ObjectMeta]) -> Vec<String> {
    let looks: Vec<(String, u64, chrono::DateTime<chrono::Utc>, String)> = metas
        .iter()
        .map(|m| {
            (
                format!("/{}", m.location),
                m.size,
                m.last_modified,
                store_version(m),
            )
        })
        .collect();
    let stat = move || {
        looks
            .into_iter()
            .map(|(path, size, modified, version)| {
                let Ok(metadata) = std::fs::metadata(&path) else {
                    return String::new();
                };
                match modified_time(&metadata) {
                    Some(mtime) if metadata.len() == size && mtime == modified => {
                        with_change_time(&version, &metadata)
                    }
                    _ => String::new(),
                }
            })
            .collect()
    };
    tokio::task::spawn_blocking(stat)
        .await
        .unwrap_or_else(|_| vec![String::new(); metas.len()])
}

/// The files under directory `prefix` of `store`, each with its version
/// (see [`versions`]), exactly as `store.list(Some(prefix))` followed by
/// [`versions`] gives them, but from one look at each file: what the
/// listing costs is then mostly one `stat` a file, where the store's
/// listing and the second look take four.
///
/// `None` (list through the store instead) unless `store` is the local
/// file system rooted at `/` and the directory holds only what this
/// listing shows the same as the store: regular files and directories
/// whose names are plain (letters, digits, `._-=+,@`; no name the store
/// would encode, decode or skip), and no symbolic link, which the store
/// follows with its own rules. So a directory this does not list as the
/// store does is listed by the store.
///
/// A directory is listed on the calling thread for at most
/// [`INLINE_BUDGET`], then, if it is not done, again on the blocking pool.
pub(super) async fn list_dir(
    store: &dyn ObjectStore,
    prefix: &Path,
) -> Option<Vec<(ObjectMeta, String)>> {
    if !reads_alike(store, prefix) {
        return None;
    }
    if let Ok(listed) = walk(prefix, Some(Instant::now() + INLINE_BUDGET)) {
        return listed;
    }
    let prefix = prefix.clone();
    tokio::task::spawn_blocking(move || walk(&prefix, None).ok().flatten())
        .await
        .ok()
        .flatten()
}

/// How long a listing may run on the caller's thread (a runtime worker)
/// before it goes to the blocking pool. Handing work to the pool wakes a
/// thread and switches twice, which costs about as much as the `stat`s of
/// a hundred local files (in the rewrite's planning benchmark, `cargo
/// bench --bench matview -- rewrite_planning`, the pool's wake-ups were
/// the largest part of the check after the listing itself); a large
/// directory, or a slow file system, must not hold the worker long.
const INLINE_BUDGET: Duration = Duration::from_micros(250);

/// A listing stopped at its deadline.
struct OutOfTime;

/// The files under `prefix` and their versions; `Ok(None)` at the first
/// thing [`list_dir`] leaves to the store; `Err` once `deadline` passed.
fn walk(
    prefix: &Path,
    deadline: Option<Instant>,
) -> Result<Option<Vec<(ObjectMeta, String)>>, OutOfTime> {
    let mut out = vec![];
    let mut dirs = vec![prefix.as_ref().to_owned()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(format!("/{dir}")) {
            Ok(entries) => entries,
            // A directory that is not there lists nothing, as in the store.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return Ok(None),
        };
        for entry in entries {
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(OutOfTime);
            }
            let Ok(entry) = entry else {
                return Ok(None);
            };
            let Some(name) = entry.file_name().into_string().ok().filter(|n| plain(n)) else {
                return Ok(None);
            };
            // The entry itself (a link is not followed), looked up from
            // the directory read rather than from the root.
            let metadata = match entry.metadata() {
                Ok(metadata) => metadata,
                // Removed since the directory was read: not listed.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => return Ok(None),
            };
            if metadata.is_symlink() {
                return Ok(None);
            }
            let location = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            if metadata.is_dir() {
                dirs.push(location);
            } else if metadata.is_file() {
                let Some(modified) = modified_time(&metadata) else {
                    return Ok(None);
                };
                let e_tag = e_tag(&metadata);
                let version = with_change_time(&e_tag, &metadata);
                let Ok(location) = Path::parse(&location) else {
                    return Ok(None);
                };
                let meta = ObjectMeta {
                    location,
                    last_modified: modified,
                    size: metadata.len(),
                    e_tag: Some(e_tag),
                    version: None,
                };
                out.push((meta, version));
            }
        }
    }
    Ok(Some(out))
}

/// Whether `path` of `store` names the same thing on the local file
/// system at `/{path}`: `store` is the local file system rooted at `/`
/// (the store DataFusion registers for `file://` URLs), and each part of
/// `path` reads the same to both (see [`plain`]).
fn reads_alike(store: &dyn ObjectStore, path: &Path) -> bool {
    store.to_string() == ROOT_STORE && path.parts().all(|p| plain(p.as_ref()))
}

/// Whether a file is at `location` of `store`, as the store's `HEAD`
/// says, from one `stat` on this thread, when the path reads the same
/// to both (see [`reads_alike`]); `None`: ask the store. The store hands each request to the
/// blocking pool, which costs more than the `stat` (see
/// [`INLINE_BUDGET`]).
pub(crate) fn file_exists(store: &dyn ObjectStore, location: &Path) -> Option<bool> {
    if !reads_alike(store, location) {
        return None;
    }
    match std::fs::metadata(format!("/{location}")) {
        // The store's HEAD of a directory finds nothing.
        Ok(metadata) => Some(metadata.is_file()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}

/// Whether a file or directory name reads the same as a part of a store
/// path: not `.` or `..`, and only characters the store neither encodes
/// nor treats specially (its listing skips `name#123`).
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-=+,@".contains(&b))
}

/// The e-tag the local store gives a file: inode, modification time in
/// microseconds and size, in hexadecimal.
fn e_tag(metadata: &std::fs::Metadata) -> String {
    let mtime = metadata
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::SystemTime::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    format!("{:x}-{mtime:x}-{:x}", metadata.ino(), metadata.len())
}

fn modified_time(metadata: &std::fs::Metadata) -> Option<chrono::DateTime<chrono::Utc>> {
    metadata.modified().ok().map(Into::into)
}

/// A local file's version: the store's `version` of it (its e-tag) and
/// `seconds.nanoseconds` of its status change time, the same for both
/// ways of listing.
fn with_change_time(version: &str, metadata: &std::fs::Metadata) -> String {
    format!(
        "{version} ctime {}.{:09}",
        metadata.ctime(),
        metadata.ctime_nsec()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    use object_store::local::LocalFileSystem;

    /// The store's listing and the second look, as the fingerprint took
    /// them before this listing.
    async fn through_store(store: &LocalFileSystem, prefix: &Path) -> Vec<(ObjectMeta, String)> {
        let metas: Vec<ObjectMeta> = store.list(Some(prefix)).try_collect().await.unwrap();
        let versions = versions(&metas).await;
        let mut out: Vec<_> = metas.into_iter().zip(versions).collect();
        out.sort_by(|a, b| a.0.location.cmp(&b.0.location));
        out
    }

    async fn in_one_look(
        store: &LocalFileSystem,
        prefix: &Path,
    ) -> Option<Vec<(ObjectMeta, String)>> {
        let mut out = list_dir(store, prefix).await?;
        out.sort_by(|a, b| a.0.location.cmp(&b.0.location));
        Some(out)
    }

    #[tokio::test]
    async fn lists_a_directory_as_the_store_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        std::fs::create_dir_all(root.join("day=2026-12-01/part=a")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("a.parquet"), b"one").unwrap();
        std::fs::write(root.join(".hidden"), b"").unwrap();
        std::fs::write(root.join("day=2026-12-01/part=a/b.parquet"), b"two!").unwrap();
        std::fs::write(root.join("day=2026-12-01/c_d-e+f,g@h.csv"), b"3").unwrap();
        let store = LocalFileSystem::new();
        let prefix = Path::from_filesystem_path(&root).unwrap();
        let listed = in_one_look(&store, &prefix)
            .await
            .expect("listed in one look");
        assert_eq!(listed.len(), 4);
        assert_eq!(listed, through_store(&store, &prefix).await);
        // A directory that is not there lists nothing, as in the store.
        let missing = Path::from_filesystem_path(dir.path())
            .unwrap()
            .join("missing");
        assert_eq!(in_one_look(&store, &missing).await, Some(vec![]));
        assert!(through_store(&store, &missing).await.is_empty());
        // A file rewritten in place with its size and modification time
        // put back still gets a new version (its status change time).
        std::thread::sleep(std::time::Duration::from_millis(20));
        datafusion_matview_testing::rewrite_in_place(&root.join("a.parquet"), b"eno");
        let again = in_one_look(&store, &prefix).await.unwrap();
        let version = |listed: &[(ObjectMeta, String)]| {
            let (meta, version) = listed
                .iter()
                .find(|(m, _)| m.location.as_ref().ends_with("t/a.parquet"))
                .unwrap();
            (meta.last_modified, meta.size, version.clone())
        };
        let (before, after) = (version(&listed), version(&again));
        assert_eq!((before.0, before.1), (after.0, after.1));
        assert_ne!(before.2, after.2);
        assert_eq!(again, through_store(&store, &prefix).await);
    }

    #[tokio::test]
    async fn leaves_to_the_store_what_it_would_show_otherwise() {
        let store = LocalFileSystem::new();
        for odd in ["with space.csv", "x#1", "caf\u{e9}.csv", "per%cent"] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("plain.csv"), b"1").unwrap();
            std::fs::write(dir.path().join(odd), b"1").unwrap();
            let prefix = Path::from_filesystem_path(dir.path()).unwrap();
            assert_eq!(in_one_look(&store, &prefix).await, None, "{odd}");
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.csv"), b"1").unwrap();
        std::os::unix::fs::symlink(dir.path().join("a.csv"), dir.path().join("b.csv")).unwrap();
        let prefix = Path::from_filesystem_path(dir.path()).unwrap();
        assert_eq!(in_one_look(&store, &prefix).await, None, "a link");
        // A store rooted elsewhere is listed by the store.
        let rooted = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        assert_eq!(list_dir(&rooted, &Path::from("")).await, None);
    }

    #[tokio::test]
    async fn a_listing_past_its_budget_goes_to_the_blocking_pool() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..300 {
            std::fs::write(dir.path().join(format!("f{i:03}.csv")), b"1").unwrap();
        }
        let store = LocalFileSystem::new();
        let prefix = Path::from_filesystem_path(dir.path()).unwrap();
        let past = Instant::now().checked_sub(Duration::from_millis(1));
        assert!(matches!(walk(&prefix, past), Err(OutOfTime)));
        let whole = walk(&prefix, None).ok().flatten().unwrap();
        assert_eq!(whole.len(), 300);
        // However far it got inline, the listing is the store's.
        let listed = in_one_look(&store, &prefix).await.unwrap();
        assert_eq!(listed, through_store(&store, &prefix).await);
    }

    #[tokio::test]
    async fn a_file_is_there_as_the_stores_head_says() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("v1.json"), b"{}").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let store = LocalFileSystem::new();
        let base = Path::from_filesystem_path(dir.path()).unwrap();
        for (name, there) in [("v1.json", true), ("v2.json", false), ("d", false)] {
            let path = base.clone().join(name);
            assert_eq!(file_exists(&store, &path), Some(there), "{name}");
            assert_eq!(store.head(&path).await.is_ok(), there, "{name}");
        }
        // Left to the store: a name it would encode, a store rooted
        // elsewhere.
        assert_eq!(
            file_exists(&store, &base.clone().join("with space.json")),
            None
        );
        let rooted = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        assert_eq!(file_exists(&rooted, &Path::from("v1.json")), None);
    }
}
