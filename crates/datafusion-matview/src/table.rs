//! The [`TableProvider`] of a materialized view: a Parquet scan over exactly
//! the files of the committed snapshot.
//!
//! Planning reads no Parquet footer and lists nothing: the file list, sizes,
//! row counts and per-file column statistics come from the manifest.
//! Projection and limit go into DataFusion's Parquet scan. Filters are not
//! applied by `scan` itself: they are reported `Inexact`, so DataFusion
//! keeps its `FilterExec` above the scan, and its physical filter-pushdown
//! rule hands the predicate to the Parquet scan, which skips whole files on
//! the manifest's statistics and row groups and pages on the statistics
//! written at refresh time (as it does for a `ListingTable`;
//! `tests/it/catalog.rs` reads the scan's pruning metrics). The session's
//! Parquet settings (`datafusion.execution.parquet.*`, as `SET` leaves
//! them) apply to the scan, and to the files a refresh writes.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics, project_schema};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;

use crate::catalog::Catalog;
use crate::error::Error;
use crate::spec::{ColumnStats, QualifiedName, Snapshot, ViewVersion, quote_ident};

/// A materialized view as a DataFusion table.
///
/// Every scan reads the snapshot the view's log holds when the scan is
/// planned (one `HEAD` of the log when nothing changed), also when the
/// provider sits in the plan of a plain view made earlier; a plan keeps
/// reading that snapshot to its end.
#[derive(Debug)]
pub struct MaterializedViewTable {
    catalog: Arc<Catalog>,
    name: QualifiedName,
    /// The state last read.
    state: RwLock<Arc<ViewVersion>>,
    display_name: String,
    schema: SchemaRef,
    definition: String,
    /// Whether scans read `state` as it is instead of the latest state
    /// (see [`Self::at`]).
    fixed: bool,
}

impl MaterializedViewTable {
    /// A provider for one state of a view of `catalog`.
    pub fn new(catalog: Arc<Catalog>, state: Arc<ViewVersion>, display_name: String) -> Self {
        let entry = &state.view;
        let columns = &entry.definition.column_names;
        let definition = format!(
            "CREATE MATERIALIZED VIEW {}{} AS {}",
            entry.name.to_table_reference(),
            if columns.is_empty() {
                String::new()
            } else {
                let quoted: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
                format!(" ({})", quoted.join(", "))
            },
            entry.definition.sql
        );
        Self {
            catalog,
            name: entry.name.clone(),
            schema: Arc::new(entry.definition.schema.clone()),
            state: RwLock::new(state),
            display_name,
            definition,
            fixed: false,
        }
    }

    /// A provider that reads `state` only, never a newer one: a source
    /// view held at one version of its log for a refresh (see
    /// [`Catalog::view_at`]).
    pub fn at(catalog: Arc<Catalog>, state: Arc<ViewVersion>, display_name: String) -> Self {
        Self {
            fixed: true,
            ..Self::new(catalog, state, display_name)
        }
    }

    /// Reads the view's latest state (see [`Catalog::view`]) and keeps it.
    pub async fn latest(&self) -> Result<Arc<ViewVersion>, Error> {
        if self.fixed {
            return Ok(self.state());
        }
        let state = self
            .catalog
            .view(&self.name)
            .await?
            .ok_or_else(|| Error::NotFound {
                name: self.display_name.clone(),
            })?;
        self.set_state(Arc::clone(&state));
        Ok(state)
    }

    /// The latest committed snapshot (see [`Self::latest`]), or the error
    /// a query of this view gets.
    pub async fn latest_snapshot(&self) -> Result<Snapshot, Error> {
        self.latest().await?;
        self.snapshot()
    }

    /// The snapshot a scan planned now reads: the state held for a
    /// provider made with [`Self::at`], else the latest.
    pub async fn snapshot_to_scan(&self) -> Result<Snapshot, Error> {
        if self.fixed {
            self.snapshot()
        } else {
            self.latest_snapshot().await
        }
    }

    /// The catalog the view belongs to.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The view's name as messages show it.
    pub fn display_name(&self) -> &str {
        &self.display_name
    }

    /// Keeps `state` as the one last read (a newer state of the same
    /// definition).
    pub(crate) fn set_state(&self, state: Arc<ViewVersion>) {
        if self.fixed {
            return;
        }
        let mut guard = self.state.write().unwrap_or_else(|e| e.into_inner());
        if state.version >= guard.version || state.view.id != guard.view.id {
            *guard = state;
        }
    }

    /// Whether `self` and `other` are providers of the same definition of
    /// the same view of the same catalog (two instances may read it, for
    /// example one kept in the plan of a plain view made earlier).
    pub fn same_view(&self, other: &MaterializedViewTable) -> bool {
        Arc::ptr_eq(&self.catalog, &other.catalog)
            && self.name == other.name
            && self.state().view.id == other.state().view.id
    }

    /// The state of the view this provider last read.
    pub fn state(&self) -> Arc<ViewVersion> {
        Arc::clone(&self.state.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The view's fully qualified name.
    pub fn name(&self) -> &QualifiedName {
        &self.name
    }

    /// The snapshot of the state last read (see [`Self::latest_snapshot`]),
    /// or the error a query of this view gets.
    pub fn snapshot(&self) -> Result<Snapshot, Error> {
        self.state()
            .view
            .snapshot
            .clone()
            .ok_or_else(|| Error::NotPopulated {
                name: self.display_name.clone(),
            })
    }

    fn read_only(&self) -> datafusion::error::DataFusionError {
        Error::ReadOnly {
            name: self.display_name.clone(),
        }
        .into()
    }
}

fn column_statistics(column: &mut ColumnStatistics, recorded: &ColumnStats, data_type: &DataType) {
    if let Some(nulls) = recorded.null_count {
        column.null_count = Precision::Exact(nulls as usize);
    }
    let value = |text: &Option<String>| {
        let value = ScalarValue::try_from_string(text.clone()?, data_type).ok()?;
        Some(if recorded.exact {
            Precision::Exact(value)
        } else {
            Precision::Inexact(value)
        })
    };
    if let (Some(min), Some(max)) = (value(&recorded.min), value(&recorded.max)) {
        column.min_value = min;
        column.max_value = max;
    }
}

fn snapshot_statistics(snapshot: &Snapshot, schema: &SchemaRef) -> Statistics {
    Statistics {
        num_rows: Precision::Exact(snapshot.row_count as usize),
        total_byte_size: Precision::Inexact(snapshot.size_bytes as usize),
        column_statistics: Statistics::unknown_column(schema),
    }
}

/// A Parquet scan of `snapshot`'s files read as `schema` (the view's
/// columns, or a prefix of what the files hold), planned from the manifest
/// alone.
async fn scan_snapshot(
    catalog: &Catalog,
    snapshot: &Snapshot,
    schema: &SchemaRef,
    state: &dyn Session,
    projection: Option<&Vec<usize>>,
    limit: Option<usize>,
) -> DFResult<Arc<dyn ExecutionPlan>> {
    if snapshot.files.is_empty() {
        let projected = project_schema(schema, projection)?;
        return Ok(Arc::new(EmptyExec::new(projected)));
    }
    let files: Vec<PartitionedFile> = snapshot
        .files
        .iter()
        .map(|f| {
            let mut stats = Statistics::new_unknown(schema);
            stats.num_rows = Precision::Exact(f.rows as usize);
            stats.total_byte_size = Precision::Inexact(f.size as usize);
            // Min/max/nulls recorded at refresh let DataFusion skip
            // whole files, as it does for a listing table.
            for ((column, field), recorded) in stats
                .column_statistics
                .iter_mut()
                .zip(schema.fields())
                .zip(&f.columns)
            {
                column_statistics(column, recorded, field.data_type());
            }
            PartitionedFile::new(catalog.path(&f.path).to_string(), f.size)
                .with_statistics(Arc::new(stats))
        })
        .collect();
    // Consecutive files to each of the session's target partitions (as
    // a listing table does, keeping the written order); DataFusion
    // splits large files further by byte range when it repartitions.
    let groups = state.config().target_partitions().clamp(1, files.len());
    let per_group = files.len().div_ceil(groups);
    let file_groups: Vec<Vec<PartitionedFile>> = files
        .chunks(per_group)
        .map(<[PartitionedFile]>::to_vec)
        .collect();
    let format = ParquetFormat::default().with_options(state.default_table_options().parquet);
    let source = format.file_source(Arc::clone(schema).into());
    let config = FileScanConfigBuilder::new(catalog.store_url().clone(), source)
        .with_file_groups(file_groups.into_iter().map(FileGroup::new).collect())
        .with_statistics(snapshot_statistics(snapshot, schema))
        .with_projection_indices(projection.cloned())?
        .with_limit(limit)
        .build();
    format.create_physical_plan(state, config).await
}

/// One fixed snapshot of a view, with the aggregate state columns its
/// files hold after the view's: what an incremental refresh merges new
/// rows into. Not registered anywhere; it appears only inside refresh
/// plans, where a planner that sends plans elsewhere (the Ballista
/// integration) finds it and reads [`Self::parts`]. Only the crate makes
/// one.
#[derive(Debug)]
pub struct SnapshotTable {
    catalog: Arc<Catalog>,
    snapshot: Snapshot,
    schema: SchemaRef,
}

impl SnapshotTable {
    /// `schema`: the view's columns followed by the snapshot's state columns.
    pub(crate) fn new(catalog: Arc<Catalog>, snapshot: Snapshot, schema: SchemaRef) -> Self {
        Self {
            catalog,
            snapshot,
            schema,
        }
    }

    /// The catalog, the snapshot and the columns its files are read with.
    pub fn parts(&self) -> (&Arc<Catalog>, &Snapshot, SchemaRef) {
        (&self.catalog, &self.snapshot, Arc::clone(&self.schema))
    }
}

#[async_trait]
impl TableProvider for SnapshotTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        scan_snapshot(
            &self.catalog,
            &self.snapshot,
            &self.schema,
            state,
            projection,
            limit,
        )
        .await
    }
}

#[async_trait]
impl TableProvider for MaterializedViewTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_table_definition(&self) -> Option<&str> {
        Some(&self.definition)
    }

    fn get_logical_plan(&'_ self) -> Option<Cow<'_, LogicalPlan>> {
        None
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let snapshot = self.snapshot_to_scan().await?;
        scan_snapshot(
            &self.catalog,
            &snapshot,
            &self.schema,
            state,
            projection,
            limit,
        )
        .await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        // DataFusion keeps its filter above the scan and pushes the
        // predicate into the Parquet scan for pruning (see the module docs).
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    fn statistics(&self) -> Option<Statistics> {
        self.snapshot()
            .ok()
            .map(|s| snapshot_statistics(&s, &self.schema))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        _input: Arc<dyn ExecutionPlan>,
        _insert_op: InsertOp,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self.read_only())
    }

    async fn delete_from(
        &self,
        _state: &dyn Session,
        _filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self.read_only())
    }

    async fn update(
        &self,
        _state: &dyn Session,
        _assignments: Vec<(String, Expr)>,
        _filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self.read_only())
    }

    async fn truncate(&self, _state: &dyn Session) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self.read_only())
    }
}

/// A file of a view's snapshot that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableFile {
    /// The file, as people know it (a local path or a URL).
    pub path: String,
    /// What reading it said.
    pub reason: String,
}

/// The first file of `snapshot` whose footer or data does not decode,
/// reading every file whole: a diagnosis for after a scan has failed, not
/// something to run on every query.
pub(crate) async fn first_unreadable_file(
    catalog: &Catalog,
    snapshot: &Snapshot,
) -> Option<UnreadableFile> {
    use datafusion::datasource::physical_plan::parquet::{
        DefaultParquetFileReaderFactory, ParquetFileReaderFactory,
    };
    use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;
    use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
    use futures::TryStreamExt;

    let readers = DefaultParquetFileReaderFactory::new(Arc::clone(catalog.store()));
    for file in &snapshot.files {
        let path = catalog.path(&file.path);
        let read = async {
            let reader: Box<dyn datafusion::parquet::arrow::async_reader::AsyncFileReader> =
                readers
                    .create_reader(
                        0,
                        PartitionedFile::new(path.to_string(), file.size),
                        None,
                        &ExecutionPlanMetricsSet::new(),
                    )
                    .map_err(|e| datafusion::parquet::errors::ParquetError::External(e.into()))?;
            let stream = ParquetRecordBatchStreamBuilder::new(reader)
                .await?
                .build()?;
            let batches: Vec<_> = stream.try_collect().await?;
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            if rows as u64 != file.rows {
                return Err(datafusion::parquet::errors::ParquetError::General(format!(
                    "{rows} rows where the manifest records {}",
                    file.rows
                )));
            }
            Ok(())
        };
        if let Err(e) = read.await {
            return Some(UnreadableFile {
                path: catalog.display_path(&path),
                reason: e.to_string(),
            });
        }
    }
    None
}
