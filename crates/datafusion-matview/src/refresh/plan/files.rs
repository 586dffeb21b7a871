//! Reading a file-backed table as some of its files: a listing table
//! (Hive-partitioned or not) or a materialized view, told apart from other
//! tables by what it is, not by which object stands for it.

use super::*;

/// A table whose files can be read apart from the rest: a listing table,
/// or a materialized view (whose data files are immutable).
pub(super) enum Files {
    Listing(ListingTable),
    /// A Hive-partitioned listing table: read through a store that lists
    /// only the chosen files (see [`pinned`]).
    Partitioned {
        listing: ListingTable,
        runtime: Arc<RuntimeEnv>,
    },
    View {
        catalog: Arc<Catalog>,
        snapshot: Snapshot,
        schema: datafusion::arrow::datatypes::SchemaRef,
    },
}

impl Files {
    pub(super) fn of(
        provider: &Arc<dyn TableProvider>,
        name: &str,
        catalog: &Arc<Catalog>,
        runtime: Option<&Arc<RuntimeEnv>>,
    ) -> std::result::Result<Files, FullReason> {
        if let Some(view) =
            (provider.as_ref() as &dyn std::any::Any).downcast_ref::<MaterializedViewTable>()
        {
            let snapshot = view.snapshot().map_err(|_| FullReason::NoData {
                view: name.to_owned(),
            })?;
            return Ok(Files::View {
                catalog: Arc::clone(catalog),
                snapshot,
                schema: view.schema(),
            });
        }
        listing_of(provider, name, runtime)
    }

    /// A table of the same columns over only `paths`.
    pub(super) fn only(&self, paths: &[String]) -> Result<Arc<dyn TableProvider>> {
        match self {
            Files::Listing(listing) | Files::Partitioned { listing, .. } if paths.is_empty() => {
                Ok(Arc::new(EmptyTable::new(TableProvider::schema(listing))))
            }
            Files::Partitioned { listing, runtime } => {
                pinned::partitioned_files(listing, runtime, paths)
            }
            Files::Listing(listing) => {
                let urls = paths
                    .iter()
                    .map(ListingTableUrl::parse)
                    .collect::<datafusion::error::Result<Vec<_>>>()?;
                let config = ListingTableConfig::new_with_multi_paths(urls)
                    .with_listing_options(listing.options().clone())
                    .with_schema(TableProvider::schema(listing));
                Ok(Arc::new(ListingTable::try_new(config)?))
            }
            Files::View {
                catalog,
                snapshot,
                schema,
            } => {
                let wanted: BTreeSet<&str> = paths.iter().map(String::as_str).collect();
                let files: Vec<DataFile> = snapshot
                    .files
                    .iter()
                    .filter(|f| wanted.contains(f.path.as_str()))
                    .cloned()
                    .collect();
                if files.len() != wanted.len() {
                    return Err(datafusion::error::DataFusionError::Plan(
                        "a materialized view changed while its dependent was planned".into(),
                    )
                    .into());
                }
                let only = Snapshot {
                    row_count: files.iter().map(|f| f.rows).sum(),
                    size_bytes: files.iter().map(|f| f.size).sum(),
                    files,
                    ..snapshot.clone()
                };
                Ok(Arc::new(SnapshotTable::new(
                    Arc::clone(catalog),
                    only,
                    Arc::clone(schema),
                )))
            }
        }
    }
}

/// `provider` as a listing table whose files can be read apart from the
/// rest, or why not. A partitioned one is read through a store registered
/// in `runtime`; without one (on a cluster, whose executors would not have
/// that store) it cannot be.
pub(super) fn listing_of(
    provider: &Arc<dyn TableProvider>,
    name: &str,
    runtime: Option<&Arc<RuntimeEnv>>,
) -> std::result::Result<Files, FullReason> {
    let listing = (provider.as_ref() as &dyn std::any::Any)
        .downcast_ref::<ListingTable>()
        .ok_or_else(|| FullReason::NotFileBacked {
            relation: name.to_owned(),
        })?;
    if listing.options().table_partition_cols.is_empty() {
        return Ok(Files::Listing(listing.clone()));
    }
    let Some(runtime) = runtime else {
        return Err(FullReason::PartitionedOnCluster {
            table: name.to_owned(),
        });
    };
    Ok(Files::Partitioned {
        listing: listing.clone(),
        runtime: Arc::clone(runtime),
    })
}

/// Whether `scan` reads `provider`: the same relation by what it is, not
/// by which object stands for it (see [`same_relation`]).
pub(super) fn reads(scan: &TableScan, provider: &Arc<dyn TableProvider>) -> bool {
    match source_as_provider(&scan.source) {
        Ok(scanned) => same_relation(&scanned, provider),
        Err(_) => false,
    }
}

/// Whether two providers are the same relation, told by what they are:
/// listing tables by their definition (locations, format and its options,
/// schema, partition columns, order), materialized views by name and
/// definition id. DataFusion's dynamic file catalog and custom schema
/// providers build a new provider on every lookup, and a table re-created
/// with the same definition is a new object with the same meaning, so
/// object identity alone would miss both.
pub(super) fn same_relation(a: &Arc<dyn TableProvider>, b: &Arc<dyn TableProvider>) -> bool {
    if std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)) {
        return true;
    }
    fn any(p: &Arc<dyn TableProvider>) -> &dyn std::any::Any {
        p.as_ref()
    }
    if let (Some(a), Some(b)) = (
        any(a).downcast_ref::<ListingTable>(),
        any(b).downcast_ref::<ListingTable>(),
    ) {
        return listing_definition(a) == listing_definition(b);
    }
    match (
        any(a).downcast_ref::<MaterializedViewTable>(),
        any(b).downcast_ref::<MaterializedViewTable>(),
    ) {
        (Some(a), Some(b)) => a.same_view(b),
        _ => false,
    }
}

/// Whether `plan` reads `provider` anywhere, subqueries included.
pub(super) fn reads_anywhere(plan: &LogicalPlan, provider: &Arc<dyn TableProvider>) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && reads(scan, provider)
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// `plan` with every scan of `provider` reading only `paths` of it instead.
pub(super) fn over_files(
    plan: &LogicalPlan,
    provider: &Arc<dyn TableProvider>,
    files: &Files,
    paths: &[String],
) -> Result<LogicalPlan> {
    if !reads_anywhere(plan, provider) {
        return Ok(plan.clone());
    }
    let only = provider_as_source(files.only(paths)?);
    Ok(plan
        .clone()
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::TableScan(scan) if reads(&scan, provider) => {
                Ok(Transformed::yes(LogicalPlan::TableScan(TableScan {
                    source: Arc::clone(&only),
                    ..scan
                })))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}
