//! The `materialized_views()` table function.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::plan_err;
use datafusion::datasource::{MemTable, TableProvider};
use datafusion::error::Result as DFResult;

use crate::catalog::Catalog;
use crate::spec::Manifest;

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
#[derive(Debug)]
pub struct MaterializedViewsFunction {
    catalog: Arc<Catalog>,
}

impl MaterializedViewsFunction {
    /// The function over `catalog`.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
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
        ]))
    }

    /// The rows for one manifest version.
    pub fn batch(manifest: &Manifest) -> DFResult<RecordBatch> {
        let views = &manifest.views;
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
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }

    /// The current rows as a table.
    pub fn table(&self) -> DFResult<Arc<dyn TableProvider>> {
        let batch = Self::batch(&self.catalog.current())?;
        Ok(Arc::new(MemTable::try_new(
            Self::schema(),
            vec![vec![batch]],
        )?))
    }
}

impl TableFunctionImpl for MaterializedViewsFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("materialized_views() takes no arguments");
        }
        self.table()
    }
}
