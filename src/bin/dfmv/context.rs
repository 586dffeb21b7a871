//! The DataFusion session dfmv runs in, set up as `datafusion-cli` sets up
//! its own, and the object stores that remote locations need.
//!
//! Follows datafusion-cli 55.2.0: `src/main.rs` (session, runtime and memory
//! pool from the flags) and `src/exec.rs`
//! (`register_object_store_and_config_extensions`: stores for the
//! locations of CREATE EXTERNAL TABLE and COPY, built with the public
//! `object_storage` builders; `StatementExecutor`: a CREATE EXTERNAL TABLE
//! that fails with an S3 error is tried once more with the bucket's region
//! detected) and `src/object_storage/stdin.rs` (`LOCATION '/dev/stdin'`
//! reads what was piped in, through a `stdin://` store; upstream keeps that
//! store crate-private, so it is written here again).

use std::collections::HashMap;
use std::io::{IsTerminal, Read};
use std::num::NonZeroUsize;
use std::sync::Arc;

use datafusion::common::config::ConfigNonZeroUsize;
use datafusion::common::{exec_datafusion_err, exec_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::error::Result;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{
    FairSpillPool, GreedyMemoryPool, MemoryPool, TrackConsumersPool,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::ExplainFormat;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::Value;
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion_cli::catalog::DynamicObjectStoreCatalog;
use datafusion_cli::cli_context::CliSessionContext;
use datafusion_cli::functions::{
    ListFilesCacheFunc, MetadataCacheFunc, ParquetMetadataFunc, StatisticsCacheFunc,
};
use datafusion_cli::object_storage::instrumented::{
    InstrumentedObjectStoreMode, InstrumentedObjectStoreRegistry,
};
use datafusion_cli::object_storage::{
    AwsOptions, GcpOptions, StdinCarriesCommands, get_cos_object_store_builder,
    get_gcs_object_store_builder, get_oss_object_store_builder, get_s3_object_store_builder,
    is_stdin_location,
};
use datafusion_cli::pool_type::PoolType;
use datafusion_matview::MatviewSession;
use datafusion_matview::spec::RelationKind;
use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};

/// The command-line settings that shape the session.
pub struct Setup {
    pub batch_size: Option<usize>,
    pub memory_limit: Option<usize>,
    pub mem_pool_type: PoolType,
    pub top_memory_consumers: usize,
    pub disk_limit: Option<usize>,
    pub object_store_profiling: InstrumentedObjectStoreMode,
    pub stdin_carries_commands: bool,
}

/// A session context configured like `datafusion-cli`'s: options from the
/// environment, tree EXPLAIN, `NULL` shown as NULL, information_schema,
/// memory pool and disk limits, instrumented object stores, URL tables
/// with stores registered on demand, and its table functions.
pub async fn create_context(
    setup: &Setup,
) -> Result<(SessionContext, Arc<InstrumentedObjectStoreRegistry>)> {
    let mut options = ConfigOptions::from_env()?;
    if let Some(batch_size) = setup.batch_size {
        options.execution.batch_size = ConfigNonZeroUsize::try_new(batch_size)?;
    }
    if std::env::var_os("DATAFUSION_EXPLAIN_FORMAT").is_none() {
        options.explain.format = ExplainFormat::Tree;
    }
    if std::env::var_os("DATAFUSION_FORMAT_NULL").is_none() {
        options.format.null = "NULL".to_owned();
    }
    let mut config = SessionConfig::from(options).with_information_schema(true);
    if setup.stdin_carries_commands {
        config = config.with_extension(Arc::new(StdinCarriesCommands));
    }

    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = setup.memory_limit {
        let top = NonZeroUsize::new(setup.top_memory_consumers);
        let pool: Arc<dyn MemoryPool> = match (&setup.mem_pool_type, top) {
            (PoolType::Fair, None) => Arc::new(FairSpillPool::new(limit)),
            (PoolType::Fair, Some(top)) => {
                Arc::new(TrackConsumersPool::new(FairSpillPool::new(limit), top))
            }
            (PoolType::Greedy, None) => Arc::new(GreedyMemoryPool::new(limit)),
            (PoolType::Greedy, Some(top)) => {
                Arc::new(TrackConsumersPool::new(GreedyMemoryPool::new(limit), top))
            }
        };
        runtime = runtime.with_memory_pool(pool);
    }
    if let Some(limit) = setup.disk_limit {
        runtime = runtime.with_disk_manager_builder(
            DiskManagerBuilder::default()
                .with_mode(DiskManagerMode::OsTmpDirectory)
                .with_max_temp_directory_size(limit as u64),
        );
    }
    let registry = Arc::new(
        InstrumentedObjectStoreRegistry::new().with_profile_mode(setup.object_store_profiling),
    );
    runtime = runtime.with_object_store_registry(Arc::clone(&registry) as _);

    let ctx = SessionContext::new_with_config_rt(config, runtime.build_arc()?).enable_url_table();
    ctx.refresh_catalogs().await?;
    ctx.register_catalog_list(Arc::new(DynamicObjectStoreCatalog::new(
        ctx.state().catalog_list().clone(),
        ctx.state_weak_ref(),
    )));
    let cache = ctx.task_ctx().runtime_env().cache_manager.clone();
    ctx.register_udtf("parquet_metadata", Arc::new(ParquetMetadataFunc {}));
    ctx.register_udtf(
        "metadata_cache",
        Arc::new(MetadataCacheFunc::new(Arc::clone(&cache))),
    );
    ctx.register_udtf(
        "statistics_cache",
        Arc::new(StatisticsCacheFunc::new(Arc::clone(&cache))),
    );
    ctx.register_udtf("list_files_cache", Arc::new(ListFilesCacheFunc::new(cache)));
    Ok((ctx, registry))
}

/// Whether `location` is in a store dfmv has to build (not a local path).
pub fn is_remote(location: &str) -> bool {
    match location.split_once("://") {
        Some((scheme, _)) => !scheme.eq_ignore_ascii_case("file"),
        None => false,
    }
}

/// Registers the object store for a location of the catalog (default
/// credentials from the environment, as for a URL in a query).
pub async fn register_store_for_location(ctx: &SessionContext, location: &str) -> Result<()> {
    if is_remote(location) && !location.starts_with("memory://") {
        register_store(ctx, location, &HashMap::new(), false).await?;
    }
    Ok(())
}

/// Why the catalog cannot be at `location`, when dfmv can tell before
/// opening it: a URL whose scheme no object store is registered for, or
/// a local path that is (or lies under) something other than a folder.
pub fn check_catalog_location(
    ctx: &SessionContext,
    location: &str,
) -> std::result::Result<(), String> {
    if is_remote(location) {
        let scheme = location.split_once("://").map_or("", |(s, _)| s);
        // The library makes an in-memory store for memory:// itself.
        let known = scheme.eq_ignore_ascii_case("memory")
            || ListingTableUrl::parse(location)
                .ok()
                .is_some_and(|url| ctx.runtime_env().object_store(url.object_store()).is_ok());
        if !known {
            return Err(format!(
                "catalog location \"{location}\" has an unknown scheme \"{scheme}\"; \
                 use a folder or a URL of s3://, gs://, gcs://, oss://, cos://, http(s):// or memory://"
            ));
        }
        return Ok(());
    }
    let path = match url::Url::parse(location) {
        Ok(url) if url.scheme().eq_ignore_ascii_case("file") => match url.to_file_path() {
            Ok(path) => path,
            Err(()) => {
                return Err(format!(
                    "catalog location \"{location}\" is not a local path"
                ));
            }
        },
        _ => std::path::PathBuf::from(location),
    };
    // The catalog folder, or the first of its parents that exists, must
    // be a folder (it is created on first use).
    if let Some(existing) = path.ancestors().find(|p| p.exists())
        && !existing.is_dir()
    {
        return Err(if existing == path {
            format!("catalog location \"{location}\" is not a folder")
        } else {
            format!(
                "catalog location \"{location}\" is not a folder: \"{}\" is a file",
                existing.display()
            )
        });
    }
    Ok(())
}

/// Registers the object store that `location` needs, built from the
/// `aws.*` / `gcp.*` options of the statement naming it (the rest from the
/// environment), with `datafusion-cli`'s builders. Local paths need none.
/// `resolve_region`: ask S3 for the bucket's region instead of trusting
/// the configured one.
pub async fn register_store(
    ctx: &SessionContext,
    location: &str,
    options: &HashMap<String, String>,
    resolve_region: bool,
) -> Result<()> {
    if !is_remote(location) {
        return Ok(());
    }
    let table_url = ListingTableUrl::parse(location)?;
    let scheme = table_url.scheme().to_owned();
    let url = table_url.as_ref();
    CliSessionContext::register_table_options_extension_from_scheme(ctx, &scheme);
    let mut table_options = ctx.state().default_table_options();
    let store_options: HashMap<String, String> = options
        .iter()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            k.starts_with("aws.") || k.starts_with("gcp.")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    table_options.alter_with_string_hash_map(&store_options)?;
    let aws = || {
        table_options
            .extensions
            .get::<AwsOptions>()
            .ok_or_else(|| exec_datafusion_err!("options incompatible with the '{scheme}' scheme"))
    };
    let store: Arc<dyn ObjectStore> = match scheme.as_str() {
        "s3" => Arc::new(
            get_s3_object_store_builder(url, aws()?, resolve_region)
                .await?
                .build()?,
        ),
        "oss" => Arc::new(get_oss_object_store_builder(url, aws()?)?.build()?),
        "cos" => Arc::new(get_cos_object_store_builder(url, aws()?)?.build()?),
        "gs" | "gcs" => {
            let Some(gcp) = table_options.extensions.get::<GcpOptions>() else {
                return exec_err!("options incompatible with the '{scheme}' scheme");
            };
            Arc::new(get_gcs_object_store_builder(url, gcp)?.build()?)
        }
        "http" | "https" => Arc::new(
            object_store::http::HttpBuilder::new()
                .with_client_options(object_store::ClientOptions::new().with_allow_http(true))
                .with_url(url.origin().ascii_serialization())
                .build()?,
        ),
        // Anything else is either registered already (memory://, stores a
        // rc file registered) or unknown, which the statement will report.
        _ => return Ok(()),
    };
    ctx.register_object_store(url, store);
    Ok(())
}

/// `OPTIONS (...)` of a statement as strings.
pub fn options_map(options: &[(String, Value)]) -> HashMap<String, String> {
    options
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), value)
        })
        .collect()
}

/// Registers the stores a statement writes to or reads from, as
/// `datafusion-cli` does before it runs `CREATE EXTERNAL TABLE` or `COPY`
/// (`resolve_region`: see [`register_store`]).
pub async fn prepare_stores(
    ctx: &SessionContext,
    statement: &DFStatement,
    resolve_region: bool,
) -> Result<()> {
    match statement {
        DFStatement::CreateExternalTable(create) => {
            let options = options_map(&create.options);
            for location in &create.locations {
                register_store(ctx, location, &options, resolve_region).await?;
            }
        }
        DFStatement::CopyTo(copy) => {
            register_store(
                ctx,
                &copy.target,
                &options_map(&copy.options),
                resolve_region,
            )
            .await?;
        }
        _ => {}
    }
    Ok(())
}

/// Whether `statement` failing with `error` is worth one more try with the
/// S3 bucket's region detected, as datafusion-cli does: a CREATE EXTERNAL
/// TABLE over an `s3://` location whose store answered with an error of
/// its own (a request to the wrong region is one).
pub fn retry_with_region(statement: &DFStatement, error: &datafusion_matview::Error) -> bool {
    let DFStatement::CreateExternalTable(create) = statement else {
        return false;
    };
    let s3 = |location: &String| {
        location
            .split_once("://")
            .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("s3"))
    };
    if !create.locations.iter().any(s3) {
        return false;
    }
    let store_error = match error {
        datafusion_matview::Error::ObjectStore(e) => Some(e),
        datafusion_matview::Error::DataFusion(datafusion::error::DataFusionError::ObjectStore(
            e,
        )) => Some(e.as_ref()),
        _ => None,
    };
    matches!(
        store_error,
        Some(object_store::Error::Generic { store, .. }) if store.eq_ignore_ascii_case("s3")
    )
}

/// The URL scheme of the store that holds what was piped into dfmv.
const STDIN_SCHEME: &str = "stdin";

/// For `CREATE EXTERNAL TABLE ... LOCATION '/dev/stdin'` (or `/dev/fd/0`,
/// `/proc/self/fd/0`): the same statement over a `stdin://` store holding
/// everything piped in, read once per process and registered here; the
/// object is named after the declared format, so a second stdin table in
/// another format is refused rather than read wrongly. `None` for every
/// other statement. The library does not remember such a table: its data
/// is gone when the process ends.
pub async fn stdin_table(
    ctx: &SessionContext,
    statement: &DFStatement,
) -> Result<Option<DFStatement>> {
    let DFStatement::CreateExternalTable(create) = statement else {
        return Ok(None);
    };
    if !create.locations.iter().any(|l| is_stdin_location(l)) {
        return Ok(None);
    }
    let object = match create.file_type.to_ascii_lowercase().as_str() {
        "csv" => "stdin.csv",
        "json" => "stdin.json",
        "parquet" => "stdin.parquet",
        _ => "stdin",
    };
    let url = url::Url::parse(&format!("{STDIN_SCHEME}:///{object}"))
        .map_err(|e| exec_datafusion_err!("{e}"))?;
    let path = object_store::path::Path::from(object);
    match ctx
        .runtime_env()
        .object_store(ListingTableUrl::parse(url.as_str())?.object_store())
    {
        Ok(store) => {
            if store.head(&path).await.is_err() {
                let read_as = store
                    .list(None)
                    .next()
                    .await
                    .and_then(|meta| meta.ok())
                    .map(|meta| format!(" as {}", meta.location))
                    .unwrap_or_default();
                return exec_err!(
                    "standard input was read{read_as} by an earlier statement and can be \
                     read only once; tables over /dev/stdin in one session must all be \
                     STORED AS the same format"
                );
            }
        }
        Err(_) => {
            if ctx
                .state()
                .config()
                .get_extension::<StdinCarriesCommands>()
                .is_some()
            {
                return exec_err!(
                    "standard input carries this session's SQL, so it cannot also carry \
                     table data; give the SQL with -c or -f, e.g. \
                     `cat data.csv | dfmv -f query.sql`"
                );
            }
            if std::io::stdin().is_terminal() {
                return exec_err!(
                    "standard input is a terminal, not piped data; pipe the data in, \
                     e.g. `cat data.csv | dfmv -f query.sql`"
                );
            }
            let mut data = vec![];
            std::io::stdin()
                .lock()
                .read_to_end(&mut data)
                .map_err(|e| exec_datafusion_err!("cannot read standard input: {e}"))?;
            let store = object_store::memory::InMemory::new();
            store.put(&path, data.into()).await?;
            ctx.register_object_store(&url, Arc::new(store));
        }
    }
    let mut create = create.clone();
    for location in &mut create.locations {
        if is_stdin_location(location) {
            *location = url.to_string();
        }
    }
    Ok(Some(DFStatement::CreateExternalTable(create)))
}

/// The library builds a remembered table where a statement first names
/// it; one in a remote store needs that store registered, as dfmv does for
/// a `CREATE EXTERNAL TABLE` it runs. Registers the stores of the
/// remembered remote tables (no request is made); returns a warning for
/// each that could not be.
pub async fn register_remembered_stores(session: &MatviewSession) -> Vec<String> {
    let mut warnings = vec![];
    let ctx = session.context();
    // Parsed only for tables that may be remote: a table kept with its
    // resolved locations, all local, needs no store (and opening a catalog
    // of many local tables then parses nothing).
    let remote = session.catalog().relations().into_iter().filter(|r| {
        r.kind == RelationKind::ExternalTable
            && r.resolved
                .as_ref()
                .is_none_or(|t| t.locations.iter().any(|l| is_remote(&l.url)))
    });
    let mut dialect = None;
    for relation in remote {
        let registered = async {
            if dialect.is_none() {
                let name = ctx.state().config().options().sql_parser.dialect;
                dialect = Some(
                    dialect_from_str(name)
                        .ok_or_else(|| exec_datafusion_err!("unsupported SQL dialect {name}"))?,
                );
            }
            let dialect = dialect.as_ref().expect("set above");
            let statements = DFParser::parse_sql_with_dialect(&relation.sql, dialect.as_ref())?;
            match statements.front() {
                Some(statement @ DFStatement::CreateExternalTable(create))
                    if create.locations.iter().any(|l| is_remote(l)) =>
                {
                    prepare_stores(ctx, statement, false).await
                }
                _ => Ok(()),
            }
        };
        if let Err(e) = registered.await {
            warnings.push(format!(
                "cannot register the store of table {}: {e}",
                session.display(&relation.name)
            ));
        }
    }
    warnings
}

/// The session's default catalog and schema, and its SQL dialect and
/// parser recursion limit: the library's, so names and statements mean in
/// dfmv what they mean in the session.
pub use datafusion_matview::sql::{defaults, parser_settings};

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::error::DataFusionError;
    use datafusion_matview::Error;

    fn statement(sql: &str) -> DFStatement {
        DFParser::parse_sql(sql).unwrap().pop_front().unwrap()
    }

    fn s3_error(store: &'static str) -> object_store::Error {
        object_store::Error::Generic {
            store,
            source: "PermanentRedirect: the bucket is in eu-central-1".into(),
        }
    }

    #[test]
    fn an_s3_error_of_create_external_table_is_retried_with_the_region_detected() {
        let create = statement("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://b/t/'");
        assert!(retry_with_region(
            &create,
            &Error::ObjectStore(s3_error("S3"))
        ));
        assert!(retry_with_region(
            &create,
            &Error::DataFusion(DataFusionError::ObjectStore(Box::new(s3_error("S3"))))
        ));
        // Another store's error, another kind of error, another statement,
        // another location: no retry.
        assert!(!retry_with_region(
            &create,
            &Error::ObjectStore(s3_error("GCS"))
        ));
        assert!(!retry_with_region(
            &create,
            &Error::DataFusion(DataFusionError::Plan("no such column".into()))
        ));
        let copy = statement("COPY (SELECT 1) TO 's3://b/x.parquet'");
        assert!(!retry_with_region(
            &copy,
            &Error::ObjectStore(s3_error("S3"))
        ));
        let local = statement("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/data/t/'");
        assert!(!retry_with_region(
            &local,
            &Error::ObjectStore(s3_error("S3"))
        ));
    }
}
