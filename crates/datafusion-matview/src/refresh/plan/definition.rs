//! Planning a view's stored definition as it was defined: its SQL under
//! the defaults and result settings recorded with it, its columns renamed,
//! and its schema checked against the view's.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use datafusion::common::Column;
use datafusion::config::{ConfigField, ConfigOptions, Visit};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};

use crate::error::{Error, Result};
use crate::spec::{Definition, RESULT_SETTINGS};

/// A session state that resolves names as they were resolved when the
/// definition was created, whatever the session's defaults are now.
///
/// It also forgets the directory listings DataFusion caches for the life of
/// a session (by default, without expiry): a view computes from its
/// sources as they are now, files added since they were last read included.
pub(crate) fn state_for(
    state: SessionState,
    definition_catalog: &str,
    definition_schema: &str,
) -> SessionState {
    forget_listings(&state);
    with_defaults(state, definition_catalog, definition_schema)
}

/// `state` resolving names under `catalog`.`schema`.
pub(crate) fn with_defaults(mut state: SessionState, catalog: &str, schema: &str) -> SessionState {
    let options = state.config_mut().options_mut();
    options.catalog.default_catalog = catalog.to_owned();
    options.catalog.default_schema = schema.to_owned();
    state
}

/// The settings of [`RESULT_SETTINGS`] in `options` that differ from
/// DataFusion's defaults, for a new definition.
pub(crate) fn result_settings(options: &ConfigOptions) -> BTreeMap<String, String> {
    static DEFAULTS: std::sync::LazyLock<BTreeMap<String, Option<String>>> =
        std::sync::LazyLock::new(|| setting_values(&ConfigOptions::default()));
    let defaults = &*DEFAULTS;
    setting_values(options)
        .into_iter()
        .filter(|(key, value)| defaults.get(key) != Some(value))
        .filter_map(|(key, value)| Some((key, value?)))
        .collect()
}

fn setting_values(options: &ConfigOptions) -> BTreeMap<String, Option<String>> {
    /// The values of [`RESULT_SETTINGS`], as `ConfigOptions::entries`
    /// shows them, without writing out every other setting.
    struct Values(BTreeMap<String, Option<String>>);
    impl Visit for Values {
        fn some<V: std::fmt::Display>(&mut self, key: &str, value: V, _: &'static str) {
            if RESULT_SETTINGS.contains(&key) {
                self.0.insert(key.to_owned(), Some(value.to_string()));
            }
        }

        fn none(&mut self, key: &str, _: &'static str) {
            if RESULT_SETTINGS.contains(&key) {
                self.0.insert(key.to_owned(), None);
            }
        }
    }
    // The namespaces they are in.
    let mut values = Values(BTreeMap::new());
    options
        .execution
        .visit(&mut values, "datafusion.execution", "");
    options
        .sql_parser
        .visit(&mut values, "datafusion.sql_parser", "");
    values.0
}

/// Puts the settings of [`RESULT_SETTINGS`] as a definition recorded
/// them: the recorded values, the others at DataFusion's defaults.
fn apply_result_settings(
    options: &mut ConfigOptions,
    recorded: &BTreeMap<String, String>,
) -> Result<()> {
    let defaults = ConfigOptions::default();
    // Optional settings cannot be unset by name.
    options.execution.time_zone = defaults.execution.time_zone.clone();
    options.execution.parquet.coerce_int96 = defaults.execution.parquet.coerce_int96.clone();
    options.execution.parquet.coerce_int96_tz = defaults.execution.parquet.coerce_int96_tz.clone();
    for (key, value) in setting_values(&defaults) {
        if let Some(value) = value {
            options.set(&key, &value)?;
        }
    }
    for (key, value) in recorded {
        options.set(key, value)?;
    }
    Ok(())
}

/// Forgets the directory listings the session's runtime caches, so that
/// what reads sources next (a table found by path infers its schema from
/// a listing) sees the files there now.
pub(crate) fn forget_listings(state: &SessionState) {
    if let Some(cache) = state.runtime_env().cache_manager.get_list_files_cache() {
        cache.clear();
    }
}

/// Projects `plan` so its output columns are named by `names` left to right
/// (the rest keep their names) and carry no table qualifier.
pub(crate) fn rename_columns(plan: LogicalPlan, names: &[String]) -> Result<LogicalPlan> {
    let schema = Arc::clone(plan.schema());
    if names.len() > schema.fields().len() {
        return Err(Error::TooManyColumnNames);
    }
    let mut seen = HashSet::new();
    let mut exprs = Vec::with_capacity(schema.fields().len());
    for (i, (qualifier, field)) in schema.iter().enumerate() {
        let name = names.get(i).map(String::as_str).unwrap_or(field.name());
        if !seen.insert(name.to_owned()) {
            return Err(Error::DuplicateColumn {
                name: name.to_owned(),
            });
        }
        exprs.push(Expr::Column(Column::from((qualifier, field))).alias(name));
    }
    Ok(LogicalPlanBuilder::from(plan).project(exprs)?.build()?)
}

/// Plans a stored definition: its SQL under its recorded defaults, then the
/// column renames. Checks the result still has the view's schema.
pub(crate) async fn plan_definition(
    state: SessionState,
    view_name: &str,
    definition: &Definition,
) -> Result<(SessionState, LogicalPlan)> {
    let mut state = state_for(
        state,
        &definition.default_catalog,
        &definition.default_schema,
    );
    if let Some(recorded) = &definition.settings {
        apply_result_settings(state.config_mut().options_mut(), recorded)?;
    }
    let plan = state.create_logical_plan(&definition.sql).await?;
    let plan = rename_columns(plan, &definition.column_names)?;
    let now = plan.schema().as_arrow();
    let then = &definition.schema;
    let changed = |reason: String| Error::DefinitionChanged {
        name: view_name.to_owned(),
        reason,
    };
    if now.fields().len() != then.fields().len() {
        return Err(changed(format!(
            "its query now returns {} columns instead of {}",
            now.fields().len(),
            then.fields().len()
        )));
    }
    for (new, old) in now.fields().iter().zip(then.fields()) {
        if new.name() != old.name() || new.data_type() != old.data_type() {
            return Err(changed(format!(
                "column \"{}\" of type {} is now \"{}\" of type {}",
                old.name(),
                old.data_type(),
                new.name(),
                new.data_type()
            )));
        }
        if new.is_nullable() && !old.is_nullable() {
            return Err(changed(format!(
                "column \"{}\" may now contain nulls",
                old.name()
            )));
        }
    }
    Ok((state, plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `ConfigOptions::entries` shows of the result settings.
    fn from_entries(options: &ConfigOptions) -> BTreeMap<String, Option<String>> {
        options
            .entries()
            .into_iter()
            .filter(|e| RESULT_SETTINGS.contains(&e.key.as_str()))
            .map(|e| (e.key, e.value))
            .collect()
    }

    #[test]
    fn result_settings_are_read_as_entries_shows_them() {
        let mut options = ConfigOptions::default();
        let values = setting_values(&options);
        assert_eq!(values.len(), RESULT_SETTINGS.len(), "{values:?}");
        assert_eq!(values, from_entries(&options));
        assert!(result_settings(&options).is_empty());
        options
            .set("datafusion.execution.time_zone", "+01:00")
            .unwrap();
        options
            .set("datafusion.sql_parser.dialect", "PostgreSQL")
            .unwrap();
        options
            .set("datafusion.execution.parquet.binary_as_string", "true")
            .unwrap();
        assert_eq!(setting_values(&options), from_entries(&options));
        assert_eq!(
            result_settings(&options).keys().collect::<Vec<_>>(),
            [
                "datafusion.execution.parquet.binary_as_string",
                "datafusion.execution.time_zone",
                "datafusion.sql_parser.dialect",
            ]
        );
    }
}
