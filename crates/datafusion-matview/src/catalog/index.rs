//! The index log: reading it (a checkpoint and the versions after it, or
//! the versions after the one loaded), committing to it, checkpoints, and
//! moving a format 1 catalog to format 2.

use super::views::commit_id_in;
use super::*;

/// How many index versions are read at once from an object store over a
/// network, where each read waits a round trip.
const MOST_READS_AT_ONCE: usize = 16;

/// The same on a local file system, where a read waits for no network
/// and each concurrent one takes a blocking thread of its own (object
/// store's `LocalFileSystem`): as many as a small machine has cores.
const MOST_LOCAL_READS_AT_ONCE: usize = 2;

/// How many bytes of a checkpoint its first read asks for: its header (a
/// line of about 85 bytes per block of [`CHECKPOINT_BLOCK_VIEWS`] views, so
/// up to about 50,000 views) and the blocks that fit after it.
pub(super) const CHECKPOINT_FIRST_READ: u64 = 64 * 1024;

/// Reads blocks of a checkpoint's views from the catalog's object store,
/// for [`CheckpointViews`]: finding a view is synchronous (DataFusion's
/// `SchemaProvider::table_exist` is), so [`BlockReader::read`] waits for
/// the read. On a multi-threaded Tokio runtime it waits in
/// `block_in_place`; from a local folder, which needs no runtime, it reads
/// on a thread of its own. A remote store on a single-threaded runtime
/// (where waiting would stall the runtime that drives the request) has
/// no `StoreBlocks`: its checkpoints are read whole.
#[derive(Debug)]
pub(super) struct StoreBlocks {
    store: Arc<dyn ObjectStore>,
    path: Path,
    local: bool,
    /// Where the views start in the checkpoint.
    offset: u64,
    /// The checkpoint's entity tag when its header was read: a later read
    /// of another object at that path fails rather than misread it.
    e_tag: Option<String>,
}

impl StoreBlocks {
    /// A reader of `path` in `catalog`'s store, when one can wait (see
    /// above).
    fn new(catalog: &Catalog, path: &Path) -> Option<Self> {
        let local = catalog.is_local();
        let threaded = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        (local || threaded).then(|| Self {
            store: Arc::clone(&catalog.store),
            path: path.clone(),
            local,
            offset: 0,
            e_tag: None,
        })
    }

    /// The reader of the views starting at `offset` of the checkpoint
    /// whose header was read as `e_tag`.
    fn starting_at(self, offset: u64, e_tag: Option<String>) -> Self {
        Self {
            offset,
            e_tag,
            ..self
        }
    }

    async fn get(&self, range: std::ops::Range<u64>) -> std::result::Result<bytes::Bytes, String> {
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(
                range.start + self.offset..range.end + self.offset,
            )),
            if_match: self.e_tag.clone(),
            ..Default::default()
        };
        let read = match self.store.get_opts(&self.path, options).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        read.map_err(|e| match e {
            object_store::Error::NotFound { .. } | object_store::Error::Precondition { .. } => {
                "the checkpoint was deleted while this process still read it (two newer \
                 ones were written meanwhile); run the statement again"
                    .to_owned()
            }
            e => e.to_string(),
        })
    }
}

impl BlockReader for StoreBlocks {
    fn read(&self, range: std::ops::Range<u64>) -> std::result::Result<bytes::Bytes, String> {
        wait_for(self.local, self.get(range), "its views")?
    }

    fn read_async(
        &self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, std::result::Result<bytes::Bytes, String>> {
        Box::pin(self.get(range))
    }
}

/// Waits for `read`, from synchronous code that runs inside (or outside)
/// an async runtime, such as DataFusion's `SchemaProvider::table_exist` or
/// a table function's planning: on a multi-threaded Tokio runtime in
/// `block_in_place`; for a local store (`local`), which needs no runtime, on
/// a thread of its own. A remote store on a single-threaded runtime,
/// where waiting would stall the runtime that drives the request, is an
/// error naming `what` was to be read.
pub(crate) fn wait_for<F>(
    local: bool,
    read: F,
    what: &str,
) -> std::result::Result<F::Output, String>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(read)))
        }
        _ if local => std::thread::scope(|scope| {
            scope
                .spawn(|| futures::executor::block_on(read))
                .join()
                .map_err(|_| format!("the read of {what} panicked"))
        }),
        _ => Err(format!(
            "{what} cannot be read from a remote store while waiting on a \
             single-threaded Tokio runtime; use a multi-threaded one"
        )),
    }
}

/// The index with the versions `changes` (each following the one before)
/// applied.
fn extended(index: &Index, changes: &[IndexVersion]) -> Index {
    let mut index = index.clone();
    for change in changes {
        apply(&mut index, change);
    }
    index
}

/// An index version as read: format 2 changes, or a whole format 1
/// manifest (the last version before a migration).
pub(super) enum Read {
    Changes(IndexVersion),
    Whole(Manifest),
}

/// Parses one index version file (`path` names it in errors).
pub(super) fn parse_index_version(path: &str, bytes: &[u8], expected: u64) -> Result<Read> {
    let corrupt = |reason: String| Error::CorruptManifest {
        path: path.to_string(),
        reason,
    };
    if versions::format_of(path, bytes)? < 2 {
        return Ok(Read::Whole(parse_manifest(path, bytes, expected)?));
    }
    let version: IndexVersion =
        serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if version.version != expected {
        return Err(corrupt(format!(
            "it says version {}, its name says {expected}",
            version.version
        )));
    }
    Ok(Read::Changes(version))
}

/// The index a format 1 manifest describes; its views' logs are the
/// manifest itself until the catalog is migrated (slot `""`).
pub(super) fn legacy_index(manifest: &Manifest) -> Index {
    Index {
        version: manifest.version,
        committed_at: manifest.committed_at,
        commit_id: manifest.commit_id.clone(),
        views: manifest
            .views
            .iter()
            .map(|v| (v.name.clone(), index_entry(v, String::new())))
            .collect(),
        relations: manifest.relations.clone(),
        retired_slots: vec![],
        retired: manifest.retired.clone(),
    }
}

/// The index entry of `view`, whose log is `slot`.
pub fn index_entry(view: &ViewEntry, slot: SlotId) -> IndexEntry {
    IndexEntry {
        name: view.name.clone(),
        id: view.id.clone(),
        slot,
        sources: view.definition.sources.clone(),
    }
}

/// `value` as JSON; `what` names it when that fails.
pub(super) fn encode<T: serde::Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::Encoding {
        what,
        reason: e.to_string(),
    })
}

impl Catalog {
    pub(super) fn checkpoint_path(&self, version: u64) -> Path {
        self.path(&format!("_matview/checkpoint/{version:020}.json"))
    }

    /// Reads one index version (`None`: not there).
    pub(super) async fn read_index_version(&self, version: u64) -> Result<Option<Read>> {
        let Some(bytes) = self.index_log.get(version).await? else {
            return Ok(None);
        };
        let path = self
            .index_log
            .display(&self.index_log.version_path(version));
        parse_index_version(&path, &bytes, version).map(Some)
    }

    /// [`Self::reload`] with every view parsed, for what must see them all
    /// (cleanup, recovery): a block of the checkpoint that does not parse
    /// is an error rather than views left out.
    pub(crate) async fn reload_whole(&self) -> Result<Arc<Index>> {
        let index = self.reload().await?;
        index.views.read_all().await;
        match index.views.parse_all() {
            Some((path, reason)) => Err(Error::CorruptManifest { path, reason }),
            None => Ok(index),
        }
    }

    /// Loads the latest index version (if newer than what is loaded) and
    /// returns it (see [`Self::load_latest`]).
    pub async fn reload(&self) -> Result<Arc<Index>> {
        self.load_latest().await?;
        let index = self.index();
        self.check_poisoned()?;
        Ok(index)
    }

    /// Loads the latest index version if newer than what is loaded, and
    /// returns its number. When nothing changed this costs two `HEAD`
    /// requests (of the version after the loaded one, and of the loaded
    /// one: versions a checkpoint covers may be deleted any time); it reads
    /// the versions committed since, or, far behind, a checkpoint and the
    /// versions after it, whose views are parsed only when needed; it
    /// never lists the log unless the pointer is missing or stale.
    pub(crate) async fn load_latest(&self) -> Result<u64> {
        let current = self.index();
        // A block of the checkpoint that could not be read (rather than
        // parsed) is mended by reading the index again.
        let unread = current.views.unread_failure();
        if !unread {
            self.check_poisoned()?;
        }
        let version = current.version;
        if !unread && version > 0 && self.index_log.still_latest(version).await? {
            return Ok(version);
        }
        let (latest, pointer) = self.index_log.latest_version().await?;
        let Some(latest) = latest else {
            return Ok(version);
        };
        if latest <= version && !unread {
            return Ok(version);
        }
        let mut near = !unread && version > 0 && latest - version <= CHECKPOINT_INTERVAL;
        // The checkpoint the loaded views still read blocks from goes once
        // two newer ones are written (see `Self::cleanup`): once one newer
        // may be, read the rest of it, or start from the newest.
        if near
            && let Some(checkpoint) = current.views.reading_checkpoint()
            && latest >= checkpoint + CHECKPOINT_INTERVAL
        {
            current.views.read_all().await;
            near = !current.views.unread_failure();
        }
        if near && let Some(changes) = self.read_forward(version, latest).await? {
            return Ok(self
                .install(Arc::new(extended(&current, &changes)), None)
                .version);
        }
        let (loaded, legacy) = self
            .read_from_base(latest, pointer.and_then(|p| p.checkpoint))
            .await?;
        Ok(self.install(loaded, legacy).version)
    }

    /// The error of a checkpoint whose views did not parse, if any.
    pub(crate) fn check_poisoned(&self) -> Result<()> {
        if let Some((path, reason)) = self.index().views.failure() {
            return Err(Error::CorruptManifest { path, reason });
        }
        Ok(())
    }

    /// The loaded index version, without parsing anything.
    pub fn version(&self) -> u64 {
        self.index().version
    }

    /// The schemas (catalog, schema) that hold views in the loaded index
    /// (or did since its checkpoint), without parsing its views.
    pub fn schemas(&self) -> Vec<(String, String)> {
        self.index().views.schemas()
    }

    /// The remembered relations of the loaded index, without parsing its
    /// views.
    pub fn relations(&self) -> Vec<crate::spec::RelationEntry> {
        self.index().relations.clone()
    }

    /// The remembered relation `name` of the loaded index, if any.
    pub fn relation(
        &self,
        name: &crate::spec::QualifiedName,
    ) -> Option<crate::spec::RelationEntry> {
        self.index()
            .relations
            .iter()
            .find(|r| &r.name == name)
            .cloned()
    }

    /// The versions after `from` up to `to`; `None` when one is gone
    /// (deleted under an idle reader) or starts afresh.
    async fn read_forward(&self, from: u64, to: u64) -> Result<Option<Vec<IndexVersion>>> {
        let reads = self.read_index_versions(from + 1..=to).await;
        let mut changes = Vec::with_capacity(reads.len());
        for read in reads {
            match read? {
                Some(Read::Changes(change)) if change.base.is_none() => changes.push(change),
                _ => return Ok(None),
            }
        }
        Ok(Some(changes))
    }

    /// The index at `latest`, from the newest checkpoint or base before it.
    pub(super) async fn read_from_base(
        &self,
        latest: u64,
        checkpoint: Option<u64>,
    ) -> Result<(Arc<Index>, Option<Arc<Manifest>>)> {
        // The checkpoint the pointer names, read together with the versions
        // after it; when one of those is gone (a newer checkpoint the
        // pointer does not name yet covers it) or holds a base, the walk
        // back from the latest; when there is no checkpoint, the newest
        // listed.
        if let Some(c) = checkpoint.filter(|c| *c <= latest) {
            let (start, after) =
                futures::future::join(self.read_checkpoint(c), self.read_forward(c, latest)).await;
            if let Some(start) = start? {
                // A version that does not read is named by the walk.
                if let Ok(Some(changes)) = after {
                    return Ok((Arc::new(extended(&start, &changes)), None));
                }
                if let Some(read) = self.walk_back(Some(start), latest).await? {
                    return Ok(read);
                }
            }
        }
        let mut start = None;
        for c in self.list_checkpoints().await?.into_iter().rev() {
            if c <= latest
                && let Some(index) = self.read_checkpoint(c).await?
            {
                start = Some(index);
                break;
            }
        }
        match self.walk_back(start, latest).await? {
            Some(read) => Ok(read),
            None => Err(Error::CorruptManifest {
                path: self.index_log.display(&self.index_log.dir().clone()),
                reason: "an index version is missing and no checkpoint covers it; \
                         run `dfmv recover` (MatviewSession::recover) to rebuild it from the views' data"
                    .into(),
            }),
        }
    }

    /// Reads the index versions `versions`, in that order, up to
    /// [`Self::reads_at_once`] at a time; each with its own outcome.
    async fn read_index_versions(
        &self,
        versions: impl Iterator<Item = u64>,
    ) -> Vec<Result<Option<Read>>> {
        let reads: Vec<BoxFuture<'_, Result<Option<Read>>>> = versions
            .map(|v| Box::pin(self.read_index_version(v)) as BoxFuture<'_, _>)
            .collect();
        futures::stream::iter(reads)
            .buffered(self.reads_at_once())
            .collect()
            .await
    }

    /// Whether the catalog is in a local folder (`file://`), where a read
    /// waits for no network and needs no runtime.
    pub(crate) fn is_local(&self) -> bool {
        self.store_url.as_str().starts_with("file://")
    }

    /// How many index versions are read at once: see
    /// [`MOST_READS_AT_ONCE`] and [`MOST_LOCAL_READS_AT_ONCE`].
    fn reads_at_once(&self) -> usize {
        if self.is_local() {
            MOST_LOCAL_READS_AT_ONCE
        } else {
            MOST_READS_AT_ONCE
        }
    }

    /// The index at `latest`: the versions from `latest` back to `start`
    /// (a checkpoint), a version with a base, a format 1 manifest or the
    /// beginning, applied in order. `None` when a version on the way is
    /// missing. Versions are read several at a time: from a checkpoint, all
    /// those after it; without one (where the walk stops is not known), the
    /// latest alone and then twice as many each round, so a format 1
    /// manifest or a base at the latest version costs one read.
    async fn walk_back(
        &self,
        mut start: Option<Arc<Index>>,
        latest: u64,
    ) -> Result<Option<(Arc<Index>, Option<Arc<Manifest>>)>> {
        let floor = start.as_ref().map_or(0, |i| i.version);
        let mut changes = vec![];
        let mut version = latest;
        let mut legacy = None;
        let mut at_once = if start.is_some() {
            self.reads_at_once() as u64
        } else {
            1
        };
        let base = 'walk: loop {
            if version == floor
                && let Some(loaded) = start.take()
            {
                break loaded;
            }
            if version == 0 {
                self.set_base_version(0);
                break Arc::new(Index::default());
            }
            let lowest = version.saturating_sub(at_once - 1).max(floor + 1);
            // An error counts only once the walk reaches its version: one
            // below a base (a recovery's, say) may be unreadable.
            let reads = self.read_index_versions((lowest..=version).rev()).await;
            for read in reads {
                match read? {
                    Some(Read::Changes(mut read)) => match read.base.take() {
                        Some(base) => {
                            self.set_base_version(version);
                            changes.push(read);
                            break 'walk Arc::new(*base);
                        }
                        None => changes.push(read),
                    },
                    Some(Read::Whole(manifest)) => {
                        let index = legacy_index(&manifest);
                        legacy = Some(Arc::new(manifest));
                        break 'walk Arc::new(index);
                    }
                    None => return Ok(None),
                }
                version -= 1;
            }
            at_once = (at_once * 2).min(self.reads_at_once() as u64);
        };
        changes.reverse();
        let base = Arc::new(extended(&base, &changes));
        if legacy.is_some() && base.version != latest {
            return Err(Error::CorruptManifest {
                path: self.index_log.display(&self.index_log.version_path(latest)),
                reason: "a format 1 version follows format 2 versions".into(),
            });
        }
        Ok(Some((base, legacy)))
    }

    /// Reads checkpoint `version`'s header and the views that come in the
    /// same first read ([`CHECKPOINT_FIRST_READ`] bytes); its other blocks
    /// are read as they are needed (see [`StoreBlocks`]).
    async fn read_checkpoint(&self, version: u64) -> Result<Option<Arc<Index>>> {
        let path = self.checkpoint_path(version);
        let reader = StoreBlocks::new(self, &path);
        let options = object_store::GetOptions {
            range: reader
                .is_some()
                .then_some(object_store::GetRange::Bounded(0..CHECKPOINT_FIRST_READ)),
            ..Default::default()
        };
        let (mut bytes, size, e_tag) = match self.store.get_opts(&path, options).await {
            Ok(got) => {
                let (size, e_tag) = (got.meta.size, got.meta.e_tag.clone());
                (got.bytes().await?, size, e_tag)
            }
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let display = self.display_path(&path);
        let corrupt = |reason: String| Error::CorruptManifest {
            path: display.clone(),
            reason,
        };
        // A header longer than the first read: read on, twice as much each
        // time, until its line ends.
        let split = loop {
            if let Some(split) = bytes.iter().position(|b| *b == b'\n') {
                break split;
            }
            let have = bytes.len() as u64;
            if have >= size {
                break bytes.len();
            }
            let more = self
                .store
                .get_range(&path, have..size.min(have * 2))
                .await?;
            bytes = [bytes, more].concat().into();
        };
        let head = bytes.slice(..split);
        let views = bytes.slice((split + 1).min(bytes.len())..);
        versions::format_of(&display, &head)?;
        let header: CheckpointHeader =
            serde_json::from_slice(&head).map_err(|e| corrupt(e.to_string()))?;
        if header.index.version != version {
            return Err(corrupt(format!(
                "it says version {}, its name says {version}",
                header.index.version
            )));
        }
        // The views, then (format 5) a newline and the readers.
        let views_offset = split as u64 + 1;
        let after_header = match header.readers_bytes {
            0 => header.views_bytes,
            readers => header.views_bytes + 1 + readers,
        };
        if size.saturating_sub(views_offset) != after_header {
            return Err(corrupt(format!(
                "{} bytes follow its header, which says {after_header}",
                size.saturating_sub(views_offset),
            )));
        }
        // Formats 2 and 3 keep every view on one line, read now.
        let blocks = (header.format_version >= 4).then_some(header.blocks.as_slice());
        let readers = (header.format_version >= 5).then_some(header.readers.as_slice());
        let (views, reader) = match (blocks, reader) {
            (Some(_), Some(reader)) => (views, Some(reader.starting_at(views_offset, e_tag))),
            _ if (views.len() as u64) < after_header => {
                let rest = self
                    .store
                    .get_range(&path, views_offset + views.len() as u64..size)
                    .await?;
                ([views, rest].concat().into(), None)
            }
            (_, _) => (views, None),
        };
        let views = CheckpointViews::new(
            CheckpointRead {
                path: display.clone(),
                version,
                head: views,
                bytes: after_header,
                reader: reader.map(|r| Arc::new(r) as Arc<dyn BlockReader>),
                schemas: header.schemas,
            },
            blocks,
            readers,
        )
        .map_err(corrupt)?;
        *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
        Ok(Some(Arc::new(Index {
            views: Views::from_checkpoint(views),
            ..header.index
        })))
    }

    /// The checkpoint versions, oldest first (a `LIST`).
    pub(super) async fn list_checkpoints(&self) -> Result<Vec<u64>> {
        let mut found: Vec<u64> = self
            .store
            .list(Some(&self.path("_matview/checkpoint")))
            .try_filter_map(|meta| async move { Ok(journal::version_of(&meta.location)) })
            .try_collect()
            .await?;
        found.sort_unstable();
        Ok(found)
    }

    pub(super) fn install(&self, loaded: Arc<Index>, legacy: Option<Arc<Manifest>>) -> Arc<Index> {
        let mut guard = self.index.write().unwrap_or_else(|e| e.into_inner());
        let (new, old) = (loaded.version, guard.version);
        // The same version read again mends a checkpoint block that could
        // not be read.
        let mends = new == old && guard.views.unread_failure() && !loaded.views.unread_failure();
        if new > old || (old == 0 && new == 0) || mends {
            *guard = loaded;
            *self.legacy.write().unwrap_or_else(|e| e.into_inner()) = legacy;
        }
        Arc::clone(&guard)
    }

    /// Installs a committed index and returns it.
    pub(super) fn install_index(&self, index: Index) -> Arc<Index> {
        self.install(Arc::new(index), None)
    }

    /// The version of the format 2 base this process last read or wrote
    /// (the versions before it are not needed to read the index).
    pub(super) fn base_version(&self) -> Option<u64> {
        *self.base_version.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set_base_version(&self, version: u64) {
        let mut guard = self.base_version.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none_or(|v| v < version) {
            *guard = Some(version);
        }
    }

    /// Whether the loaded index is still a format 1 manifest.
    pub fn is_format_1(&self) -> bool {
        self.legacy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    pub(super) fn legacy(&self) -> Option<Arc<Manifest>> {
        self.legacy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Commits `commit` to the index: its requirements are checked
    /// against the latest index, then its updates applied there; when
    /// another writer commits first, both happen again on the newer index.
    /// Only the difference is written. Returns the committed index, or how
    /// the commit failed ([`CommitFailure`]: whether it provably did not
    /// land, which alone decides whether the caller may delete what it
    /// wrote for it).
    pub(crate) async fn commit(&self, commit: &IndexCommit) -> Result<Arc<Index>, CommitFailure> {
        let ((), index) = self.commit_change(|index| commit.apply(index)).await?;
        Ok(index)
    }

    /// A change no statement makes (an index as an older build left it):
    /// `change` is applied to a copy of the latest index, unchecked. For
    /// tests that build such catalogs.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub async fn commit_unchecked(
        &self,
        change: impl FnMut(&mut Index) -> Result<()>,
    ) -> Result<()> {
        self.commit_change(change).await?;
        Ok(())
    }

    /// The commit loop: `change` is applied to a copy of the latest index
    /// (again on the newer index when another writer commits first). Every
    /// commit carries a fresh identity; a put that failed is read back to
    /// know whether it landed (see [`journal::Log::put`]), and a put that
    /// fails even so is the one [`CommitFailure::Unknown`].
    pub(crate) async fn commit_change<T>(
        &self,
        mut change: impl FnMut(&mut Index) -> Result<T>,
    ) -> Result<(T, Arc<Index>), CommitFailure> {
        let mut base = self.reload().await?;
        let forgotten = self.forgotten.lock().map(|f| f.clone()).unwrap_or_default();
        let commit_id = crate::spec::new_id();
        let mut retries = Retries::new(&self.location);
        loop {
            if self.is_format_1() {
                // Migrated (by this writer or another), then tried again
                // on the format 2 index; counted as an attempt.
                self.migrate_from(&base).await?;
                base = self.reload().await?;
                retries.lost().await?;
                continue;
            }
            let mut next = (*base).clone();
            let out = change(&mut next)?;
            // What a cleanup already deleted.
            next.retired_slots
                .retain(|r| !forgotten.slots.contains(&r.slot));
            next.retired.retain(|r| !forgotten.retired.contains(r));
            next.version = base.version + 1;
            next.committed_at = Utc::now();
            next.commit_id = commit_id.clone();
            for retired in next
                .retired_slots
                .iter_mut()
                .filter(|r| r.retired_at.is_none())
            {
                retired.retired_at = Some(next.committed_at);
            }
            let record = IndexVersion {
                format_version: MANIFEST_FORMAT,
                version: next.version,
                committed_at: next.committed_at,
                commit_id: commit_id.clone(),
                base: None,
                actions: base.diff(&next),
            };
            // A view of a block that does not parse would be missing from
            // what the change saw (its dependents, say) or from the diff.
            if let Some((path, reason)) = next.views.failure().or_else(|| base.views.failure()) {
                return Err(Error::CorruptManifest { path, reason }.into());
            }
            let bytes = encode("an index version", &record)?;
            match self
                .index_log
                .put(next.version, bytes, &commit_id, commit_id_in)
                .await
                .map_err(CommitFailure::Unknown)?
            {
                journal::Put::Lost => {
                    retries.lost().await?;
                    base = self.reload().await?;
                    continue;
                }
                journal::Put::Landed => {}
            }
            let next = self.install_index(next);
            if let Ok(mut pending) = self.forgotten.lock() {
                pending.slots.retain(|s| !forgotten.slots.contains(s));
                pending.retired.retain(|r| !forgotten.retired.contains(r));
            }
            // Its predecessor may be deleted once it is older than the window.
            self.schedule_log_sweep(self.expiry(next.committed_at));
            self.after_index_commit(&next).await;
            return Ok((out, next));
        }
    }

    /// Writes a checkpoint when one is due, then the pointer. With a new
    /// checkpoint, what the one before it covers goes: the index versions
    /// before it and the checkpoint before that (a reader that was reading
    /// them starts again from the newer one), so the log holds at most two
    /// intervals of versions however many commits the catalog has had.
    async fn after_index_commit(&self, index: &Index) {
        let mut checkpoint = *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        if index.version.is_multiple_of(CHECKPOINT_INTERVAL) && self.write_checkpoint(index).await {
            if let Some(previous) = checkpoint.filter(|c| *c < index.version) {
                // Best effort: a later checkpoint or cleanup deletes what is left.
                if let Err(e) = self.index_log.delete_before(previous).await {
                    log::warn!("could not delete index versions before {previous}: {e}");
                }
                if let Some(older) = previous.checked_sub(CHECKPOINT_INTERVAL) {
                    let _ = self.store.delete(&self.checkpoint_path(older)).await;
                }
            }
            checkpoint = Some(index.version);
            *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = checkpoint;
        }
        self.index_log.write_pointer(journal::LatestPointer {
            version: index.version,
            checkpoint,
        });
    }

    /// Writes the checkpoint of `index`; best effort (a missing checkpoint
    /// only makes readers read more versions).
    pub(super) async fn write_checkpoint(&self, index: &Index) -> bool {
        index.views.read_all().await;
        let Ok((views, blocks)) = crate::spec::checkpoint_blocks(index.views.values()) else {
            return false;
        };
        let Ok((readers, reader_blocks)) = crate::spec::checkpoint_readers(index.views.values())
        else {
            return false;
        };
        // Never a checkpoint without the views of a block that did not parse.
        if index.views.failure().is_some() {
            return false;
        }
        let header = CheckpointHeader {
            format_version: MANIFEST_FORMAT,
            index: Index {
                views: Views::default(),
                ..index.clone()
            },
            schemas: index.schemas(),
            views_bytes: views.len() as u64,
            blocks,
            readers: reader_blocks,
            readers_bytes: readers.len() as u64,
        };
        let Ok(mut bytes) = encode("a checkpoint", &header) else {
            return false;
        };
        bytes.push(b'\n');
        bytes.extend(views);
        if !readers.is_empty() {
            bytes.push(b'\n');
            bytes.extend(readers);
        }
        match self
            .store
            .put_opts(
                &self.checkpoint_path(index.version),
                PutPayload::from(bytes),
                create_only(),
            )
            .await
        {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => true,
            Err(e) => {
                log::warn!(
                    "could not write the checkpoint of version {}: {e}",
                    index.version
                );
                false
            }
        }
    }

    /// Moves a format 1 catalog to the current format: every view's entry and data
    /// become the first version of a log of its own, then one index version
    /// with the whole index as its base is committed on top of the format 1
    /// log. Returns whether it migrated (false: already format 2 or later, or
    /// nothing committed yet). Safe to race with other writers and other
    /// migrations: the index version is written only if no version of its
    /// number exists, and the view logs of a migration that lost are
    /// deleted (nothing references them).
    pub async fn migrate(&self) -> Result<bool> {
        let base = self.reload().await?;
        if !self.is_format_1() {
            return Ok(false);
        }
        self.migrate_from(&base).await?;
        self.reload().await?;
        Ok(true)
    }

    pub(super) async fn migrate_from(&self, base: &Index) -> Result<()> {
        let Some(manifest) = self.legacy().filter(|m| m.version == base.version) else {
            return Ok(());
        };
        let mut index = legacy_index(&manifest);
        let writes: Vec<BoxFuture<'_, Result<(QualifiedName, SlotId)>>> = manifest
            .views
            .iter()
            .map(|view| {
                Box::pin(async move {
                    let slot = self.create_view_log(view).await?;
                    Ok((view.name.clone(), slot))
                }) as BoxFuture<'_, _>
            })
            .collect();
        let slots: Vec<(QualifiedName, SlotId)> = futures::stream::iter(writes)
            .buffer_unordered(32)
            .try_collect()
            .await?;
        for (name, slot) in &slots {
            if let Some(entry) = index.views.get(name) {
                let entry = IndexEntry {
                    slot: slot.clone(),
                    ..entry.clone()
                };
                index.views.insert(name.clone(), entry);
            }
        }
        let commit_id = crate::spec::new_id();
        let version = manifest.version + 1;
        let committed_at = Utc::now();
        index.version = version;
        index.committed_at = committed_at;
        index.commit_id = commit_id.clone();
        let record = IndexVersion {
            format_version: MANIFEST_FORMAT,
            version,
            committed_at,
            commit_id: commit_id.clone(),
            base: Some(Box::new(index.clone())),
            actions: vec![],
        };
        let bytes = encode("an index version", &record)?;
        match self
            .index_log
            .put(version, bytes, &commit_id, commit_id_in)
            .await
        {
            Ok(journal::Put::Landed) => {
                log::info!(
                    "catalog {} moved to format {MANIFEST_FORMAT} at version {version}",
                    self.location
                );
                self.set_base_version(version);
                let index = self.install_index(index);
                self.after_index_commit(&index).await;
                Ok(())
            }
            Ok(journal::Put::Lost) => {
                for (_, slot) in slots {
                    let _ = self.view_log(&slot).log.delete_all().await;
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Applies one index version to the index before it.
pub(super) fn apply(index: &mut Index, version: &IndexVersion) {
    index.apply(&version.actions);
    index.version = version.version;
    index.committed_at = version.committed_at;
    index.commit_id = version.commit_id.clone();
}
