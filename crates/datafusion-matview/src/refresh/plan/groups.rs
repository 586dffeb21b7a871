//! How a full refresh splits the table lineage follows into groups of
//! its files, each computed apart and recorded as the lineage of what it
//! writes, and how a later change finds the pieces computed from changed
//! files.

use super::*;

/// Most groups of source files a full refresh writes for lineage.
pub(super) const LINEAGE_GROUPS: usize = 16;

/// Most groups for a view over several tables, each of which joins its
/// group with the other tables whole: every group more adds a join's
/// fixed cost to a full refresh (measured in dev, 1 million rows: 16
/// groups made it 1.4 times a COPY of the same query, 1.9 times beside
/// 100 small dimension files).
pub(super) const JOIN_LINEAGE_GROUPS: usize = 4;

/// The table a full refresh keeps lineage for: of the listing tables and
/// materialized views under `sources` (through plain views), the one with
/// the most bytes (the fact table of a join with a dimension), which
/// removals and rewrites most likely hit and recomputing costs most. Only
/// changes to it evict by lineage; changes to the others are handled
/// otherwise.
///
/// Each group of its files is computed apart, reading the other tables
/// again: so beside other tables, in as many groups (at most
/// [`JOIN_LINEAGE_GROUPS`], at least two) as read them again for at most
/// a quarter of the table's bytes, and only when their sizes are known
/// (listing tables and materialized views). With it, its files and that
/// most of groups.
pub(crate) fn lineage_table(
    sources: &[SourceFingerprint],
) -> Option<(&QualifiedName, &[FileFingerprint], usize)> {
    let mut tables = BTreeMap::new();
    leaves_under(sources, &mut tables);
    let bytes = |files: &[FileFingerprint]| non_empty(files).map(|f| f.size).sum::<u64>();
    let (mut all, count) = (0, tables.len());
    let mut largest: Option<(&QualifiedName, &[FileFingerprint], u64)> = None;
    for (name, fingerprint) in tables {
        // A materialized view's data files are immutable: its own
        // incremental refreshes add and evict whole files, which a view
        // over it follows by lineage as it follows a listing table's.
        let size = match fingerprint {
            Fingerprint::Files { files, .. } | Fingerprint::Snapshot { files, .. } => {
                let size = bytes(files);
                // The first of the largest, by name: the same every time.
                if largest.is_none_or(|(_, _, most)| size > most) {
                    largest = Some((name, files.as_slice(), size));
                }
                size
            }
            _ => return None,
        };
        all += size;
    }
    let (name, files, size) = largest?;
    let others = all - size;
    let most = match (size / 4).checked_div(others) {
        _ if count == 1 => LINEAGE_GROUPS,
        // Beside empty tables: still a join per group.
        None => JOIN_LINEAGE_GROUPS,
        Some(rereads) => (rereads as usize)
            .saturating_add(1)
            .min(JOIN_LINEAGE_GROUPS),
    };
    (most >= 2).then_some((name, files, most))
}

/// The table a full refresh keeps lineage for, read through `provider`
/// (see [`lineage_table`]).
pub(super) type LineageSource<'a> = (
    &'a Arc<dyn TableProvider>,
    &'a QualifiedName,
    &'a [FileFingerprint],
    usize,
);

/// `files` split into those computed from any of the `changed` source
/// files (by their lineage) and the others.
pub(super) fn computed_from<'a>(
    files: &'a [DataFile],
    changed: &BTreeSet<&str>,
) -> (Vec<&'a DataFile>, Vec<&'a DataFile>) {
    files.iter().partition(|f| {
        f.lineage
            .iter()
            .flatten()
            .any(|p| changed.contains(p.as_str()))
    })
}

/// One part per group of files: `plan` over that group's files of
/// `provider` alone, with the group as its lineage.
pub(super) fn per_group(
    plan: &LogicalPlan,
    provider: &Arc<dyn TableProvider>,
    files: &Files,
    groups: Vec<Vec<String>>,
) -> Result<Vec<Part>> {
    groups
        .into_iter()
        .map(|group| {
            Ok(Part {
                plan: over_files(plan, provider, files, &group)?,
                lineage: Some(group),
            })
        })
        .collect()
}

/// Splits `files` (sorted by path) into at most [`LINEAGE_GROUPS`] runs of
/// consecutive files of about equal size.
pub(super) fn groups(files: &[FileFingerprint], most: usize) -> Vec<Vec<String>> {
    let files: Vec<&FileFingerprint> = non_empty(files).collect();
    let total: u64 = files.iter().map(|f| f.size).sum();
    let target = total.div_ceil(most as u64).max(1);
    let mut out: Vec<Vec<String>> = vec![];
    let mut size = 0;
    for file in files {
        if out.is_empty() || size >= target {
            out.push(vec![]);
            size = 0;
        }
        size += file.size;
        out.last_mut()
            .expect("pushed above")
            .push(file.path.clone());
    }
    out
}
