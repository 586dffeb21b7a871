//! Refresh history: one record per refresh attempt of every view, kept in
//! the catalog and read with `materialized_view_refreshes([view])`.
//!
//! ```text
//! <catalog>/_matview/history/<catalog>/<schema>/<view>/<started µs>-<attempt id>.json
//! ```
//!
//! Each attempt is one small object written with `PutMode::Create` once
//! the attempt has ended (succeeded, failed, found nothing to do, or was
//! cancelled: a statement dropped mid-way, such as a cancelled server job
//! or a timeout, writes its record from a task of its own). It is not a
//! commit: no log is read or extended, nothing races, and a record that
//! cannot be written is logged and does not fail the refresh it
//! describes. The newest [`MatviewOptions::history_per_view`] records of
//! each view are kept: older ones are deleted alongside the first refresh
//! of a view that writes data in a process, after every quarter of that
//! many records a process writes (see [`History::prune_if_due`]), and by
//! `VACUUM MATERIALIZED VIEWS`, which also removes the history of views
//! that no longer exist once it is older than the retention window.
//!
//! [`MatviewOptions::history_per_view`]: crate::MatviewOptions::history_per_view

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use datafusion::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::{ScalarValue, TableReference, plan_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::spec::QualifiedName;

/// The name `materialized_view_refreshes` is registered under.
pub const FUNCTION: &str = "materialized_view_refreshes";

/// How many attempts of each view are kept by default.
pub const DEFAULT_HISTORY_PER_VIEW: usize = 100;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    /// It committed a new version.
    Succeeded,
    /// It failed; [`RefreshAttempt::error`] says why.
    Failed,
    /// It was stopped before it ended (a cancelled job, a timeout).
    Cancelled,
    /// No source had changed: nothing was written.
    NoOp,
}

impl AttemptState {
    /// `succeeded`, `failed`, `cancelled` or `no_op`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Succeeded => "succeeded",
            AttemptState::Failed => "failed",
            AttemptState::Cancelled => "cancelled",
            AttemptState::NoOp => "no_op",
        }
    }
}

/// What started an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A `REFRESH MATERIALIZED VIEW` statement (or the API call that runs
    /// one) naming the view.
    Statement,
    /// A `REFRESH ... CASCADE` of a view that reads this one.
    Cascade,
    /// The server's scheduler (`auto_refresh`).
    Auto,
    /// `CREATE MATERIALIZED VIEW` populating the view.
    Create,
    /// A server job (the REST refresh and create routes).
    #[serde(rename = "server job")]
    ServerJob,
}

impl Trigger {
    /// `statement`, `cascade`, `auto`, `create` or `server job`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Statement => "statement",
            Trigger::Cascade => "cascade",
            Trigger::Auto => "auto",
            Trigger::Create => "create",
            Trigger::ServerJob => "server job",
        }
    }
}

/// One refresh attempt, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefreshAttempt {
    /// The view.
    pub view: QualifiedName,
    /// The definition refreshed ([`crate::spec::ViewEntry::id`]); empty
    /// when the attempt failed before finding it.
    #[serde(default)]
    pub definition: String,
    /// This attempt's id.
    pub attempt_id: String,
    /// The version of the view's log it committed (for `no_op`, the
    /// current one); `None` when it committed none.
    pub version: Option<u64>,
    /// How it ended.
    pub state: AttemptState,
    /// What started it.
    pub trigger: Trigger,
    /// `full`, `incremental` or `no_op`, once decided.
    pub mode: Option<String>,
    /// Why that mode (the `detail` a REFRESH returns).
    pub reason: Option<String>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: DateTime<Utc>,
    /// Rows written.
    pub rows_written: Option<u64>,
    /// Rows of the previous snapshot the new one no longer has.
    pub rows_deleted: Option<u64>,
    /// Files its file scans read (as planned, before pruning); `None`
    /// when not known (on a cluster, or before it ran).
    pub files_read: Option<u64>,
    /// Bytes of those files.
    pub bytes_read: Option<u64>,
    /// What it read: per source, its files or the version of a
    /// materialized view it read.
    pub sources: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Who ran it: the session's actor ([`crate::MatviewOptions::actor`],
    /// `dfmv serve` names itself) and host and process id.
    pub ran_by: String,
    /// The server job that ran it, if one did.
    pub job_id: Option<String>,
}

/// Who this process is, for [`RefreshAttempt::ran_by`].
pub(crate) fn process_name(actor: Option<&str>) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    let process = format!("{host} pid {}", std::process::id());
    match actor {
        Some(actor) => format!("{actor} ({process})"),
        None => process,
    }
}

/// Writes the history of one catalog, shared by a session and its forks.
#[derive(Debug)]
pub(crate) struct History {
    catalog: Arc<Catalog>,
    /// How many records of each view are kept; 0 turns the history off.
    keep: usize,
    ran_by: String,
    /// Per view: records written since this process last pruned its
    /// history, and whether it has pruned it at all.
    written: Mutex<HashMap<QualifiedName, (usize, bool)>>,
}

impl History {
    pub(crate) fn new(catalog: Arc<Catalog>, keep: usize, actor: Option<&str>) -> Self {
        Self {
            catalog,
            keep,
            ran_by: process_name(actor),
            written: Mutex::default(),
        }
    }

    /// Starts recording an attempt of view `view` (its definition
    /// `definition` when known), started by `trigger` (in server job
    /// `job_id`). Dropped without [`Recording::finish`], it records the
    /// attempt as cancelled.
    pub(crate) fn start(
        self: &Arc<Self>,
        view: &QualifiedName,
        trigger: Trigger,
        job_id: Option<&str>,
    ) -> Recording {
        Recording {
            history: (self.keep > 0).then(|| Arc::clone(self)),
            attempt: Some(RefreshAttempt {
                view: view.clone(),
                definition: String::new(),
                attempt_id: crate::spec::new_id(),
                version: None,
                state: AttemptState::Cancelled,
                trigger,
                mode: None,
                reason: None,
                started_at: Utc::now(),
                ended_at: Utc::now(),
                rows_written: None,
                rows_deleted: None,
                files_read: None,
                bytes_read: None,
                sources: None,
                error: None,
                ran_by: self.ran_by.clone(),
                job_id: job_id.map(str::to_owned),
            }),
        }
    }

    /// Writes `attempt`; a failure is logged, not returned: the refresh it
    /// describes has ended as it has whatever happens here.
    async fn write(self: Arc<Self>, attempt: RefreshAttempt) {
        let path = record_path(&self.catalog, &attempt);
        let bytes = match serde_json::to_vec(&attempt) {
            Ok(bytes) => bytes,
            Err(e) => {
                log::warn!("could not encode a refresh history record: {e}");
                return;
            }
        };
        let put = self
            .catalog
            .store()
            .put_opts(
                &path,
                PutPayload::from(bytes),
                PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                },
            )
            .await;
        if let Err(e) = put {
            log::warn!("could not write the refresh history record {path}: {e}");
            return;
        }
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(attempt.view.clone())
            .or_default()
            .0 += 1;
        self.prune_if_due(&attempt.view, false).await;
    }

    /// Trims view `view`'s history to the newest `keep` records when it is
    /// due: after every quarter of `keep` records this process wrote, and
    /// (`writing`: alongside a refresh that writes data, off its path) the
    /// first time this process refreshes the view. So a process that
    /// refreshes a view once (`dfmv -c`) trims it, one that only finds
    /// nothing to do adds one request every `keep / 4` attempts, and the
    /// history of a view never grows far past `keep`.
    pub(crate) async fn prune_if_due(&self, view: &QualifiedName, writing: bool) {
        if self.keep == 0 {
            return;
        }
        let due = {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            let (since, pruned) = written.entry(view.clone()).or_default();
            let due = (writing && !*pruned) || *since >= self.keep.div_ceil(4);
            if due {
                *since = 0;
                *pruned = true;
            }
            due
        };
        if due && let Err(e) = prune_view(&self.catalog, view, self.keep).await {
            log::warn!("could not trim the refresh history of {view}: {e}");
        }
    }
}

/// An attempt being recorded (see [`History::start`]).
#[derive(Debug)]
pub(crate) struct Recording {
    /// `None` when the history is off.
    history: Option<Arc<History>>,
    attempt: Option<RefreshAttempt>,
}

impl Recording {
    /// The record so far, to fill in as the attempt learns more.
    pub(crate) fn attempt(&mut self) -> &mut RefreshAttempt {
        self.attempt
            .as_mut()
            .expect("a recording holds its attempt until it ends")
    }

    /// Ends the attempt: `error` (when it failed) decides its state unless
    /// the record already says `no_op`; writes the record.
    pub(crate) async fn finish(mut self, error: Option<&Error>) {
        let Some(mut attempt) = self.attempt.take() else {
            return;
        };
        attempt.ended_at = Utc::now();
        match error {
            Some(Error::StatementTimeout { .. }) => {
                attempt.state = AttemptState::Cancelled;
                attempt.error = error.map(ToString::to_string);
            }
            Some(e) => {
                attempt.state = AttemptState::Failed;
                attempt.error = Some(e.to_string());
            }
            None if attempt.state == AttemptState::NoOp => {}
            None => attempt.state = AttemptState::Succeeded,
        }
        if let Some(history) = self.history.take() {
            history.write(attempt).await;
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let (Some(history), Some(mut attempt)) = (self.history.take(), self.attempt.take()) else {
            return;
        };
        attempt.state = AttemptState::Cancelled;
        attempt.ended_at = Utc::now();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            drop(handle.spawn(history.write(attempt)));
        }
    }
}

/// Where view `view`'s history is kept.
fn view_dir(catalog: &Catalog, view: &QualifiedName) -> Path {
    catalog
        .path("_matview/history")
        .clone()
        .join(view.catalog.as_str())
        .join(view.schema.as_str())
        .join(view.name.as_str())
}

/// Where `attempt` is kept: named so that names sort by start time.
fn record_path(catalog: &Catalog, attempt: &RefreshAttempt) -> Path {
    let micros = attempt.started_at.timestamp_micros().max(0);
    view_dir(catalog, &attempt.view).join(format!("{micros:020}-{}.json", attempt.attempt_id))
}

/// The records under `prefix`, per view folder, oldest first (one `LIST`).
async fn listed(
    catalog: &Catalog,
    prefix: &Path,
) -> Result<BTreeMap<String, Vec<object_store::ObjectMeta>>> {
    let mut folders: BTreeMap<String, Vec<object_store::ObjectMeta>> = BTreeMap::new();
    let mut stream = catalog.store().list(Some(prefix));
    while let Some(meta) = stream.try_next().await? {
        let location = meta.location.as_ref();
        let Some((folder, file)) = location.rsplit_once('/') else {
            continue;
        };
        if file.ends_with(".json") {
            folders.entry(folder.to_owned()).or_default().push(meta);
        }
    }
    for records in folders.values_mut() {
        records.sort_by(|a, b| a.location.cmp(&b.location));
    }
    Ok(folders)
}

/// The newest `keep` attempts of view `view` (every view: `None`), oldest
/// first. Records that do not parse are skipped with a warning.
pub async fn read(
    catalog: &Catalog,
    view: Option<&QualifiedName>,
    keep: usize,
) -> Result<Vec<RefreshAttempt>> {
    let prefix = match view {
        Some(view) => view_dir(catalog, view),
        None => catalog.path("_matview/history"),
    };
    let newest: Vec<Path> = listed(catalog, &prefix)
        .await?
        .into_values()
        .flat_map(|records| {
            let skip = records.len().saturating_sub(keep);
            records.into_iter().skip(skip).map(|m| m.location)
        })
        .collect();
    let store = catalog.store();
    let reads = newest.into_iter().map(|path| async move {
        match store.get(&path).await {
            Ok(got) => {
                let bytes = got.bytes().await?;
                Ok(match serde_json::from_slice::<RefreshAttempt>(&bytes) {
                    Ok(attempt) => Some(attempt),
                    Err(e) => {
                        log::warn!("skipping the refresh history record {path}: {e}");
                        None
                    }
                })
            }
            // Pruned since it was listed.
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::from(e)),
        }
    });
    let mut attempts: Vec<RefreshAttempt> = futures::stream::iter(reads)
        .buffered(32)
        .try_filter_map(|a| futures::future::ready(Ok(a)))
        .try_collect()
        .await?;
    attempts.sort_by(|a, b| {
        (a.started_at, &a.view, &a.attempt_id).cmp(&(b.started_at, &b.view, &b.attempt_id))
    });
    Ok(attempts)
}

/// Deletes all but the newest `keep` records of view `view`.
async fn prune_view(catalog: &Catalog, view: &QualifiedName, keep: usize) -> Result<usize> {
    let folders = listed(catalog, &view_dir(catalog, view)).await?;
    delete_oldest(catalog, folders.into_values(), keep).await
}

async fn delete_oldest(
    catalog: &Catalog,
    folders: impl Iterator<Item = Vec<object_store::ObjectMeta>>,
    keep: usize,
) -> Result<usize> {
    let mut deleted = 0;
    for records in folders {
        let excess = records.len().saturating_sub(keep);
        for meta in records.into_iter().take(excess) {
            match catalog.store().delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(deleted)
}

/// `VACUUM`'s part: keeps the newest `keep` records of each view, and
/// deletes the history of views not in the catalog any more once its
/// newest record is older than the retention window. Returns how many
/// records it deleted.
pub(crate) async fn prune_all(catalog: &Catalog, keep: usize) -> Result<usize> {
    let existing: std::collections::BTreeSet<String> = catalog
        .view_names()?
        .iter()
        .map(|name| view_dir(catalog, name).to_string())
        .collect();
    let now = Utc::now();
    let mut kept = vec![];
    let mut gone = vec![];
    for (folder, records) in listed(catalog, &catalog.path("_matview/history")).await? {
        let newest = records.iter().map(|m| m.last_modified).max();
        if existing.contains(&folder) {
            kept.push(records);
        } else if newest.is_some_and(|at| catalog.expiry(at) <= now) {
            gone.push(records);
        }
    }
    Ok(delete_oldest(catalog, kept.into_iter(), keep).await?
        + delete_oldest(catalog, gone.into_iter(), 0).await?)
}

/// `materialized_view_refreshes([view])`: the refresh history of every
/// view, or of one.
///
/// | column | type |
/// |---|---|
/// | table_catalog, table_schema, table_name | Utf8 |
/// | attempt_id | Utf8 |
/// | version | Int64: the version committed (`no_op`: the current one); null when none |
/// | state | Utf8: `succeeded`, `failed`, `cancelled` or `no_op` |
/// | trigger | Utf8: `statement`, `cascade`, `auto`, `create` or `server job` |
/// | mode | Utf8: `full`, `incremental` or `no_op`; null when it failed before deciding |
/// | reason | Utf8: why that mode |
/// | started_at, ended_at | Timestamp(µs, UTC) |
/// | duration_ms | Int64 |
/// | rows_written, rows_deleted | Int64, null when it wrote nothing |
/// | files_read, bytes_read | Int64: what its file scans read (as planned, before pruning); null when not known |
/// | sources | Utf8: what it read, per source |
/// | error | Utf8: why it failed |
/// | ran_by | Utf8: the session's actor, host and process id |
/// | job_id | Utf8: the server job that ran it |
/// | definition | Utf8: the definition's id (new on every CREATE OR REPLACE) |
///
/// Rows are in the order the attempts started.
#[derive(Debug)]
pub struct RefreshHistoryFunction {
    catalog: Arc<Catalog>,
    keep: usize,
}

impl RefreshHistoryFunction {
    pub(crate) fn new(catalog: Arc<Catalog>, keep: usize) -> Self {
        Self { catalog, keep }
    }

    /// Schema of the function's result.
    pub fn schema() -> SchemaRef {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let text = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
        let number = |name: &str| Field::new(name, DataType::Int64, true);
        Arc::new(Schema::new(vec![
            text("table_catalog", false),
            text("table_schema", false),
            text("table_name", false),
            text("attempt_id", false),
            number("version"),
            text("state", false),
            text("trigger", false),
            text("mode", true),
            text("reason", true),
            Field::new("started_at", ts.clone(), false),
            Field::new("ended_at", ts, false),
            Field::new("duration_ms", DataType::Int64, false),
            number("rows_written"),
            number("rows_deleted"),
            number("files_read"),
            number("bytes_read"),
            text("sources", true),
            text("error", true),
            text("ran_by", false),
            text("job_id", true),
            text("definition", false),
        ]))
    }

    /// One row per attempt.
    pub fn batch(attempts: &[RefreshAttempt]) -> DFResult<RecordBatch> {
        let text = |f: &dyn Fn(&RefreshAttempt) -> Option<String>| -> ArrayRef {
            Arc::new(StringArray::from_iter(attempts.iter().map(f)))
        };
        let number = |f: &dyn Fn(&RefreshAttempt) -> Option<u64>| -> ArrayRef {
            Arc::new(Int64Array::from_iter(
                attempts.iter().map(|a| f(a).map(|n| n as i64)),
            ))
        };
        let time = |f: &dyn Fn(&RefreshAttempt) -> DateTime<Utc>| -> ArrayRef {
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    attempts.iter().map(|a| f(a).timestamp_micros()),
                )
                .with_timezone("UTC"),
            )
        };
        let columns: Vec<ArrayRef> = vec![
            text(&|a| Some(a.view.catalog.clone())),
            text(&|a| Some(a.view.schema.clone())),
            text(&|a| Some(a.view.name.clone())),
            text(&|a| Some(a.attempt_id.clone())),
            number(&|a| a.version),
            text(&|a| Some(a.state.as_str().to_owned())),
            text(&|a| Some(a.trigger.as_str().to_owned())),
            text(&|a| a.mode.clone()),
            text(&|a| a.reason.clone()),
            time(&|a| a.started_at),
            time(&|a| a.ended_at),
            Arc::new(Int64Array::from_iter_values(
                attempts
                    .iter()
                    .map(|a| (a.ended_at - a.started_at).num_milliseconds().max(0)),
            )),
            number(&|a| a.rows_written),
            number(&|a| a.rows_deleted),
            number(&|a| a.files_read),
            number(&|a| a.bytes_read),
            text(&|a| a.sources.clone()),
            text(&|a| a.error.clone()),
            text(&|a| Some(a.ran_by.clone())),
            text(&|a| a.job_id.clone()),
            text(&|a| Some(a.definition.clone())),
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }
}

impl TableFunctionImpl for RefreshHistoryFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let view = match args.exprs() {
            [] => None,
            [
                Expr::Literal(
                    ScalarValue::Utf8(Some(text))
                    | ScalarValue::LargeUtf8(Some(text))
                    | ScalarValue::Utf8View(Some(text)),
                    _,
                ),
            ] => {
                let options = args.session().config().options();
                let resolved = TableReference::parse_str(text).resolve(
                    &options.catalog.default_catalog,
                    &options.catalog.default_schema,
                );
                Some(QualifiedName::from(resolved))
            }
            _ => {
                return plan_err!("{FUNCTION}([view]) takes a view's name as a string, or nothing");
            }
        };
        Ok(Arc::new(HistoryTable {
            catalog: Arc::clone(&self.catalog),
            keep: self.keep,
            view,
        }))
    }
}

/// The table of one call of [`RefreshHistoryFunction`]: read when scanned.
#[derive(Debug)]
struct HistoryTable {
    catalog: Arc<Catalog>,
    keep: usize,
    view: Option<QualifiedName>,
}

#[async_trait]
impl TableProvider for HistoryTable {
    fn schema(&self) -> SchemaRef {
        RefreshHistoryFunction::schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let attempts = read(&self.catalog, self.view.as_ref(), self.keep.max(1)).await?;
        let batch = RefreshHistoryFunction::batch(&attempts)?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            RefreshHistoryFunction::schema(),
            projection.cloned(),
        )?)
    }
}
