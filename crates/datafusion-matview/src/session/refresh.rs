//! `REFRESH MATERIALIZED VIEW` and `EXPLAIN REFRESH`: the CASCADE order,
//! and for each view the four stages of [`crate::refresh`] (decide, plan,
//! write, commit) run against one base state of the catalog, the index
//! version [`MatviewSession::sync`] loaded when the statement started.

use super::*;
use crate::history::{AttemptState, Recording, Trigger};
use crate::refresh::commit::commit_snapshot;
use crate::refresh::decide::{self, Decision, Estimate};
use crate::refresh::write::{Reads, Watch};
use crate::refresh::{FullReason, failed};
use crate::spec::{Fingerprint, ViewVersion};

/// What a refresh of one view will do (see `MatviewSession::plan_refresh`).
pub(super) struct PlannedRefresh {
    name: QualifiedName,
    display: String,
    /// Version of the view's log it was planned against.
    version: u64,
    entry: ViewEntry,
    mode: RefreshMode,
    detail: String,
    /// What the cost rule compared, when an incremental plan was weighed.
    estimate: Option<Estimate>,
    /// What to write, with the session state to run it in; `None` for
    /// `no_op`.
    run: Option<(datafusion::execution::SessionState, Write)>,
    fingerprints: Vec<SourceFingerprint>,
    source_versions: BTreeMap<QualifiedName, u64>,
}

/// What started a REFRESH, for the history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin<'a> {
    /// What started the named view's refresh (those CASCADE refreshes
    /// first are `cascade`).
    pub(crate) trigger: Trigger,
    /// The server job running it.
    pub(crate) job_id: Option<&'a str>,
}

impl Origin<'_> {
    /// A statement (or API call) of this session.
    pub(crate) const STATEMENT: Origin<'static> = Origin {
        trigger: Trigger::Statement,
        job_id: None,
    };
}

/// How a REFRESH statement asks a view to be brought up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Requested {
    /// The cheapest way: `no_op`, `incremental` or `full`.
    Cheapest,
    /// `FULL`.
    Full,
    /// `INCREMENTAL`: only what changed, or an error saying why not.
    Incremental,
}

/// Source materialized views a refresh reads at a given state of their
/// logs rather than their latest (see [`MatviewSession::refresh_at`]).
pub(crate) type PinnedSources = HashMap<QualifiedName, Arc<ViewVersion>>;

/// The plan(s) a refresh runs, optimized, for EXPLAIN REFRESH: the first
/// part's, with a note when the same query runs over several groups of
/// source files.
pub(super) fn explain_write(state: &datafusion::execution::SessionState, write: &Write) -> String {
    let show = |plan: &LogicalPlan| {
        state
            .optimize(plan)
            .map(|optimized| optimized.display_indent().to_string())
            .unwrap_or_else(|_| plan.display_indent().to_string())
    };
    let shown = |parts: &[plan::Part]| -> Option<String> {
        let plan = show(&parts.first()?.plan);
        Some(match parts.len() {
            1 => plan,
            n => format!(
                "{plan}\n(and {} more like it: one per group of source files)",
                n - 1
            ),
        })
    };
    let Some(merge) = &write.partials.merge else {
        return shown(&write.parts).unwrap_or_else(|| "(no query: only files are evicted)".into());
    };
    let merged = match merge.plan(&[]) {
        Ok(plan) => show(&plan),
        Err(e) => e.to_string(),
    };
    let written = write.partials.parts.len();
    format!(
        "{}\n(written as {written} partial aggregate(s), then merged with {} stored file(s):)\n{merged}",
        shown(&write.partials.parts).unwrap_or_default(),
        merge.merged_with()
    )
}

impl MatviewSession {
    /// Brings a view up to date (see [`Self::plan_refresh`] for how) and
    /// atomically replaces its data; with CASCADE, first the materialized
    /// views it reads (directly or through plain views), in dependency
    /// order, each once. One outcome per view refreshed, the named view last.
    pub async fn refresh(&self, refresh: &RefreshMaterializedView) -> Result<Vec<RefreshOutcome>> {
        let base = self.sync_base().await?;
        self.refresh_pinned(refresh, &base, &PinnedSources::new(), Origin::STATEMENT)
            .await
    }

    /// [`Self::refresh`], reading each materialized view of
    /// `source_versions` at that version of its log (the `version` that
    /// [`Self::describe`] and every refresh outcome report) instead of its
    /// latest: to recompute a view over the sources it had, or to bring
    /// several views up to one agreed state of a shared source. The
    /// outcome's [`RefreshOutcome::source_versions`] says what was read,
    /// and freshness then compares against the sources' latest as always
    /// (a view refreshed over an older source snapshot is stale).
    ///
    /// Each pinned view must be read by the refreshed view (directly or
    /// through plain views), and its version must still be retained: the
    /// version's log entry and data files are kept for the catalog's
    /// retention window after a newer one replaces them. Tables cannot be
    /// pinned (files have no versions), and neither can a CASCADE refresh
    /// (it refreshes the sources first). Failures are
    /// [`Error::SourceVersionUnavailable`] and [`Error::NotSupported`].
    pub async fn refresh_at(
        &self,
        refresh: &RefreshMaterializedView,
        source_versions: &BTreeMap<QualifiedName, u64>,
    ) -> Result<Vec<RefreshOutcome>> {
        self.refresh_from(refresh, source_versions, Origin::STATEMENT)
            .await
    }

    /// [`Self::refresh_at`], recorded in the history as started by
    /// `origin`.
    pub(super) async fn refresh_from(
        &self,
        refresh: &RefreshMaterializedView,
        source_versions: &BTreeMap<QualifiedName, u64>,
        origin: Origin<'_>,
    ) -> Result<Vec<RefreshOutcome>> {
        let base = self.sync_base().await?;
        if source_versions.is_empty() {
            return self
                .refresh_pinned(refresh, &base, &PinnedSources::new(), origin)
                .await;
        }
        let name = self.resolve(&refresh.name)?;
        let display = self.display(&name);
        if refresh.cascade {
            return Err(Error::NotSupported(format!(
                "REFRESH MATERIALIZED VIEW {display} CASCADE cannot read pinned source versions: the cascade refreshes those sources first"
            )));
        }
        let pinned = self.source_states(&base, source_versions).await?;
        self.refresh_pinned(refresh, &base, &pinned, origin).await
    }

    /// Checks `source_versions` as [`Self::refresh_at`] would, against
    /// `index` (the catalog's, see [`Catalog::reload`]), refreshing
    /// nothing: for a caller that answers a pin it cannot honour before
    /// it queues the refresh (the server's refresh route).
    pub async fn check_source_versions(
        &self,
        index: &Index,
        source_versions: &BTreeMap<QualifiedName, u64>,
    ) -> Result<()> {
        self.source_states(index, source_versions).await.map(drop)
    }

    /// The state of each materialized view of `source_versions` at its
    /// version, checked as [`Self::refresh_at`] checks it against `index`.
    pub(crate) async fn source_states(
        &self,
        index: &Index,
        source_versions: &BTreeMap<QualifiedName, u64>,
    ) -> Result<PinnedSources> {
        let mut pinned = PinnedSources::new();
        for (source, &version) in source_versions {
            let source_display = self.display(source);
            if index.view(source).is_none() {
                return Err(match self.kind_of(index, source).await? {
                    Some(_) => Error::NotSupported(format!(
                        "cannot read \"{source_display}\" at version {version}: only materialized views have versions (a table's files do not)"
                    )),
                    None => Error::NotFound {
                        name: source_display,
                    },
                });
            }
            let state = self
                .catalog
                .view_at(source, &source_display, version)
                .await?;
            pinned.insert(source.clone(), state);
        }
        Ok(pinned)
    }

    /// Runs a REFRESH statement against `base`, the index version the
    /// statement started from.
    pub(super) async fn refresh_pinned(
        &self,
        refresh: &RefreshMaterializedView,
        base: &Index,
        pinned: &PinnedSources,
        origin: Origin<'_>,
    ) -> Result<Vec<RefreshOutcome>> {
        let mut outcomes = vec![];
        let order = self.refresh_order(refresh, base).await?;
        let last = order.len().saturating_sub(1);
        for (i, (name, requested)) in order.into_iter().enumerate() {
            let trigger = if i < last {
                Trigger::Cascade
            } else {
                origin.trigger
            };
            let mut recording = self.history.start(&name, trigger, origin.job_id);
            // Boxed: the refresh's future is large, and a caller's stack
            // (a test's thread, 2 MiB) holds the statement's.
            let refreshed =
                Box::pin(self.refresh_recorded(base, &name, requested, pinned, &mut recording))
                    .await;
            recording.finish(refreshed.as_ref().err()).await;
            outcomes.push(refreshed?);
        }
        Ok(outcomes)
    }

    /// Plans and runs the refresh of view `name`, telling `recording` what
    /// it learns.
    async fn refresh_recorded(
        &self,
        base: &Index,
        name: &QualifiedName,
        requested: Requested,
        pinned: &PinnedSources,
        recording: &mut Recording,
    ) -> Result<RefreshOutcome> {
        let planned = self.plan_refresh(base, name, requested, pinned).await?;
        let attempt = recording.attempt();
        attempt.definition = planned.entry.id.clone();
        attempt.mode = Some(planned.mode.as_str().to_owned());
        attempt.reason = Some(planned.detail.clone());
        attempt.sources = Some(self.sources_read(&planned.fingerprints, &planned.source_versions));
        if planned.mode == RefreshMode::NoOp {
            attempt.state = AttemptState::NoOp;
        }
        let outcome = self
            .run_refresh(planned)
            .await
            .map_err(|e| self.refused("REFRESH MATERIALIZED VIEW", e))?;
        let attempt = recording.attempt();
        attempt.version = Some(outcome.version);
        attempt.rows_written = Some(outcome.rows_written);
        attempt.rows_deleted = Some(outcome.rows_deleted);
        attempt.files_read = outcome.files_read;
        attempt.bytes_read = outcome.bytes_read;
        Ok(outcome)
    }

    /// What a planned refresh reads, per source, for the history: a
    /// table's files and their bytes, the version of a materialized view.
    pub(super) fn sources_read(
        &self,
        fingerprints: &[SourceFingerprint],
        source_versions: &BTreeMap<QualifiedName, u64>,
    ) -> String {
        let described: Vec<String> = fingerprints
            .iter()
            .map(|source| {
                let name = self.display(&source.name);
                match &source.fingerprint {
                    Fingerprint::Files { files, .. } => format!(
                        "{name}: {} file(s), {} bytes",
                        files.len(),
                        files.iter().map(|f| f.size).sum::<u64>()
                    ),
                    Fingerprint::Snapshot { id: None, .. } => format!("{name}: not populated"),
                    Fingerprint::Snapshot { .. } => match source_versions.get(&source.name) {
                        Some(version) => format!("{name}: version {version}"),
                        None => format!("{name}: its latest version"),
                    },
                    Fingerprint::View { sources, .. } => {
                        format!("{name}: a view over {} source(s)", sources.len())
                    }
                    Fingerprint::Unknown => format!("{name}: changes not visible"),
                }
            })
            .collect();
        described.join("; ")
    }

    /// The views a REFRESH statement refreshes, in order, each with how:
    /// with CASCADE the materialized views it reads first; FULL and
    /// INCREMENTAL apply to the named view only (what it reads is brought
    /// up to date the cheapest way).
    pub(super) async fn refresh_order(
        &self,
        refresh: &RefreshMaterializedView,
        base: &Index,
    ) -> Result<Vec<(QualifiedName, Requested)>> {
        // The base index was loaded without this check (see `sync_base`).
        self.catalog.check_poisoned()?;
        let requested = match (refresh.full, refresh.incremental) {
            (false, false) => Requested::Cheapest,
            (true, false) => Requested::Full,
            (false, true) => Requested::Incremental,
            (true, true) => {
                return Err(Error::NotSupported(
                    "REFRESH MATERIALIZED VIEW takes FULL or INCREMENTAL, not both".into(),
                ));
            }
        };
        let name = self.resolve(&refresh.name)?;
        let mut order = vec![];
        if refresh.cascade {
            self.upstream_views(base, &name, &mut order).await?;
        }
        let mut order: Vec<_> = order
            .into_iter()
            .map(|n| (n, Requested::Cheapest))
            .collect();
        order.push((name, requested));
        Ok(order)
    }

    /// The materialized views `name` reads, directly or through plain
    /// views, each after the ones it reads itself.
    pub(super) async fn upstream_views(
        &self,
        index: &Index,
        name: &QualifiedName,
        order: &mut Vec<QualifiedName>,
    ) -> Result<()> {
        let mut stack = vec![(name.clone(), false)];
        let mut seen = BTreeSet::new();
        while let Some((current, expanded)) = stack.pop() {
            if expanded {
                if &current != name && index.view(&current).is_some() && !order.contains(&current) {
                    order.push(current);
                }
                continue;
            }
            if !seen.insert(current.clone()) {
                continue;
            }
            stack.push((current.clone(), true));
            let sources: Vec<QualifiedName> = match index.view(&current) {
                Some(view) => view.sources.clone(),
                None => match self.registered(&current).await? {
                    Some(table) if table.table_type() == TableType::View => {
                        match table.get_logical_plan() {
                            Some(plan) => {
                                let (catalog, schema) = self.view_defaults(&current);
                                self.sources_of(&plan, &catalog, &schema)
                                    .await?
                                    .into_iter()
                                    .collect()
                            }
                            None => vec![],
                        }
                    }
                    _ => vec![],
                },
            };
            for source in sources.into_iter().rev() {
                stack.push((source, false));
            }
        }
        Ok(())
    }

    /// Decides how to bring view `name` up to date and plans it, without
    /// changing anything (stages 1 and 2 of [`crate::refresh`]): `no_op`
    /// when no source changed since the last refresh, `incremental` when
    /// one file-backed table changed and the query's shape allows
    /// computing only what changed (see [`crate::refresh::plan`]), else
    /// `full`; with the reason. `base` is the statement's index version.
    pub(super) async fn plan_refresh(
        &self,
        base: &Index,
        name: &QualifiedName,
        requested: Requested,
        pinned: &PinnedSources,
    ) -> Result<PlannedRefresh> {
        let display = self.display(name);
        // Sources are looked up (a table found by path infers its schema
        // from a listing) from the files there now.
        plan::forget_listings(&self.ctx.state_ref().read());
        let Some(view_state) = self.catalog.view_in(base, name).await? else {
            return Err(match self.kind_of(base, name).await? {
                Some(_) => Error::WrongObjectType {
                    name: display,
                    expected: "materialized view",
                    hint: None,
                },
                None => Error::NotFound { name: display },
            });
        };
        let entry = view_state.view.clone();
        let refresh_failed = |e: Error| failed(&display, e);
        if entry.definition.format > DEFINITION_FORMAT {
            return Err(Error::UnsupportedDefinition {
                name: display,
                found: entry.definition.format,
                supported: DEFINITION_FORMAT,
            });
        }
        for source in &entry.definition.sources {
            if base.view(source).is_none() && self.registered(source).await?.is_none() {
                return Err(refresh_failed(Error::RelationNotFound {
                    name: self.display(source),
                }));
            }
        }
        // Plain views read the relations their names mean now, as in a new
        // process (see `rebind`).
        self.rebind_views(&entry.definition.sources)
            .await
            .map_err(refresh_failed)?;
        // Fingerprint the sources before reading them: a change made while
        // the query runs leaves the view stale, never wrongly fresh.
        // Planning reads no data, so the two run together.
        let fingerprinter = self.fingerprinter().with_pins(pinned.clone());
        let (planned, fingerprints) = futures::join!(
            plan_definition(self.ctx.state(), &display, &entry.definition),
            fingerprinter.sources(&entry.definition.sources)
        );
        let (state, plan) = planned.map_err(refresh_failed)?;
        let fingerprints = fingerprints?;
        let source_versions = fingerprinter.versions_read();
        if let Some((source, state)) = pinned
            .iter()
            .find(|(source, _)| !source_versions.contains_key(*source))
        {
            return Err(Error::SourceVersionUnavailable {
                name: self.display(source),
                version: state.version,
                reason: format!("materialized view \"{display}\" does not read it"),
            });
        }
        // Judged on today's plan too: a definition stored by an older
        // build may not have recorded it.
        let not_reproducible = entry
            .definition
            .not_reproducible
            .clone()
            .or_else(|| not_reproducible(&plan, self.options.trust_user_functions));
        let decision = decide::decide(
            entry.snapshot.as_ref(),
            &fingerprints,
            requested == Requested::Full,
            not_reproducible,
            !entry.definition.sources.is_empty(),
        );
        let forced = requested == Requested::Incremental;
        let not_incremental = |reason: String| Error::NotIncremental {
            name: display.clone(),
            reason,
        };
        // Analysed only when the view is not fresh.
        let mut shape = None;
        let mut estimate = None;
        let (mode, detail, chosen) = match decision {
            Decision::NoOp => (RefreshMode::NoOp, "sources unchanged".to_string(), None),
            Decision::Full(why) if forced => {
                return Err(not_incremental(why.describe(|n| self.names(n))));
            }
            Decision::Full(why) => (RefreshMode::Full, why.describe(|n| self.names(n)), None),
            Decision::Stale { changed, diff } => {
                let shape = shape.insert(Shape::of(&plan));
                let snapshot = entry.snapshot.as_ref().expect("stale views have data");
                match self
                    .choose_incremental(&plan, shape, snapshot, &diff, pinned, forced)
                    .await?
                {
                    Strategy::Incremental {
                        write,
                        detail,
                        estimate: weighed,
                    } => {
                        estimate = Some(weighed);
                        (RefreshMode::Incremental, detail, Some(write))
                    }
                    Strategy::Full(why) => {
                        let detail = format!("changed: {}; {why}", self.names(&changed));
                        if forced {
                            return Err(not_incremental(detail));
                        }
                        estimate = why.estimate();
                        (RefreshMode::Full, detail, None)
                    }
                }
            }
        };
        let detail = if pinned.is_empty() {
            detail
        } else {
            let mut pins: Vec<String> = pinned
                .iter()
                .map(|(source, state)| {
                    format!("{} at version {}", self.display(source), state.version)
                })
                .collect();
            pins.sort();
            format!("{detail}; read {}", pins.join(", "))
        };
        let write = match (mode, chosen) {
            (RefreshMode::NoOp, _) => None,
            (_, Some(write)) => Some(*write),
            _ => {
                let shape = shape.unwrap_or_else(|| Shape::of(&plan));
                let previous = entry.snapshot.as_ref();
                Some(
                    self.full_write(plan, &shape, &fingerprints, pinned, previous)
                        .await?,
                )
            }
        };
        let write = match write {
            Some(write) => Some(write.pin(&self.pins(&fingerprints, pinned).await?)?),
            None => None,
        };
        Ok(PlannedRefresh {
            name: name.clone(),
            display,
            version: view_state.version,
            entry,
            mode,
            detail,
            estimate,
            run: write.map(|write| (state, write)),
            fingerprints,
            source_versions,
        })
    }

    /// How to refresh a stale view incrementally, or why it must be
    /// recomputed (see [`plan::choose`]).
    pub(super) async fn choose_incremental(
        &self,
        plan: &LogicalPlan,
        shape: &Shape,
        snapshot: &Snapshot,
        diff: &Diff<'_>,
        pinned: &PinnedSources,
        force: bool,
    ) -> Result<Strategy> {
        if let Some(strategy) = self
            .by_lineage(plan, shape, snapshot, diff, pinned, force)
            .await?
        {
            return Ok(strategy);
        }
        let change = match decide::changed_table(diff, |n| self.display(n)) {
            Ok(change) => change,
            Err(FullReason::SeveralChanged { .. }) => {
                return self
                    .choose_several(plan, shape, snapshot, diff, pinned, force)
                    .await;
            }
            Err(why) => return Ok(Strategy::Full(why)),
        };
        let (source, provider) = match self.source_of(&change.name, pinned).await? {
            Ok(found) => found,
            Err(why) => return Ok(Strategy::Full(why)),
        };
        plan::choose(
            plan,
            shape,
            snapshot,
            &change,
            &source,
            &provider,
            &self.catalog,
            self.pinning_runtime().as_ref(),
            force,
        )
    }

    /// Table `name` as messages show it and the provider a refresh reads
    /// it through, or why it is not a table of the session.
    async fn source_of(
        &self,
        name: &QualifiedName,
        pinned: &PinnedSources,
    ) -> Result<std::result::Result<(String, Arc<dyn TableProvider>), FullReason>> {
        let source = self.display(name);
        Ok(match self.source_provider(name, pinned).await? {
            Some(provider) => Ok((source, provider)),
            None => Err(FullReason::NotATable { relation: source }),
        })
    }

    /// How to refresh a view whose lineage follows one table after other
    /// tables gained files, keeping its lineage (see
    /// [`plan::by_lineage`]); `None` when that does not apply, or only the
    /// table lineage follows changed.
    async fn by_lineage(
        &self,
        plan: &LogicalPlan,
        shape: &Shape,
        snapshot: &Snapshot,
        diff: &Diff<'_>,
        pinned: &PinnedSources,
        force: bool,
    ) -> Result<Option<Strategy>> {
        let Some(table) = &snapshot.lineage_of else {
            return Ok(None);
        };
        if !diff.changed_tables().iter().any(|n| *n != table) {
            return Ok(None);
        }
        let Ok(changes) = decide::changed_tables(diff, |n| self.display(n)) else {
            return Ok(None);
        };
        let files = match diff.table(table).1 {
            Some(Fingerprint::Files { files, .. } | Fingerprint::Snapshot { files, .. }) => files,
            _ => return Ok(None),
        };
        let Ok((source, provider)) = self.source_of(table, pinned).await? else {
            return Ok(None);
        };
        let mut others = Vec::with_capacity(changes.len());
        for change in changes.iter().filter(|c| c.name != *table) {
            let Ok((source, provider)) = self.source_of(&change.name, pinned).await? else {
                return Ok(None);
            };
            others.push(plan::Changed {
                change,
                source,
                provider,
            });
        }
        let followed = plan::Followed {
            source,
            provider,
            change: changes.iter().find(|c| c.name == *table),
            files,
        };
        plan::by_lineage(
            plan,
            shape,
            snapshot,
            &followed,
            &others,
            &self.catalog,
            self.pinning_runtime().as_ref(),
            force,
        )
    }

    /// How to refresh a view after several tables changed (see
    /// [`plan::choose_several`]).
    async fn choose_several(
        &self,
        plan: &LogicalPlan,
        shape: &Shape,
        snapshot: &Snapshot,
        diff: &Diff<'_>,
        pinned: &PinnedSources,
        force: bool,
    ) -> Result<Strategy> {
        let changes = match decide::changed_tables(diff, |n| self.display(n)) {
            Ok(changes) => changes,
            Err(why) => return Ok(Strategy::Full(why)),
        };
        let mut changed = Vec::with_capacity(changes.len());
        for change in &changes {
            let (source, provider) = match self.source_of(&change.name, pinned).await? {
                Ok(found) => found,
                Err(why) => return Ok(Strategy::Full(why)),
            };
            changed.push(plan::Changed {
                change,
                source,
                provider,
            });
        }
        plan::choose_several(
            plan,
            shape,
            snapshot,
            &changed,
            &self.catalog,
            self.pinning_runtime().as_ref(),
            force,
        )
    }

    /// The file-backed sources a refresh reads, each held to the files it
    /// had when `fingerprints` were taken (see [`Write::pin`]).
    pub(super) async fn pins(
        &self,
        fingerprints: &[SourceFingerprint],
        pinned: &PinnedSources,
    ) -> Result<Vec<Pin>> {
        let mut pins = vec![];
        for (name, paths) in plan::fingerprinted_files(fingerprints) {
            if let Some(provider) = self.source_provider(name, pinned).await?
                && let Some(pin) = Pin::new(
                    provider,
                    &self.display(name),
                    &self.catalog,
                    self.pinning_runtime().as_ref(),
                    paths,
                )
            {
                pins.push(pin);
            }
        }
        Ok(pins)
    }

    /// What a full computation of a view with query `plan` writes (see
    /// [`plan::full`]).
    pub(super) async fn full_write(
        &self,
        plan: LogicalPlan,
        shape: &Shape,
        fingerprints: &[SourceFingerprint],
        pinned: &PinnedSources,
        previous: Option<&Snapshot>,
    ) -> Result<Write> {
        let table = plan::lineage_table(fingerprints);
        let provider = match table {
            Some((name, _, _)) => self.source_provider(name, pinned).await?,
            None => None,
        };
        let single = table
            .zip(provider.as_ref())
            .map(|((name, files, most), provider)| (provider, name, files, most));
        plan::full(
            plan,
            shape,
            single,
            previous,
            &self.catalog,
            self.pinning_runtime().as_ref(),
        )
    }

    /// Where a refresh registers the stores that read a partitioned table
    /// as some of its files; none on a cluster, whose executors would not
    /// find them (such a table is then read whole, and refreshed fully).
    fn pinning_runtime(&self) -> Option<Arc<datafusion::execution::runtime_env::RuntimeEnv>> {
        // Read in place: `ctx.state()` would copy the whole state.
        let on_cluster = super::on_cluster(&self.ctx.state_ref().read());
        (!on_cluster).then(|| self.ctx.runtime_env())
    }

    /// The provider a refresh reads source `name` through: held at its
    /// pinned state when `pinned` has one, else the session's.
    async fn source_provider(
        &self,
        name: &QualifiedName,
        pinned: &PinnedSources,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        match pinned.get(name) {
            Some(state) => Ok(Some(Arc::new(MaterializedViewTable::at(
                Arc::clone(&self.catalog),
                Arc::clone(state),
                self.display(name),
            )))),
            None => self.registered(name).await,
        }
    }

    /// Carries out a planned refresh: writes the new snapshot and commits it.
    pub(super) async fn run_refresh(&self, planned: PlannedRefresh) -> Result<RefreshOutcome> {
        let PlannedRefresh {
            name,
            display,
            version,
            entry,
            mode,
            detail,
            run,
            fingerprints,
            source_versions,
            estimate: _,
        } = planned;
        let Some((state, write)) = run else {
            return Ok(RefreshOutcome {
                view: display,
                mode,
                rows_written: 0,
                version,
                rows_deleted: 0,
                detail,
                source_versions,
                files_read: Some(0),
                bytes_read: Some(0),
            });
        };
        let previous_rows = entry.snapshot.as_ref().map_or(0, |s| s.row_count);
        let kept_rows: u64 = write.keep.iter().map(|f| f.rows).sum();
        let progress = self.progress.as_ref().map(|l| (display.as_str(), l));
        // Cleanup (here or in any process) leaves what this write makes
        // alone until it commits.
        let lease = self.catalog.lease(&entry, false).await?;
        // For naming the file a cast error comes from, if one does.
        let plans = write.plans();
        // What expired is removed while the query runs rather than after the
        // commit, off the statement's path; what this refresh supersedes
        // goes with a later one.
        let reads = Reads::default();
        let measured = !on_cluster(&state);
        let (written, _, ()) = futures::join!(
            write_snapshot(
                state,
                &self.catalog,
                &entry,
                write,
                Watch {
                    progress,
                    reads: &reads,
                },
                fingerprints,
                &lease,
            ),
            self.cleanup_expired(),
            self.history.prune_if_due(&name, true)
        );
        let snapshot = match written {
            Ok(snapshot) => snapshot,
            Err(e) => {
                let e = self.explain_write_error(&plans, e).await;
                return Err(failed(&display, e));
            }
        };
        let version =
            commit_snapshot(&self.catalog, &name, &display, &entry, &snapshot, lease).await?;
        Ok(RefreshOutcome {
            view: display,
            mode,
            rows_written: snapshot.row_count - kept_rows,
            version,
            rows_deleted: previous_rows - kept_rows,
            detail,
            source_versions,
            files_read: measured.then(|| reads.files()),
            bytes_read: measured.then(|| reads.bytes()),
        })
    }

    /// `EXPLAIN REFRESH MATERIALIZED VIEW v`: the mode, the reason and the
    /// plan a refresh would run, changing nothing.
    pub(super) async fn explain_refresh(
        &self,
        refresh: &RefreshMaterializedView,
        base: &Index,
    ) -> Result<DataFrame> {
        let (mut views, mut modes, mut details, mut plans) = (vec![], vec![], vec![], vec![]);
        let mut estimates = vec![];
        for (name, requested) in self.refresh_order(refresh, base).await? {
            let planned = self
                .plan_refresh(base, &name, requested, &PinnedSources::new())
                .await?;
            views.push(planned.display.clone());
            modes.push(planned.mode.as_str());
            details.push(planned.detail.clone());
            estimates.push(planned.estimate.map(|e| match requested {
                Requested::Incremental => format!("{}; INCREMENTAL requested", e.describe()),
                _ => e.describe(),
            }));
            plans.push(match &planned.run {
                Some((state, write)) => explain_write(state, write),
                None => String::new(),
            });
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("view", DataType::Utf8, false),
            Field::new("mode", DataType::Utf8, false),
            Field::new("detail", DataType::Utf8, false),
            Field::new("plan", DataType::Utf8, false),
            Field::new("estimate", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(views)),
                Arc::new(StringArray::from(modes)),
                Arc::new(StringArray::from(details)),
                Arc::new(StringArray::from(plans)),
                Arc::new(StringArray::from(estimates)),
            ],
        )?;
        Ok(self.ctx.read_batch(batch)?)
    }

    /// A fingerprinter for this session's sources against the catalog.
    pub(super) fn fingerprinter(&self) -> Fingerprinter<'_> {
        Fingerprinter::new(
            self.ctx.state(),
            &self.catalog,
            self.created_under().clone(),
        )
    }

    /// `a, s.b`: names for messages.
    pub(super) fn names(&self, names: &[QualifiedName]) -> String {
        names
            .iter()
            .map(|n| self.display(n))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Removes what expired (see [`Sweep::Quick`]), after DROP and CREATE
    /// OR REPLACE commit and while a refresh runs its query. Best effort:
    /// whatever is left is removed by a later cleanup.
    pub(super) async fn cleanup_expired(&self) -> Result<()> {
        if self.options.cleanup_after_commit
            && let Err(e) = self.catalog.cleanup(Sweep::Quick).await
        {
            log::warn!("cleanup failed (a later cleanup retries): {e}");
        }
        Ok(())
    }
}
