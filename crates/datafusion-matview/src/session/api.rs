//! The typed entry points: CREATE, REFRESH and DROP of materialized views
//! called with names and options, not SQL text or parser values. A name is
//! a [`QualifiedName`] (exact, never case-folded); a query is SQL text.
//! Each runs exactly as its statement does through [`MatviewSession::sql`].

use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{Ident, ObjectName, Query, Statement as SqlStatement};

use super::*;
use crate::sql::{CreateMaterializedView, DropMaterializedView, RefreshMaterializedView};

/// How [`MatviewSession::create_view`] creates a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// `OR REPLACE`: replace a view of the same name.
    pub or_replace: bool,
    /// `IF NOT EXISTS`: do nothing when a view of the name exists.
    pub if_not_exists: bool,
    /// Output column names, left to right (`CREATE ... v (a, b) AS ...`).
    pub columns: Vec<String>,
    /// `false` for `WITH NO DATA`: store the definition only.
    pub with_data: bool,
    /// `WITH (name = value, ...)`: `auto_refresh`, `target_lag` (see
    /// [`crate::spec::AutoRefresh`]).
    pub options: Vec<(String, String)>,
}

impl Default for CreateOptions {
    /// `CREATE MATERIALIZED VIEW name AS query`, with data.
    fn default() -> Self {
        Self {
            or_replace: false,
            if_not_exists: false,
            columns: vec![],
            with_data: true,
            options: vec![],
        }
    }
}

/// How [`MatviewSession::refresh_view`] refreshes a view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshOptions {
    /// `FULL`: recompute even when an incremental refresh or none would do.
    pub full: bool,
    /// `INCREMENTAL`: compute only what changed, even when the cost rule
    /// would recompute, or fail saying why it cannot. Not with `full`.
    pub incremental: bool,
    /// `CASCADE`: first bring up to date the materialized views it reads.
    pub cascade: bool,
    /// Read these materialized views at these versions of their logs
    /// instead of their latest (see [`MatviewSession::refresh_at`]).
    pub sources_at: BTreeMap<QualifiedName, u64>,
    /// The server job that runs the refresh: the history records it, with
    /// the trigger `server job`.
    pub job_id: Option<String>,
}

/// How [`MatviewSession::drop_views`] drops views.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropOptions {
    /// `IF EXISTS`: a name that is not a view is no error.
    pub if_exists: bool,
    /// `CASCADE`: drop what depends on them too.
    pub cascade: bool,
}

/// `name` as the parser would give it for the quoted identifiers
/// `"catalog"."schema"."name"`: each part exactly as it is.
pub(crate) fn object_name(name: &QualifiedName) -> ObjectName {
    ObjectName::from(
        [&name.catalog, &name.schema, &name.name]
            .into_iter()
            .map(|part| Ident::with_quote('"', part.as_str()))
            .collect::<Vec<_>>(),
    )
}

impl MatviewSession {
    /// `CREATE MATERIALIZED VIEW name AS query` with `options`; `query` is
    /// one query (SELECT, VALUES, WITH ...) in the session's dialect.
    pub async fn create_view(
        &self,
        name: &QualifiedName,
        query: &str,
        options: &CreateOptions,
    ) -> Result<CreateOutcome> {
        let create = self.create_statement(name, query, options)?;
        self.create_materialized_view(&create).await
    }

    /// The statement [`Self::create_view`] runs, for callers that check it
    /// first (the server checks the paths a query reads).
    pub fn create_statement(
        &self,
        name: &QualifiedName,
        query: &str,
        options: &CreateOptions,
    ) -> Result<CreateMaterializedView> {
        Ok(CreateMaterializedView {
            name: object_name(name),
            or_replace: options.or_replace,
            if_not_exists: options.if_not_exists,
            columns: options
                .columns
                .iter()
                .map(|c| Ident::with_quote('"', c.as_str()))
                .collect(),
            query: self.parse_query(query)?,
            with_data: options.with_data,
            options: options.options.clone(),
        })
    }

    /// `query` parsed as exactly one query.
    fn parse_query(&self, query: &str) -> Result<Box<Query>> {
        let (dialect, recursion_limit) = crate::sql::parser_settings(self.context());
        let mut statements = crate::sql::parse_sql(query, &dialect, recursion_limit)?;
        match (statements.pop(), statements.is_empty()) {
            (Some(Statement::DataFusion(statement)), true) => match *statement {
                DFStatement::Statement(statement) => match *statement {
                    SqlStatement::Query(query) => Ok(query),
                    _ => Err(not_a_query()),
                },
                _ => Err(not_a_query()),
            },
            _ => Err(not_a_query()),
        }
    }

    /// `REFRESH MATERIALIZED VIEW name` with `options`: the outcome of each
    /// view refreshed, the named one last (`CASCADE` refreshes the views it
    /// reads first).
    pub async fn refresh_view(
        &self,
        name: &QualifiedName,
        options: &RefreshOptions,
    ) -> Result<Vec<RefreshOutcome>> {
        let refresh = RefreshMaterializedView {
            name: object_name(name),
            full: options.full,
            incremental: options.incremental,
            cascade: options.cascade,
        };
        let origin = super::refresh::Origin {
            trigger: match options.job_id {
                Some(_) => crate::history::Trigger::ServerJob,
                None => crate::history::Trigger::Statement,
            },
            job_id: options.job_id.as_deref(),
        };
        self.refresh_from(&refresh, &options.sources_at, origin)
            .await
    }

    /// `DROP MATERIALIZED VIEW names` with `options`; returns what CASCADE
    /// dropped with them (see [`Self::drop_materialized_views`]).
    pub async fn drop_views(
        &self,
        names: &[QualifiedName],
        options: DropOptions,
    ) -> Result<Vec<(QualifiedName, &'static str)>> {
        let drop = DropMaterializedView {
            names: names.iter().map(object_name).collect(),
            if_exists: options.if_exists,
            cascade: options.cascade,
        };
        self.drop_materialized_views(&drop).await
    }
}

/// PostgreSQL answers a view over something else with a syntax error.
fn not_a_query() -> Error {
    Error::from(
        datafusion::sql::sqlparser::parser::ParserError::ParserError(
            "a materialized view's query must be one query (SELECT, VALUES, WITH ...), \
         without a trailing statement"
                .into(),
        ),
    )
}
