//! Answering queries from materialized views (see [`crate::rewrite`]):
//! which views may answer a statement, checked before it is planned any
//! further, since freshness is known only from listings.
//!
//! A view is a candidate when every relation it reads directly is one the
//! query names (through plain views too). A candidate is used only when
//! its shape matches a block of the query and, checked then, it is fresh;
//! or stale by a change its incremental refresh would follow (its data is
//! then computed as that refresh would write it, from what it keeps and
//! the changed files); or, under `stale_ok`, refreshed within the bound
//! with no relation under it redefined. Its scan is held at the state
//! checked.

use datafusion::common::ParamValues;
use datafusion::common::config::ExtensionOptions;
use datafusion::common::display::{PlanType, StringifiedPlan};
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::logical_expr::builder::LogicalPlanBuilder;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Execute, Explain, Prepare, Statement};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;

use super::*;
use crate::freshness::Freshness;
use crate::rewrite::{Candidate, MatviewConfig, RewriteMode, Shape};
use crate::spec::ViewVersion;

/// The shapes of views' definitions, by view, for the definition and
/// snapshot they were worked out for: a refresh or a redefinition makes
/// another. Only shapes planned while the definitions under the view were
/// those its snapshot recorded are kept.
pub(crate) type Shapes = Arc<std::sync::Mutex<HashMap<QualifiedName, (ShapeKey, Arc<Shape>)>>>;

/// What a view's shape was worked out for.
#[derive(Debug, PartialEq)]
pub(crate) struct ShapeKey {
    definition: String,
    snapshot: String,
    /// The definitions of the materialized views under it that were read
    /// in place of their scans (see [`MatviewSession::unfolded`]).
    unfolded: Vec<String>,
}

/// A candidate view as the session holds it while it plans a query.
pub(crate) struct Held {
    view: Arc<ViewVersion>,
    /// The materialized views under it that its shape reads through their
    /// definitions: it answers for those only while they are fresh.
    under: Vec<Arc<ViewVersion>>,
}

/// How many shapes a session keeps.
const MAX_SHAPES: usize = 4096;

/// The statements a session prepared (`PREPARE`), by name, as planned.
pub(crate) type PreparedStatements = Arc<std::sync::Mutex<HashMap<String, Arc<Prepare>>>>;

impl MatviewSession {
    /// The session's rewrite settings.
    fn rewrite_config(&self) -> MatviewConfig {
        self.ctx
            .state_ref()
            .read()
            .config()
            .options()
            .extensions
            .get::<MatviewConfig>()
            .cloned()
            .unwrap_or_default()
    }

    /// The session's rewrite settings when queries may be answered from
    /// views: not with `matview.rewrite = 'off'`, nor on a cluster.
    fn rewrite_on(&self) -> Option<MatviewConfig> {
        let config = self.rewrite_config();
        (config.rewrite != RewriteMode::Off && !on_cluster(&self.ctx.state_ref().read()))
            .then_some(config)
    }

    /// `RESET matview.x`, which DataFusion does not do for settings of
    /// an extension: puts `variable` back to its default. `false`: not
    /// one of ours.
    pub(super) fn reset_matview_setting(&self, variable: &str) -> Result<bool> {
        if !variable.starts_with("matview.") {
            return Ok(false);
        }
        let default = MatviewConfig::default()
            .entries()
            .into_iter()
            .find(|e| e.key == variable)
            .and_then(|e| e.value)
            .ok_or_else(|| {
                Error::DataFusion(datafusion::error::DataFusionError::Configuration(format!(
                    "unrecognized configuration parameter \"{variable}\""
                )))
            })?;
        let state_ref = self.ctx.state_ref();
        let mut state = state_ref.write();
        state.config_mut().options_mut().set(variable, &default)?;
        Ok(true)
    }

    /// `plan` (a statement planned, not yet analyzed) with the blocks of
    /// its query that views answer replaced, when the session's
    /// `matview.rewrite` allows it. An `EXPLAIN VERBOSE` also shows the
    /// candidates and why each was not used.
    pub(super) async fn answer_from_views(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let Some(config) = self.rewrite_on() else {
            return Ok(plan);
        };
        match plan {
            LogicalPlan::Explain(explain) if is_query(&explain.plan) => {
                let inner = Arc::unwrap_or_clone(explain.plan);
                let (rewritten, report) = self.rewrite_or_keep(inner, &config).await;
                let mut stringified_plans = explain.stringified_plans;
                if explain.verbose
                    && let Some(report) = report
                {
                    let mut lines = vec![];
                    lines.extend(report.used.iter().map(|u| format!("used {u}")));
                    lines.extend(report.rejected.iter().map(|r| format!("not used {r}")));
                    lines.push(rewritten.display_indent().to_string());
                    stringified_plans.push(StringifiedPlan::new(
                        PlanType::AnalyzedLogicalPlan {
                            analyzer_name: "matview_rewrite".into(),
                        },
                        lines.join("\n"),
                    ));
                }
                Ok(LogicalPlan::Explain(Explain {
                    plan: Arc::new(rewritten),
                    stringified_plans,
                    ..explain
                }))
            }
            LogicalPlan::Analyze(analyze) if is_query(&analyze.input) => {
                let inner = Arc::unwrap_or_clone(analyze.input);
                let (rewritten, _) = self.rewrite_or_keep(inner, &config).await;
                Ok(LogicalPlanBuilder::from(rewritten)
                    .explain(analyze.verbose, true)?
                    .build()?)
            }
            plan if is_query(&plan) => Ok(self.rewrite_or_keep(plan, &config).await.0),
            other => Ok(other),
        }
    }

    /// [`Self::rewrite_query`], or `plan` as it is when it has parameters
    /// (a prepared statement is planned again at each execution) or the
    /// rewrite fails: the rewrite never fails a query.
    async fn rewrite_or_keep(
        &self,
        plan: LogicalPlan,
        config: &MatviewConfig,
    ) -> (LogicalPlan, Option<crate::rewrite::Report>) {
        if !plan.get_parameter_types().is_ok_and(|p| p.is_empty()) {
            return (plan, None);
        }
        match self.rewrite_query(plan.clone(), config).await {
            Ok(done) => done,
            Err(e) => {
                log::warn!("queries are not answered from materialized views: {e}");
                (plan, None)
            }
        }
    }

    /// `df`, a query planned by [`Self::sql`] with parameters (`$1`,
    /// `$2`, ...), with `params` bound to them and answered from
    /// materialized views as a query without parameters is.
    /// (`DataFrame::with_param_values` binds them too, but the query then
    /// reads its tables as written: a query with parameters is not
    /// answered from views until their values are known.)
    pub async fn with_param_values(
        &self,
        df: DataFrame,
        params: impl Into<ParamValues>,
    ) -> Result<DataFrame> {
        let (state, plan) = df.into_parts();
        // A query without parameters was answered when it was planned.
        let had_parameters = !plan.get_parameter_types()?.is_empty();
        let mut plan = plan.with_param_values(params)?;
        if had_parameters {
            plan = self.answer_from_views(plan).await?;
        }
        Ok(DataFrame::new(state, plan))
    }

    /// `plan` with an `EXECUTE` of a statement this session prepared
    /// replaced by that statement's query, its parameters bound, when
    /// views answer it; otherwise `plan` as it is, for DataFusion to run
    /// (which also gives the errors: unknown statement, wrong parameters).
    pub(super) async fn execute_from_views(&self, plan: LogicalPlan) -> LogicalPlan {
        let LogicalPlan::Statement(Statement::Execute(execute)) = &plan else {
            return plan;
        };
        let Some(config) = self.rewrite_on() else {
            return plan;
        };
        // A prepared query (DataFusion also prepares INSERT and the like,
        // which are left to it).
        let Some(bound) = self.bound(execute).filter(is_query) else {
            return plan;
        };
        match self.rewrite_or_keep(bound, &config).await {
            (rewritten, Some(report)) if !report.used.is_empty() => rewritten,
            _ => plan,
        }
    }

    /// The query of the statement `execute` runs, with its parameters
    /// bound as DataFusion binds them (each simplified to a literal, cast
    /// to the type `PREPARE` declared); `None` when this session did not
    /// prepare it or a parameter is not one DataFusion would take.
    fn bound(&self, execute: &Execute) -> Option<LogicalPlan> {
        let prepare = self
            .prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&execute.name)
            .cloned()?;
        let state = self.ctx.state();
        let simplifier = ExprSimplifier::new(
            SimplifyContext::builder()
                .with_schema(Arc::clone(prepare.input.schema()))
                .with_config_options(Arc::clone(state.config_options()))
                .with_query_execution_start_time(state.execution_props().query_execution_start_time)
                .build(),
        );
        let mut values = vec![];
        for parameter in &execute.parameters {
            let Ok(Expr::Literal(value, metadata)) = simplifier.simplify(parameter.clone()) else {
                return None;
            };
            values.push(ScalarAndMetadata::new(value, metadata));
        }
        if !prepare.fields.is_empty() {
            if values.len() != prepare.fields.len() {
                return None;
            }
            values = values
                .into_iter()
                .zip(&prepare.fields)
                .map(|(value, field)| value.cast_storage_to(field.data_type()))
                .collect::<datafusion::error::Result<_>>()
                .ok()?;
        }
        prepare
            .input
            .as_ref()
            .clone()
            .with_param_values(ParamValues::List(values))
            .ok()
    }

    /// Keeps what a `PREPARE` (`Some`) or `DEALLOCATE` (`None`) that
    /// DataFusion ran did to the statements `name` names.
    pub(super) fn prepared_changed(&self, name: String, prepare: Option<Prepare>) {
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        match prepare {
            Some(prepare) => prepared.insert(name, Arc::new(prepare)),
            None => prepared.remove(&name),
        };
    }

    /// The query `plan` rewritten, and what the rewrite found (`None`: no
    /// view reads the relations the query does).
    async fn rewrite_query(
        &self,
        plan: LogicalPlan,
        config: &MatviewConfig,
    ) -> Result<(LogicalPlan, Option<crate::rewrite::Report>)> {
        let (catalog, schema) = self.defaults();
        let mut names = BTreeSet::new();
        plan.apply_with_subqueries(|node| {
            let reference = match node {
                LogicalPlan::TableScan(scan) => &scan.table_name,
                LogicalPlan::SubqueryAlias(alias) => &alias.alias,
                _ => return Ok(TreeNodeRecursion::Continue),
            };
            names.insert(QualifiedName::from(
                reference.clone().resolve(&catalog, &schema),
            ));
            Ok(TreeNodeRecursion::Continue)
        })?;
        // The views that read only relations the query names (from the
        // index's readers, without going through every view), and, since
        // such a view answers what its definition computes, the views
        // that read those views and relations the query names: their
        // definitions are read with each materialized view the query
        // does not name in place of its scan (see `Self::unfolded`).
        let index = self.catalog.index();
        let mut reachable = names.clone();
        let mut entries = BTreeSet::new();
        let mut frontier: Vec<QualifiedName> = names.iter().cloned().collect();
        while let Some(name) = frontier.pop() {
            for reader in index.views.readers_of(&name) {
                let reads_reachable = index
                    .views
                    .get(&reader)
                    .is_some_and(|v| v.sources.iter().all(|s| reachable.contains(s)));
                if reads_reachable
                    && entries.insert(reader.clone())
                    && reachable.insert(reader.clone())
                {
                    frontier.push(reader);
                }
            }
        }
        if entries.is_empty() {
            return Ok((plan, None));
        }
        let unfold: BTreeSet<QualifiedName> = entries.difference(&names).cloned().collect();
        // One copy of the session's state, for the fingerprints and the
        // rest.
        let fingerprinter = self.fingerprinter();
        let state = fingerprinter.state();
        let analyzed =
            state
                .analyzer()
                .execute_and_check(plan.clone(), state.config_options(), |_, _| {})?;
        let settings = crate::refresh::plan::result_settings(state.config_options());
        // The defaults each plain view was created under, which its names
        // are read under.
        let views = self.created_under().clone();
        let mut candidates = vec![];
        let mut states = vec![];
        let mut rejected = vec![];
        for name in &entries {
            let display = self.display(name);
            match self
                .candidate(
                    name,
                    &display,
                    state,
                    &settings,
                    &fingerprinter,
                    &views,
                    &unfold,
                    config,
                )
                .await
            {
                Ok((candidate, view)) => {
                    candidates.push(candidate);
                    states.push(view);
                }
                Err(why) => rejected.push(format!("{display}: {why}")),
            }
        }
        let defaults = (catalog.as_str(), schema.as_str());
        // Each pass takes the views not checked yet as fresh; the views it
        // used that way are checked (a listing of their sources), and when
        // one is not fresh the pass runs again with what was learned. So
        // only views that would answer are checked, and a pass whose views
        // all turn out fresh is the answer.
        let (rewritten, mut report) = loop {
            let (rewritten, report) =
                crate::rewrite::rewrite(analyzed.clone(), &candidates, defaults, &views)?;
            let mut all_fresh = true;
            for &i in &report.unchecked {
                let checked = self
                    .usable_over(&states[i], state, &fingerprinter, config)
                    .await;
                let candidate = &mut candidates[i];
                match checked {
                    Ok(usable) => {
                        all_fresh &= usable.data.is_none() && usable.why == crate::rewrite::FRESH;
                        candidate.usable = Some(Ok(usable.why));
                        candidate.data = usable.data;
                        candidate.data_merged = usable.merged;
                    }
                    Err((why, _)) => {
                        all_fresh = false;
                        candidate.usable = Some(Err(why));
                    }
                }
            }
            if all_fresh {
                break (rewritten, report);
            }
        };
        rejected.append(&mut report.rejected);
        report.rejected = rejected;
        if report.used.is_empty() {
            return Ok((plan, Some(report)));
        }
        Ok((rewritten, Some(report)))
    }

    /// Candidate view `name` at its latest state, with its shape; its
    /// freshness is left to be checked if its shape matches, unless
    /// working out the shape checked it already. The materialized views of
    /// `unfold` it reads (directly or through each other) are read through
    /// their definitions, and held with it to be checked too.
    #[allow(clippy::too_many_arguments)]
    async fn candidate(
        &self,
        name: &QualifiedName,
        display: &str,
        state: &datafusion::execution::SessionState,
        settings: &BTreeMap<String, String>,
        fingerprinter: &Fingerprinter<'_>,
        views: &crate::rewrite::normal::ViewDefaults,
        unfold: &BTreeSet<QualifiedName>,
        config: &MatviewConfig,
    ) -> std::result::Result<(Candidate, Held), String> {
        let view = self
            .answering(name, settings)
            .await
            .map_err(|why| format!("it {why}"))?;
        let entry = &view.view;
        if entry.auto_refresh.no_rewrite {
            return Err("its rewrite setting is false".into());
        }
        let snapshot = entry.snapshot.as_ref().ok_or("it has not been populated")?;
        // The materialized views under it that the query does not name.
        let index = self.catalog.index();
        let mut under: Vec<Arc<ViewVersion>> = vec![];
        let mut next: Vec<QualifiedName> = index
            .views
            .get(name)
            .map(|v| v.sources.clone())
            .unwrap_or_default();
        while let Some(source) = next.pop() {
            if !unfold.contains(&source) || under.iter().any(|u| u.view.name == source) {
                continue;
            }
            let below = self
                .answering(&source, settings)
                .await
                .map_err(|why| format!("it reads {}, which {why}", self.display(&source)))?;
            next.extend(
                index
                    .views
                    .get(&source)
                    .map(|v| v.sources.clone())
                    .unwrap_or_default(),
            );
            under.push(below);
        }
        let held = Held {
            view: Arc::clone(&view),
            under,
        };
        let key = ShapeKey {
            definition: entry.id.clone(),
            snapshot: snapshot.id.clone(),
            unfolded: held.under.iter().map(|u| u.view.id.clone()).collect(),
        };
        let cached = self
            .shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .filter(|(k, _)| *k == key)
            .map(|(_, shape)| Arc::clone(shape));
        let mut usable = None;
        let mut data = None;
        let mut data_merged = false;
        let shape = match cached {
            Some(shape) => shape,
            None => {
                let (definition_state, plan) =
                    plan_definition(state.clone(), display, &entry.definition)
                        .await
                        .map_err(|e| e.to_string())?;
                let defaults = (
                    entry.definition.default_catalog.clone(),
                    entry.definition.default_schema.clone(),
                );
                let (plan, views) = self
                    .unfolded(plan, &defaults, &held.under, state, views)
                    .await?;
                let plan = definition_state
                    .analyzer()
                    .execute_and_check(plan, definition_state.config_options(), |_, _| {})
                    .map_err(|e| e.to_string())?;
                let shape = Arc::new(Shape::of(&plan, (&defaults.0, &defaults.1), &views)?);
                // Kept only if planned over the definitions the snapshot
                // recorded.
                let checked = self.usable_over(&held, state, fingerprinter, config).await;
                if !matches!(checked, Err((_, true))) {
                    let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
                    if shapes.len() >= MAX_SHAPES {
                        shapes.clear();
                    }
                    shapes.insert(name.clone(), (key, Arc::clone(&shape)));
                }
                match checked {
                    Ok(checked) => {
                        usable = Some(Ok(checked.why));
                        data = checked.data;
                        data_merged = checked.merged;
                    }
                    Err((why, _)) => usable = Some(Err(why)),
                }
                shape
            }
        };
        let provider = MaterializedViewTable::at(
            Arc::clone(&self.catalog),
            Arc::clone(&view),
            display.to_owned(),
        );
        let candidate = Candidate {
            display: display.to_owned(),
            shape,
            source: datafusion::datasource::provider_as_source(Arc::new(provider)),
            reference: short_reference(name, &self.defaults()),
            rows: snapshot.row_count,
            usable,
            data,
            data_merged,
        };
        Ok((candidate, held))
    }

    /// View `name` at its latest state, if its data can answer for its
    /// query in this session: populated, reproducible, and defined under
    /// this session's result settings.
    async fn answering(
        &self,
        name: &QualifiedName,
        settings: &BTreeMap<String, String>,
    ) -> std::result::Result<Arc<ViewVersion>, String> {
        let view = self
            .catalog
            .view(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("was dropped")?;
        let entry = &view.view;
        if entry.snapshot.is_none() {
            return Err("has not been populated".into());
        }
        if let Some(why) = &entry.definition.not_reproducible {
            return Err(format!("has a query that is not reproducible ({why})"));
        }
        let recorded = entry.definition.settings.as_ref();
        if recorded.map_or(!settings.is_empty(), |recorded| recorded != settings) {
            return Err("was defined under result settings other than this session's".into());
        }
        Ok(view)
    }

    /// `plan`, a definition planned under `defaults`, with each scan of a
    /// materialized view of `under` replaced by that view's definition
    /// (aliased as the scan was named), and `views` with the defaults each
    /// of those definitions reads names under.
    async fn unfolded(
        &self,
        mut plan: LogicalPlan,
        defaults: &(String, String),
        under: &[Arc<ViewVersion>],
        state: &datafusion::execution::SessionState,
        views: &crate::rewrite::normal::ViewDefaults,
    ) -> std::result::Result<(LogicalPlan, crate::rewrite::normal::ViewDefaults), String> {
        let mut views = views.clone();
        let mut definitions = HashMap::new();
        for below in under {
            let definition = &below.view.definition;
            let (_, planned) =
                plan_definition(state.clone(), &self.display(&below.view.name), definition)
                    .await
                    .map_err(|e| e.to_string())?;
            views.insert(
                below.view.name.clone(),
                (
                    definition.default_catalog.clone(),
                    definition.default_schema.clone(),
                ),
            );
            definitions.insert(below.view.name.clone(), planned);
        }
        // Each round replaces the scans of one level more: a definition
        // put in may read another view of `under`.
        for _ in 0..=under.len() {
            let (replaced, changed) =
                crate::rewrite::normal::replace_scans(plan, defaults, &views, &definitions)
                    .map_err(|e| e.to_string())?;
            plan = replaced;
            if !changed {
                break;
            }
        }
        Ok((plan, views))
    }

    /// Whether `held` may answer queries now: whether its view may (see
    /// [`Self::usable`]), when each materialized view under it that its
    /// shape reads through its definition holds what its definition gives
    /// now: fresh, or, under `stale_ok`, refreshed within the bound. (Its
    /// data computed past a change, as a stale view's is, would not be
    /// what the view over it read.)
    async fn usable_over(
        &self,
        held: &Held,
        state: &datafusion::execution::SessionState,
        fingerprinter: &Fingerprinter<'_>,
        config: &MatviewConfig,
    ) -> std::result::Result<Usable, (String, bool)> {
        let mut stale_under = vec![];
        for below in &held.under {
            let name = self.display(&below.view.name);
            match self
                .usable(below, state, fingerprinter, config, false)
                .await
            {
                Ok(Usable { why, .. }) if why == crate::rewrite::FRESH => {}
                Ok(Usable { why, .. }) => {
                    stale_under.push(format!("{name}, which it reads, is {why}"))
                }
                Err((why, redefined)) => {
                    return Err((
                        format!(
                            "it reads {name}, whose data must be what its query gives now: {why}"
                        ),
                        redefined,
                    ));
                }
            }
        }
        let mut usable = self
            .usable(&held.view, state, fingerprinter, config, true)
            .await?;
        if !stale_under.is_empty() {
            usable.why = format!("{}; {}", usable.why, stale_under.join("; "));
        }
        Ok(usable)
    }

    /// Under `stale_ok`, the bound, when `view` was refreshed within it.
    fn within_staleness(&self, view: &ViewVersion, config: &MatviewConfig) -> Option<String> {
        let snapshot = view.view.snapshot.as_ref()?;
        let age = (chrono::Utc::now() - snapshot.refreshed_at)
            .to_std()
            .unwrap_or_default();
        (config.rewrite == RewriteMode::StaleOk
            && age <= Duration::from_secs(config.rewrite_staleness.0))
        .then(|| config.rewrite_staleness.to_string())
    }

    /// Whether `view` may answer queries now (and if so, why, and the
    /// data to read instead of its own), or why not (and whether a
    /// relation under it was redefined, or could not be fingerprinted):
    /// fresh; stale by a change its incremental refresh would follow (see
    /// [`Self::compensated`]: the answer is the query's now); or, under
    /// `stale_ok`, refreshed within the bound with no relation under it
    /// redefined. A view whose relations were redefined is never usable.
    /// Without `compensate`, a stale view is usable only under `stale_ok`.
    async fn usable(
        &self,
        view: &Arc<ViewVersion>,
        state: &datafusion::execution::SessionState,
        fingerprinter: &Fingerprinter<'_>,
        config: &MatviewConfig,
        compensate: bool,
    ) -> std::result::Result<Usable, (String, bool)> {
        let entry = &view.view;
        let Some(snapshot) = &entry.snapshot else {
            return Err(("it has not been populated".into(), false));
        };
        let now = fingerprinter
            .sources(&entry.definition.sources)
            .await
            .map_err(|e| (e.to_string(), true))?;
        let diff = Diff::new(
            &snapshot.sources,
            &now,
            !entry.definition.sources.is_empty(),
        );
        if let Some(redefinition) = diff.redefinition() {
            let name = match redefinition {
                crate::freshness::Redefinition::Redefined(n)
                | crate::freshness::Redefinition::NotRecorded(n) => n,
            };
            return Err((
                format!(
                    "{} was redefined since its last refresh",
                    self.display(name)
                ),
                true,
            ));
        }
        let names = match diff.freshness() {
            Freshness::Fresh => {
                return Ok(Usable {
                    why: crate::rewrite::FRESH.into(),
                    data: None,
                    merged: false,
                });
            }
            Freshness::Unknown(names) => {
                return Err((
                    format!(
                        "its freshness is unknown ({} cannot be fingerprinted)",
                        self.names(&names)
                    ),
                    false,
                ));
            }
            Freshness::Stale(names) => names,
        };
        let changed = self.names(&names);
        let not_compensated = if compensate {
            match self.compensated(view, state, &diff, &now).await {
                Ok((detail, data, merged)) => {
                    return Ok(Usable {
                        why: format!("stale: {detail}"),
                        data: Some(data),
                        merged,
                    });
                }
                Err(why) => Some(why),
            }
        } else {
            None
        };
        if let Some(bound) = self.within_staleness(view, config) {
            Ok(Usable {
                why: format!("stale: {changed} changed since its refresh less than {bound} ago"),
                data: None,
                merged: false,
            })
        } else if let Some(not_compensated) = not_compensated {
            Err((
                format!(
                    "stale: {changed} changed since its last refresh, and its data is not \
                     computed past the change as an incremental refresh would: {not_compensated}"
                ),
                false,
            ))
        } else {
            Err((
                format!("stale: {changed} changed since its last refresh"),
                false,
            ))
        }
    }

    /// When `view` is stale by changes an incremental refresh would
    /// follow (files appended, or removed and rewritten where lineage
    /// allows; see [`crate::refresh::plan::choose`]): what that refresh
    /// would do, in words, and the view's data it would write, computed
    /// instead, from the stored data it would keep and the source files it
    /// would read (pinned to those fingerprinted in `now`), a grouped
    /// view's pieces left unmerged (see [`Write::pieces`]). The cost rule
    /// is the refresh's: a change it would recompute fully is not
    /// compensated. With it, whether that data is the view's own rows
    /// (see [`Write::pieces_merged`]).
    async fn compensated(
        &self,
        view: &Arc<ViewVersion>,
        state: &datafusion::execution::SessionState,
        diff: &Diff<'_>,
        now: &[SourceFingerprint],
    ) -> std::result::Result<(String, LogicalPlan, bool), String> {
        let text = |e: Error| e.to_string();
        let entry = &view.view;
        let snapshot = entry.snapshot.as_ref().ok_or("it has not been populated")?;
        let (_, plan) =
            plan_definition(state.clone(), &self.display(&entry.name), &entry.definition)
                .await
                .map_err(text)?;
        let shape = crate::refresh::plan::Shape::of(&plan);
        let unpinned = super::refresh::PinnedSources::default();
        let (write, detail) = match self
            .choose_incremental(&plan, &shape, snapshot, diff, &unpinned, false)
            .await
            .map_err(text)?
        {
            Strategy::Incremental { write, detail, .. } => (*write, detail),
            Strategy::Full(why) => return Err(why.to_string()),
        };
        let write = write
            .pin(&self.pins(now, &unpinned).await.map_err(text)?)
            .map_err(text)?;
        let columns = MaterializedViewTable::at(
            Arc::clone(&self.catalog),
            Arc::clone(view),
            self.display(&entry.name),
        )
        .schema();
        // The stored files the refresh would keep, read as the view's.
        let kept = if write.keep.is_empty() {
            None
        } else {
            let mut kept = ViewVersion::clone(view);
            if let Some(snapshot) = kept.view.snapshot.as_mut() {
                snapshot.row_count = write.keep.iter().map(|f| f.rows).sum();
                snapshot.size_bytes = write.keep.iter().map(|f| f.size).sum();
                snapshot.files = write.keep.clone();
            }
            let provider = MaterializedViewTable::at(
                Arc::clone(&self.catalog),
                Arc::new(kept),
                self.display(&entry.name),
            );
            let scan = LogicalPlanBuilder::scan(
                "__dfmv_kept",
                datafusion::datasource::provider_as_source(Arc::new(provider)),
                None,
            )
            .and_then(LogicalPlanBuilder::build)
            .map_err(|e| e.to_string())?;
            Some(scan)
        };
        let data = write.pieces(kept, &columns).map_err(text)?;
        Ok((detail, data, write.pieces_merged()))
    }
}

/// A view that may answer queries: why, and, when it is stale, its data
/// as of now (see [`MatviewSession::compensated`]).
struct Usable {
    why: String,
    data: Option<LogicalPlan>,
    /// Whether `data` is the view's own rows (one row per group).
    merged: bool,
}

/// Whether `plan` is a query (what the rewrite applies to), not a
/// statement that changes something.
fn is_query(plan: &LogicalPlan) -> bool {
    !matches!(
        plan,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::DescribeTable(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
    )
}

/// The shortest reference to `name` under `defaults`, for plans to show.
fn short_reference(name: &QualifiedName, (catalog, schema): &(String, String)) -> TableReference {
    if &name.catalog != catalog {
        name.to_table_reference()
    } else if &name.schema != schema {
        TableReference::partial(name.schema.as_str(), name.name.as_str())
    } else {
        TableReference::bare(name.name.as_str())
    }
}
