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
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
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

/// `materialized_views()`: one row per view of the catalog.
///
/// | column | type |
/// |---|---|
/// | table_catalog, table_schema, table_name | Utf8 |
/// | definition | Utf8: the view's query |
/// | populated | Boolean |
/// | row_count | Int64, null when unpopulated |
/// | size_bytes | Int64, null when unpopulated |
/// | last_refreshed | Timestamp(µs, UTC), null when never |
/// | created_at | Timestamp(µs, UTC) |
/// | freshness | Utf8: `fresh`, `stale` or `unknown` (see [`crate::freshness`]) |
/// | changed_sources | Utf8: the sources that changed (stale) or cannot be fingerprinted (unknown), comma-separated; null when none |
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
            Field::new("definition", DataType::Utf8, false),
            Field::new("populated", DataType::Boolean, false),
            Field::new("row_count", DataType::Int64, true),
            Field::new("size_bytes", DataType::Int64, true),
            Field::new("last_refreshed", ts.clone(), true),
            Field::new("created_at", ts, false),
            Field::new("freshness", DataType::Utf8, false),
            Field::new("changed_sources", DataType::Utf8, true),
        ]))
    }

    /// The rows for `views`, with each view's freshness and the names of
    /// the sources it reports.
    pub fn batch(views: &[&ViewEntry], freshness: &[(Freshness, String)]) -> DFResult<RecordBatch> {
        let strings = |f: &dyn Fn(usize) -> String| -> ArrayRef {
            Arc::new(StringArray::from_iter_values((0..views.len()).map(f)))
        };
        let snapshot = |i: usize| views[i].snapshot.as_ref();
        let columns: Vec<ArrayRef> = vec![
            strings(&|i| views[i].name.catalog.clone()),
            strings(&|i| views[i].name.schema.clone()),
            strings(&|i| views[i].name.name.clone()),
            strings(&|i| views[i].definition.sql.clone()),
            Arc::new(BooleanArray::from_iter(
                (0..views.len()).map(|i| Some(snapshot(i).is_some())),
            )),
            Arc::new(Int64Array::from_iter(
                (0..views.len()).map(|i| snapshot(i).map(|s| s.row_count as i64)),
            )),
            Arc::new(Int64Array::from_iter(
                (0..views.len()).map(|i| snapshot(i).map(|s| s.size_bytes as i64)),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter(
                    (0..views.len())
                        .map(|i| snapshot(i).map(|s| s.refreshed_at.timestamp_micros())),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    views.iter().map(|v| v.created_at.timestamp_micros()),
                )
                .with_timezone("UTC"),
            ),
            strings(&|i| freshness[i].0.as_str().to_owned()),
            Arc::new(StringArray::from_iter(
                freshness
                    .iter()
                    .map(|(_, names)| (!names.is_empty()).then_some(names.as_str())),
            )),
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
        let states = self.catalog.views().await?;
        let views: Vec<&ViewEntry> = states.iter().map(|s| &s.view).collect();
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
        let mut freshness = Vec::with_capacity(views.len());
        for view in &views {
            let f = fingerprinter.freshness(view).await?;
            let names: Vec<String> = f
                .sources()
                .iter()
                .map(|n| n.short(catalog, schema))
                .collect();
            freshness.push((f, names.join(", ")));
        }
        let batch = Self::batch(&views, &freshness)?;
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
