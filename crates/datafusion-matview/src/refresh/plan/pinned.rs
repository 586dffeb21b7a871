//! A Hive-partitioned listing table read as only some of its files.
//!
//! DataFusion takes a partitioned table's partition values from the paths
//! it lists under the table's location, so its files cannot be named one by
//! one the way an unpartitioned table's can (a file's own URL has no
//! `year=2024/` above it). Instead the same table is read through a store
//! that lists only the chosen files: [`FilesOnly`] wraps the table's store,
//! registered under a URL of its own for as long as the table that reads it
//! lives. Its paths start with a fresh id (`dfmv-pinned://<id>/<id>/<the
//! table's path>`): DataFusion caches listings by path alone, so two such
//! tables over one location must not share a path. Everything else about
//! the table (format, options, partition columns, pruning) is DataFusion's
//! own.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::Statistics;
use datafusion::datasource::TableProvider;
use datafusion::datasource::listing::{ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use url::Url;

use crate::error::Result;

/// The scheme of the stores [`FilesOnly`] registers.
const SCHEME: &str = "dfmv-pinned";

/// A read-only view of a store that lists only `files` (paths of
/// `inner`), and the directories above them, each path under `id`.
#[derive(Debug)]
struct FilesOnly {
    inner: Arc<dyn ObjectStore>,
    files: Arc<BTreeSet<Path>>,
    /// Every directory above a file of `files`.
    dirs: BTreeSet<Path>,
    id: Path,
}

impl fmt::Display for FilesOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FilesOnly({} files of {})", self.files.len(), self.inner)
    }
}

fn read_only() -> object_store::Error {
    object_store::Error::NotSupported {
        source: "a table held to its fingerprinted files is read-only".into(),
    }
}

impl FilesOnly {
    /// `path` of this store as a path of `inner`.
    fn inner_path(&self, path: &Path) -> object_store::Result<Path> {
        match path.prefix_match(&self.id) {
            Some(rest) => Ok(Path::from_iter(rest)),
            None => Err(object_store::Error::NotFound {
                path: path.to_string(),
                source: "not a path of a table held to its files".into(),
            }),
        }
    }

    /// `path` of `inner` as a path of this store.
    fn outer_path(id: &Path, path: &Path) -> Path {
        Path::from_iter(id.parts().chain(path.parts()))
    }

    fn keep(&self, listing: Listing) -> Listing {
        let (files, id) = (Arc::clone(&self.files), self.id.clone());
        listing
            .try_filter(move |meta| futures::future::ready(files.contains(&meta.location)))
            .map_ok(move |meta| ObjectMeta {
                location: Self::outer_path(&id, &meta.location),
                ..meta
            })
            .boxed()
    }
}

type Listing = BoxStream<'static, object_store::Result<ObjectMeta>>;

#[async_trait]
impl ObjectStore for FilesOnly {
    async fn put_opts(
        &self,
        _location: &Path,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(read_only())
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(read_only())
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let mut got = self
            .inner
            .get_opts(&self.inner_path(location)?, options)
            .await?;
        got.meta.location = location.clone();
        Ok(got)
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner
            .get_ranges(&self.inner_path(location)?, ranges)
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        locations.map(|_| Err(read_only())).boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> Listing {
        match prefix.map(|p| self.inner_path(p)).transpose() {
            Ok(prefix) => self.keep(self.inner.list(prefix.as_ref())),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        }
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> Listing {
        let paths = prefix
            .map(|p| self.inner_path(p))
            .transpose()
            .and_then(|prefix| Ok((prefix, self.inner_path(offset)?)));
        match paths {
            Ok((prefix, offset)) => {
                self.keep(self.inner.list_with_offset(prefix.as_ref(), &offset))
            }
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let prefix = prefix.map(|p| self.inner_path(p)).transpose()?;
        let mut listed = self.inner.list_with_delimiter(prefix.as_ref()).await?;
        listed
            .objects
            .retain(|meta| self.files.contains(&meta.location));
        listed.common_prefixes.retain(|dir| self.dirs.contains(dir));
        for meta in &mut listed.objects {
            meta.location = Self::outer_path(&self.id, &meta.location);
        }
        for dir in &mut listed.common_prefixes {
            *dir = Self::outer_path(&self.id, dir);
        }
        Ok(listed)
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(read_only())
    }

    async fn rename_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: RenameOptions,
    ) -> object_store::Result<()> {
        Err(read_only())
    }
}

/// Unregisters a [`FilesOnly`] store when the table reading it is gone.
#[derive(Debug)]
struct Registration {
    runtime: Arc<RuntimeEnv>,
    url: Url,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = self.runtime.deregister_object_store(&self.url);
    }
}

/// `listing` (partitioned) read as only `paths` (URLs of its files), in
/// `runtime`.
pub(super) fn partitioned_files(
    listing: &ListingTable,
    runtime: &Arc<RuntimeEnv>,
    paths: &[String],
) -> Result<Arc<dyn TableProvider>> {
    let mut table_paths = vec![];
    let mut files = BTreeSet::new();
    let mut store = None;
    let host = crate::spec::new_id();
    let url = Url::parse(&format!("{SCHEME}://{host}/")).expect("a valid URL");
    for table_path in listing.table_paths() {
        let inner = runtime.object_store(table_path.object_store())?;
        if let Some((first, _)) = &store
            && table_path.object_store() != *first
        {
            return Err(datafusion::error::DataFusionError::NotImplemented(
                "a partitioned table over several stores".into(),
            )
            .into());
        }
        store.get_or_insert((table_path.object_store(), inner));
        let prefix = table_path.prefix().as_ref();
        let dir = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        table_paths.push(ListingTableUrl::parse(format!("{url}{host}/{dir}"))?);
    }
    let Some((store_url, inner)) = store else {
        return Err(datafusion::error::DataFusionError::Plan(
            "a listing table without a location".into(),
        )
        .into());
    };
    for path in paths {
        let file = ListingTableUrl::parse(path)?;
        if file.object_store() != store_url {
            return Err(datafusion::error::DataFusionError::Plan(format!(
                "{path} is not in the table's store"
            ))
            .into());
        }
        files.insert(file.prefix().clone());
    }
    runtime.register_object_store(
        &url,
        Arc::new(FilesOnly {
            inner,
            dirs: files
                .iter()
                .flat_map(|file| {
                    let parts: Vec<_> = file.parts().collect();
                    (1..parts.len()).map(move |n| Path::from_iter(parts[..n].iter().cloned()))
                })
                .collect(),
            files: Arc::new(files),
            id: Path::from(host),
        }),
    );
    let registration = Registration {
        runtime: Arc::clone(runtime),
        url,
    };
    let partition_columns: BTreeSet<&str> = listing
        .options()
        .table_partition_cols
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    let table_schema = TableProvider::schema(listing);
    let file_schema = Schema::new_with_metadata(
        table_schema
            .fields()
            .iter()
            .filter(|f| !partition_columns.contains(f.name().as_str()))
            .cloned()
            .collect::<Vec<_>>(),
        table_schema.metadata().clone(),
    );
    let config = ListingTableConfig::new_with_multi_paths(table_paths)
        .with_listing_options(listing.options().clone())
        .with_schema(Arc::new(file_schema));
    Ok(Arc::new(Held {
        table: ListingTable::try_new(config)?,
        _registration: registration,
    }))
}

/// A listing table and the store registration it reads through.
#[derive(Debug)]
struct Held {
    table: ListingTable,
    _registration: Registration,
}

#[async_trait]
impl TableProvider for Held {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        self.table.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        self.table.scan(state, projection, filters, limit).await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        self.table.supports_filters_pushdown(filters)
    }

    fn statistics(&self) -> Option<Statistics> {
        self.table.statistics()
    }
}
