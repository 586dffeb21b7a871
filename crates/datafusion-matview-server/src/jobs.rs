//! Asynchronous jobs: CREATE (with its first population) and REFRESH run
//! as jobs, as LanceDB's materialized-view API runs them.
//!
//! - The queue is bounded: at most `max_jobs` jobs wait or run at once; a
//!   further submission is refused (503), so a burst of requests cannot
//!   exhaust memory. At most `max_running_jobs` run at once.
//! - Jobs on one view run one after the other, in the order submitted
//!   (each view has its own lock), so two refreshes of one view queued at
//!   once never race; jobs on different views run side by side.
//! - A job's failure is recorded in the job (`FAILED`, with its phase,
//!   message and whether a retry may succeed); the server keeps serving.
//! - Cancelling a job that waits removes it; cancelling a running job
//!   stops it at its next await point. The view keeps a committed state
//!   either way: every write of a refresh is a new file followed by one
//!   conditional commit, so a job stopped before its commit leaves the
//!   previous data (and unreferenced files for the cleanup sweep). A job
//!   stopped while its commit was in flight may have committed; the job
//!   then records the view's version it found after stopping.
//! - Finished jobs are kept for `keep_finished` and then forgotten.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use futures::FutureExt;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio_util::task::TaskTracker;

use super::{ApiError, Condition};
use datafusion_matview::error::{Error, ErrorCode};
use datafusion_matview::spec::QualifiedName;

/// The state of a job, as LanceDB names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Waiting for its turn or running.
    InProgress,
    /// Finished; its result is recorded.
    Done,
    /// Finished with an error; the failure is recorded.
    Failed,
    /// Stopped by a cancel request or by the server shutting down.
    Cancelled,
}

impl JobState {
    /// Every state (the OpenAPI document's enum).
    pub const ALL: [JobState; 4] = [
        JobState::InProgress,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ];
}

/// What a job does, as LanceDB names its job types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobType {
    /// The first population of a view created with data.
    CreateMaterializedView,
    /// A refresh.
    RefreshMaterializedView,
}

impl JobType {
    /// Every job type (the OpenAPI document's enum).
    pub const ALL: [JobType; 2] = [
        JobType::CreateMaterializedView,
        JobType::RefreshMaterializedView,
    ];
}

/// Where a job failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Planning and running the query, writing files.
    Execute,
    /// The catalog commit.
    Commit,
    /// The server shut down before the job started.
    Shutdown,
}

impl Phase {
    /// Every phase (the OpenAPI document's enum).
    pub const ALL: [Phase; 3] = [Phase::Execute, Phase::Commit, Phase::Shutdown];
}

/// Why a job failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// Where: `execute`, `commit` or `shutdown`.
    pub phase: Phase,
    /// The error's message.
    pub message: String,
    /// Whether submitting the same job again may succeed.
    pub retryable: bool,
}

tokio::task_local! {
    /// The id of the job whose work is running (see [`current_job`]).
    static CURRENT_JOB: String;
}

/// The id of the job whose work calls this, if any: a refresh records it
/// in the view's history.
pub fn current_job() -> Option<String> {
    CURRENT_JOB.try_with(Clone::clone).ok()
}

/// A job as `jobs/describe` answers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "JobWire")]
pub struct JobInfo {
    /// Its id.
    pub job_id: String,
    /// `CREATE_MATERIALIZED_VIEW` or `REFRESH_MATERIALIZED_VIEW`.
    pub job_type: JobType,
    /// Its state.
    pub job_state: JobState,
    /// When it was submitted, in milliseconds since the Unix epoch.
    pub creation_ms: i64,
    /// What was asked.
    pub spec: Value,
    /// What it did, when `DONE` (or what a cancelled job left).
    pub result: Option<Value>,
    /// Why it failed, when `FAILED`.
    pub failure: Option<Failure>,
}

/// A job as the routes answer it: [`JobInfo`], plus the names LanceDB's
/// SDK reads (`table`, `state`, `created_at_millis`).
#[derive(Serialize)]
struct JobWire {
    job_id: String,
    job_type: JobType,
    job_state: JobState,
    state: JobState,
    creation_ms: i64,
    created_at_millis: i64,
    table: Option<String>,
    spec: Value,
    result: Option<Value>,
    failure: Option<Failure>,
}

impl From<JobInfo> for JobWire {
    fn from(job: JobInfo) -> Self {
        Self {
            table: job
                .spec
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            job_id: job.job_id,
            job_type: job.job_type,
            job_state: job.job_state,
            state: job.job_state,
            creation_ms: job.creation_ms,
            created_at_millis: job.creation_ms,
            spec: job.spec,
            result: job.result,
            failure: job.failure,
        }
    }
}

struct Entry {
    info: JobInfo,
    seq: u64,
    /// Set while the job may still run.
    abort: Option<AbortHandle>,
    /// Whether it has started running (holds its view and a run slot).
    started: bool,
    finished_at: Option<Instant>,
    view: QualifiedName,
}

#[derive(Default)]
struct Table {
    next_seq: u64,
    /// By submission order.
    order: BTreeMap<u64, String>,
    entries: HashMap<String, Entry>,
    /// Jobs waiting or running.
    pending: usize,
    /// Refusing new jobs (shutting down).
    closed: bool,
}

/// The server's jobs.
pub struct Jobs {
    table: Mutex<Table>,
    max_jobs: usize,
    running: Arc<Semaphore>,
    keep_finished: Duration,
    views: Mutex<HashMap<QualifiedName, Arc<tokio::sync::Mutex<()>>>>,
    tracker: TaskTracker,
    /// Where jobs run; the current runtime when `None`.
    runtime: Option<tokio::runtime::Handle>,
}

/// What a job's work returns: its result, or the error with the phase it
/// failed in.
pub type JobOutcome = Result<Value, (Phase, Error)>;

impl Jobs {
    /// Empty; see the module documentation for the bounds.
    pub fn new(max_jobs: usize, max_running_jobs: usize, keep_finished: Duration) -> Self {
        Self {
            table: Mutex::default(),
            max_jobs: max_jobs.max(1),
            running: Arc::new(Semaphore::new(max_running_jobs.max(1))),
            keep_finished,
            views: Mutex::default(),
            tracker: TaskTracker::new(),
            runtime: None,
        }
    }

    /// These jobs, run on `runtime` (a server runs them apart from the
    /// runtime answering requests, so a busy job cannot stall the answers).
    pub fn on(mut self, runtime: tokio::runtime::Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock that orders the jobs (and synchronous changes) of `view`.
    pub fn view_lock(&self, view: &QualifiedName) -> Arc<tokio::sync::Mutex<()>> {
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        // Forget the locks nobody holds or waits for.
        views.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(views.entry(view.clone()).or_default())
    }

    /// 503 when [`Self::submit`] would refuse a job now (the queue is full
    /// or the server is shutting down).
    pub fn check_room(&self) -> Result<(), ApiError> {
        let mut table = self.table();
        self.forget_old(&mut table);
        self.refusal(&table).map_or(Ok(()), Err)
    }

    fn refusal(&self, table: &Table) -> Option<ApiError> {
        if table.closed {
            return Some(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Condition::ShuttingDown,
                "the server is shutting down",
            ));
        }
        if table.pending >= self.max_jobs {
            return Some(ApiError {
                retryable: true,
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Condition::JobQueueFull,
                    format!(
                        "the job queue is full ({} jobs waiting or running); retry later",
                        self.max_jobs
                    ),
                )
            });
        }
        None
    }

    /// Queues `work` on `view`; returns the job's id, or 503 when the queue
    /// is full (or the server is shutting down).
    pub fn submit<F>(
        self: &Arc<Self>,
        job_type: JobType,
        view: QualifiedName,
        spec: Value,
        work: F,
    ) -> Result<String, ApiError>
    where
        F: Future<Output = JobOutcome> + Send + 'static,
    {
        let id = uuid::Uuid::new_v4().to_string();
        {
            let mut table = self.table();
            self.forget_old(&mut table);
            if let Some(refusal) = self.refusal(&table) {
                return Err(refusal);
            }
            table.pending += 1;
            let seq = table.next_seq;
            table.next_seq += 1;
            table.order.insert(seq, id.clone());
            table.entries.insert(
                id.clone(),
                Entry {
                    info: JobInfo {
                        job_id: id.clone(),
                        job_type,
                        job_state: JobState::InProgress,
                        creation_ms: chrono::Utc::now().timestamp_millis(),
                        spec,
                        result: None,
                        failure: None,
                    },
                    seq,
                    abort: None,
                    started: false,
                    finished_at: None,
                    view: view.clone(),
                },
            );
            // Spawned under the table's lock, so the abort handle is in
            // place before the job can finish or be cancelled.
            let jobs = Arc::clone(self);
            let job_id = id.clone();
            let task = async move {
                let lock = jobs.view_lock(&view);
                let _view = lock.lock().await;
                let _slot = Arc::clone(&jobs.running).acquire_owned().await;
                jobs.started(&job_id);
                let work = CURRENT_JOB.scope(job_id.clone(), work);
                let outcome = std::panic::AssertUnwindSafe(work)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|panic| {
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err((
                            Phase::Execute,
                            Error::NotSupported(format!(
                                "internal error: the job panicked: {what}"
                            )),
                        ))
                    });
                jobs.finish(&job_id, outcome);
            };
            let handle = match &self.runtime {
                Some(runtime) => self.tracker.spawn_on(task, runtime),
                None => self.tracker.spawn(task),
            };
            if let Some(entry) = table.entries.get_mut(&id) {
                entry.abort = Some(handle.abort_handle());
            }
        }
        Ok(id)
    }

    fn started(&self, id: &str) {
        if let Some(entry) = self.table().entries.get_mut(id) {
            entry.started = true;
        }
    }

    fn finish(&self, id: &str, outcome: JobOutcome) {
        let mut table = self.table();
        let Some(entry) = table.entries.get_mut(id) else {
            return;
        };
        if entry.info.job_state != JobState::InProgress {
            return;
        }
        match outcome {
            Ok(result) => {
                entry.info.job_state = JobState::Done;
                entry.info.result = Some(result);
            }
            Err((phase, error)) => {
                let api = ApiError::from(&error);
                entry.info.job_state = JobState::Failed;
                entry.info.failure = Some(Failure {
                    phase,
                    message: error.to_string(),
                    retryable: api.retryable,
                });
            }
        }
        entry.abort = None;
        entry.finished_at = Some(Instant::now());
        table.pending -= 1;
    }

    /// One job, or 404.
    pub fn describe(&self, id: &str) -> Result<JobInfo, ApiError> {
        let mut table = self.table();
        self.forget_old(&mut table);
        table
            .entries
            .get(id)
            .map(|e| e.info.clone())
            .ok_or_else(|| not_found(id))
    }

    /// Jobs newest first, after the job with sequence `after`; with the
    /// next page's position when there is more.
    pub fn list(&self, after: Option<u64>, limit: usize) -> (Vec<JobInfo>, Option<u64>) {
        let mut table = self.table();
        self.forget_old(&mut table);
        let upper = after.unwrap_or(u64::MAX);
        let mut page: Vec<(u64, JobInfo)> = table
            .order
            .range(..upper)
            .rev()
            .take(limit + 1)
            .filter_map(|(seq, id)| table.entries.get(id).map(|e| (*seq, e.info.clone())))
            .collect();
        let more = page.len() > limit;
        page.truncate(limit);
        let next = if more {
            page.last().map(|(seq, _)| *seq)
        } else {
            None
        };
        (page.into_iter().map(|(_, info)| info).collect(), next)
    }

    /// Cancels a job that has not finished; answers its state after. The
    /// view's version afterwards is found by `version_of`.
    pub async fn cancel<F, Fut>(&self, id: &str, version_of: F) -> Result<JobInfo, ApiError>
    where
        F: FnOnce(QualifiedName) -> Fut,
        Fut: Future<Output = Option<u64>>,
    {
        let (abort, view, started) = {
            let table = self.table();
            let entry = table.entries.get(id).ok_or_else(|| not_found(id))?;
            if entry.info.job_state != JobState::InProgress {
                return Ok(entry.info.clone());
            }
            (entry.abort.clone(), entry.view.clone(), entry.started)
        };
        if let Some(abort) = &abort {
            abort.abort();
        }
        // Wait for the task to be gone: it stops at its next await point,
        // or it had already finished and recorded its own outcome.
        while abort.as_ref().is_some_and(|a| !a.is_finished()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let version = if started {
            version_of(view).await
        } else {
            None
        };
        let mut table = self.table();
        let entry = table.entries.get_mut(id).ok_or_else(|| not_found(id))?;
        if entry.info.job_state == JobState::InProgress {
            entry.info.job_state = JobState::Cancelled;
            entry.info.result = Some(serde_json::json!({
                "started": started,
                "view_version_after": version,
            }));
            entry.abort = None;
            entry.finished_at = Some(Instant::now());
            let info = entry.info.clone();
            table.pending -= 1;
            return Ok(info);
        }
        Ok(entry.info.clone())
    }

    /// Refuses new jobs, cancels those that have not started, and waits
    /// for the running ones to finish.
    pub async fn shutdown(&self) {
        let waiting: Vec<AbortHandle> = {
            let mut table = self.table();
            table.closed = true;
            let mut waiting = vec![];
            let mut cancelled = 0;
            for entry in table.entries.values_mut() {
                if entry.info.job_state == JobState::InProgress && !entry.started {
                    if let Some(abort) = entry.abort.take() {
                        waiting.push(abort);
                    }
                    entry.info.job_state = JobState::Cancelled;
                    entry.info.failure = Some(Failure {
                        phase: Phase::Shutdown,
                        message: "the server shut down before the job started".into(),
                        retryable: true,
                    });
                    entry.finished_at = Some(Instant::now());
                    cancelled += 1;
                }
            }
            table.pending -= cancelled;
            waiting
        };
        for abort in waiting {
            abort.abort();
        }
        self.tracker.close();
        self.tracker.wait().await;
    }

    fn forget_old(&self, table: &mut Table) {
        let now = Instant::now();
        let expired: Vec<(u64, String)> = table
            .entries
            .iter()
            .filter(|(_, e)| {
                e.finished_at
                    .is_some_and(|at| now.duration_since(at) >= self.keep_finished)
            })
            .map(|(id, e)| (e.seq, id.clone()))
            .collect();
        for (seq, id) in expired {
            table.entries.remove(&id);
            table.order.remove(&seq);
        }
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::UndefinedObject,
        format!("job \"{id}\" does not exist"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str) -> QualifiedName {
        QualifiedName::new("c", "s", name)
    }

    async fn wait_done(jobs: &Jobs, id: &str) -> JobInfo {
        for _ in 0..1000 {
            let info = jobs.describe(id).unwrap();
            if info.job_state != JobState::InProgress {
                return info;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("job {id} did not finish");
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_failures_are_recorded() {
        let jobs = Arc::new(Jobs::new(2, 1, Duration::from_secs(60)));
        let gate = Arc::new(tokio::sync::Notify::new());
        let g = Arc::clone(&gate);
        let a = jobs
            .submit(
                JobType::RefreshMaterializedView,
                view("a"),
                Value::Null,
                async move {
                    g.notified().await;
                    Ok(Value::from(1))
                },
            )
            .unwrap();
        let b = jobs
            .submit(
                JobType::RefreshMaterializedView,
                view("b"),
                Value::Null,
                async { Err((Phase::Execute, Error::NotSupported("boom".into()))) },
            )
            .unwrap();
        let refused = jobs
            .submit(
                JobType::RefreshMaterializedView,
                view("c"),
                Value::Null,
                async { Ok(Value::Null) },
            )
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.retryable);
        gate.notify_one();
        assert_eq!(wait_done(&jobs, &a).await.result, Some(Value::from(1)));
        let failed = wait_done(&jobs, &b).await;
        assert_eq!(failed.job_state, JobState::Failed);
        assert_eq!(failed.failure.unwrap().message, "boom");
        // Both finished: there is room again.
        jobs.submit(
            JobType::RefreshMaterializedView,
            view("c"),
            Value::Null,
            async { Ok(Value::Null) },
        )
        .unwrap();
    }

    #[tokio::test]
    async fn jobs_on_one_view_run_one_after_the_other() {
        let jobs = Arc::new(Jobs::new(10, 4, Duration::from_secs(60)));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut ids = vec![];
        for _ in 0..4 {
            let (running, most) = (Arc::clone(&running), Arc::clone(&most));
            ids.push(
                jobs.submit(
                    JobType::RefreshMaterializedView,
                    view("v"),
                    Value::Null,
                    async move {
                        use std::sync::atomic::Ordering::SeqCst;
                        let now = running.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(now, SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        running.fetch_sub(1, SeqCst);
                        Ok(Value::Null)
                    },
                )
                .unwrap(),
            );
        }
        for id in &ids {
            wait_done(&jobs, id).await;
        }
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn cancel_stops_a_job_and_shutdown_cancels_waiting_ones() {
        let jobs = Arc::new(Jobs::new(10, 1, Duration::from_secs(60)));
        let long = jobs
            .submit(
                JobType::RefreshMaterializedView,
                view("a"),
                Value::Null,
                async {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    Ok(Value::Null)
                },
            )
            .unwrap();
        let waiting = jobs
            .submit(
                JobType::RefreshMaterializedView,
                view("b"),
                Value::Null,
                async { Ok(Value::Null) },
            )
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let info = jobs.cancel(&long, |_| async { Some(7) }).await.unwrap();
        assert_eq!(info.job_state, JobState::Cancelled);
        assert_eq!(info.result.unwrap()["view_version_after"], 7);
        // The slot is free: the waiting job runs.
        assert_eq!(wait_done(&jobs, &waiting).await.job_state, JobState::Done);
        let blocked = jobs
            .submit(
                JobType::RefreshMaterializedView,
                view("c"),
                Value::Null,
                async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(Value::from("finished"))
                },
            )
            .unwrap();
        let never = jobs
            .submit(
                JobType::RefreshMaterializedView,
                view("d"),
                Value::Null,
                async { Ok(Value::Null) },
            )
            .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        jobs.shutdown().await;
        assert_eq!(jobs.describe(&blocked).unwrap().job_state, JobState::Done);
        let never = jobs.describe(&never).unwrap();
        assert_eq!(never.job_state, JobState::Cancelled);
        assert_eq!(never.failure.unwrap().phase, Phase::Shutdown);
        assert!(
            jobs.submit(
                JobType::RefreshMaterializedView,
                view("e"),
                Value::Null,
                async { Ok(Value::Null) }
            )
            .is_err()
        );
    }

    #[tokio::test]
    async fn finished_jobs_are_forgotten_after_a_while_and_listed_newest_first() {
        let jobs = Arc::new(Jobs::new(10, 2, Duration::from_millis(50)));
        let mut ids = vec![];
        for i in 0..3 {
            ids.push(
                jobs.submit(
                    JobType::RefreshMaterializedView,
                    view(&i.to_string()),
                    Value::Null,
                    async { Ok(Value::Null) },
                )
                .unwrap(),
            );
        }
        for id in &ids {
            wait_done(&jobs, id).await;
        }
        let (page, next) = jobs.list(None, 2);
        assert_eq!(
            page.iter().map(|j| &j.job_id).collect::<Vec<_>>(),
            [&ids[2], &ids[1]]
        );
        let (rest, end) = jobs.list(next, 2);
        assert_eq!(rest[0].job_id, ids[0]);
        assert_eq!(end, None);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(jobs.describe(&ids[0]).is_err());
    }
}
