//! Views whose windows partition by a Hive partition column of the table
//! they read: each value of that column is computed from that
//! partition's files alone, so a change recomputes only the partitions
//! of the files it touched.
//!
//! A full refresh of such a view writes one data file per group of whole
//! partitions, with those partitions' files as its lineage. After files
//! are appended, removed or rewritten, the data files whose lineage holds
//! a file of a touched partition are evicted, and the query runs again
//! over all the files those partitions hold now. Rows of other
//! partitions are kept as they are: no window of the view reaches across
//! partitions.

use std::collections::HashMap;

use datafusion::logical_expr::expr::WindowFunction;

use super::*;

/// The Hive partition columns of `provider` that every window function
/// of `plan` partitions its rows by, when `plan` is projections,
/// filters, aliases and windows (at least one) over one scan of
/// `provider`, and those columns reach each window unchanged (renamed at
/// most). `None` otherwise.
pub(super) fn window_keys(
    plan: &LogicalPlan,
    provider: &Arc<dyn TableProvider>,
) -> Option<Vec<String>> {
    let hive: BTreeSet<String> = (provider.as_ref() as &dyn std::any::Any)
        .downcast_ref::<ListingTable>()?
        .options()
        .table_partition_cols
        .iter()
        .map(|(name, _)| name.clone())
        .collect();
    if hive.is_empty() {
        return None;
    }
    let mut subquery = false;
    let _ = plan.apply_subqueries(|_| {
        subquery = true;
        Ok(TreeNodeRecursion::Stop)
    });
    if subquery {
        return None;
    }
    let mut keys = None;
    carriers(plan, provider, &hive, &mut keys)?;
    keys.filter(|k: &BTreeSet<String>| !k.is_empty())
        .map(|k| k.into_iter().collect())
}

/// The output columns of `plan` that hold a partition column of `hive`
/// unchanged, by output name, with that column's name; narrows `keys` to
/// the partition columns each window partitions by. `None`: a node that
/// is not one of [`window_keys`]'s.
fn carriers(
    plan: &LogicalPlan,
    provider: &Arc<dyn TableProvider>,
    hive: &BTreeSet<String>,
    keys: &mut Option<BTreeSet<String>>,
) -> Option<HashMap<String, String>> {
    match plan {
        LogicalPlan::TableScan(scan) if reads(scan, provider) => Some(
            scan.projected_schema
                .fields()
                .iter()
                .filter(|f| hive.contains(f.name()))
                .map(|f| (f.name().clone(), f.name().clone()))
                .collect(),
        ),
        LogicalPlan::Filter(filter) => carriers(&filter.input, provider, hive, keys),
        LogicalPlan::SubqueryAlias(alias) => carriers(&alias.input, provider, hive, keys),
        LogicalPlan::Projection(projection) => {
            let input = carriers(&projection.input, provider, hive, keys)?;
            Some(
                projection
                    .expr
                    .iter()
                    .zip(projection.schema.fields())
                    .filter_map(|(expr, field)| match shape::unalias(expr) {
                        Expr::Column(c) => input
                            .get(&c.name)
                            .map(|column| (field.name().clone(), column.clone())),
                        _ => None,
                    })
                    .collect(),
            )
        }
        LogicalPlan::Window(window) => {
            let input = carriers(&window.input, provider, hive, keys)?;
            for expr in &window.window_expr {
                let Expr::WindowFunction(function) = shape::unalias(expr) else {
                    return None;
                };
                let WindowFunction { params, .. } = function.as_ref();
                let by: BTreeSet<String> = params
                    .partition_by
                    .iter()
                    .filter_map(|e| match e {
                        Expr::Column(c) => input.get(&c.name).cloned(),
                        _ => None,
                    })
                    .collect();
                let narrowed = match keys.take() {
                    Some(keys) => keys.intersection(&by).cloned().collect(),
                    None => by,
                };
                *keys = Some(narrowed);
            }
            Some(input)
        }
        _ => None,
    }
}

/// The values of partition columns `keys` in a file's path (its
/// `name=value` directories), or `None` when one is missing.
fn key_of(path: &str, keys: &[String]) -> Option<Vec<String>> {
    let values: HashMap<&str, &str> = path
        .split('/')
        .filter_map(|part| part.split_once('='))
        .collect();
    keys.iter()
        .map(|k| values.get(k.as_str()).map(|v| (*v).to_owned()))
        .collect()
}

/// `files` in at most `most` groups of whole partitions (by the values of
/// `keys`), of about equal size; `None` when a path does not show its
/// partition.
pub(super) fn partition_groups(
    files: &[FileFingerprint],
    most: usize,
    keys: &[String],
) -> Option<Vec<Vec<String>>> {
    let mut partitions: BTreeMap<Vec<String>, (u64, Vec<String>)> = BTreeMap::new();
    for file in non_empty(files) {
        let partition = partitions.entry(key_of(&file.path, keys)?).or_default();
        partition.0 += file.size;
        partition.1.push(file.path.clone());
    }
    let total: u64 = partitions.values().map(|(size, _)| size).sum();
    let target = total.div_ceil(most as u64).max(1);
    let mut out: Vec<Vec<String>> = vec![];
    let mut size = 0;
    for (bytes, paths) in partitions.into_values() {
        if out.is_empty() || size >= target {
            out.push(vec![]);
            size = 0;
        }
        size += bytes;
        out.last_mut().expect("pushed above").extend(paths);
    }
    Some(out)
}

/// What [`recomputed`] finds: the data files evicted and kept, the
/// source files to read, and how many partitions they hold.
pub(super) type Recomputed<'a> = (Vec<&'a DataFile>, Vec<&'a DataFile>, Vec<String>, usize);

/// What a change (source files `changed`, removed or rewritten, and
/// `added`; `after`: the files there now) recomputes of a view computed
/// by partition: the data files to evict (those whose lineage holds a
/// file of a partition it touched, or of a partition they share with one
/// evicted), the data files kept, the source files to read (every file
/// those partitions hold now), and how many partitions that is. `None`
/// when a path does not show its partition.
pub(super) fn recomputed<'a>(
    files: &'a [DataFile],
    keys: &[String],
    changed: &BTreeSet<&str>,
    added: &[&str],
    after: &BTreeMap<&str, &FileFingerprint>,
) -> Option<Recomputed<'a>> {
    let mut touched: BTreeSet<Vec<String>> = BTreeSet::new();
    for path in changed.iter().chain(added) {
        touched.insert(key_of(path, keys)?);
    }
    // Each data file with the partitions its lineage holds.
    let mut covered = vec![];
    for file in files {
        let mut partitions = BTreeSet::new();
        for path in file.lineage.iter().flatten() {
            partitions.insert(key_of(path, keys)?);
        }
        covered.push((file, partitions));
    }
    // A partition computed in an evicted file is computed again whole:
    // any other file holding part of it goes too (each partition is in
    // one data file, but nothing is lost by making sure).
    let mut evict = vec![false; files.len()];
    loop {
        let mut grew = false;
        for (i, (_, partitions)) in covered.iter().enumerate() {
            if !evict[i] && !partitions.is_disjoint(&touched) {
                evict[i] = true;
                touched.extend(partitions.iter().cloned());
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let (mut evicted, mut kept) = (vec![], vec![]);
    for ((file, _), evicted_here) in covered.into_iter().zip(evict) {
        if evicted_here {
            evicted.push(file);
        } else {
            kept.push(file);
        }
    }
    let mut read = vec![];
    for path in after.keys() {
        if touched.contains(&key_of(path, keys)?) {
            read.push((*path).to_owned());
        }
    }
    Some((evicted, kept, read, touched.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refresh::plan::tests::file;

    #[test]
    fn groups_hold_whole_partitions() {
        let files = [
            file("file:///t/day=1/region=a/f1.csv", 10),
            file("file:///t/day=1/region=b/f2.csv", 10),
            file("file:///t/day=2/region=a/f3.csv", 10),
            file("file:///t/day=3/region=a/f4.csv", 0),
            file("file:///t/day=3/region=b/f5.csv", 10),
        ];
        let by_day = partition_groups(&files, 4, &["day".into()]).unwrap();
        assert_eq!(
            by_day,
            [
                vec![
                    "file:///t/day=1/region=a/f1.csv",
                    "file:///t/day=1/region=b/f2.csv"
                ],
                vec!["file:///t/day=2/region=a/f3.csv"],
                vec!["file:///t/day=3/region=b/f5.csv"],
            ]
        );
        // By region, a second-level column: its files are not next to
        // each other by path, and still end up together.
        let by_region = partition_groups(&files, 8, &["region".into()]).unwrap();
        assert_eq!(by_region.len(), 2);
        assert_eq!(by_region[0].len(), 2);
        assert!(by_region[1].iter().all(|p| p.contains("region=b")));
        assert_eq!(partition_groups(&files, 2, &["shard".into()]), None);
    }

    #[test]
    fn a_change_recomputes_the_partitions_it_touched() {
        let data = |lineage: &[&str]| DataFile {
            path: "d.parquet".into(),
            size: 1,
            rows: 1,
            columns: vec![],
            lineage: Some(lineage.iter().map(|p| p.to_string()).collect()),
        };
        let files = [
            data(&["t/day=1/a.csv", "t/day=1/b.csv"]),
            data(&["t/day=2/c.csv", "t/day=3/d.csv"]),
            data(&["t/day=4/e.csv"]),
        ];
        let now = [
            file("t/day=1/a.csv", 1),
            file("t/day=1/b.csv", 1),
            file("t/day=2/c.csv", 1),
            file("t/day=3/d.csv", 1),
            file("t/day=3/n.csv", 1),
            file("t/day=4/e.csv", 1),
        ];
        let after = now.iter().map(|f| (f.path.as_str(), f)).collect();
        let keys = ["day".to_owned()];
        let (evicted, kept, read, partitions) =
            recomputed(&files, &keys, &BTreeSet::new(), &["t/day=3/n.csv"], &after).unwrap();
        // The file appended to day 3 recomputes day 3, and day 2, which
        // was computed in the same data file.
        assert_eq!(evicted.len(), 1);
        assert_eq!(kept.len(), 2);
        assert_eq!(read, ["t/day=2/c.csv", "t/day=3/d.csv", "t/day=3/n.csv"]);
        assert_eq!(partitions, 2);
        // A file removed from day 4: that partition alone, from what it
        // holds now (nothing).
        let after = now
            .iter()
            .filter(|f| f.path != "t/day=4/e.csv")
            .map(|f| (f.path.as_str(), f))
            .collect();
        let (evicted, kept, read, partitions) =
            recomputed(&files, &keys, &["t/day=4/e.csv"].into(), &[], &after).unwrap();
        assert_eq!(
            (evicted.len(), kept.len(), read.len(), partitions),
            (1, 2, 0, 1)
        );
    }
}
