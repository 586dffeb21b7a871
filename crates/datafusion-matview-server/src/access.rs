//! What the server's clients may read and write.
//!
//! A statement sent to `dfmv serve` runs with the server's rights on the
//! machine, so by default it may touch only the catalog's own files. Every
//! object store the server's sessions use is wrapped in a [`GuardedStore`]
//! that refuses any path outside:
//!
//! - the catalog's root;
//! - the folders and store URLs the server was started with
//!   ([`ServerOptions::data_dirs`](super::ServerOptions::data_dirs),
//!   [`ServerOptions::allow_stores`](super::ServerOptions::allow_stores));
//! - the locations of the external tables the catalog remembers (whoever
//!   created them: a client's own `CREATE EXTERNAL TABLE` had to pass this
//!   check first).
//!
//! The check is on the store, not on the SQL, so it holds for every way a
//! statement can name a file: `CREATE EXTERNAL TABLE`, `COPY`, a path in
//! `FROM`, `INSERT INTO` a table, a table function. A refusal is
//! [`Error::PermissionDenied`], naming the path and the flag that would
//! allow it.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::object_store::ObjectStoreRegistry;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use url::Url;

use datafusion_matview::catalog::Catalog;
use datafusion_matview::error::{Error, Result};
use datafusion_matview::spec::RelationKind;

/// The key of the store a URL names: `scheme://authority`, as DataFusion's
/// registry keys stores (`file://` for local files).
pub(crate) fn store_key(url: &Url) -> String {
    format!(
        "{}://{}",
        url.scheme(),
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    )
}

/// One place clients may use: a store and a path prefix in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    store: String,
    prefix: Path,
}

impl Place {
    fn of_url(url: &Url) -> Result<Self> {
        Ok(Self {
            store: store_key(url),
            prefix: Path::from_url_path(url.path()).map_err(|e| Error::InvalidLocation {
                location: url.to_string(),
                reason: e.to_string(),
            })?,
        })
    }

    fn contains(&self, store: &str, path: &Path) -> bool {
        self.store == store && path.prefix_matches(&self.prefix)
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.store == "file://" {
            write!(f, "/{}", self.prefix)
        } else {
            write!(f, "{}/{}", self.store, self.prefix)
        }
    }
}

/// The places a server's clients may use.
#[derive(Debug)]
pub(crate) struct Access {
    /// The catalog's root, the data folders and the allowed stores.
    given: Vec<Place>,
    catalog: Arc<Catalog>,
    /// The locations of the remembered external tables, by the catalog
    /// version they were read at.
    remembered: Mutex<(u64, Vec<Place>)>,
}

impl Access {
    /// The catalog's root, `data_dirs` (local folders) and `stores` (URLs,
    /// with or without a path).
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        data_dirs: &[std::path::PathBuf],
        stores: &[String],
    ) -> Result<Self> {
        let invalid = |what: &str, reason: String| Error::InvalidLocation {
            location: what.to_owned(),
            reason,
        };
        let mut given = vec![Place {
            store: store_key(catalog.store_url().as_ref()),
            prefix: catalog.path(""),
        }];
        for dir in data_dirs {
            let shown = dir.display().to_string();
            let absolute = std::fs::canonicalize(dir)
                .map_err(|e| invalid(&shown, format!("--data-dir: {e}")))?;
            if !absolute.is_dir() {
                return Err(invalid(&shown, "--data-dir: not a folder".into()));
            }
            let url = Url::from_directory_path(&absolute)
                .map_err(|()| invalid(&shown, "--data-dir: not an absolute path".into()))?;
            given.push(Place::of_url(&url)?);
        }
        for store in stores {
            let url =
                Url::parse(store).map_err(|e| invalid(store, format!("--allow-store: {e}")))?;
            if url.scheme() == "file" {
                return Err(invalid(
                    store,
                    "--allow-store names other stores; give local folders with --data-dir".into(),
                ));
            }
            given.push(Place::of_url(&url)?);
        }
        Ok(Self {
            given,
            catalog,
            remembered: Mutex::new((u64::MAX, vec![])),
        })
    }

    /// The places given (the catalog's root first), as shown to users.
    pub(crate) fn places(&self) -> Vec<String> {
        self.given.iter().map(ToString::to_string).collect()
    }

    /// Whether clients may use `path` in the store keyed `store`.
    pub(crate) fn allows(&self, store: &str, path: &Path) -> bool {
        if self.given.iter().any(|p| p.contains(store, path)) {
            return true;
        }
        let version = self.catalog.version();
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if remembered.0 != version {
            *remembered = (version, self.remembered_places());
        }
        remembered.1.iter().any(|p| p.contains(store, path))
    }

    /// [`Error::PermissionDenied`] unless clients may use `url`.
    pub(crate) fn check_url(&self, url: &ListingTableUrl) -> Result<()> {
        let store = store_key(url.as_ref());
        self.check(&store, url.prefix()).map_err(|e| {
            let e = Error::ObjectStore(e);
            Refusal::find(&e).unwrap_or(e)
        })
    }

    /// Whether `url` is in the store holding the catalog.
    pub(crate) fn is_catalog_store(&self, url: &Url) -> bool {
        store_key(url) == self.given[0].store
    }

    /// The places the remembered external tables read.
    fn remembered_places(&self) -> Vec<Place> {
        let mut places = vec![];
        for relation in self.catalog.relations() {
            if relation.kind != RelationKind::ExternalTable {
                continue;
            }
            let Ok(statements) = datafusion_matview::sql::parse_sql(&relation.sql, "generic", 50)
            else {
                continue;
            };
            for statement in statements {
                let datafusion_matview::sql::Statement::DataFusion(statement) = statement else {
                    continue;
                };
                let datafusion::sql::parser::Statement::CreateExternalTable(create) = *statement
                else {
                    continue;
                };
                for location in &create.locations {
                    if let Ok(url) = ListingTableUrl::parse(location) {
                        places.push(Place {
                            store: store_key(url.as_ref()),
                            prefix: url.prefix().clone(),
                        });
                    }
                }
            }
        }
        places
    }

    /// The refusal of `path` in the store keyed `store`.
    fn refusal(&self, store: &str, path: &Path) -> object_store::Error {
        let place = Place {
            store: store.to_owned(),
            prefix: path.clone(),
        };
        object_store::Error::PermissionDenied {
            path: path.to_string(),
            source: Box::new(Refusal {
                what: place.to_string(),
                allowed: self
                    .given
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                local: store == "file://",
            }),
        }
    }

    fn check(&self, store: &str, path: &Path) -> object_store::Result<()> {
        if self.allows(store, path) {
            Ok(())
        } else {
            Err(self.refusal(store, path))
        }
    }
}

/// Why a guarded store refused a path; becomes [`Error::PermissionDenied`].
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    what: String,
    allowed: String,
    local: bool,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error())
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    pub(crate) fn error(&self) -> Error {
        let flag = if self.local {
            "--data-dir <folder>"
        } else {
            "--allow-store <url>"
        };
        Error::PermissionDenied {
            what: format!("to use \"{}\"", self.what),
            hint: format!(
                "This server's clients may use {} and the locations of the tables the catalog \
                 remembers. Start dfmv serve with {flag} to allow more.",
                self.allowed
            ),
        }
    }

    /// The refusal in `error`'s chain of causes, if there is one.
    pub(crate) fn find(error: &Error) -> Option<Error> {
        error
            .causes()
            .into_iter()
            .find_map(|e| e.downcast_ref::<Refusal>())
            .map(Refusal::error)
    }
}

/// An [`ObjectStoreRegistry`] whose stores are [`GuardedStore`]s. Stores
/// registered through it go to the registry it wraps, except a new store
/// for the catalog's own: a client's options never replace that.
#[derive(Debug)]
pub(crate) struct GuardedRegistry {
    inner: Arc<dyn ObjectStoreRegistry>,
    access: Arc<Access>,
}

impl GuardedRegistry {
    pub(crate) fn new(inner: Arc<dyn ObjectStoreRegistry>, access: Arc<Access>) -> Self {
        Self { inner, access }
    }
}

impl ObjectStoreRegistry for GuardedRegistry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        if self.access.is_catalog_store(url) {
            return self.inner.get_store(url).ok();
        }
        self.inner.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        if self.access.is_catalog_store(url) {
            return Err(datafusion::error::DataFusionError::Plan(
                "the store holding the catalog cannot be removed".into(),
            ));
        }
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        let inner = self.inner.get_store(url)?;
        Ok(Arc::new(GuardedStore {
            inner,
            store: store_key(url),
            access: Arc::clone(&self.access),
        }))
    }
}

/// A store that refuses every path its [`Access`] does not allow.
#[derive(Debug)]
pub(crate) struct GuardedStore {
    inner: Arc<dyn ObjectStore>,
    store: String,
    access: Arc<Access>,
}

impl fmt::Display for GuardedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guarded({})", self.inner)
    }
}

impl GuardedStore {
    fn check(&self, path: &Path) -> object_store::Result<()> {
        self.access.check(&self.store, path)
    }

    fn check_prefix(&self, prefix: Option<&Path>) -> object_store::Result<()> {
        self.check(&prefix.cloned().unwrap_or_default())
    }

    /// `list()` when `prefix` is allowed; else one refusal.
    fn listing(
        &self,
        prefix: Option<&Path>,
        list: impl FnOnce() -> BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.check_prefix(prefix) {
            Ok(()) => list(),
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    }
}

#[async_trait]
impl ObjectStore for GuardedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check(location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check(location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.check(location)?;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let access = Arc::clone(&self.access);
        let store = self.store.clone();
        let checked = locations
            .map(move |location| {
                let location = location?;
                access.check(&store, &location)?;
                Ok(location)
            })
            .boxed();
        self.inner.delete_stream(checked)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.listing(prefix, || self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.listing(prefix, || self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.check_prefix(prefix)?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.check(from)?;
        self.check(to)?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.check(from)?;
        self.check(to)?;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    async fn access(dir: &std::path::Path) -> (Arc<Access>, Arc<Catalog>) {
        let session = datafusion_matview::MatviewSession::open(
            datafusion::prelude::SessionContext::new(),
            dir.join("catalog").to_str().unwrap(),
        )
        .await
        .unwrap();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let catalog = Arc::clone(session.catalog());
        let access = Access::new(
            Arc::clone(&catalog),
            &[dir.join("data")],
            &["s3://open-bucket/shared".to_owned()],
        )
        .unwrap();
        (Arc::new(access), catalog)
    }

    /// The object path of a local path, which need not exist.
    fn local(path: &std::path::Path) -> Path {
        Path::from_url_path(Url::from_file_path(path).unwrap().path()).unwrap()
    }

    #[tokio::test]
    async fn only_the_catalog_the_data_folders_and_the_allowed_stores_are_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let dir_path = std::fs::canonicalize(dir.path()).unwrap();
        let (access, _) = access(&dir_path).await;
        assert!(access.allows("file://", &local(&dir_path.join("catalog/_matview/x"))));
        assert!(access.allows("file://", &local(&dir_path.join("data/a/b.csv"))));
        assert!(!access.allows("file://", &local(&dir_path.join("database/b.csv"))));
        assert!(!access.allows("file://", &Path::from("etc/passwd")));
        assert!(access.allows("s3://open-bucket", &Path::from("shared/x.parquet")));
        assert!(!access.allows("s3://open-bucket", &Path::from("private/x.parquet")));
        assert!(!access.allows("s3://other", &Path::from("shared/x.parquet")));
        assert!(!access.allows("https://example.com", &Path::from("x.csv")));
    }

    #[tokio::test]
    async fn a_guarded_store_refuses_reads_writes_and_listings_outside() {
        let dir = tempfile::tempdir().unwrap();
        let dir_path = std::fs::canonicalize(dir.path()).unwrap();
        let (access, _) = access(&dir_path).await;
        std::fs::create_dir_all(dir_path.join("private")).unwrap();
        std::fs::write(dir_path.join("private/secret.txt"), "s").unwrap();
        let store = GuardedStore {
            inner: Arc::new(object_store::local::LocalFileSystem::new()),
            store: "file://".into(),
            access,
        };
        let secret = local(&dir_path.join("private/secret.txt"));
        let refused = store.get(&secret).await.unwrap_err();
        assert!(
            matches!(refused, object_store::Error::PermissionDenied { .. }),
            "{refused}"
        );
        let error = Refusal::find(&Error::ObjectStore(refused)).unwrap();
        assert!(error.to_string().contains("--data-dir <folder>"), "{error}");
        assert!(
            store
                .put(&local(&dir_path.join("private/new.txt")), "x".into())
                .await
                .is_err()
        );
        assert!(!dir_path.join("private/new.txt").exists());
        let listed: Vec<_> = store
            .list(Some(&local(&dir_path.join("private"))))
            .collect()
            .await;
        assert!(listed.iter().all(Result::is_err), "{listed:?}");
        let allowed = local(&dir_path.join("data/ok.txt"));
        store.put(&allowed, "ok".into()).await.unwrap();
        assert_eq!(
            store
                .get(&allowed)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .as_ref(),
            b"ok"
        );
        assert!(store.copy(&secret, &allowed).await.is_err());
    }
}
