//! The materialized views of an [`Index`]: a map by name resting on a
//! base (a checkpoint's views, read and parsed one block at a time, or a
//! map) with the changes since on top. Finding one view reads and parses
//! at most one block of [`CHECKPOINT_BLOCK_VIEWS`] entries, and copying an
//! index for a commit copies only the changes, so neither grows with the
//! number of views; listing every view reads and parses the rest once.

use std::collections::HashMap;
use std::ops::{Bound, Range};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;

use super::*;

/// Most views in one block of a checkpoint.
pub const CHECKPOINT_BLOCK_VIEWS: usize = 64;

/// Changes kept on top of the base before they are folded into it (which
/// costs a pass over every view).
const MOST_CHANGES: usize = 256;

/// One block of a checkpoint's views, as its header lists it: a line
/// holding a JSON list of at most [`CHECKPOINT_BLOCK_VIEWS`] entries,
/// sorted by name, the blocks in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBlock {
    /// The name of the block's first view.
    pub first: QualifiedName,
    /// The length of the block's line in bytes, without its newline.
    pub bytes: u64,
}

/// Reads byte ranges of a checkpoint's views (offsets from the first byte
/// after its header line) for the blocks not read with the header. The
/// catalog implements it over its object store; this module does no I/O.
pub trait BlockReader: Send + Sync + fmt::Debug {
    /// The bytes `range`, waiting for them (from synchronous code: finding
    /// a view is synchronous, as DataFusion's `SchemaProvider::table_exist`
    /// is).
    fn read(&self, range: Range<u64>) -> std::result::Result<bytes::Bytes, String>;

    /// The bytes `range`.
    fn read_async(
        &self,
        range: Range<u64>,
    ) -> BoxFuture<'_, std::result::Result<bytes::Bytes, String>>;
}

/// Why a block of a checkpoint is missing from its views.
#[derive(Debug, Clone)]
struct Failure {
    reason: String,
    /// It could not be read (the checkpoint was deleted under a reader
    /// that held it long, or the store failed): reading the index again
    /// mends it. Otherwise it did not parse, which nothing mends.
    unread: bool,
}

/// Which materialized views read one relation, as a checkpoint keeps it
/// (format 5): the lines after the views' hold these in the source's name
/// order, [`CHECKPOINT_BLOCK_VIEWS`] per line, so that dropping a relation
/// finds what depends on it by reading one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceReaders {
    /// The relation read.
    pub source: QualifiedName,
    /// The views reading it, in name order.
    pub readers: Vec<QualifiedName>,
}

/// The views of a checkpoint, read and parsed a block at a time.
#[derive(Debug)]
pub struct CheckpointViews {
    /// The checkpoint, as errors name it.
    path: String,
    /// The index version the checkpoint holds.
    version: u64,
    /// The first bytes after the checkpoint's header, read with it (shared
    /// with the bytes read, not copied).
    head: bytes::Bytes,
    /// Reads the blocks `head` does not hold (`None`: it holds them all).
    reader: Option<Arc<dyn BlockReader>>,
    /// Blocks read after the header, by number (views' blocks, then
    /// readers' blocks), until parsed.
    read: Mutex<HashMap<usize, bytes::Bytes>>,
    /// Bytes after the header read so far, `head` included.
    bytes_read: AtomicU64,
    /// Each block's first name (`None`: one block of a format 2 or 3
    /// checkpoint, holding every view) and bytes after the header.
    blocks: Vec<(Option<QualifiedName>, Range<usize>)>,
    /// Each block, once parsed (`None`: it did not parse).
    parsed: Vec<OnceLock<Option<Vec<IndexEntry>>>>,
    /// The blocks of readers, by first source (`None`: a checkpoint
    /// before format 5, which keeps no readers).
    reader_blocks: Option<Vec<(QualifiedName, Range<usize>)>>,
    /// Each block of readers, once parsed.
    readers_parsed: Vec<OnceLock<Option<Vec<SourceReaders>>>>,
    /// Why a block is missing, the first time one was.
    failure: Mutex<Option<Failure>>,
    /// The schemas (catalog, schema) holding views.
    schemas: Vec<(String, String)>,
}

/// What [`CheckpointViews::new`] takes besides the header's blocks.
#[derive(Debug)]
pub struct CheckpointRead {
    /// The checkpoint, as errors name it.
    pub path: String,
    /// The index version it holds.
    pub version: u64,
    /// The first bytes after the header, read with it.
    pub head: bytes::Bytes,
    /// How many bytes follow the header, all blocks read.
    pub bytes: u64,
    /// Reads the rest (needed when `head` is shorter than that).
    pub reader: Option<Arc<dyn BlockReader>>,
    /// The schemas (catalog, schema) holding views, from the header.
    pub schemas: Vec<(String, String)>,
}

/// Where the lines of `blocks` lie from byte `start` on, each after a
/// newline (but a line at byte 0); checks they are in name order and end
/// by `total`, and the newlines `head` holds.
fn lay_out(
    what: &str,
    blocks: &[CheckpointBlock],
    mut start: usize,
    total: usize,
    head: &[u8],
) -> std::result::Result<Vec<(QualifiedName, Range<usize>)>, String> {
    let mut ranges = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        if start > 0 {
            // Checked where read with the header; elsewhere a block that
            // does not start a line does not parse.
            if start < head.len() && head[start] != b'\n' {
                return Err(format!("block {i} of its {what} does not start a line"));
            }
            start += 1;
        }
        let end = start + usize::try_from(block.bytes).map_err(|e| e.to_string())?;
        if end > total {
            return Err(format!(
                "its blocks of {what} take more than its {total} bytes"
            ));
        }
        ranges.push((block.first.clone(), start..end));
        start = end;
    }
    if blocks.windows(2).any(|w| w[0].first >= w[1].first) {
        return Err(format!("its blocks of {what} are not in name order"));
    }
    Ok(ranges)
}

impl CheckpointViews {
    /// The views of a checkpoint whose header lists `blocks` (`None`: a
    /// format 2 or 3 checkpoint, whose views are one list) and `readers`
    /// (`None`: before format 5); checks that the blocks' lengths add up
    /// to the bytes after the header.
    pub fn new(
        read: CheckpointRead,
        blocks: Option<&[CheckpointBlock]>,
        readers: Option<&[CheckpointBlock]>,
    ) -> std::result::Result<Self, String> {
        let total = usize::try_from(read.bytes).map_err(|e| e.to_string())?;
        if read.head.len() > total {
            return Err(format!(
                "{} bytes follow its header, which says {total}",
                read.head.len()
            ));
        }
        if read.head.len() < total && read.reader.is_none() {
            return Err(format!(
                "only {} of the {total} bytes after its header were read",
                read.head.len()
            ));
        }
        let ranges: Vec<(Option<QualifiedName>, Range<usize>)> = match blocks {
            None => vec![(None, 0..total)],
            Some(blocks) => lay_out("views", blocks, 0, total, &read.head)?
                .into_iter()
                .map(|(first, range)| (Some(first), range))
                .collect(),
        };
        let views_end = ranges.last().map_or(0, |(_, r)| r.end);
        // After the views' last line and a newline.
        let reader_blocks = match readers {
            Some(readers) => Some(lay_out("readers", readers, views_end, total, &read.head)?),
            None => None,
        };
        let end = match reader_blocks.as_ref().and_then(|r| r.last()) {
            Some((_, range)) => range.end,
            None => views_end,
        };
        if end != total {
            return Err(format!(
                "its blocks take {end} bytes, {total} follow its header"
            ));
        }
        Ok(Self {
            path: read.path,
            version: read.version,
            bytes_read: AtomicU64::new(read.head.len() as u64),
            reader: (read.head.len() < total).then_some(read.reader).flatten(),
            head: read.head,
            read: Mutex::default(),
            parsed: ranges.iter().map(|_| OnceLock::new()).collect(),
            blocks: ranges,
            readers_parsed: reader_blocks
                .iter()
                .flatten()
                .map(|_| OnceLock::new())
                .collect(),
            reader_blocks,
            failure: Mutex::new(None),
            schemas: read.schemas,
        })
    }

    /// The views of a checkpoint all read at once.
    pub fn whole(
        path: String,
        version: u64,
        views: impl Into<bytes::Bytes>,
        blocks: Option<&[CheckpointBlock]>,
        schemas: Vec<(String, String)>,
    ) -> std::result::Result<Self, String> {
        let head = views.into();
        Self::new(
            CheckpointRead {
                path,
                version,
                bytes: head.len() as u64,
                head,
                reader: None,
                schemas,
            },
            blocks,
            None,
        )
    }

    fn fail(&self, reason: String, unread: bool) {
        log::error!("{}: {reason}", self.path);
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.get_or_insert(Failure { reason, unread });
    }

    /// How many blocks there are, views' and readers'.
    fn block_count(&self) -> usize {
        self.blocks.len() + self.readers_parsed.len()
    }

    /// Where block `i` lies (views' blocks, then readers').
    fn range(&self, i: usize) -> Range<usize> {
        match i.checked_sub(self.blocks.len()) {
            None => self.blocks[i].1.clone(),
            Some(r) => self.reader_blocks.as_ref().expect("blocks of readers")[r]
                .1
                .clone(),
        }
    }

    fn is_parsed(&self, i: usize) -> bool {
        match i.checked_sub(self.blocks.len()) {
            None => self.parsed[i].get().is_some(),
            Some(r) => self.readers_parsed[r].get().is_some(),
        }
    }

    /// The blocks of `blocks` neither parsed nor read yet, as the range of
    /// bytes from the first one's start to the last one's end (with the
    /// first and last block).
    fn unread(&self, blocks: Range<usize>) -> Option<(usize, usize, Range<u64>)> {
        self.reader.as_ref()?;
        let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let missing = |i: &usize| {
            !self.is_parsed(*i) && self.range(*i).end > self.head.len() && !read.contains_key(i)
        };
        let first = blocks.clone().find(missing)?;
        let last = blocks.rev().find(missing)?;
        let span = self.range(first).start as u64..self.range(last).end as u64;
        Some((first, last, span))
    }

    /// Keeps `bytes`, read as `span` for blocks `first..=last`, by block.
    fn keep(&self, first: usize, last: usize, span: Range<u64>, bytes: bytes::Bytes) {
        if bytes.len() as u64 != span.end - span.start {
            self.fail(
                format!(
                    "{} bytes of it were read where {} were asked for",
                    bytes.len(),
                    span.end - span.start
                ),
                true,
            );
            return;
        }
        self.bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        for i in first..=last {
            let range = self.range(i);
            let at = range.start - span.start as usize..range.end - span.start as usize;
            read.entry(i).or_insert_with(|| bytes.slice(at));
        }
    }

    /// Reads, in one request and waiting for it, the blocks of `blocks`
    /// not read yet.
    fn read_blocks(&self, blocks: Range<usize>) {
        if let Some((first, last, span)) = self.unread(blocks) {
            let reader = self.reader.as_ref().expect("unread blocks have a reader");
            self.took(first, last, span.clone(), reader.read(span));
        }
    }

    /// Reads, in one request, every block not read yet.
    async fn read_all(&self) {
        if let Some((first, last, span)) = self.unread(0..self.block_count()) {
            let reader = self.reader.as_ref().expect("unread blocks have a reader");
            let read = reader.read_async(span.clone()).await;
            self.took(first, last, span, read);
        }
    }

    /// Keeps what a read of `span` for blocks `first..=last` gave, or
    /// records why it failed.
    fn took(
        &self,
        first: usize,
        last: usize,
        span: Range<u64>,
        read: std::result::Result<bytes::Bytes, String>,
    ) {
        match read {
            Ok(bytes) => self.keep(first, last, span, bytes),
            Err(e) => self.fail(format!("it could not be read: {e}"), true),
        }
    }

    /// The bytes of block `i`, read now if they were not.
    fn bytes_of(&self, i: usize) -> Option<bytes::Bytes> {
        let range = self.range(i);
        if range.end <= self.head.len() {
            return Some(self.head.slice(range));
        }
        self.read_blocks(i..i + 1);
        let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        read.get(&i).cloned()
    }

    /// Parses `bytes`, block `i`'s, recording why when they do not parse.
    fn parse<T: serde::de::DeserializeOwned>(&self, i: usize, bytes: &[u8]) -> Option<T> {
        let parsed = match serde_json::from_slice(bytes) {
            Ok(parsed) => Some(parsed),
            Err(e) => {
                let what = if i < self.blocks.len() {
                    "views"
                } else {
                    "readers"
                };
                self.fail(format!("its {what} do not parse: {e}"), false);
                None
            }
        };
        self.read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&i);
        parsed
    }

    /// Block `i` of the views, read and parsed now if it was not (`None`:
    /// it could not be read, or does not parse).
    fn block(&self, i: usize) -> Option<&[IndexEntry]> {
        self.parsed_block(&self.parsed[i], i)
    }

    /// Block `i`, kept in `cell` once parsed: read and parsed now if it
    /// was not.
    fn parsed_block<'a, T: serde::de::DeserializeOwned>(
        &'a self,
        cell: &'a OnceLock<Option<Vec<T>>>,
        i: usize,
    ) -> Option<&'a [T]> {
        if let Some(parsed) = cell.get() {
            return parsed.as_deref();
        }
        let bytes = self.bytes_of(i)?;
        cell.get_or_init(|| self.parse(i, &bytes)).as_deref()
    }

    /// The block `name` falls in (`None`: before the first block).
    fn block_of(&self, name: &QualifiedName) -> Option<usize> {
        self.blocks
            .partition_point(|(first, _)| first.as_ref().is_none_or(|f| f <= name))
            .checked_sub(1)
    }

    fn get(&self, name: &QualifiedName) -> Option<&IndexEntry> {
        let block = self.block(self.block_of(name)?)?;
        block
            .binary_search_by(|e| e.name.cmp(name))
            .ok()
            .map(|k| &block[k])
            // A format 2 or 3 checkpoint's list is in name order too, but
            // nothing checked that when it was written.
            .or_else(|| block.iter().find(|e| &e.name == name))
    }

    /// The views reading `source` (`None`: the checkpoint keeps no
    /// readers, or their block could not be read or parsed); reads one
    /// block of readers.
    fn readers_of(&self, source: &QualifiedName) -> Option<Vec<QualifiedName>> {
        let reader_blocks = self.reader_blocks.as_ref()?;
        let Some(r) = reader_blocks
            .partition_point(|(first, _)| first <= source)
            .checked_sub(1)
        else {
            return Some(vec![]);
        };
        let block = self.parsed_block(&self.readers_parsed[r], self.blocks.len() + r)?;
        Some(
            block
                .binary_search_by(|e| e.source.cmp(source))
                .map(|k| block[k].readers.clone())
                .unwrap_or_default(),
        )
    }

    fn all(&self) -> BTreeMap<QualifiedName, IndexEntry> {
        self.read_blocks(0..self.blocks.len());
        (0..self.blocks.len())
            .filter_map(|i| self.block(i))
            .flatten()
            .map(|e| (e.name.clone(), e.clone()))
            .collect()
    }
}

#[derive(Debug, Clone)]
enum Base {
    Map(Arc<BTreeMap<QualifiedName, IndexEntry>>),
    Checkpoint(Arc<CheckpointViews>),
}

impl Default for Base {
    fn default() -> Self {
        Base::Map(Arc::default())
    }
}

/// The materialized views of an [`Index`], by name: see the module's
/// documentation. Reads like a `BTreeMap`; listing parses what finding
/// did not.
#[derive(Debug, Clone, Default)]
pub struct Views {
    base: Base,
    /// Views put (`Some`) or removed (`None`) since the base.
    changes: BTreeMap<QualifiedName, Option<IndexEntry>>,
    /// Base and changes together, once listed.
    merged: Arc<OnceLock<BTreeMap<QualifiedName, IndexEntry>>>,
}

impl Views {
    /// The views of a checkpoint.
    pub fn from_checkpoint(views: CheckpointViews) -> Self {
        Self {
            base: Base::Checkpoint(Arc::new(views)),
            ..Default::default()
        }
    }

    /// The view named `name`, if any; parses at most one block.
    pub fn get(&self, name: &QualifiedName) -> Option<&IndexEntry> {
        match self.changes.get(name) {
            Some(change) => change.as_ref(),
            None => match &self.base {
                Base::Map(map) => map.get(name),
                Base::Checkpoint(checkpoint) => checkpoint.get(name),
            },
        }
    }

    /// The names of the views that read `source`, in order: from a
    /// checkpoint that keeps readers (format 5), one block of them with
    /// the changes since on top; otherwise by going through every view.
    pub fn readers_of(&self, source: &QualifiedName) -> Vec<QualifiedName> {
        let base = match &self.base {
            Base::Checkpoint(checkpoint) => checkpoint.readers_of(source),
            Base::Map(_) => None,
        };
        let Some(base) = base else {
            return self
                .values()
                .filter(|v| v.sources.contains(source))
                .map(|v| v.name.clone())
                .collect();
        };
        let mut readers: BTreeSet<QualifiedName> = base.into_iter().collect();
        for (name, change) in &self.changes {
            readers.remove(name);
            if change.as_ref().is_some_and(|e| e.sources.contains(source)) {
                readers.insert(name.clone());
            }
        }
        readers.into_iter().collect()
    }

    /// Whether a view is named `name`.
    pub fn contains_key(&self, name: &QualifiedName) -> bool {
        self.get(name).is_some()
    }

    /// Puts a view; returns the one it replaced.
    pub fn insert(&mut self, name: QualifiedName, entry: IndexEntry) -> Option<IndexEntry> {
        let old = self.get(&name).cloned();
        self.changes.insert(name, Some(entry));
        self.changed();
        old
    }

    /// Puts a view, or removes it (`None`), without looking up what it
    /// replaces (as replaying a version does).
    pub fn set(&mut self, name: QualifiedName, entry: Option<IndexEntry>) {
        self.changes.insert(name, entry);
        self.changed();
    }

    /// Removes a view; returns it.
    pub fn remove(&mut self, name: &QualifiedName) -> Option<IndexEntry> {
        let old = self.get(name).cloned()?;
        self.changes.insert(name.clone(), None);
        self.changed();
        Some(old)
    }

    fn changed(&mut self) {
        // What was listed before this change is stale.
        self.merged = Arc::default();
        // Not over a block that does not parse: its views would be lost.
        if self.changes.len() > MOST_CHANGES && self.parse_all().is_none() {
            let all = self.all().clone();
            self.base = Base::Map(Arc::new(all));
            self.changes.clear();
        }
    }

    /// Every view, by name (parses every block not parsed yet).
    fn all(&self) -> &BTreeMap<QualifiedName, IndexEntry> {
        self.merged.get_or_init(|| {
            let mut all = match &self.base {
                Base::Map(map) => (**map).clone(),
                Base::Checkpoint(checkpoint) => checkpoint.all(),
            };
            for (name, change) in &self.changes {
                match change {
                    Some(entry) => all.insert(name.clone(), entry.clone()),
                    None => all.remove(name),
                };
            }
            all
        })
    }

    /// Every view, in name order.
    pub fn iter(&self) -> std::collections::btree_map::Iter<'_, QualifiedName, IndexEntry> {
        self.all().iter()
    }

    /// Every view's name, in order.
    pub fn keys(&self) -> std::collections::btree_map::Keys<'_, QualifiedName, IndexEntry> {
        self.all().keys()
    }

    /// Every view's entry, in name order.
    pub fn values(&self) -> std::collections::btree_map::Values<'_, QualifiedName, IndexEntry> {
        self.all().values()
    }

    /// The views whose names are in `range`, in order.
    pub fn range<R: std::ops::RangeBounds<QualifiedName>>(
        &self,
        range: R,
    ) -> std::collections::btree_map::Range<'_, QualifiedName, IndexEntry> {
        self.all().range(range)
    }

    /// The views from `start` on, in name order, parsing a checkpoint's
    /// blocks only as the iteration reaches them: a page of a listing
    /// parses the blocks it shows. A block that does not parse is left out
    /// and recorded ([`Self::failure`]).
    pub fn iter_from<'a>(
        &'a self,
        start: Bound<&'a QualifiedName>,
    ) -> impl Iterator<Item = &'a IndexEntry> + 'a {
        let base: Box<dyn Iterator<Item = &'a IndexEntry> + 'a> = match &self.base {
            Base::Map(map) => Box::new(map.range((start, Bound::Unbounded)).map(|(_, e)| e)),
            Base::Checkpoint(checkpoint) => {
                let first = match start {
                    Bound::Unbounded => 0,
                    Bound::Included(name) | Bound::Excluded(name) => {
                        checkpoint.block_of(name).unwrap_or(0)
                    }
                };
                Box::new(
                    (first..checkpoint.blocks.len())
                        .flat_map(|i| checkpoint.block(i).unwrap_or_default())
                        .filter(move |e| match start {
                            Bound::Unbounded => true,
                            Bound::Included(name) => &e.name >= name,
                            Bound::Excluded(name) => &e.name > name,
                        }),
                )
            }
        };
        Merged {
            base: base.peekable(),
            changes: self.changes.range((start, Bound::Unbounded)).peekable(),
        }
    }

    /// How many views there are.
    pub fn len(&self) -> usize {
        self.all().len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.all().is_empty()
    }

    /// The schemas (catalog, schema) holding views, in order, without
    /// parsing a checkpoint's views: from a checkpoint, those its header
    /// names and those of the views put since (a schema may hold none any
    /// more).
    pub fn schemas(&self) -> Vec<(String, String)> {
        let mut schemas: Vec<(String, String)> = match &self.base {
            Base::Checkpoint(checkpoint) => checkpoint.schemas.clone(),
            Base::Map(map) => map
                .keys()
                .map(|n| (n.catalog.clone(), n.schema.clone()))
                .collect(),
        };
        schemas.extend(
            self.changes
                .iter()
                .filter(|(_, c)| c.is_some())
                .map(|(n, _)| (n.catalog.clone(), n.schema.clone())),
        );
        schemas.sort();
        schemas.dedup();
        schemas
    }

    /// Why a block of the checkpoint these views rest on did not parse,
    /// with the checkpoint's path, if one did not.
    pub fn failure(&self) -> Option<(String, String)> {
        let Base::Checkpoint(checkpoint) = &self.base else {
            return None;
        };
        let failure = checkpoint.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure
            .as_ref()
            .map(|f| (checkpoint.path.clone(), f.reason.clone()))
    }

    /// Whether a block of the checkpoint these views rest on could not be
    /// read (rather than parsed): reading the index again mends that.
    pub fn unread_failure(&self) -> bool {
        let Base::Checkpoint(checkpoint) = &self.base else {
            return false;
        };
        let failure = checkpoint.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.as_ref().is_some_and(|f| f.unread)
    }

    /// The version of the checkpoint these views rest on while some of its
    /// blocks are still to be read from it.
    pub fn reading_checkpoint(&self) -> Option<u64> {
        let Base::Checkpoint(checkpoint) = &self.base else {
            return None;
        };
        checkpoint
            .unread(0..checkpoint.block_count())
            .map(|_| checkpoint.version)
    }

    /// Reads, in one request, every block of the checkpoint these views
    /// rest on not read yet (which listing them all would read waiting).
    pub async fn read_all(&self) {
        if let Base::Checkpoint(checkpoint) = &self.base {
            checkpoint.read_all().await;
        }
    }

    /// How many bytes of the views of the checkpoint they rest on were
    /// read, of how many (`None`: they rest on no checkpoint).
    pub fn checkpoint_bytes_read(&self) -> Option<(u64, u64)> {
        let Base::Checkpoint(checkpoint) = &self.base else {
            return None;
        };
        let total = match checkpoint.block_count() {
            0 => 0,
            n => checkpoint.range(n - 1).end as u64,
        };
        Some((checkpoint.bytes_read.load(Ordering::Relaxed), total))
    }

    /// How many blocks of the checkpoint these views rest on are parsed,
    /// of how many (`None`: they rest on no checkpoint).
    pub fn checkpoint_blocks_parsed(&self) -> Option<(usize, usize)> {
        let Base::Checkpoint(checkpoint) = &self.base else {
            return None;
        };
        let parsed = checkpoint
            .parsed
            .iter()
            .filter(|p| p.get().is_some())
            .count();
        Some((parsed, checkpoint.blocks.len()))
    }

    /// Parses every block not parsed yet; why one did not parse, with the
    /// checkpoint's path, if one did not.
    pub fn parse_all(&self) -> Option<(String, String)> {
        self.all();
        self.failure()
    }

    /// The views put (`Some`) or removed (`None`) between `self` and
    /// `next`, by name; compares only the changes when both rest on the
    /// same base.
    pub fn changes_to<'a>(
        &'a self,
        next: &'a Views,
    ) -> Vec<(&'a QualifiedName, Option<&'a IndexEntry>)> {
        let same_base = match (&self.base, &next.base) {
            (Base::Map(a), Base::Map(b)) => Arc::ptr_eq(a, b),
            (Base::Checkpoint(a), Base::Checkpoint(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let names: BTreeSet<&QualifiedName> = if same_base {
            self.changes.keys().chain(next.changes.keys()).collect()
        } else {
            self.keys().chain(next.keys()).collect()
        };
        names
            .into_iter()
            .filter_map(|name| {
                let after = next.get(name);
                (self.get(name) != after).then_some((name, after))
            })
            .collect()
    }
}

/// A base's views in name order with the changes on top.
struct Merged<'a, B: Iterator<Item = &'a IndexEntry>> {
    base: std::iter::Peekable<B>,
    changes: std::iter::Peekable<
        std::collections::btree_map::Range<'a, QualifiedName, Option<IndexEntry>>,
    >,
}

impl<'a, B: Iterator<Item = &'a IndexEntry>> Iterator for Merged<'a, B> {
    type Item = &'a IndexEntry;

    fn next(&mut self) -> Option<&'a IndexEntry> {
        loop {
            let order = match (self.base.peek(), self.changes.peek()) {
                (None, None) => return None,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(entry), Some((name, _))) => entry.name.cmp(name),
            };
            if order.is_ge() {
                // A change replaces the base's view of its name.
                if order.is_eq() {
                    self.base.next();
                }
                if let Some((_, Some(entry))) = self.changes.next() {
                    return Some(entry);
                }
                continue;
            }
            return self.base.next();
        }
    }
}

impl PartialEq for Views {
    fn eq(&self, other: &Self) -> bool {
        self.all() == other.all()
    }
}

impl FromIterator<(QualifiedName, IndexEntry)> for Views {
    fn from_iter<T: IntoIterator<Item = (QualifiedName, IndexEntry)>>(iter: T) -> Self {
        Self {
            base: Base::Map(Arc::new(iter.into_iter().collect())),
            ..Default::default()
        }
    }
}

impl<'a> IntoIterator for &'a Views {
    type Item = (&'a QualifiedName, &'a IndexEntry);
    type IntoIter = std::collections::btree_map::Iter<'a, QualifiedName, IndexEntry>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// `items` (in name order) as lines of [`CHECKPOINT_BLOCK_VIEWS`], each a
/// JSON list, joined by newlines; with each line's header entry, named by
/// `first` of its first item.
fn lines_of<T: Serialize>(
    items: &[T],
    first: impl Fn(&T) -> &QualifiedName,
) -> serde_json::Result<(Vec<u8>, Vec<CheckpointBlock>)> {
    let mut body = vec![];
    let mut blocks = vec![];
    for chunk in items.chunks(CHECKPOINT_BLOCK_VIEWS) {
        if !body.is_empty() {
            body.push(b'\n');
        }
        let line = serde_json::to_vec(chunk)?;
        blocks.push(CheckpointBlock {
            first: first(&chunk[0]).clone(),
            bytes: line.len() as u64,
        });
        body.extend(line);
    }
    Ok((body, blocks))
}

/// The blocks of a checkpoint holding `views` (in name order): each
/// block's line, and its header entry.
pub fn checkpoint_blocks<'a>(
    views: impl Iterator<Item = &'a IndexEntry>,
) -> serde_json::Result<(Vec<u8>, Vec<CheckpointBlock>)> {
    let views: Vec<&IndexEntry> = views.collect();
    lines_of(&views, |v| &v.name)
}

/// The lines of a checkpoint after its views' (format 5): which views read
/// each relation that some view of `views` reads, in the relation's name
/// order, [`CHECKPOINT_BLOCK_VIEWS`] relations per line; with each line's
/// header entry.
pub fn checkpoint_readers<'a>(
    views: impl Iterator<Item = &'a IndexEntry>,
) -> serde_json::Result<(Vec<u8>, Vec<CheckpointBlock>)> {
    let mut by_source: BTreeMap<&QualifiedName, BTreeSet<&QualifiedName>> = BTreeMap::new();
    for view in views {
        for source in &view.sources {
            by_source.entry(source).or_default().insert(&view.name);
        }
    }
    let all: Vec<SourceReaders> = by_source
        .into_iter()
        .map(|(source, readers)| SourceReaders {
            source: source.clone(),
            readers: readers.into_iter().cloned().collect(),
        })
        .collect();
    lines_of(&all, |r| &r.source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(schema: &str, name: &str) -> IndexEntry {
        IndexEntry {
            name: QualifiedName::new("datafusion", schema, name),
            id: format!("id-{name}"),
            slot: format!("slot-{name}"),
            sources: vec![],
        }
    }

    fn checkpoint(entries: &[IndexEntry]) -> Views {
        let (body, blocks) = checkpoint_blocks(entries.iter()).unwrap();
        let schemas = entries
            .iter()
            .map(|e| (e.name.catalog.clone(), e.name.schema.clone()))
            .collect();
        Views::from_checkpoint(
            CheckpointViews::whole("cp".into(), 1, body, Some(&blocks), schemas).unwrap(),
        )
    }

    /// `v0000` to `v0999` in schema `public`, in name order.
    fn thousand_views() -> Vec<IndexEntry> {
        (0..1000)
            .map(|i| entry("public", &format!("v{i:04}")))
            .collect()
    }

    fn parsed_blocks(views: &Views) -> usize {
        views.checkpoint_blocks_parsed().unwrap().0
    }

    #[test]
    fn finding_a_view_parses_only_its_block() {
        let entries = thousand_views();
        let views = checkpoint(&entries);
        for probe in [0, 63, 64, 500, 999] {
            assert_eq!(views.get(&entries[probe].name), Some(&entries[probe]));
        }
        assert_eq!(
            views.get(&QualifiedName::new("datafusion", "public", "v0500x")),
            None
        );
        assert_eq!(views.get(&QualifiedName::new("datafusion", "a", "v")), None);
        assert_eq!(
            views.get(&QualifiedName::new("datafusion", "zzz", "v")),
            None
        );
        // Blocks 0, 0, 1, 7, 15, then 7 and 15 again: four blocks of 16.
        assert_eq!(parsed_blocks(&views), 4);
        assert_eq!(views.len(), 1000);
        assert_eq!(parsed_blocks(&views), 16);
        assert_eq!(views.values().cloned().collect::<Vec<_>>(), entries);
    }

    #[test]
    fn changes_on_a_checkpoint_read_and_compare_as_a_whole_map() {
        let entries = vec![entry("a", "x"), entry("a", "y"), entry("b", "z")];
        let base = checkpoint(&entries);
        let mut next = base.clone();
        next.insert(entry("c", "w").name, entry("c", "w"));
        assert_eq!(next.remove(&entries[1].name), Some(entries[1].clone()));
        assert_eq!(next.remove(&entries[1].name), None);
        let changes = base.changes_to(&next);
        assert_eq!(
            changes,
            vec![
                (&entries[1].name, None),
                (&entry("c", "w").name, Some(&entry("c", "w"))),
            ]
        );
        // The same, from two maps that share nothing.
        let plain: Views = entries
            .iter()
            .map(|e| (e.name.clone(), e.clone()))
            .collect();
        let plain_next: Views = next.iter().map(|(n, e)| (n.clone(), e.clone())).collect();
        assert_eq!(plain.changes_to(&plain_next), changes);
        assert_eq!(plain_next, next);
        assert_eq!(
            next.schemas(),
            vec![
                ("datafusion".to_owned(), "a".to_owned()),
                ("datafusion".to_owned(), "b".to_owned()),
                ("datafusion".to_owned(), "c".to_owned()),
            ]
        );
    }

    #[test]
    fn a_page_from_a_name_parses_the_blocks_it_reaches() {
        let entries = thousand_views();
        let mut views = checkpoint(&entries);
        // v0500 removed, v0500a added, v0501 replaced.
        views.remove(&entries[500].name);
        let added = entry("public", "v0500a");
        views.insert(added.name.clone(), added.clone());
        let replaced = IndexEntry {
            id: "new".into(),
            ..entries[501].clone()
        };
        views.insert(replaced.name.clone(), replaced.clone());
        let page: Vec<&IndexEntry> = views
            .iter_from(Bound::Excluded(&entries[498].name))
            .take(4)
            .collect();
        assert_eq!(page, vec![&entries[499], &added, &replaced, &entries[502]]);
        // v0499 to v0502 lie in block 7 (448 to 511) alone: the removal
        // looked up v0500 there too.
        assert_eq!(parsed_blocks(&views), 1);
        let all: Vec<IndexEntry> = views.iter_from(Bound::Unbounded).cloned().collect();
        assert_eq!(all, views.values().cloned().collect::<Vec<_>>());
        assert_eq!(all.len(), 1000);
    }

    #[test]
    fn many_changes_fold_into_the_base() {
        let mut views = Views::default();
        for i in 0..MOST_CHANGES + 10 {
            let e = entry("s", &format!("v{i}"));
            views.insert(e.name.clone(), e);
            // Listed after every change: the fold sees the newest one.
            assert_eq!(views.len(), i + 1);
        }
        assert!(views.changes.len() <= MOST_CHANGES);
        assert!(matches!(views.base, Base::Map(_)));
        assert_eq!(views.len(), MOST_CHANGES + 10);
    }

    /// Serves the views of a checkpoint after its first `head` bytes, as
    /// the catalog's reader does, counting reads; fails after `fail_after`.
    #[derive(Debug)]
    struct Served {
        views: bytes::Bytes,
        reads: AtomicU64,
        fail_after: u64,
    }

    impl BlockReader for Served {
        fn read(&self, range: Range<u64>) -> std::result::Result<bytes::Bytes, String> {
            if self.reads.fetch_add(1, Ordering::SeqCst) >= self.fail_after {
                return Err("gone".into());
            }
            Ok(self.views.slice(range.start as usize..range.end as usize))
        }

        fn read_async(
            &self,
            range: Range<u64>,
        ) -> BoxFuture<'_, std::result::Result<bytes::Bytes, String>> {
            Box::pin(futures::future::ready(self.read(range)))
        }
    }

    /// The views of `entries`' checkpoint, of which the first `head` bytes
    /// came with the header.
    fn served(entries: &[IndexEntry], head: usize, fail_after: u64) -> (Views, Arc<Served>) {
        let (body, blocks) = checkpoint_blocks(entries.iter()).unwrap();
        let views = bytes::Bytes::from(body);
        let reader = Arc::new(Served {
            views: views.clone(),
            reads: AtomicU64::new(0),
            fail_after,
        });
        let read = CheckpointRead {
            path: "cp".into(),
            version: 64,
            head: views.slice(..head),
            bytes: views.len() as u64,
            reader: Some(Arc::clone(&reader) as Arc<dyn BlockReader>),
            schemas: vec![],
        };
        let views =
            Views::from_checkpoint(CheckpointViews::new(read, Some(&blocks), None).unwrap());
        (views, reader)
    }

    #[test]
    fn finding_a_view_reads_only_its_block() {
        let entries = thousand_views();
        let block = checkpoint_blocks(entries[..64].iter()).unwrap().0.len() as u64;
        // The head holds block 0 and part of block 1.
        let (views, reader) = served(&entries, block as usize + 10, u64::MAX);
        assert_eq!(views.reading_checkpoint(), Some(64));
        assert_eq!(views.get(&entries[3].name), Some(&entries[3]));
        assert_eq!(reader.reads.load(Ordering::SeqCst), 0);
        assert_eq!(views.get(&entries[70].name), Some(&entries[70]));
        assert_eq!(views.get(&entries[999].name), Some(&entries[999]));
        assert_eq!(reader.reads.load(Ordering::SeqCst), 2);
        let (read, total) = views.checkpoint_bytes_read().unwrap();
        assert!(read < 4 * block, "{read} of {total}");
        // Listing reads the 13 blocks left in one request.
        assert_eq!(views.values().cloned().collect::<Vec<_>>(), entries);
        assert_eq!(reader.reads.load(Ordering::SeqCst), 3);
        // All of it, and again the part of block 1 the head held.
        let (read, _) = views.checkpoint_bytes_read().unwrap();
        assert!((total..total + 10).contains(&read), "{read} of {total}");
        assert_eq!(views.reading_checkpoint(), None);
        assert_eq!(views.failure(), None);
    }

    #[test]
    fn a_block_that_cannot_be_read_is_reported_as_unread() {
        let entries = thousand_views();
        let (views, _) = served(&entries, 0, 1);
        assert_eq!(views.get(&entries[0].name), Some(&entries[0]));
        assert_eq!(views.get(&entries[500].name), None);
        assert!(views.unread_failure());
        let (path, reason) = views.failure().unwrap();
        assert_eq!(path, "cp");
        assert!(reason.contains("could not be read: gone"), "{reason}");
    }

    /// A format 5 checkpoint of `entries`: their blocks, then their
    /// readers'.
    fn with_readers(entries: &[IndexEntry]) -> Views {
        let (mut body, blocks) = checkpoint_blocks(entries.iter()).unwrap();
        let (readers, reader_blocks) = checkpoint_readers(entries.iter()).unwrap();
        body.push(b'\n');
        body.extend(readers);
        let read = CheckpointRead {
            path: "cp".into(),
            version: 64,
            bytes: body.len() as u64,
            head: body.into(),
            reader: None,
            schemas: vec![],
        };
        Views::from_checkpoint(
            CheckpointViews::new(read, Some(&blocks), Some(&reader_blocks)).unwrap(),
        )
    }

    #[test]
    fn readers_come_from_their_block_with_the_changes_on_top() {
        // Every tenth view reads the view before it; v0999 reads t.
        let t = QualifiedName::new("datafusion", "public", "t");
        let mut entries = thousand_views();
        for i in (10..1000).step_by(10) {
            entries[i].sources = vec![entries[i - 1].name.clone()];
        }
        entries[999].sources = vec![t.clone()];
        let mut views = with_readers(&entries);
        assert_eq!(
            views.readers_of(&entries[9].name),
            vec![entries[10].name.clone()]
        );
        assert_eq!(views.readers_of(&t), vec![entries[999].name.clone()]);
        assert_eq!(views.readers_of(&entries[10].name), vec![]);
        assert_eq!(parsed_blocks(&views), 0, "no block of views parsed");
        // v0010 dropped, v0500 now reads t, a new view reads v0009.
        views.remove(&entries[10].name);
        let mut changed = entries[500].clone();
        changed.sources = vec![t.clone()];
        views.insert(changed.name.clone(), changed.clone());
        let mut new = entry("public", "w");
        new.sources = vec![entries[9].name.clone()];
        views.insert(new.name.clone(), new.clone());
        assert_eq!(views.readers_of(&entries[9].name), vec![new.name.clone()]);
        assert_eq!(
            views.readers_of(&t),
            vec![changed.name.clone(), entries[999].name.clone()]
        );
        assert_eq!(views.readers_of(&entries[499].name), vec![]);
        // The same as going through every view.
        let plain: Views = views.iter().map(|(n, e)| (n.clone(), e.clone())).collect();
        for source in [&t, &entries[9].name, &entries[499].name, &entries[989].name] {
            assert_eq!(
                views.readers_of(source),
                plain.readers_of(source),
                "{source}"
            );
        }
    }

    #[test]
    fn a_checkpoint_whose_blocks_do_not_add_up_is_refused() {
        let entries = [entry("a", "x"), entry("a", "y")];
        let (body, mut blocks) = checkpoint_blocks(entries.iter()).unwrap();
        blocks[0].bytes -= 1;
        let err = CheckpointViews::whole("cp".into(), 1, body, Some(&blocks), vec![]).unwrap_err();
        assert!(err.contains("bytes"), "{err}");
    }

    #[test]
    fn a_block_that_does_not_parse_is_reported() {
        let entries = [entry("a", "x")];
        let (mut body, blocks) = checkpoint_blocks(entries.iter()).unwrap();
        body[1] = b'!';
        let views = Views::from_checkpoint(
            CheckpointViews::whole("cp".into(), 1, body, Some(&blocks), vec![]).unwrap(),
        );
        assert_eq!(views.get(&entries[0].name), None);
        let (path, reason) = views.failure().unwrap();
        assert_eq!(path, "cp");
        assert!(reason.contains("do not parse"), "{reason}");
    }
}
