//! The third stage of a refresh: running a planned [`Write`] and writing
//! its result as a new snapshot of Parquet files with DataFusion's own
//! (streaming) writer, reporting progress while it runs; and importing
//! existing files as a snapshot (`dfmv adopt`).
//!
//! Nothing here commits: [`super::commit`] commits the returned
//! [`Snapshot`], and its directory is discarded if the commit is rejected.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue};
use datafusion::config::TableParquetOptions;
use datafusion::datasource::file_format::format_as_file_type;
use datafusion::datasource::file_format::parquet::ParquetFormatFactory;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::LogicalPlanBuilder;
use datafusion::physical_plan::{ExecutionPlan, collect};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use object_store::{ObjectStoreExt, PutPayload};

use super::plan::{Part, Write};
use crate::catalog::{Catalog, Lease, create_only};
use crate::error::{Error, Result};
use crate::spec::{
    ColumnStats, DataFile, META_DEFINITION, META_PART, META_SNAPSHOT, META_VIEW, QualifiedName,
    SNAPSHOT_MARKER, Snapshot, SnapshotMarker, SourceFingerprint, ViewEntry,
};

/// Runs the parts of `write` (concurrently) and writes their results under
/// the fresh snapshot directory `lease` holds, next to the files `write`
/// keeps. On failure the partial output is removed and the view's
/// committed data is untouched.
pub(crate) async fn write_snapshot(
    mut state: SessionState,
    catalog: &Catalog,
    entry: &ViewEntry,
    write: Write,
    watch: Watch<'_>,
    sources: Vec<SourceFingerprint>,
    lease: &Lease,
) -> Result<Snapshot> {
    let Watch { progress, reads } = watch;
    let id = lease.snapshot_id.clone();
    let dir = lease.dir.clone();
    let mut options: TableParquetOptions = state.default_table_options().parquet;
    options.global.compression = Some("zstd(3)".into());
    options.global.statistics_enabled = Some("page".into());
    options
        .key_value_metadata
        .insert(META_VIEW.into(), Some(entry.name.to_string()));
    options
        .key_value_metadata
        .insert(META_SNAPSHOT.into(), Some(id.clone()));
    let definition = serde_json::to_string(&entry.definition).map_err(|e| Error::Encoding {
        what: "a definition",
        reason: e.to_string(),
    })?;
    options
        .key_value_metadata
        .insert(META_DEFINITION.into(), Some(definition));

    let Write {
        parts,
        keep,
        state_columns,
        input_bytes,
        partials,
        lineage_of,
    } = write;
    let small = state.config().options().optimizer.repartition_file_min_size as u64;
    if input_bytes.is_some_and(|bytes| bytes < small) {
        // Below the size at which DataFusion stops splitting files among
        // partitions, one partition: spreading a few megabytes over
        // threads costs more than it saves.
        state.config_mut().options_mut().execution.target_partitions = 1;
    }
    if parts.len() > 1 || partials.parts.len() > 1 {
        // One file per part (a group of source files), as the lineage
        // that evicts data files by source file group wants.
        state
            .config_mut()
            .options_mut()
            .set("datafusion.execution.minimum_parallel_output_files", "1")?;
    }
    let writer = PartWriter {
        state: &state,
        catalog,
        dir: &dir,
        options: &options,
        schema: Arc::new(entry.definition.schema.clone()),
        reads,
    };
    let produced = async {
        // Partial aggregates first: the view's data may be their merge.
        let mut new_partials = vec![];
        let mut parts = parts;
        if let Some(first) = partials.parts.first() {
            // Partials of a view that computes over its aggregate hold the
            // aggregate's columns, not the view's: their statistics are
            // read as what they hold.
            let columns = Arc::new(first.plan.schema().as_arrow().clone());
            new_partials = writer
                .write(partials.parts, progress, &[], &columns)
                .await?;
        }
        if let Some(merge) = &partials.merge {
            parts = vec![Part {
                plan: merge.plan(&new_partials)?,
                lineage: None,
            }];
        }
        let progress = progress.filter(|_| new_partials.is_empty());
        let data = writer
            .write(parts, progress, &new_partials, &writer.schema)
            .await?;
        Ok(Produced {
            data,
            partials: partials.keep.into_iter().chain(new_partials).collect(),
        })
    }
    .await;
    seal_snapshot(
        catalog,
        entry,
        id,
        &dir,
        produced,
        sources,
        Kept {
            keep,
            state_columns,
            lineage_of,
        },
    )
    .await
}

/// Writes parts of a refresh into its snapshot directory.
struct PartWriter<'a> {
    state: &'a SessionState,
    catalog: &'a Catalog,
    dir: &'a str,
    options: &'a TableParquetOptions,
    /// The view's columns (its files may hold state columns after them).
    schema: SchemaRef,
    /// What the parts' file scans read.
    reads: &'a Reads,
}

/// Who watches a write: its progress listener, and what its file scans
/// read.
pub(crate) struct Watch<'a> {
    /// The view, as messages name it, and who hears of its progress.
    pub(crate) progress: Option<(&'a str, &'a Arc<dyn ProgressListener>)>,
    /// Counts what the write's file scans read.
    pub(crate) reads: &'a Reads,
}

/// What the file scans of a refresh's plans read, as planned (before
/// pruning): each file once per plan, and the bytes of the ranges its
/// partitions read (the whole file unless split).
#[derive(Debug, Default)]
pub(crate) struct Reads {
    files: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
}

impl Reads {
    /// Files read.
    pub(crate) fn files(&self) -> u64 {
        self.files.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes read.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Adds the file scans of `plan`.
    fn add_scans_of(&self, plan: &Arc<dyn ExecutionPlan>) {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        use datafusion::datasource::physical_plan::FileScanConfig;
        use datafusion::datasource::source::DataSourceExec;
        use std::sync::atomic::Ordering::Relaxed;
        let mut paths = std::collections::HashSet::new();
        let mut bytes = 0u64;
        let _ = plan.apply(|node| {
            if let Some(exec) = node.downcast_ref::<DataSourceExec>()
                && let Some(config) = exec.data_source().downcast_ref::<FileScanConfig>()
            {
                for file in config.file_groups.iter().flat_map(|g| g.iter()) {
                    paths.insert(file.object_meta.location.clone());
                    bytes += match &file.range {
                        Some(range) => u64::try_from(range.end - range.start).unwrap_or(0),
                        None => file.object_meta.size,
                    };
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        self.files.fetch_add(paths.len() as u64, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }
}

impl PartWriter<'_> {
    /// Runs `parts` and returns the files they wrote, each with its part's
    /// lineage: the directory's Parquet files but those already `written`,
    /// with statistics of their `columns`.
    ///
    /// Each part writes files into the directory (as many as DataFusion's
    /// writer makes), named afresh by every execution, so a task that runs
    /// twice (an executor declared lost that is still alive) never
    /// overwrites a file; each file's footer names its part, so its
    /// lineage and the rows each part wrote are known. On a cluster the
    /// footer's key-value metadata does not reach the executors (Ballista
    /// 55's plan codec drops it), so several parts run one after the other
    /// and each file is attributed to the part that was running when it
    /// appeared.
    async fn write(
        &self,
        parts: Vec<Part>,
        progress: Option<(&str, &Arc<dyn ProgressListener>)>,
        written: &[DataFile],
        columns: &SchemaRef,
    ) -> Result<Vec<DataFile>> {
        let (catalog, state) = (self.catalog, self.state);
        let lineage: Vec<Option<Vec<String>>> = parts.iter().map(|p| p.lineage.clone()).collect();
        let attribute = (parts.len() > 1 && crate::session::on_cluster(state)).then(|| {
            let found: HashMap<_, _> = written
                .iter()
                .map(|f| (catalog.path(&f.path), usize::MAX))
                .collect();
            Attribution {
                store: Arc::clone(catalog.store()),
                prefix: catalog.path(self.dir),
                found: Arc::new(std::sync::Mutex::new(found)),
            }
        });
        let found = attribute.as_ref().map(|a| Arc::clone(&a.found));
        let mut physical = Vec::with_capacity(parts.len());
        // The logical plans live until their execution ends: a table they
        // scan may hold what its execution needs (a partitioned table held
        // to some files registers its store for as long as it lives).
        let mut logical = Vec::with_capacity(parts.len());
        for (i, part) in parts.into_iter().enumerate() {
            let mut options = self.options.clone();
            options
                .key_value_metadata
                .insert(META_PART.into(), Some(i.to_string()));
            let file_type =
                format_as_file_type(Arc::new(ParquetFormatFactory::new_with_options(options)));
            let copy = LogicalPlanBuilder::copy_to(
                part.plan,
                catalog.url_of_dir(self.dir),
                file_type,
                HashMap::new(),
                vec![],
            )?
            .build()?;
            let plan = state.create_physical_plan(&copy).await?;
            self.reads.add_scans_of(&plan);
            physical.push(plan);
            logical.push(copy);
        }
        let concurrency = state.config().target_partitions().max(1);
        let expected_rows =
            run_with_progress(physical, state.task_ctx(), concurrency, progress, attribute).await?;
        drop(logical);
        let attributed: HashMap<String, usize> = found
            .map(|found| std::mem::take(&mut *found.lock().unwrap_or_else(|e| e.into_inner())))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(path, part)| Some((catalog.relative(&path)?, part)))
            .collect();
        let known: std::collections::HashSet<&str> =
            written.iter().map(|f| f.path.as_str()).collect();
        let mut files = list_snapshot_files(catalog, self.dir, columns).await?;
        files.retain(|(f, _)| !known.contains(f.path.as_str()));
        claim(self.dir, files, &expected_rows, &lineage, &attributed)
    }
}

/// The files a write produced: the view's data and its partials.
struct Produced {
    data: Vec<DataFile>,
    partials: Vec<DataFile>,
}

/// What a new snapshot takes from the write that is not written by it.
struct Kept {
    /// Files of the previous snapshot the new one keeps.
    keep: Vec<DataFile>,
    state_columns: Vec<String>,
    /// The table the lineage of the files lists files of.
    lineage_of: Option<QualifiedName>,
}

/// The files `listed` (each with the part its footer names, if any) as
/// the parts that wrote `expected_rows` (when they report them) produced
/// them, each with its part's `lineage`; `attributed` names the part of
/// files whose footer does not say. Fails when a part's files do not hold
/// exactly the rows it wrote, or files no part claims hold rows: never
/// commit a snapshot that is not all there, or holds a part twice.
fn claim(
    dir: &str,
    mut listed: Vec<(DataFile, Option<usize>)>,
    expected_rows: &[Option<u64>],
    lineage: &[Option<Vec<String>>],
    attributed: &HashMap<String, usize>,
) -> Result<Vec<DataFile>> {
    for (file, part) in &mut listed {
        if part.is_none() {
            *part = attributed.get(&file.path).copied();
        }
        // One part: every file its writer made is its own.
        if part.is_none() && expected_rows.len() == 1 {
            *part = Some(0);
        }
    }
    let rows_of = |part: usize| -> u64 {
        listed
            .iter()
            .filter(|(_, p)| *p == Some(part))
            .map(|(f, _)| f.rows)
            .sum()
    };
    let unclaimed: u64 = listed
        .iter()
        .filter(|(_, p)| p.is_none_or(|p| p >= expected_rows.len()))
        .map(|(f, _)| f.rows)
        .sum();
    let mismatch = expected_rows
        .iter()
        .enumerate()
        .find_map(|(part, expected)| {
            let found = rows_of(part);
            expected
                .filter(|e| *e != found)
                .map(|expected| (expected, found))
        })
        .or_else(|| {
            // Files no part claims: another writer's, or a stray copy.
            let expected: Option<u64> = expected_rows.iter().copied().sum();
            (unclaimed > 0 && !expected_rows.is_empty() && expected.is_some()).then(|| {
                let found = listed.iter().map(|(f, _)| f.rows).sum();
                (expected.unwrap_or_default(), found)
            })
        });
    if let Some((expected, found)) = mismatch {
        return Err(Error::IncompleteWrite {
            dir: dir.to_owned(),
            expected,
            found,
        });
    }
    Ok(listed
        .into_iter()
        .map(|(f, part)| DataFile {
            lineage: part.and_then(|p| lineage.get(p).cloned()).flatten(),
            ..f
        })
        .collect())
}

/// Files attributed to the part that was running when they appeared, for
/// writes whose footers cannot say (see [`write_snapshot`]).
struct Attribution {
    store: Arc<dyn object_store::ObjectStore>,
    prefix: object_store::path::Path,
    found: Arc<std::sync::Mutex<HashMap<object_store::path::Path, usize>>>,
}

/// Completes a snapshot of the files `produced` wrote under `dir` and the
/// files it keeps: writes the `_snapshot.json` marker that recovery
/// trusts. On any failure removes `dir` (nothing references it).
async fn seal_snapshot(
    catalog: &Catalog,
    entry: &ViewEntry,
    id: String,
    dir: &str,
    produced: Result<Produced>,
    sources: Vec<SourceFingerprint>,
    kept: Kept,
) -> Result<Snapshot> {
    let sealed = async {
        let produced = produced?;
        // An incremental refresh keeps files of the snapshot it builds on.
        let files: Vec<DataFile> = kept.keep.into_iter().chain(produced.data).collect();
        let snapshot = Snapshot {
            id,
            row_count: files.iter().map(|f| f.rows).sum(),
            size_bytes: files.iter().map(|f| f.size).sum(),
            files,
            refreshed_at: Utc::now(),
            sources,
            state_columns: kept.state_columns,
            partials: produced.partials,
            lineage_of: kept.lineage_of,
        };
        let marker = SnapshotMarker {
            view: entry.clone(),
            snapshot: snapshot.clone(),
        };
        let json = serde_json::to_vec(&marker).map_err(|e| Error::Encoding {
            what: "a snapshot marker",
            reason: e.to_string(),
        })?;
        let opts = create_only();
        catalog
            .store()
            .put_opts(
                &catalog.path(&format!("{dir}/{SNAPSHOT_MARKER}")),
                PutPayload::from(json),
                opts,
            )
            .await?;
        Ok(snapshot)
    }
    .await;
    if sealed.is_err() {
        let _ = catalog.delete_dir(dir).await;
    }
    sealed
}

/// Copies existing Parquet files (any URL or path the session can read)
/// into a new snapshot of the view, checking that their columns are the
/// view's. Used to adopt data computed outside the catalog.
pub(crate) async fn import_snapshot(
    state: &SessionState,
    catalog: &Catalog,
    entry: &ViewEntry,
    files: &[String],
    sources: Vec<SourceFingerprint>,
    lease: &Lease,
) -> Result<Snapshot> {
    let id = lease.snapshot_id.clone();
    let dir = lease.dir.clone();
    let copied = async {
        for (i, file) in files.iter().enumerate() {
            let url = ListingTableUrl::parse(file)?;
            let source = state.runtime_env().object_store(url.object_store())?;
            let meta = source.head(url.prefix()).await?;
            let schema = DFParquetMetadata::new(source.as_ref(), &meta)
                .fetch_schema()
                .await?;
            check_columns(file, &schema, &entry.definition.schema)?;
            let target = catalog.path(&format!("{dir}/part-{i:05}.parquet"));
            let bytes = source.get(url.prefix()).await?.bytes().await?;
            let opts = create_only();
            catalog
                .store()
                .put_opts(&target, PutPayload::from(bytes), opts)
                .await?;
        }
        let schema = Arc::new(entry.definition.schema.clone());
        let listed = list_snapshot_files(catalog, &dir, &schema).await?;
        let data = claim(&dir, listed, &[], &[], &HashMap::new())?;
        Ok(Produced {
            data,
            partials: vec![],
        })
    }
    .await;
    let kept = Kept {
        keep: vec![],
        state_columns: vec![],
        lineage_of: None,
    };
    seal_snapshot(catalog, entry, id, &dir, copied, sources, kept).await
}

/// Existing data must have the view's columns, in order, with types a
/// scan can read as the view's (e.g. `Utf8` for `Utf8View`).
fn check_columns(file: &str, found: &Schema, wanted: &Schema) -> Result<()> {
    let same = found.fields().len() == wanted.fields().len()
        && found.fields().iter().zip(wanted.fields()).all(|(a, b)| {
            a.name() == b.name()
                && DFSchema::datatype_is_logically_equal(a.data_type(), b.data_type())
        });
    if same {
        return Ok(());
    }
    Err(Error::ColumnsMismatch {
        file: file.to_owned(),
        found: crate::error::describe_columns(found),
        wanted: crate::error::describe_columns(wanted),
    })
}

/// Receives progress of a refresh while its query runs.
pub trait ProgressListener: Send + Sync + std::fmt::Debug {
    /// Called about ten times a second while a view is computed, with the
    /// rows its query has produced so far.
    fn progress(&self, view: &str, rows: u64, elapsed: Duration);
    /// Called once when the computation has ended, successfully or not.
    fn finished(&self, _view: &str) {}
}

/// Runs the write plans, `concurrency` at a time; while they run, reports
/// the rows their inputs have produced (from the inputs' live metrics) to
/// `progress`. Returns the rows each plan wrote, when it reports them.
/// With `attribute`, runs them one at a time and lists its prefix after
/// each, attributing the new files to the plan that just ran.
async fn run_with_progress(
    physical: Vec<Arc<dyn ExecutionPlan>>,
    task_ctx: Arc<TaskContext>,
    concurrency: usize,
    progress: Option<(&str, &Arc<dyn ProgressListener>)>,
    attribute: Option<Attribution>,
) -> Result<Vec<Option<u64>>> {
    let concurrency = if attribute.is_some() { 1 } else { concurrency };
    let attribute = attribute.map(Arc::new);
    let inputs: Vec<Arc<dyn ExecutionPlan>> = physical
        .iter()
        .filter_map(|p| p.children().first().map(|c| Arc::clone(*c)))
        .collect();
    // Boxed futures in a Vec: a stream built from closures trips the
    // compiler's `Send` check of async callers.
    type Run = BoxFuture<'static, datafusion::error::Result<(usize, Option<u64>)>>;
    let runs: Vec<Run> = physical
        .into_iter()
        .enumerate()
        .map(|(i, plan)| {
            let (task_ctx, attribute) = (Arc::clone(&task_ctx), attribute.clone());
            async move {
                let batches = collect(plan, task_ctx).await?;
                if let Some(a) = attribute {
                    let listed: Vec<object_store::ObjectMeta> =
                        a.store.list(Some(&a.prefix)).try_collect().await?;
                    let mut found = a.found.lock().unwrap_or_else(|e| e.into_inner());
                    for meta in listed {
                        found.entry(meta.location).or_insert(i);
                    }
                }
                Ok((i, rows_written(&batches)))
            }
            .boxed()
        })
        .collect();
    let parts = runs.len();
    let run = async move {
        let counts: Vec<(usize, Option<u64>)> = futures::stream::iter(runs)
            .buffer_unordered(concurrency)
            .try_collect()
            .await?;
        let mut by_part = vec![None; parts];
        for (i, count) in counts {
            by_part[i] = count;
        }
        Ok::<_, datafusion::error::DataFusionError>(by_part)
    };
    let Some((view, listener)) = progress else {
        return Ok(run.await?);
    };
    let started = Instant::now();
    tokio::pin!(run);
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let result = loop {
        tokio::select! {
            done = &mut run => break done,
            _ = ticks.tick() => {
                let rows: usize = inputs
                    .iter()
                    .filter_map(|i| i.metrics())
                    .filter_map(|m| m.output_rows())
                    .sum();
                listener.progress(view, rows as u64, started.elapsed());
            }
        }
    };
    listener.finished(view);
    Ok(result?)
}

/// Types whose values survive Arrow's cast to `Utf8` and back unchanged.
fn text_round_trips(data_type: &DataType) -> bool {
    data_type.is_integer()
        || data_type.is_floating()
        || matches!(
            data_type,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Boolean
                | DataType::Date32
        )
}

fn column_stats(c: &ColumnStatistics, data_type: &DataType) -> ColumnStats {
    let value = |p: &Precision<ScalarValue>| match p {
        Precision::Exact(v) | Precision::Inexact(v)
            if !v.is_null() && text_round_trips(data_type) =>
        {
            v.cast_to(&DataType::Utf8).ok().map(|s| s.to_string())
        }
        _ => None,
    };
    ColumnStats {
        null_count: c.null_count.get_value().map(|n| *n as u64),
        min: value(&c.min_value),
        max: value(&c.max_value),
        exact: matches!(
            (&c.min_value, &c.max_value),
            (Precision::Exact(_), Precision::Exact(_))
        ),
    }
}

/// The row count a DataFusion write plan returns (one `count` row).
fn rows_written(batches: &[RecordBatch]) -> Option<u64> {
    let mut total = None;
    for batch in batches {
        if let Some(count) = batch.column_by_name("count")
            && let Some(count) = count.as_any().downcast_ref::<UInt64Array>()
        {
            *total.get_or_insert(0) += count.iter().flatten().sum::<u64>();
        }
    }
    total
}

/// The Parquet files written under `dir`, with their sizes, row counts and
/// column statistics (read once here from the footers, so queries never
/// need to), for a view of `schema`; and the part each footer names.
async fn list_snapshot_files(
    catalog: &Catalog,
    dir: &str,
    schema: &SchemaRef,
) -> Result<Vec<(DataFile, Option<usize>)>> {
    let store = Arc::clone(catalog.store());
    let metas: Vec<_> = store.list(Some(&catalog.path(dir))).try_collect().await?;
    let mut files = Vec::with_capacity(metas.len());
    for meta in metas {
        let Some(path) = catalog.relative(&meta.location) else {
            continue;
        };
        if !path.ends_with(".parquet") {
            continue;
        }
        let footer = DFParquetMetadata::new(store.as_ref(), &meta)
            .fetch_metadata()
            .await?;
        let statistics = DFParquetMetadata::statistics_from_parquet_metadata(&footer, schema)?;
        let part = footer
            .file_metadata()
            .key_value_metadata()
            .into_iter()
            .flatten()
            .find(|kv| kv.key == META_PART)
            .and_then(|kv| kv.value.as_deref()?.parse().ok());
        files.push((
            DataFile {
                path,
                size: meta.size,
                rows: footer.file_metadata().num_rows() as u64,
                columns: statistics
                    .column_statistics
                    .iter()
                    .zip(schema.fields())
                    .map(|(c, f)| column_stats(c, f.data_type()))
                    .collect(),
                lineage: None,
            },
            part,
        ));
    }
    files.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    Ok(files)
}
