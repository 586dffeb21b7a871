//! Format 2 of the catalog's metadata: a small catalog-level log (the
//! index: which views exist, which log holds each, the remembered
//! relations) and one log per view definition (its entry and data).
//!
//! ```text
//! <root>/_matview/log/00000000000000000042.json      index versions: changes only
//! <root>/_matview/checkpoint/00000000000000000040.json  the index at a version
//! <root>/_matview/views/<slot>/00000000000000000007.json  one view's states
//! ```
//!
//! A refresh writes one version of its view's log, whose size does not
//! depend on how many other views exist, and never races with a refresh of
//! another view. CREATE, DROP and the remembered relations write one index
//! version holding only what changed; a reader catches up by reading the
//! versions after the one it has, or a checkpoint and the versions after it.

use std::collections::BTreeSet;

use super::*;

/// How a view's log is found from the index: the folder name under
/// `_matview/views/`. A new one for every definition (CREATE, CREATE OR
/// REPLACE) and for every view a migration copies, so two writers never
/// write the same log unless they change the same definition.
pub type SlotId = String;

/// What the index knows of one materialized view: enough to list it,
/// to find its log, and to know what depends on what, without reading the
/// view's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// Fully qualified name.
    pub name: QualifiedName,
    /// The definition's identity ([`ViewEntry::id`]).
    pub id: String,
    /// The folder of the view's log.
    pub slot: SlotId,
    /// The tables and views the query reads directly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<QualifiedName>,
}

/// A view log no longer in the index (its view was dropped or replaced):
/// its files and the data its states reference are deleted once it has
/// been retired for the retention window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredSlot {
    /// The log's folder.
    pub slot: SlotId,
    /// When the index version that retired it was committed (`None` only
    /// inside an uncommitted change).
    pub retired_at: Option<DateTime<Utc>>,
}

/// The catalog-level state at one index version. Not a file: each index
/// version stores only its [`IndexAction`]s, and a checkpoint stores this.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Index {
    /// The index version this is the state at (0: nothing committed).
    pub version: u64,
    /// When that version was committed.
    pub committed_at: DateTime<Utc>,
    /// Identity of the commit that wrote that version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commit_id: String,
    /// Every materialized view, by name.
    #[serde(with = "entries")]
    pub views: Views,
    /// External tables and plain views the catalog remembers, in creation order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relations: Vec<RelationEntry>,
    /// View logs of dropped or replaced definitions, kept for readers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_slots: Vec<RetiredSlot>,
    /// Snapshots retired before the catalog moved to this format (its
    /// format 1 manifest kept them for all views); they expire as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<RetiredSnapshot>,
}

/// The views of an [`Index`] as a list sorted by name (JSON object keys
/// must be strings).
mod entries {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(views: &Views, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(views.values())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Views, D::Error> {
        let list = Vec::<IndexEntry>::deserialize(d)?;
        Ok(list.into_iter().map(|e| (e.name.clone(), e)).collect())
    }
}

/// One change an index version makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexAction {
    /// A view created, or replaced by a new definition.
    PutView(IndexEntry),
    /// A view dropped.
    RemoveView(QualifiedName),
    /// The remembered relations, all of them, in creation order. Format 2
    /// wrote this whenever one changed; format 3 writes it only when the
    /// order changes otherwise than [`IndexAction::PutRelation`] and
    /// [`IndexAction::RemoveRelation`] can say.
    Relations(Vec<RelationEntry>),
    /// A relation remembered, or replaced in its place (format 3).
    PutRelation(RelationEntry),
    /// A relation forgotten (format 3).
    RemoveRelation(QualifiedName),
    /// View logs retired.
    RetireSlots(Vec<RetiredSlot>),
    /// Retired view logs whose files a cleanup deleted.
    ForgetSlots(Vec<SlotId>),
    /// Retired format-1 snapshots whose files a cleanup deleted.
    ForgetRetired(Vec<RetiredSnapshot>),
}

/// One index version file, `_matview/log/{version:020}.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexVersion {
    /// [`MANIFEST_FORMAT`]; 1 is a whole [`Manifest`] instead.
    pub format_version: u32,
    /// Version number, as in the file name.
    pub version: u64,
    /// When it was committed.
    pub committed_at: DateTime<Utc>,
    /// Identity of the commit that wrote it.
    pub commit_id: String,
    /// The whole state before the actions apply, when this version does
    /// not follow the previous one (the first version of the format: a
    /// migration or a recovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Box<Index>>,
    /// The changes, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<IndexAction>,
}

/// The first line of a checkpoint, `_matview/checkpoint/{version:020}.json`:
/// the index at that version but its views, which are the lines after it
/// (format 4: one block of at most [`CHECKPOINT_BLOCK_VIEWS`] entries per
/// line, in name order, as [`Self::blocks`] lists them; formats 2 and 3:
/// one line holding every entry), so a reader needs not read every
/// version before it, and finding one view reads only its block; format
/// 5 adds, after the views, which views read each relation (the lines
/// [`Self::readers`] lists).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointHeader {
    /// [`MANIFEST_FORMAT`].
    pub format_version: u32,
    /// The index without its views.
    pub index: Index,
    /// The schemas (catalog, schema) that hold views.
    pub schemas: Vec<(String, String)>,
    /// The length in bytes of what follows the first line's newline.
    pub views_bytes: u64,
    /// The blocks of views, in order (format 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<CheckpointBlock>,
    /// The blocks of readers ([`SourceReaders`]) after the views' (format
    /// 5), in order, each named by its first source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<CheckpointBlock>,
    /// The length in bytes of the readers' lines after the views' line
    /// ends and its newline (format 5; none when no view reads anything).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub readers_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One version of a view's log, `_matview/views/<slot>/{version:020}.json`:
/// the complete state of that one view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewVersion {
    /// [`MANIFEST_FORMAT`].
    pub format_version: u32,
    /// Version number within the view's log, from 1.
    pub version: u64,
    /// When it was committed.
    pub committed_at: DateTime<Utc>,
    /// Identity of the commit that wrote it.
    pub commit_id: String,
    /// The view.
    pub view: ViewEntry,
    /// This view's snapshots that no longer serve it (replaced by a
    /// refresh, or files an incremental refresh evicted), kept for readers
    /// of earlier versions until the retention window has passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<RetiredSnapshot>,
}

impl Index {
    /// The entry of that name, if any.
    pub fn view(&self, name: &QualifiedName) -> Option<&IndexEntry> {
        self.views.get(name)
    }

    /// Adds or replaces a view's entry; a replaced definition's log is
    /// retired.
    pub fn put_view(&mut self, entry: IndexEntry) {
        if let Some(old) = self.views.insert(entry.name.clone(), entry)
            && let Some(new) = self.views.get(&old.name)
            && new.slot != old.slot
        {
            self.retired_slots.push(RetiredSlot {
                slot: old.slot,
                retired_at: None,
            });
        }
    }

    /// The schemas (catalog, schema) that hold views, in order (lists
    /// every view; see [`Views::schemas`] for what needs not).
    pub fn schemas(&self) -> Vec<(String, String)> {
        let mut schemas: Vec<(String, String)> = self
            .views
            .keys()
            .map(|n| (n.catalog.clone(), n.schema.clone()))
            .collect();
        schemas.dedup();
        schemas
    }

    /// Removes a view, retiring its log; returns it if it was there.
    pub fn remove_view(&mut self, name: &QualifiedName) -> Option<IndexEntry> {
        let old = self.views.remove(name)?;
        self.retired_slots.push(RetiredSlot {
            slot: old.slot.clone(),
            retired_at: None,
        });
        Some(old)
    }

    /// Remembers a relation, replacing one of the same name (which keeps
    /// its place in the creation order).
    pub fn upsert_relation(&mut self, entry: RelationEntry) {
        match self.relations.iter_mut().find(|r| r.name == entry.name) {
            Some(existing) => *existing = entry,
            None => self.relations.push(entry),
        }
    }

    /// Forgets a relation; returns whether it was remembered.
    pub fn remove_relation(&mut self, name: &QualifiedName) -> bool {
        let before = self.relations.len();
        self.relations.retain(|r| &r.name != name);
        before != self.relations.len()
    }

    /// The actions that turn `self` into `next`.
    pub fn diff(&self, next: &Index) -> Vec<IndexAction> {
        let changes = self.views.changes_to(&next.views);
        let mut actions: Vec<IndexAction> = changes
            .iter()
            .filter_map(|(_, after)| after.map(|e| IndexAction::PutView(e.clone())))
            .collect();
        actions.extend(
            changes
                .iter()
                .filter(|(_, after)| after.is_none())
                .map(|(name, _)| IndexAction::RemoveView((*name).clone())),
        );
        actions.extend(relation_changes(&self.relations, &next.relations));
        let before: BTreeSet<&str> = self.retired_slots.iter().map(|r| r.slot.as_str()).collect();
        let after: BTreeSet<&str> = next.retired_slots.iter().map(|r| r.slot.as_str()).collect();
        let added: Vec<RetiredSlot> = next
            .retired_slots
            .iter()
            .filter(|r| !before.contains(r.slot.as_str()))
            .cloned()
            .collect();
        if !added.is_empty() {
            actions.push(IndexAction::RetireSlots(added));
        }
        let gone: Vec<SlotId> = before.difference(&after).map(|s| (*s).to_owned()).collect();
        if !gone.is_empty() {
            actions.push(IndexAction::ForgetSlots(gone));
        }
        let forgotten: Vec<RetiredSnapshot> = self
            .retired
            .iter()
            .filter(|r| !next.retired.contains(r))
            .cloned()
            .collect();
        if !forgotten.is_empty() {
            actions.push(IndexAction::ForgetRetired(forgotten));
        }
        actions
    }

    /// Applies the actions of one version.
    pub fn apply(&mut self, actions: &[IndexAction]) {
        self.apply_to_views(actions);
        self.apply_but_views(actions);
    }

    /// Applies what `actions` change of the views alone.
    pub fn apply_to_views(&mut self, actions: &[IndexAction]) {
        for action in actions {
            match action {
                IndexAction::PutView(entry) => {
                    self.views.set(entry.name.clone(), Some(entry.clone()));
                }
                IndexAction::RemoveView(name) => self.views.set(name.clone(), None),
                _ => {}
            }
        }
    }

    /// Applies what `actions` change but the views.
    pub fn apply_but_views(&mut self, actions: &[IndexAction]) {
        for action in actions {
            match action {
                IndexAction::PutView(_) | IndexAction::RemoveView(_) => {}
                IndexAction::Relations(relations) => self.relations = relations.clone(),
                IndexAction::PutRelation(entry) => self.upsert_relation(entry.clone()),
                IndexAction::RemoveRelation(name) => {
                    self.remove_relation(name);
                }
                IndexAction::RetireSlots(slots) => {
                    for slot in slots {
                        if !self.retired_slots.iter().any(|r| r.slot == slot.slot) {
                            self.retired_slots.push(slot.clone());
                        }
                    }
                }
                IndexAction::ForgetSlots(slots) => {
                    self.retired_slots.retain(|r| !slots.contains(&r.slot));
                }
                IndexAction::ForgetRetired(retired) => {
                    self.retired.retain(|r| !retired.contains(r));
                }
            }
        }
    }
}

/// The actions that turn the remembered relations `before` into `after`:
/// one per relation that changed, so an index version's size does not grow
/// with how many relations the catalog remembers; the whole list only when
/// those would not give `after`'s order (a relation forgotten and
/// remembered again in one commit moves to the end).
fn relation_changes(before: &[RelationEntry], after: &[RelationEntry]) -> Vec<IndexAction> {
    if before == after {
        return vec![];
    }
    let mut actions: Vec<IndexAction> = before
        .iter()
        .filter(|old| !after.iter().any(|new| new.name == old.name))
        .map(|old| IndexAction::RemoveRelation(old.name.clone()))
        .collect();
    actions.extend(
        after
            .iter()
            .filter(|new| !before.contains(new))
            .map(|new| IndexAction::PutRelation(new.clone())),
    );
    let mut replayed = Index {
        relations: before.to_vec(),
        ..Default::default()
    };
    replayed.apply_but_views(&actions);
    if replayed.relations == after {
        actions
    } else {
        vec![IndexAction::Relations(after.to_vec())]
    }
}

impl ViewVersion {
    /// Replaces the view's data, retiring what the new snapshot does not
    /// use of the old one.
    pub fn set_snapshot(&mut self, snapshot: Snapshot) {
        let old = self.view.clone();
        self.view.snapshot = Some(snapshot);
        self.retired.extend(retired_between(&old, &self.view));
    }

    /// Snapshot directories this state references or keeps for older
    /// readers, relative to the catalog root.
    pub fn known_snapshot_dirs(&self) -> BTreeSet<String> {
        self.view
            .data_dirs()
            .into_iter()
            .chain(self.retired.iter().map(|r| r.dir.clone()))
            .collect()
    }
}

/// What `old` used that `new` does not: whole directories, and single
/// files evicted from a directory `new` still uses (an incremental refresh
/// keeps some files of the snapshot before and evicts others).
pub fn retired_between(old: &ViewEntry, new: &ViewEntry) -> Vec<RetiredSnapshot> {
    let keep = new.data_dirs();
    let kept_files: BTreeSet<&str> = new
        .snapshot
        .iter()
        .flat_map(|s| s.stored_files().map(|f| f.path.as_str()))
        .collect();
    let mut retired = vec![];
    for dir in old.data_dirs() {
        if !keep.contains(&dir) {
            retired.push(RetiredSnapshot {
                dir,
                retired_at: None,
                files: vec![],
            });
            continue;
        }
        let evicted: Vec<String> = old
            .snapshot
            .iter()
            .flat_map(|s| s.stored_files())
            .filter(|f| {
                f.path.rsplit_once('/').map(|(d, _)| d) == Some(dir.as_str())
                    && !kept_files.contains(f.path.as_str())
            })
            .map(|f| f.path.clone())
            .collect();
        if !evicted.is_empty() {
            retired.push(RetiredSnapshot {
                dir,
                retired_at: None,
                files: evicted,
            });
        }
    }
    retired
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(name: &str, sql: &str) -> RelationEntry {
        RelationEntry {
            name: QualifiedName::new("datafusion", "public", name),
            kind: RelationKind::View,
            sql: sql.into(),
            default_catalog: "datafusion".into(),
            default_schema: "public".into(),
            withheld_options: vec![],
            resolved: None,
        }
    }

    fn index(relations: &[RelationEntry]) -> Index {
        Index {
            relations: relations.to_vec(),
            ..Default::default()
        }
    }

    /// `diff` then `apply` gives `after` exactly; returns the actions.
    fn replayed(before: &[RelationEntry], after: &[RelationEntry]) -> Vec<IndexAction> {
        let actions = index(before).diff(&index(after));
        let mut replay = index(before);
        replay.apply(&actions);
        assert_eq!(replay.relations, after);
        actions
    }

    #[test]
    fn a_relation_change_names_only_that_relation() {
        let (a, b, c) = (
            relation("a", "SELECT 1"),
            relation("b", "SELECT 2"),
            relation("c", "SELECT 3"),
        );
        let b2 = relation("b", "SELECT 22");
        let all = [a.clone(), b.clone(), c.clone()];
        assert_eq!(replayed(&all, &all), vec![]);
        assert_eq!(
            replayed(&all[..2], &all),
            vec![IndexAction::PutRelation(c.clone())]
        );
        // Replaced in its place.
        assert_eq!(
            replayed(&all, &[a.clone(), b2.clone(), c.clone()]),
            vec![IndexAction::PutRelation(b2.clone())]
        );
        assert_eq!(
            replayed(&all, &[a.clone(), c.clone()]),
            vec![IndexAction::RemoveRelation(b.name.clone())]
        );
        assert_eq!(
            replayed(&all, &[a.clone(), c.clone(), b2.clone()]),
            vec![IndexAction::Relations(vec![a.clone(), c.clone(), b2])]
        );
        // Forgotten and remembered again in one change: it moves to the
        // end, which only the whole list can say.
        assert_eq!(
            replayed(&all, &[a.clone(), c.clone(), b.clone()]),
            vec![IndexAction::Relations(vec![a, c, b])]
        );
    }
}
