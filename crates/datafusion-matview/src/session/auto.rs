//! Automatic refresh: the scheduler `dfmv serve` runs.
//!
//! Every `tick` the [`Scheduler`] loads the catalog's index (two `HEAD`s
//! when nothing changed) and, for each view whose settings say
//! `auto_refresh = true` with a target lag, checks its freshness when its
//! check is due, the way `materialized_views()` does: from listings and
//! the views' logs, reading no data. A fresh view is checked again after
//! half its target lag; a stale one (or one that was never populated, or
//! whose sources cannot be fingerprinted and whose data is older than its
//! target lag) is refreshed, the materialized views it reads that are
//! refreshed automatically first (`target_lag = 'downstream'` views are
//! refreshed only this way). So a view is never behind its sources by
//! more than half its target lag plus the time its refresh takes.
//!
//! Several servers on one catalog never refresh one view at once: before
//! refreshing view `v` at version `n` of its log, a server creates the
//! claim `_matview/auto/<log>/<n>-<k>.json` with `PutMode::Create`. Only
//! one server's put lands; the others leave the view alone this round. The
//! holder renews its claim while it works and marks it released when done;
//! a claim whose holder died expires after `claim_ttl`, and the next claim
//! for that version (`k + 1`) takes over. A refresh that fails anyway (a
//! commit conflict with a statement) is not retried at once: the view
//! backs off (twice as long after each failure, at most `max_backoff`),
//! and the history records every attempt with the trigger `auto`.

use std::sync::Mutex;
use std::time::Instant;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use super::refresh::Origin;
use super::*;
use crate::freshness::Freshness;
use crate::history::Trigger;
use crate::spec::{AutoRefresh, TargetLag, ViewVersion};

/// How the [`Scheduler`] works.
#[derive(Debug, Clone)]
pub struct AutoRefreshOptions {
    /// How often it looks at the catalog. Default: 1 s.
    pub tick: Duration,
    /// Refreshes it runs at once. Default: 2.
    pub concurrency: usize,
    /// How long a claim holds without renewal. Default: 60 s.
    pub claim_ttl: Duration,
    /// The longest it waits after failures before trying a view again.
    /// Default: 10 minutes.
    pub max_backoff: Duration,
    /// How often it reads the settings of a view that is not due (another
    /// server may have altered them). Default: 30 s.
    pub reread: Duration,
}

impl Default for AutoRefreshOptions {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(1),
            concurrency: 2,
            claim_ttl: Duration::from_secs(60),
            max_backoff: Duration::from_secs(600),
            reread: Duration::from_secs(30),
        }
    }
}

/// What the scheduler knows of one view.
#[derive(Debug, Clone)]
struct Schedule {
    settings: AutoRefresh,
    /// When its settings were last read.
    read_at: Instant,
    /// When its freshness is next checked.
    next_check: Instant,
    /// Failed refreshes in a row.
    failures: u32,
    /// A refresh of it is running here.
    running: bool,
}

/// What one pass of the scheduler did ([`Scheduler::tick`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// Views whose freshness it checked.
    pub checked: usize,
    /// Views it started refreshing.
    pub started: Vec<QualifiedName>,
}

/// Refreshes the views whose settings ask for it (see the module).
#[derive(Debug, Clone)]
pub struct Scheduler {
    session: MatviewSession,
    options: AutoRefreshOptions,
    /// Who holds the claims it makes (the session's actor, host and pid).
    holder: String,
    schedules: Arc<Mutex<HashMap<QualifiedName, Schedule>>>,
    running: Arc<tokio::sync::Semaphore>,
    tasks: Arc<Mutex<tokio::task::JoinSet<()>>>,
}

impl Scheduler {
    /// A scheduler of `session`'s catalog.
    pub fn new(session: MatviewSession, options: AutoRefreshOptions) -> Self {
        let holder = crate::history::process_name(session.options.actor.as_deref());
        let running = Arc::new(tokio::sync::Semaphore::new(options.concurrency.max(1)));
        Self {
            session,
            options,
            holder,
            schedules: Arc::default(),
            running,
            tasks: Arc::default(),
        }
    }

    /// Runs until `stop` completes; then stops the refreshes it started
    /// (each records `cancelled`).
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            if let Err(e) = self.tick().await {
                log::warn!("automatic refresh: {e}");
            }
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(self.options.tick) => {}
            }
        }
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        tasks.shutdown().await;
    }

    /// One pass: reads what changed, checks the views that are due, and
    /// starts refreshing the stale ones (in the background, at most
    /// `concurrency` at once).
    pub async fn tick(&self) -> Result<TickReport> {
        self.reap();
        let session = &self.session;
        let catalog = session.catalog();
        catalog.reload().await?;
        let names = catalog.view_names()?;
        let now = Instant::now();
        {
            let mut schedules = self.schedules();
            schedules.retain(|name, _| names.binary_search(name).is_ok());
        }
        let mut report = TickReport::default();
        for name in names {
            let known = self.schedules().get(&name).cloned();
            if known.as_ref().is_some_and(|s| s.running) {
                continue;
            }
            let due = known.as_ref().is_none_or(|s| {
                now >= s.next_check && s.settings.enabled
                    || now.duration_since(s.read_at) >= self.options.reread
            });
            if !due {
                continue;
            }
            let Some(state) = catalog.view(&name).await? else {
                continue;
            };
            let settings = state.view.auto_refresh;
            let mut schedule = known.unwrap_or(Schedule {
                settings,
                read_at: now,
                next_check: now,
                failures: 0,
                running: false,
            });
            schedule.settings = settings;
            schedule.read_at = now;
            let lag = match (settings.enabled, settings.lag()) {
                (true, TargetLag::Within(seconds)) => Duration::from_secs(seconds),
                // Off, or refreshed only for the views over it.
                _ => {
                    self.schedules().insert(name, schedule);
                    continue;
                }
            };
            if now < schedule.next_check {
                self.schedules().insert(name, schedule);
                continue;
            }
            report.checked += 1;
            let check_again = (lag / 2).max(self.options.tick);
            let stale = self.needs_refresh(&name, &state, lag).await?;
            if !stale {
                schedule.next_check = now + check_again;
                self.schedules().insert(name, schedule);
                continue;
            }
            schedule.running = true;
            self.schedules().insert(name.clone(), schedule);
            report.started.push(name.clone());
            let this = self.clone();
            let task = async move {
                let Ok(_permit) = Arc::clone(&this.running).acquire_owned().await else {
                    return;
                };
                let outcome = this.refresh_claimed(&name).await;
                let mut schedules = this.schedules();
                let Some(schedule) = schedules.get_mut(&name) else {
                    return;
                };
                schedule.running = false;
                let now = Instant::now();
                match outcome {
                    Ok(_) => {
                        schedule.failures = 0;
                        schedule.next_check = now + check_again;
                    }
                    Err(e) => {
                        schedule.failures += 1;
                        let backoff = this
                            .options
                            .tick
                            .saturating_mul(2u32.saturating_pow(schedule.failures))
                            .min(this.options.max_backoff);
                        log::warn!(
                            "automatic refresh of {name} failed ({} in a row), next try in {backoff:?}: {e}",
                            schedule.failures
                        );
                        schedule.next_check = now + backoff;
                    }
                }
            };
            self.tasks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .spawn(task);
        }
        Ok(report)
    }

    /// Whether view `name` (whose latest state is `state`) needs a
    /// refresh: it is stale, or was never populated, or its changes cannot
    /// be seen and its data is as old as `lag`; or one of the materialized
    /// views it reads that are refreshed automatically (`downstream` ones
    /// included) does, for then refreshing it after them brings it up to
    /// date.
    async fn needs_refresh(
        &self,
        name: &QualifiedName,
        state: &ViewVersion,
        lag: Duration,
    ) -> Result<bool> {
        let session = &self.session;
        let fingerprinter = session.fingerprinter();
        let stale =
            |view: &ViewVersion, freshness: &Freshness| match (freshness, &view.view.snapshot) {
                (_, None) => true,
                (Freshness::Fresh, _) => false,
                (Freshness::Stale(_), _) => true,
                (Freshness::Unknown(_), Some(snapshot)) => {
                    (Utc::now() - snapshot.refreshed_at)
                        .to_std()
                        .unwrap_or_default()
                        >= lag
                }
            };
        if stale(state, &fingerprinter.freshness(&state.view).await?) {
            return Ok(true);
        }
        let statement = RefreshMaterializedView {
            name: super::api::object_name(name),
            full: false,
            incremental: false,
            cascade: true,
        };
        let base = session.catalog.index();
        for (upstream, _) in session.refresh_order(&statement, &base).await? {
            if &upstream == name {
                continue;
            }
            if let Some(up) = session.catalog.view(&upstream).await?
                && up.view.auto_refresh.enabled
                && stale(&up, &fingerprinter.freshness(&up.view).await?)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Waits for the refreshes it has started (for tests and shutdown).
    pub async fn settle(&self) {
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        while tasks.join_next().await.is_some() {}
    }

    fn schedules(&self) -> std::sync::MutexGuard<'_, HashMap<QualifiedName, Schedule>> {
        self.schedules.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the refreshes that have ended.
    fn reap(&self) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(ended) = tasks.try_join_next() {
            if let Err(e) = ended
                && e.is_panic()
            {
                log::warn!("an automatic refresh panicked: {e}");
            }
        }
    }

    /// Refreshes view `name`, the materialized views it reads that are
    /// refreshed automatically first, each under a claim. Returns the
    /// outcomes of the refreshes it ran (none when another server holds
    /// the view's claim).
    async fn refresh_claimed(&self, name: &QualifiedName) -> Result<Vec<RefreshOutcome>> {
        let session = &self.session;
        let base = session.sync_base().await?;
        let statement = RefreshMaterializedView {
            name: super::api::object_name(name),
            full: false,
            incremental: false,
            cascade: true,
        };
        let mut outcomes = vec![];
        for (view, _) in session.refresh_order(&statement, &base).await? {
            let Some(state) = session.catalog.view(&view).await? else {
                continue;
            };
            let own = &view == name;
            if !own && !state.view.auto_refresh.enabled {
                continue;
            }
            let Some(slot) = base.view(&view).map(|e| e.slot.clone()) else {
                continue;
            };
            let Some(claim) = Claim::take(self, &view, &slot, state.version).await? else {
                if own {
                    return Ok(outcomes);
                }
                continue;
            };
            let single = RefreshMaterializedView {
                name: super::api::object_name(&view),
                full: false,
                incremental: false,
                cascade: false,
            };
            let origin = Origin {
                trigger: if own { Trigger::Auto } else { Trigger::Cascade },
                job_id: None,
            };
            let refreshed = session
                .refresh_from(&single, &BTreeMap::new(), origin)
                .await;
            claim.release().await;
            outcomes.extend(refreshed?);
        }
        Ok(outcomes)
    }
}

/// What a claim file holds.
#[derive(Debug, Serialize, Deserialize)]
struct ClaimRecord {
    holder: String,
    expires_at: DateTime<Utc>,
    released: bool,
}

/// A claim file's content: held (or `released`) by `holder` until `ttl`
/// from now.
fn claim_payload(holder: &str, ttl: Duration, released: bool) -> Result<PutPayload> {
    let record = ClaimRecord {
        holder: holder.to_owned(),
        expires_at: Utc::now() + chrono::Duration::from_std(ttl).unwrap_or_default(),
        released,
    };
    serde_json::to_vec(&record)
        .map(PutPayload::from)
        .map_err(|e| Error::Encoding {
            what: "a refresh claim",
            reason: e.to_string(),
        })
}

/// A server's claim to refresh one view at one version of its log (see
/// the module).
struct Claim {
    store: Arc<dyn object_store::ObjectStore>,
    path: object_store::path::Path,
    holder: String,
    ttl: Duration,
    renew: tokio::task::JoinHandle<()>,
    /// Claims of earlier versions, deleted once this one is released.
    older: Vec<object_store::path::Path>,
}

impl Claim {
    /// Takes the claim of `view` (log `slot`) at `version`, unless another
    /// server holds it. `None`: held elsewhere, or the view moved on.
    async fn take(
        scheduler: &Scheduler,
        view: &QualifiedName,
        slot: &str,
        version: u64,
    ) -> Result<Option<Claim>> {
        let catalog = &scheduler.session.catalog;
        let store = Arc::clone(catalog.store());
        let dir = catalog.path(&format!("_matview/auto/{slot}"));
        let listed: Vec<object_store::ObjectMeta> = store.list(Some(&dir)).try_collect().await?;
        let parse = |meta: &object_store::ObjectMeta| -> Option<(u64, u64)> {
            let file = meta.location.filename()?.strip_suffix(".json")?;
            let (v, k) = file.split_once('-')?;
            Some((v.parse().ok()?, k.parse().ok()?))
        };
        let mut older = vec![];
        let mut latest: Option<(u64, object_store::path::Path)> = None;
        for meta in &listed {
            match parse(meta) {
                Some((v, _)) if v < version => older.push(meta.location.clone()),
                Some((v, k)) if v == version && latest.as_ref().is_none_or(|(l, _)| k > *l) => {
                    latest = Some((k, meta.location.clone()));
                }
                _ => {}
            }
        }
        let next = match &latest {
            None => 0,
            Some((k, path)) => {
                let record: Option<ClaimRecord> = match store.get(path).await {
                    Ok(got) => serde_json::from_slice(&got.bytes().await?).ok(),
                    Err(object_store::Error::NotFound { .. }) => None,
                    Err(e) => return Err(e.into()),
                };
                match record {
                    Some(r) if !r.released && r.expires_at > Utc::now() => return Ok(None),
                    Some(r) if r.released => {
                        // Someone refreshed at this version: unless the view
                        // is still there, there is nothing to do.
                        let now = catalog.view(view).await?.map(|s| s.version);
                        if now != Some(version) {
                            return Ok(None);
                        }
                        k + 1
                    }
                    _ => k + 1,
                }
            }
        };
        let path = dir.clone().join(format!("{version:020}-{next:06}.json"));
        let ttl = scheduler.options.claim_ttl;
        let holder = scheduler.holder.clone();
        let created = store
            .put_opts(
                &path,
                claim_payload(&holder, ttl, false)?,
                PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                },
            )
            .await;
        match created {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        // Renewed while held: only its holder writes it.
        let renew = {
            let (store, path, holder) = (Arc::clone(&store), path.clone(), holder.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    let Ok(payload) = claim_payload(&holder, ttl, false) else {
                        return;
                    };
                    if let Err(e) = store.put(&path, payload).await {
                        log::warn!("could not renew the refresh claim {path}: {e}");
                    }
                }
            })
        };
        Ok(Some(Claim {
            store,
            path,
            holder,
            ttl,
            renew,
            older,
        }))
    }

    /// Marks the claim released and deletes the claims of earlier
    /// versions.
    async fn release(self) {
        self.renew.abort();
        if let Ok(payload) = claim_payload(&self.holder, self.ttl, true)
            && let Err(e) = self.store.put(&self.path, payload).await
        {
            log::warn!("could not release the refresh claim {}: {e}", self.path);
        }
        for path in &self.older {
            let _ = self.store.delete(path).await;
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // A claim dropped unreleased (its refresh was stopped) expires.
        self.renew.abort();
    }
}
