//! An object store wrapper for durability tests: it counts requests and can
//! fail, or kill the whole process with `SIGKILL`, at the Nth write.
//!
//! Writes are every request that changes the store: `put`, each part and
//! the completion of a multipart upload, each `delete`, `copy` and `rename`.
//! Register it in a session in place of the real store:
//!
//! ```no_run
//! # use std::sync::Arc;
//! use datafusion_matview_testing::{Fault, FaultAction, InstrumentedStore};
//! let store = InstrumentedStore::new(Arc::new(object_store::memory::InMemory::new()));
//! store.set_fault(Some(Fault { at_write: 3, after: false, action: FaultAction::Error }));
//! ```
//!
//! Also [`rewrite_in_place`], the change to a source file that only a
//! file's status change time shows.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};

/// What happens at the faulty write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// The request fails with an I/O-like error (as on a full disk).
    Error,
    /// The process is killed with `SIGKILL`: no destructor, no flush.
    Kill,
    /// The request fails as if it timed out, and a single-request put
    /// reaches the store a moment later ([`LATE_PUT_DELAY`]) anyway, as a
    /// request a server applies after the client gave up on it (other
    /// writes only fail). Acts before the write only.
    Late,
}

/// How long after its failure a [`FaultAction::Late`] put lands.
pub const LATE_PUT_DELAY: std::time::Duration = std::time::Duration::from_millis(300);

/// A fault at one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// 1-based number of the write, counted from when the fault was set.
    pub at_write: u64,
    /// Act after the write has reached the store instead of before.
    pub after: bool,
    /// What to do.
    pub action: FaultAction,
}

impl Fault {
    /// Parses `kill-before:N`, `kill-after:N`, `error-before:N`,
    /// `error-after:N` or `late:N` (the form the `DFMV_FAULT` variable
    /// takes).
    pub fn parse(text: &str) -> Option<Self> {
        let (kind, n) = text.split_once(':')?;
        let at_write = n.parse().ok()?;
        let (action, after) = match kind {
            "kill-before" => (FaultAction::Kill, false),
            "kill-after" => (FaultAction::Kill, true),
            "error-before" => (FaultAction::Error, false),
            "error-after" => (FaultAction::Error, true),
            "late" => (FaultAction::Late, false),
            _ => return None,
        };
        Some(Self {
            at_write,
            after,
            action,
        })
    }
}

/// Request counts of an [`InstrumentedStore`].
#[derive(Debug, Default)]
pub struct Counters {
    /// Writes (see the module docs).
    pub writes: AtomicU64,
    /// `get` requests, including ranged reads.
    pub gets: AtomicU64,
    /// `head` requests.
    pub heads: AtomicU64,
    /// `list` requests.
    pub lists: AtomicU64,
}

#[derive(Debug, Default)]
struct Shared {
    counters: Counters,
    fault: Mutex<Option<Fault>>,
    base: AtomicU64,
    read_only: AtomicBool,
    /// Written right after the next listing under its prefix has been read.
    after_list: Mutex<Option<AfterList>>,
    /// How long each single-request put is held before it is sent.
    put_delay: Mutex<Option<std::time::Duration>>,
    /// Set when a [`FaultAction::Late`] fault has just failed a write.
    late: AtomicBool,
    /// The next put of a file of this name waits for its release.
    hold: Mutex<Option<Arc<PutHold>>>,
}

/// A put held by [`InstrumentedStore::hold_next_put`].
pub struct PutHold {
    matches: Box<dyn Fn(&Path) -> bool + Send + Sync>,
    reached: tokio::sync::Notify,
    released: tokio::sync::Semaphore,
    lose: AtomicBool,
}

impl fmt::Debug for PutHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PutHold").finish_non_exhaustive()
    }
}

impl PutHold {
    /// Waits until the held put has been made (and is waiting).
    pub async fn reached(&self) {
        self.reached.notified().await
    }

    /// Lets the held put go on.
    pub fn release(&self) {
        self.released.add_permits(1);
    }

    /// Lets the held put return success without writing anything: a
    /// store that lost the object, or a task that reported a file it
    /// never finished.
    pub fn release_lost(&self) {
        self.lose.store(true, Ordering::SeqCst);
        self.released.add_permits(1);
    }
}

/// See [`InstrumentedStore::put_after_next_list`].
#[derive(Debug)]
struct AfterList {
    location: Path,
    data: Bytes,
}

impl Shared {
    fn before_write(&self, path: &Path) -> object_store::Result<u64> {
        if self.read_only.load(Ordering::SeqCst) {
            // What S3 answers (403) and a read-only folder gives.
            return Err(object_store::Error::PermissionDenied {
                path: path.to_string(),
                source: "the store is read-only (InstrumentedStore)".into(),
            });
        }
        let n = self.counters.writes.fetch_add(1, Ordering::SeqCst) + 1;
        self.act(n, false, path)?;
        Ok(n)
    }

    fn after_write(&self, n: u64, path: &Path) -> object_store::Result<()> {
        self.act(n, true, path)
    }

    fn act(&self, n: u64, after: bool, path: &Path) -> object_store::Result<()> {
        let fault = *self.fault.lock().unwrap_or_else(|e| e.into_inner());
        let Some(fault) = fault else { return Ok(()) };
        if fault.after != after || n - self.base.load(Ordering::SeqCst) != fault.at_write {
            return Ok(());
        }
        match fault.action {
            FaultAction::Error => Err(object_store::Error::Generic {
                store: "InstrumentedStore",
                source: format!("injected failure at write {} ({path})", fault.at_write).into(),
            }),
            FaultAction::Kill => kill_self(),
            FaultAction::Late => {
                self.late.store(true, Ordering::SeqCst);
                Err(object_store::Error::Generic {
                    store: "InstrumentedStore",
                    source: format!(
                        "injected timeout at write {} ({path}); the request lands later",
                        fault.at_write
                    )
                    .into(),
                })
            }
        }
    }
}

/// Sends `SIGKILL` to this process and waits for it to land.
fn kill_self() -> ! {
    let _ = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(std::process::id().to_string())
        .status();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct InstrumentedStore {
    inner: Arc<dyn ObjectStore>,
    shared: Arc<Shared>,
}

impl InstrumentedStore {
    /// Wraps `inner`, with no fault.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            shared: Arc::default(),
        }
    }

    /// Request counts so far.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Sets (or clears) the fault; writes are counted from now on for it.
    pub fn set_fault(&self, fault: Option<Fault>) {
        self.shared.base.store(
            self.shared.counters.writes.load(Ordering::SeqCst),
            Ordering::SeqCst,
        );
        *self.shared.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    /// Refuses (or allows again) every write, as a bucket or folder the
    /// user may only read does: `PermissionDenied`.
    pub fn set_read_only(&self, read_only: bool) {
        self.shared.read_only.store(read_only, Ordering::SeqCst);
    }

    /// Writes `data` at `location` as soon as the next `list` of a prefix
    /// containing it has been read in full, so that listing does not show
    /// it and every later one does: another writer landing a file just
    /// after someone looked.
    pub fn put_after_next_list(&self, location: Path, data: Bytes) {
        *self
            .shared
            .after_list
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(AfterList { location, data });
    }

    /// Holds every single-request put (a manifest commit, a marker, a small
    /// data file) for `delay` before sending it, or no longer with `None`:
    /// it widens the gap between a writer reading the latest manifest and
    /// putting the next one, so that writers working at once meet there
    /// and only conditional puts keep their commits apart.
    pub fn set_put_delay(&self, delay: Option<std::time::Duration>) {
        *self
            .shared
            .put_delay
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = delay;
    }

    /// Holds the next single-request put of a file named `name` (any
    /// folder) until [`PutHold::release`]: a write paused at that point,
    /// for as long as a test needs.
    pub fn hold_next_put(&self, name: &str) -> Arc<PutHold> {
        let name = name.to_owned();
        self.hold_next_put_where(move |path| path.filename() == Some(name.as_str()))
    }

    /// Holds the next single-request put whose path `matches` (see
    /// [`Self::hold_next_put`]).
    pub fn hold_next_put_where(
        &self,
        matches: impl Fn(&Path) -> bool + Send + Sync + 'static,
    ) -> Arc<PutHold> {
        let hold = Arc::new(PutHold {
            matches: Box::new(matches),
            reached: tokio::sync::Notify::new(),
            released: tokio::sync::Semaphore::new(0),
            lose: AtomicBool::new(false),
        });
        *self.shared.hold.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&hold));
        hold
    }

    /// The pending write of [`Self::put_after_next_list`] if a listing of
    /// `prefix` would show its location.
    fn take_after_list(&self, prefix: Option<&Path>) -> Option<AfterList> {
        let mut pending = self
            .shared
            .after_list
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let shows = pending
            .as_ref()
            .is_some_and(|p| prefix.is_none_or(|prefix| p.location.prefix_matches(prefix)));
        if shows { pending.take() } else { None }
    }
}

impl fmt::Display for InstrumentedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instrumented({})", self.inner)
    }
}

#[derive(Debug)]
struct InstrumentedUpload {
    inner: Box<dyn MultipartUpload>,
    shared: Arc<Shared>,
    path: Path,
}

#[async_trait]
impl MultipartUpload for InstrumentedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let shared = Arc::clone(&self.shared);
        let path = self.path.clone();
        let n = match shared.before_write(&path) {
            Ok(n) => n,
            Err(e) => return Box::pin(futures::future::ready(Err(e))),
        };
        let part = self.inner.put_part(data);
        Box::pin(async move {
            part.await?;
            shared.after_write(n, &path)
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let n = self.shared.before_write(&self.path)?;
        let result = self.inner.complete().await?;
        self.shared.after_write(n, &self.path)?;
        Ok(result)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[async_trait]
impl ObjectStore for InstrumentedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let delay = *self
            .shared
            .put_delay
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let hold = {
            let mut hold = self.shared.hold.lock().unwrap_or_else(|e| e.into_inner());
            match hold.as_ref() {
                Some(h) if (h.matches)(location) => hold.take(),
                _ => None,
            }
        };
        if let Some(hold) = hold {
            hold.reached.notify_one();
            let _ = hold.released.acquire().await;
            if hold.lose.load(Ordering::SeqCst) {
                return Ok(PutResult {
                    e_tag: None,
                    version: None,
                });
            }
        }
        let n = match self.shared.before_write(location) {
            Ok(n) => n,
            Err(e) => {
                if self.shared.late.swap(false, Ordering::SeqCst) {
                    let (inner, location) = (Arc::clone(&self.inner), location.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(LATE_PUT_DELAY).await;
                        let _ = inner.put_opts(&location, payload, opts).await;
                    });
                }
                return Err(e);
            }
        };
        let result = self.inner.put_opts(location, payload, opts).await?;
        self.shared.after_write(n, location)?;
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(InstrumentedUpload {
            inner,
            shared: Arc::clone(&self.shared),
            path: location.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let counter = if options.head {
            &self.shared.counters.heads
        } else {
            &self.shared.counters.gets
        };
        counter.fetch_add(1, Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.shared.counters.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = Arc::clone(&self.inner);
        let shared = Arc::clone(&self.shared);
        locations
            .then(move |location| {
                let inner = Arc::clone(&inner);
                let shared = Arc::clone(&shared);
                async move {
                    let location = location?;
                    let n = shared.before_write(&location)?;
                    let mut done =
                        inner.delete_stream(futures::stream::iter([Ok(location.clone())]).boxed());
                    while let Some(result) = done.next().await {
                        result?;
                    }
                    shared.after_write(n, &location)?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.shared.counters.lists.fetch_add(1, Ordering::SeqCst);
        let Some(after) = self.take_after_list(prefix) else {
            return self.inner.list(prefix);
        };
        // Read the whole listing, then land the file, then answer.
        let listing = self.inner.list(prefix);
        let inner = Arc::clone(&self.inner);
        futures::stream::once(async move {
            let listed: Vec<object_store::Result<ObjectMeta>> = listing.collect().await;
            let put = inner
                .put_opts(&after.location, after.data.into(), PutOptions::default())
                .await;
            futures::stream::iter(match put {
                Ok(_) => listed,
                Err(e) => vec![Err(e)],
            })
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.shared.counters.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.shared.counters.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let n = self.shared.before_write(to)?;
        self.inner.copy_opts(from, to, options).await?;
        self.shared.after_write(n, to)
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let n = self.shared.before_write(to)?;
        self.inner.rename_opts(from, to, options).await?;
        self.shared.after_write(n, to)
    }
}

/// Writes `contents` over the file at `path` in place (same inode), then
/// puts its modification time back: with the same size, only the file's
/// status change time shows that it changed. Panics on I/O errors.
pub fn rewrite_in_place(path: &std::path::Path, contents: impl AsRef<[u8]>) {
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    std::fs::write(path, contents).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn counts_and_fails_the_chosen_write() {
        let store = InstrumentedStore::new(Arc::new(InMemory::new()));
        store
            .put(&Path::from("a"), PutPayload::from("1"))
            .await
            .unwrap();
        store.set_fault(Some(Fault::parse("error-before:2").unwrap()));
        store
            .put(&Path::from("b"), PutPayload::from("2"))
            .await
            .unwrap();
        let err = store
            .put(&Path::from("c"), PutPayload::from("3"))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("injected failure at write 2 (c)"),
            "{err}"
        );
        assert!(store.head(&Path::from("c")).await.is_err());
        store.set_fault(Some(Fault::parse("error-after:1").unwrap()));
        assert!(store.delete(&Path::from("a")).await.is_err());
        // An after-fault lets the write through.
        assert!(store.head(&Path::from("a")).await.is_err());
        assert_eq!(store.counters().writes.load(Ordering::SeqCst), 4);
        assert_eq!(store.counters().heads.load(Ordering::SeqCst), 2);
        assert_eq!(Fault::parse("explode:1"), None);
    }
}
