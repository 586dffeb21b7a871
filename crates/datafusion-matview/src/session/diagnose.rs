//! After a statement failed casting a value read from a source file: which
//! file, and which column. A listing table keeps the schema it was created
//! with (a remembered table too, in every process), and DataFusion adapts
//! each file to it; a file written later with another type for a column
//! fails the statement with Arrow's cast error alone, which names neither.
//! This looks only once a statement has failed, so it costs nothing
//! otherwise.

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::error::ArrowError;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::source_as_provider;
use datafusion::parquet::errors::ParquetError;
use futures::{StreamExt, TryStreamExt};

use super::*;

/// A file of a listing table with a column of another type than the
/// table's.
#[derive(Debug, Clone, PartialEq)]
pub struct MismatchedFile {
    /// The table, as the statement named it.
    pub table: String,
    /// The file's URL.
    pub path: String,
    /// The column.
    pub column: String,
    /// Its type in the file (as the table's format reads it).
    pub file_type: DataType,
    /// Its type in the table.
    pub table_type: DataType,
}

impl MismatchedFile {
    /// What to add to the statement's error: the file, the column, and
    /// what to do.
    pub fn detail(&self) -> String {
        format!(
            "DETAIL: file {} of table \"{}\" has column \"{}\" as {}, but the table reads it as {}.\n\
             HINT: Correct or remove the file, or re-create the table with CREATE OR REPLACE \
             EXTERNAL TABLE to infer its schema again.",
            self.path, self.table, self.column, self.file_type, self.table_type
        )
    }
}

/// How many tables of a plan, and files of each, are looked at at most.
const MOST_TABLES: usize = 16;
const MOST_FILES: usize = 10_000;

/// Whether `error`, or one of its causes, is Arrow's failure to cast or
/// parse a value as the table's type (what a file with another type for a
/// column gives: Parquet's values are cast, CSV's parsed).
pub fn is_cast_error(error: &(dyn std::error::Error + 'static)) -> bool {
    crate::error::causes_of(error).into_iter().any(|cause| {
        matches!(
            cause.downcast_ref::<ArrowError>(),
            Some(ArrowError::CastError(_) | ArrowError::ParseError(_))
        )
    })
}

/// Whether `error`, or one of its causes, is a failure to read a file: a
/// Parquet file that does not decode, or the object store's error.
pub fn is_file_read_error(error: &(dyn std::error::Error + 'static)) -> bool {
    crate::error::causes_of(error).into_iter().any(|cause| {
        cause.is::<ParquetError>()
            || cause.is::<object_store::Error>()
            || matches!(
                cause.downcast_ref::<ArrowError>(),
                Some(ArrowError::ParquetError(_))
            )
    })
}

/// A string type: a value of it may fail to cast to a number, a date...
fn is_string(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// The listing tables `plan` scans, through plain views and subqueries,
/// with the names the plan gives them.
fn listing_tables(plan: &LogicalPlan, found: &mut Vec<(String, Arc<dyn TableProvider>)>) {
    let _ = plan.apply_with_subqueries(|node| {
        if found.len() >= MOST_TABLES {
            return Ok(TreeNodeRecursion::Stop);
        }
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
        {
            let any = provider.as_ref() as &dyn std::any::Any;
            if any.downcast_ref::<ListingTable>().is_some() {
                let name = scan.table_name.to_string();
                if !found.iter().any(|(n, _)| *n == name) {
                    found.push((name, provider));
                }
            } else if let Some(inner) = provider.get_logical_plan() {
                listing_tables(&inner, found);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
}

impl MatviewSession {
    /// After a statement planned as `plan` failed with a cast error: the
    /// first file of a listing table it reads (through plain views too)
    /// with a column of another type than the table's, preferring a string
    /// column the table reads as something else. Reads the schema of every
    /// file of those tables; `None` when none differs or they cannot be
    /// read.
    pub async fn mismatched_file(&self, plan: &LogicalPlan) -> Option<MismatchedFile> {
        let mut tables = vec![];
        listing_tables(plan, &mut tables);
        let state = self.ctx.state();
        // The first mismatch found, unless one of a string column read as
        // something else (what fails to cast) comes later.
        let mut first: Option<MismatchedFile> = None;
        for (name, provider) in tables {
            let Some(table) =
                (provider.as_ref() as &dyn std::any::Any).downcast_ref::<ListingTable>()
            else {
                continue;
            };
            let options = table.options();
            let schema = provider.schema();
            let partitions: Vec<&String> = options
                .table_partition_cols
                .iter()
                .map(|(n, _)| n)
                .collect();
            for url in table.table_paths() {
                let Ok(store) = state.runtime_env().object_store(url) else {
                    continue;
                };
                let Ok(listing) = url
                    .list_all_files(&state, store.as_ref(), &options.file_extension)
                    .await
                else {
                    continue;
                };
                let Ok(files) = listing.take(MOST_FILES).try_collect::<Vec<_>>().await else {
                    continue;
                };
                for meta in files {
                    let Ok(file_schema) = options
                        .format
                        .infer_schema(&state, &store, std::slice::from_ref(&meta))
                        .await
                    else {
                        continue;
                    };
                    for field in file_schema.fields() {
                        if partitions.contains(&field.name()) {
                            continue;
                        }
                        let Ok(expected) = schema.field_with_name(field.name()) else {
                            continue;
                        };
                        if expected.data_type() == field.data_type() {
                            continue;
                        }
                        let mismatch = MismatchedFile {
                            table: name.clone(),
                            path: format!("{}{}", url.object_store().as_str(), meta.location),
                            column: field.name().clone(),
                            file_type: field.data_type().clone(),
                            table_type: expected.data_type().clone(),
                        };
                        if is_string(field.data_type()) && !is_string(expected.data_type()) {
                            return Some(mismatch);
                        }
                        first.get_or_insert(mismatch);
                    }
                }
            }
        }
        first
    }

    /// `error`, from writing the results of `plans` (a CREATE's or a
    /// REFRESH's parts), with the file and column named when one of them
    /// reads a file that explains it ([`Self::explain_cast_error`]).
    pub(crate) async fn explain_write_error(
        &self,
        plans: &[LogicalPlan],
        mut error: Error,
    ) -> Error {
        for plan in plans {
            error = self.explain_cast_error(plan, error).await;
            if matches!(error, Error::MismatchedSourceFile { .. }) {
                break;
            }
        }
        error
    }

    /// `error`, from running a statement planned as `plan`, with the file
    /// and column named when it is a cast error a source file explains
    /// ([`Self::mismatched_file`]).
    pub async fn explain_cast_error(&self, plan: &LogicalPlan, error: Error) -> Error {
        if !is_cast_error(&error) {
            return error;
        }
        match self.mismatched_file(plan).await {
            Some(file) => Error::MismatchedSourceFile {
                source: Box::new(error),
                file: Box::new(file),
            },
            None => error,
        }
    }
}
