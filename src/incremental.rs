//! Incremental refresh: when a view is a projection and filter of one
//! file-backed source and that source only gained files, compute the view
//! over the new files alone and add the result to the files the view
//! already has.
//!
//! Anything else falls back to a full refresh, with the reason: other plan
//! shapes (aggregates, joins, sorts, limits, ...), files removed or
//! rewritten (per-file lineage for eviction is not kept yet), and appends
//! at least as large as what is already there.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::listing::{ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::datasource::{TableProvider, provider_as_source, source_as_provider};
use datafusion::logical_expr::{LogicalPlan, TableScan};

use crate::error::Result;
use crate::spec::{FileFingerprint, Fingerprint, Snapshot, SourceFingerprint};

/// How a stale view is brought up to date.
#[derive(Debug)]
pub(crate) enum Strategy {
    /// Run this plan (the view's, over the appended files only) and add
    /// its output to the current snapshot's files.
    Append {
        /// The plan over the new files.
        plan: LogicalPlan,
        /// For the result row's detail.
        detail: String,
    },
    /// Recompute everything, for this reason.
    Full(String),
}

/// Chooses the strategy for `plan` (the view's planned definition) given
/// the fingerprints recorded with `snapshot` and those of now.
pub(crate) fn choose(
    plan: &LogicalPlan,
    snapshot: &Snapshot,
    now: &[SourceFingerprint],
) -> Result<Strategy> {
    let scan = match single_scan(plan) {
        Ok(scan) => scan,
        Err(reason) => return Ok(Strategy::Full(reason)),
    };
    let Some(listing) = source_as_provider(&scan.source).ok().and_then(|p| {
        (p.as_ref() as &dyn std::any::Any)
            .downcast_ref::<ListingTable>()
            .cloned()
    }) else {
        return Ok(Strategy::Full(
            "its source is not a file-backed table".into(),
        ));
    };
    if !listing.options().table_partition_cols.is_empty() {
        return Ok(Strategy::Full("its source is partitioned".into()));
    }
    let files_of =
        |fingerprints: &[SourceFingerprint]| -> Option<BTreeMap<String, FileFingerprint>> {
            match fingerprints {
                [
                    SourceFingerprint {
                        fingerprint: Fingerprint::Files { files },
                        ..
                    },
                ] => Some(files.iter().map(|f| (f.path.clone(), f.clone())).collect()),
                _ => None,
            }
        };
    let (Some(before), Some(after)) = (files_of(&snapshot.sources), files_of(now)) else {
        return Ok(Strategy::Full(
            "its source's files were not recorded".into(),
        ));
    };
    let source = &now[0].name.name;
    let rewritten = before
        .iter()
        .filter(|(path, f)| after.get(*path) != Some(f))
        .count();
    if rewritten > 0 {
        return Ok(Strategy::Full(format!(
            "{rewritten} file(s) of {source} removed or rewritten"
        )));
    }
    let added: Vec<&FileFingerprint> = after
        .values()
        .filter(|f| !before.contains_key(&f.path))
        .collect();
    let old_bytes: u64 = before.values().map(|f| f.size).sum();
    let new_bytes: u64 = added.iter().map(|f| f.size).sum();
    if added.is_empty() {
        return Ok(Strategy::Full(format!(
            "{source} changed without new files"
        )));
    }
    if new_bytes >= old_bytes {
        return Ok(Strategy::Full(format!(
            "the {} appended file(s) are as large as {source} was",
            added.len()
        )));
    }
    let urls = added
        .iter()
        .map(|f| ListingTableUrl::parse(&f.path))
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(listing.options().clone())
        .with_schema(TableProvider::schema(&listing));
    let delta_source = provider_as_source(Arc::new(ListingTable::try_new(config)?));
    let delta = plan
        .clone()
        .transform_up(|node| match node {
            LogicalPlan::TableScan(scan) => {
                Ok(Transformed::yes(LogicalPlan::TableScan(TableScan {
                    source: Arc::clone(&delta_source),
                    ..scan
                })))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data;
    Ok(Strategy::Append {
        plan: delta,
        detail: format!("appended {} file(s) to {source}", added.len()),
    })
}

/// The one table scan of a plan made only of row-wise operators
/// (projection, filter, alias, unnest), or why the plan is not one.
fn single_scan(plan: &LogicalPlan) -> std::result::Result<TableScan, String> {
    let mut scans = vec![];
    let mut other = None;
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(scan) => scans.push(scan.clone()),
            LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Unnest(_) => {}
            LogicalPlan::Subquery(_) => {
                other = Some("a subquery".to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
            node => {
                other = Some(node.display().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if let Some(node) = other {
        let name = node.split(':').next().unwrap_or(&node).trim().to_owned();
        return Err(format!("not incremental: {name}"));
    }
    match scans.as_slice() {
        [scan] => Ok(scan.clone()),
        _ => Err(format!("not incremental: reads {} relations", scans.len())),
    }
}
