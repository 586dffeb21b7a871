//! `ALTER MATERIALIZED VIEW ... SET (...)` / `RESET (...)`: the automatic
//! refresh settings, committed as a version of the view's log with the
//! same data.

use super::*;
use crate::spec::AutoRefresh;
use crate::sql::AlterMaterializedView;

impl MatviewSession {
    /// Runs `ALTER MATERIALIZED VIEW`: checks the options, then commits
    /// the view's new settings (one version of its log, its data
    /// unchanged). `IF EXISTS` makes a missing view no error.
    pub async fn alter_materialized_view(&self, alter: &AlterMaterializedView) -> Result<()> {
        let name = self.resolve(&alter.name)?;
        let display = self.display(&name);
        // Bad options fail before anything is looked up, as in PostgreSQL.
        let apply = |settings: &mut AutoRefresh| -> Result<()> {
            settings.set(&alter.set).map_err(Error::InvalidOption)?;
            settings.reset(&alter.reset).map_err(Error::InvalidOption)
        };
        apply(&mut AutoRefresh::default())?;
        let index = self.catalog.reload().await?;
        if index.view(&name).is_none() {
            return match self.kind_of(&index, &name).await? {
                Some(_) => Err(Error::WrongObjectType {
                    name: display,
                    expected: "materialized view",
                    hint: None,
                }),
                None if alter.if_exists => Ok(()),
                None => Err(Error::NotFound { name: display }),
            };
        }
        self.catalog
            .commit_view_change(&name, &display, |_, state| {
                apply(&mut state.view.auto_refresh)
            })
            .await
            .map_err(|e| self.refused("ALTER MATERIALIZED VIEW", e.into()))?;
        Ok(())
    }
}
