//! Describing one materialized view: its definition and state, for
//! `\d`-like listings and the server's `describe` route.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::*;

/// One column of a view, as [`ViewDescription`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ColumnDescription {
    /// The column's name.
    pub name: String,
    /// Its Arrow type, as DataFusion prints it (`Int64`, `Utf8`, ...).
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether it may hold nulls.
    pub nullable: bool,
}

/// The definition and state of one materialized view
/// ([`MatviewSession::describe`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ViewDescription {
    /// The view's own name (the last part).
    pub name: String,
    /// Its catalog and schema.
    pub namespace: Vec<String>,
    /// The query it materializes, as stored.
    pub query: String,
    /// Its columns.
    pub columns: Vec<ColumnDescription>,
    /// Whether it has data (false after `WITH NO DATA` until its first
    /// refresh).
    pub populated: bool,
    /// `fresh`, `stale` or `unknown`, computed now from the sources'
    /// listings (no data file is read).
    pub freshness: String,
    /// The sources that changed (stale) or cannot be fingerprinted
    /// (unknown), as messages name them.
    pub changed_sources: Vec<String>,
    /// Rows of the current snapshot; `None` when not populated.
    pub row_count: Option<u64>,
    /// Bytes of the current snapshot's files; `None` when not populated.
    pub size_bytes: Option<u64>,
    /// When the current snapshot was committed.
    pub last_refreshed: Option<DateTime<Utc>>,
    /// The version of the view's own log (1 when created, one more per
    /// refresh that wrote data).
    pub version: u64,
    /// The catalog's metadata format ([`crate::spec::MANIFEST_FORMAT`]).
    pub format_version: u32,
    /// The versions of the view's log that can still be read with
    /// `materialized_view_at` (populated, with their data retained), oldest
    /// first.
    pub versions: Vec<crate::catalog::RetainedVersion>,
}

impl MatviewSession {
    /// Describes materialized view `name`: its definition, its current
    /// snapshot and its freshness now. [`Error::NotFound`] when there is no
    /// such view.
    pub async fn describe(&self, name: &QualifiedName) -> Result<ViewDescription> {
        self.sync().await?;
        self.catalog.check_poisoned()?;
        let display = self.display(name);
        let state = self
            .catalog
            .view(name)
            .await?
            .ok_or_else(|| Error::NotFound {
                name: display.clone(),
            })?;
        let view = &state.view;
        let freshness = self.fingerprinter().freshness(view).await?;
        let (catalog, schema) = self.defaults();
        let columns = view
            .definition
            .schema
            .fields()
            .iter()
            .map(|f| ColumnDescription {
                name: f.name().clone(),
                data_type: f.data_type().to_string(),
                nullable: f.is_nullable(),
            })
            .collect();
        let snapshot = view.snapshot.as_ref();
        Ok(ViewDescription {
            name: view.name.name.clone(),
            namespace: vec![view.name.catalog.clone(), view.name.schema.clone()],
            query: view.definition.sql.clone(),
            columns,
            populated: snapshot.is_some(),
            freshness: freshness.as_str().to_owned(),
            changed_sources: freshness
                .sources()
                .iter()
                .map(|n| n.short(&catalog, &schema))
                .collect(),
            row_count: snapshot.map(|s| s.row_count),
            size_bytes: snapshot.map(|s| s.size_bytes),
            last_refreshed: snapshot.map(|s| s.refreshed_at),
            version: state.version,
            format_version: crate::spec::MANIFEST_FORMAT,
            versions: self.catalog.retained_versions(name).await?,
        })
    }

    /// The refresh history of materialized view `name` (of every view:
    /// `None`), oldest first: the newest
    /// [`MatviewOptions::history_per_view`] attempts of each (see
    /// [`crate::history`]). [`Error::NotFound`] when `name` is no view.
    pub async fn refresh_history(
        &self,
        name: Option<&QualifiedName>,
    ) -> Result<Vec<crate::history::RefreshAttempt>> {
        if let Some(name) = name {
            self.sync().await?;
            self.catalog.check_poisoned()?;
            if self.catalog.index().view(name).is_none() {
                return Err(Error::NotFound {
                    name: self.display(name),
                });
            }
        }
        crate::history::read(&self.catalog, name, self.options.history_per_view.max(1)).await
    }

    /// The fully qualified name of `parts` taken as exact identifiers (no
    /// case folding, as a quoted name in SQL): `[name]`, `[schema, name]` or
    /// `[catalog, schema, name]`, the missing parts from the session's
    /// defaults.
    pub fn qualify_parts(&self, parts: &[String]) -> Result<QualifiedName> {
        let (catalog, schema) = self.defaults();
        let (catalog, schema, name) = match parts {
            [name] => (catalog, schema, name.clone()),
            [s, name] => (catalog, s.clone(), name.clone()),
            [c, s, name] => (c.clone(), s.clone(), name.clone()),
            _ => {
                return Err(Error::NotSupported(format!(
                    "improper qualified name (too many dotted names): {}",
                    parts.join(".")
                )));
            }
        };
        Ok(QualifiedName::new(catalog, schema, name))
    }

    /// The materialized views of the catalog in schema `schema` of catalog
    /// `catalog` (every schema when `None`), sorted by name, after
    /// `after` (exclusive), at most `limit`.
    pub async fn list_views(
        &self,
        namespace: Option<(&str, &str)>,
        after: Option<&QualifiedName>,
        limit: usize,
    ) -> Result<Vec<QualifiedName>> {
        use std::ops::Bound;
        // The index as `sync` just loaded it.
        self.sync().await?;
        let index = self.catalog.index();
        let start = match (after, namespace) {
            (Some(after), _) => Bound::Excluded(after.clone()),
            (None, Some((c, s))) => Bound::Included(QualifiedName::new(c, s, "")),
            (None, None) => Bound::Unbounded,
        };
        // A namespace's names are contiguous in the sorted map.
        let inside =
            |n: &&QualifiedName| namespace.is_none_or(|(c, s)| n.catalog == c && n.schema == s);
        let names = index
            .views
            .iter_from(start.as_ref())
            .map(|e| &e.name)
            .skip_while(|n| !inside(n))
            .take_while(inside)
            .take(limit)
            .cloned()
            .collect();
        // A block of the checkpoint that does not parse fails the listing
        // rather than leave its views out.
        self.catalog.check_poisoned()?;
        Ok(names)
    }
}
