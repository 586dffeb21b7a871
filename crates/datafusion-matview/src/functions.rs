//! The `materialized_views()` table function.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, DurationMillisecondArray, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::plan_err;
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DFResult;

use crate::catalog::Catalog;
use crate::freshness::{Fingerprinter, Freshness};
use crate::spec::{QualifiedName, ViewEntry};

/// Defaults each plain view of a session was created under, shared with
/// the session.
pub(crate) type ViewDefaults = Arc<Mutex<HashMap<QualifiedName, (String, String)>>>;

/// A row of [`MaterializedViewsFunction::batch`].
#[derive(Debug)]
pub enum Listed<'a> {
    /// A view, with its freshness and the sources it names, comma-separated.
    View {
        /// The view.
        view: &'a ViewEntry,
        /// Its freshness now.
        freshness: Freshness,
        /// The sources that changed or cannot be fingerprinted.
        sources: String,
    },
    /// A view of the index whose log cannot be read.
    Broken {
        /// The view.
        name: &'a QualifiedName,
        /// Why.
        error: String,
    },
}

/// `materialized_views()`: one row per view of the catalog.
///
/// | column | type |
/// |---|---|
/// | table_catalog, table_schema, table_name | Utf8 |
/// | definition | Utf8: the view's query; null when its log cannot be read |
/// | populated | Boolean |
/// | row_count | Int64, null when unpopulated |
/// | size_bytes | Int64, null when unpopulated |
/// | last_refreshed | Timestamp(µs, UTC), null when never |
/// | created_at | Timestamp(µs, UTC); null when its log cannot be read |
/// | freshness | Utf8: `fresh`, `stale` or `unknown` (see [`crate::freshness`]), or `broken`: its log cannot be read |
/// | changed_sources | Utf8: the sources that changed (stale) or cannot be fingerprinted (unknown), comma-separated; null when none |
/// | error | Utf8: why a `broken` view cannot be read (`dfmv recover` rebuilds its log from its data); null otherwise |
/// | auto_refresh | Boolean: whether `dfmv serve` refreshes it on its own; null when its log cannot be read |
/// | target_lag | Utf8: how far behind its sources it may fall when refreshed automatically (`5 minutes`, `downstream`); null when `auto_refresh` is off |
/// | lag | Duration(ms): how far behind its sources it is now: 0 when `fresh`, else the time since its data was computed; null when unpopulated or broken |
///
/// One view whose log cannot be read is listed as `broken`; the others
/// are listed as usual.
///
/// Freshness is computed when the function is scanned, from listings and
/// the views' logs only: no data file is read.
#[derive(Debug, Clone)]
pub struct MaterializedViewsFunction {
    catalog: Arc<Catalog>,
    view_defaults: ViewDefaults,
}

impl MaterializedViewsFunction {
    /// The function over `catalog`.
    pub(crate) fn new(catalog: Arc<Catalog>, view_defaults: ViewDefaults) -> Self {
        Self {
            catalog,
            view_defaults,
        }
    }

    /// Schema of the function's result.
    pub fn schema() -> SchemaRef {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        Arc::new(Schema::new(vec![
            Field::new("table_catalog", DataType::Utf8, false),
            Field::new("table_schema", DataType::Utf8, false),
            Field::new("table_name", DataType::Utf8, false),
            Field::new("definition", DataType::Utf8, true),
            Field::new("populated", DataType::Boolean, false),
            Field::new("row_count", DataType::Int64, true),
            Field::new("size_bytes", DataType::Int64, true),
            Field::new("last_refreshed", ts.clone(), true),
            Field::new("created_at", ts, true),
            Field::new("freshness", DataType::Utf8, false),
            Field::new("changed_sources", DataType::Utf8, true),
            Field::new("error", DataType::Utf8, true),
            Field::new("auto_refresh", DataType::Boolean, true),
            Field::new("target_lag", DataType::Utf8, true),
            Field::new("lag", DataType::Duration(TimeUnit::Millisecond), true),
        ]))
    }

    /// One row per entry of `rows`: a view with its freshness and the
    /// names of the sources it reports, or a view whose log cannot be
    /// read (freshness `broken`, the reason in `error`).
    pub fn batch(rows: &[Listed<'_>]) -> DFResult<RecordBatch> {
        let n = rows.len();
        let now = chrono::Utc::now();
        let view = |i: usize| match &rows[i] {
            Listed::View { view, .. } => Some(*view),
            Listed::Broken { .. } => None,
        };
        let name = |i: usize| match &rows[i] {
            Listed::View { view, .. } => &view.name,
            Listed::Broken { name, .. } => *name,
        };
        let snapshot = |i: usize| view(i).and_then(|v| v.snapshot.as_ref());
        let strings = |f: &dyn Fn(usize) -> Option<String>| -> ArrayRef {
            Arc::new(StringArray::from_iter((0..n).map(f)))
        };
        let columns: Vec<ArrayRef> = vec![
            strings(&|i| Some(name(i).catalog.clone())),
            strings(&|i| Some(name(i).schema.clone())),
            strings(&|i| Some(name(i).name.clone())),
            strings(&|i| view(i).map(|v| v.definition.sql.clone())),
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| Some(snapshot(i).is_some())),
            )),
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| snapshot(i).map(|s| s.row_count as i64)),
            )),
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| snapshot(i).map(|s| s.size_bytes as i64)),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter(
                    (0..n).map(|i| snapshot(i).map(|s| s.refreshed_at.timestamp_micros())),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(
                TimestampMicrosecondArray::from_iter(
                    (0..n).map(|i| view(i).map(|v| v.created_at.timestamp_micros())),
                )
                .with_timezone("UTC"),
            ),
            strings(&|i| {
                Some(match &rows[i] {
                    Listed::View { freshness, .. } => freshness.as_str().to_owned(),
                    Listed::Broken { .. } => "broken".to_owned(),
                })
            }),
            strings(&|i| match &rows[i] {
                Listed::View { sources, .. } if !sources.is_empty() => Some(sources.clone()),
                _ => None,
            }),
            strings(&|i| match &rows[i] {
                Listed::Broken { error, .. } => Some(error.clone()),
                Listed::View { .. } => None,
            }),
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| view(i).map(|v| v.auto_refresh.enabled)),
            )),
            strings(&|i| {
                view(i)
                    .filter(|v| v.auto_refresh.enabled)
                    .map(|v| v.auto_refresh.lag().display())
            }),
            Arc::new(DurationMillisecondArray::from_iter((0..n).map(|i| {
                let Listed::View {
                    view, freshness, ..
                } = &rows[i]
                else {
                    return None;
                };
                let snapshot = view.snapshot.as_ref()?;
                Some(match freshness {
                    Freshness::Fresh => 0,
                    _ => (now - snapshot.refreshed_at).num_milliseconds().max(0),
                })
            }))),
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }

    /// The function's table: computed when scanned.
    pub fn table(&self) -> Arc<dyn TableProvider> {
        Arc::new(self.clone())
    }
}

#[async_trait]
impl TableProvider for MaterializedViewsFunction {
    fn schema(&self) -> SchemaRef {
        Self::schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let Some(state) = state.as_any().downcast_ref::<SessionState>() else {
            return plan_err!("materialized_views() needs a DataFusion SessionState");
        };
        self.catalog.reload().await?;
        let states = self.catalog.views_each().await?;
        let defaults = self
            .view_defaults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let fingerprinter = Fingerprinter::new(state.clone(), &self.catalog, defaults);
        let options = state.config().options();
        let (catalog, schema) = (
            &options.catalog.default_catalog,
            &options.catalog.default_schema,
        );
        let mut rows = Vec::with_capacity(states.len());
        for (name, read) in &states {
            let view = match read {
                Ok(Some(state)) => &state.view,
                Ok(None) => continue,
                Err(e) => {
                    rows.push(Listed::Broken {
                        name,
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            let freshness = fingerprinter.freshness(view).await?;
            let sources: Vec<String> = freshness
                .sources()
                .iter()
                .map(|n| n.short(catalog, schema))
                .collect();
            rows.push(Listed::View {
                view,
                freshness,
                sources: sources.join(", "),
            });
        }
        let batch = Self::batch(&rows)?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Self::schema(),
            projection.cloned(),
        )?)
    }
}

impl TableFunctionImpl for MaterializedViewsFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("materialized_views() takes no arguments");
        }
        Ok(self.table())
    }
}
