//! The DataFusion session dfmv runs in, set up as `datafusion-cli` sets up
//! its own, and the object stores that remote locations need.
//!
//! Follows datafusion-cli 55.2.0: `src/main.rs` (session, runtime and memory
//! pool from the flags) and `src/exec.rs`
//! (`register_object_store_and_config_extensions`: stores for the
//! locations of CREATE EXTERNAL TABLE and COPY, built with the public
//! `object_storage` builders). Not carried over (upstream keeps them
//! crate-private): the retry that auto-detects an S3 bucket's region after
//! a wrong-region error, and `stdin://` locations.

use std::collections::HashMap;
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
};
use datafusion_cli::pool_type::PoolType;
use datafusion_matview::spec::RelationEntry;
use datafusion_matview::{MatviewSession, RestoreFailure};
use object_store::ObjectStore;

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
        register_store(ctx, location, &HashMap::new()).await?;
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
pub async fn register_store(
    ctx: &SessionContext,
    location: &str,
    options: &HashMap<String, String>,
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
            get_s3_object_store_builder(url, aws()?, false)
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
/// `datafusion-cli` does before it runs `CREATE EXTERNAL TABLE` or `COPY`.
pub async fn prepare_stores(ctx: &SessionContext, statement: &DFStatement) -> Result<()> {
    match statement {
        DFStatement::CreateExternalTable(create) => {
            let options = options_map(&create.options);
            for location in &create.locations {
                register_store(ctx, location, &options).await?;
            }
        }
        DFStatement::CopyTo(copy) => {
            register_store(ctx, &copy.target, &options_map(&copy.options)).await?;
        }
        _ => {}
    }
    Ok(())
}

/// The library restores remembered tables when the catalog opens, before
/// dfmv could register the object stores of remote ones; those (and the
/// views over them) are restored here. Returns the warnings that remain.
pub async fn restore_remote_relations(session: &MatviewSession) -> Vec<String> {
    let mut remaining = vec![];
    for failure in session.restore_failures() {
        match restore(session, &failure.relation).await {
            Ok(true) => {}
            Ok(false) => remaining.push(failure.to_string()),
            // Its store is registered now, so this is the real reason.
            Err(e) => remaining.push(
                RestoreFailure {
                    error: e.to_string(),
                    ..failure.clone()
                }
                .to_string(),
            ),
        }
    }
    remaining
}

/// Re-creates one remembered relation after registering its stores;
/// `Ok(false)` when it has nothing remote to register.
async fn restore(session: &MatviewSession, relation: &RelationEntry) -> Result<bool> {
    let ctx = session.context();
    let state = ctx.state();
    let dialect_name = state.config().options().sql_parser.dialect;
    let dialect = dialect_from_str(dialect_name)
        .ok_or_else(|| exec_datafusion_err!("unsupported SQL dialect {dialect_name}"))?;
    let statements = DFParser::parse_sql_with_dialect(&relation.sql, dialect.as_ref())?;
    match statements.front() {
        Some(statement @ DFStatement::CreateExternalTable(create))
            if create.locations.iter().any(|l| is_remote(l)) =>
        {
            prepare_stores(ctx, statement).await?;
        }
        _ => return Ok(false),
    }
    session.restore_relation(relation).await?;
    Ok(true)
}

/// The session's default catalog and schema, and its SQL dialect and
/// parser recursion limit: the library's, so names and statements mean in
/// dfmv what they mean in the session.
pub use datafusion_matview::sql::{defaults, parser_settings};
