//! The materialized views of an [`Index`]: a map by name resting on a
//! base (a checkpoint's views, parsed one block at a time, or a map) with
//! the changes since on top. Finding one view parses at most one block of
//! [`CHECKPOINT_BLOCK_VIEWS`] entries, and copying an index for a commit
//! copies only the changes, so neither grows with the number of views;
//! listing every view parses the rest once.

use std::ops::{Bound, Range};
use std::sync::{Arc, Mutex, OnceLock};

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

/// The views of a checkpoint, kept as read and parsed a block at a time.
#[derive(Debug)]
pub struct CheckpointViews {
    /// The checkpoint, as errors name it.
    path: String,
    /// The checkpoint's lines after its header (shared with the bytes
    /// read, not copied).
    body: bytes::Bytes,
    /// Each block's first name (`None`: one block of a format 2 or 3
    /// checkpoint, holding every view) and bytes in `body`.
    blocks: Vec<(Option<QualifiedName>, Range<usize>)>,
    /// Each block, once parsed (`None`: it did not parse).
    parsed: Vec<OnceLock<Option<Vec<IndexEntry>>>>,
    /// Why a block did not parse, the first time one did not.
    failure: Mutex<Option<String>>,
    /// The schemas (catalog, schema) holding views.
    schemas: Vec<(String, String)>,
}

impl CheckpointViews {
    /// The views of a checkpoint whose header lists `blocks` (`None`: a
    /// format 2 or 3 checkpoint, whose views are one list); checks that
    /// the blocks' lengths add up to `body`'s.
    pub fn new(
        path: String,
        body: impl Into<bytes::Bytes>,
        blocks: Option<&[CheckpointBlock]>,
        schemas: Vec<(String, String)>,
    ) -> std::result::Result<Self, String> {
        let body = body.into();
        let ranges = match blocks {
            None => vec![(None, 0..body.len())],
            Some(blocks) => {
                let mut ranges = Vec::with_capacity(blocks.len());
                let mut start = 0usize;
                for (i, block) in blocks.iter().enumerate() {
                    if i > 0 {
                        if body.get(start) != Some(&b'\n') {
                            return Err(format!("block {i} does not start a line"));
                        }
                        start += 1;
                    }
                    let end = start + usize::try_from(block.bytes).map_err(|e| e.to_string())?;
                    if end > body.len() {
                        return Err(format!(
                            "its blocks take more than its {} bytes of views",
                            body.len()
                        ));
                    }
                    ranges.push((Some(block.first.clone()), start..end));
                    start = end;
                }
                if start != body.len() {
                    return Err(format!(
                        "its blocks take {start} bytes, its views {}",
                        body.len()
                    ));
                }
                if blocks.windows(2).any(|w| w[0].first >= w[1].first) {
                    return Err("its blocks are not in name order".into());
                }
                ranges
            }
        };
        Ok(Self {
            path,
            body,
            parsed: ranges.iter().map(|_| OnceLock::new()).collect(),
            blocks: ranges,
            failure: Mutex::new(None),
            schemas,
        })
    }

    /// Block `i`, parsed now if it was not (`None`: it does not parse).
    fn block(&self, i: usize) -> Option<&[IndexEntry]> {
        self.parsed[i]
            .get_or_init(|| {
                let range = self.blocks[i].1.clone();
                match serde_json::from_slice::<Vec<IndexEntry>>(&self.body[range]) {
                    Ok(entries) => Some(entries),
                    Err(e) => {
                        let reason = format!("its views do not parse: {e}");
                        log::error!("{}: {reason}", self.path);
                        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
                        failure.get_or_insert(reason);
                        None
                    }
                }
            })
            .as_deref()
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

    fn all(&self) -> BTreeMap<QualifiedName, IndexEntry> {
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
            .map(|reason| (checkpoint.path.clone(), reason.clone()))
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

/// The blocks of a checkpoint holding `views` (in name order): each
/// block's line, and its header entry.
pub fn checkpoint_blocks<'a>(
    views: impl Iterator<Item = &'a IndexEntry>,
) -> serde_json::Result<(Vec<u8>, Vec<CheckpointBlock>)> {
    let views: Vec<&IndexEntry> = views.collect();
    let mut body = vec![];
    let mut blocks = vec![];
    for chunk in views.chunks(CHECKPOINT_BLOCK_VIEWS) {
        if !body.is_empty() {
            body.push(b'\n');
        }
        let line = serde_json::to_vec(chunk)?;
        blocks.push(CheckpointBlock {
            first: chunk[0].name.clone(),
            bytes: line.len() as u64,
        });
        body.extend(line);
    }
    Ok((body, blocks))
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
            CheckpointViews::new("cp".into(), body, Some(&blocks), schemas).unwrap(),
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

    #[test]
    fn a_checkpoint_whose_blocks_do_not_add_up_is_refused() {
        let entries = [entry("a", "x"), entry("a", "y")];
        let (body, mut blocks) = checkpoint_blocks(entries.iter()).unwrap();
        blocks[0].bytes -= 1;
        let err = CheckpointViews::new("cp".into(), body, Some(&blocks), vec![]).unwrap_err();
        assert!(err.contains("bytes"), "{err}");
    }

    #[test]
    fn a_block_that_does_not_parse_is_reported() {
        let entries = [entry("a", "x")];
        let (mut body, blocks) = checkpoint_blocks(entries.iter()).unwrap();
        body[1] = b'!';
        let views = Views::from_checkpoint(
            CheckpointViews::new("cp".into(), body, Some(&blocks), vec![]).unwrap(),
        );
        assert_eq!(views.get(&entries[0].name), None);
        let (path, reason) = views.failure().unwrap();
        assert_eq!(path, "cp");
        assert!(reason.contains("do not parse"), "{reason}");
    }
}
