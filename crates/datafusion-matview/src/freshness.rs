//! Freshness: whether a view's sources changed since its last refresh,
//! known without reading data.
//!
//! At every refresh the fingerprint of each source is recorded with the
//! snapshot: a file-backed table's files (path, size, e-tag or
//! last-modified) from a listing, and a digest of its definition; a
//! materialized view's definition id and snapshot id; a plain view's plan
//! digest and its sources, recursively. A redefinition anywhere on the
//! path is therefore a change, even when no file changed. Sources that cannot be fingerprinted
//! (in-memory tables, custom providers) make freshness `unknown`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use datafusion::catalog::CatalogProviderList;
use datafusion::common::config::{ConfigField, Visit};
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::SessionState;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use object_store::{ObjectMeta, ObjectStoreExt};
use sha2::{Digest, Sha256};

#[cfg(unix)]
mod local;
pub(crate) use local::file_exists;

use crate::catalog::Catalog;
use crate::error::Result;
use crate::resolve::{registered, sources_of};
use crate::spec::{
    FileFingerprint, Fingerprint, QualifiedName, SourceFingerprint, ViewEntry, ViewVersion,
};

/// How deep plain views may nest before fingerprinting gives up.
const MAX_DEPTH: usize = 32;

/// Whether a view is up to date with its sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// No source changed since the last refresh.
    Fresh,
    /// These sources changed (empty: never refreshed).
    Stale(Vec<QualifiedName>),
    /// These sources cannot be fingerprinted.
    Unknown(Vec<QualifiedName>),
}

impl Freshness {
    /// `fresh`, `stale` or `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale(_) => "stale",
            Freshness::Unknown(_) => "unknown",
        }
    }

    /// The sources it names.
    pub fn sources(&self) -> &[QualifiedName] {
        match self {
            Freshness::Fresh => &[],
            Freshness::Stale(names) | Freshness::Unknown(names) => names,
        }
    }
}

/// Computes fingerprints against one session state and catalog version.
pub(crate) struct Fingerprinter<'a> {
    catalogs: Arc<dyn CatalogProviderList>,
    state: SessionState,
    catalog: &'a Catalog,
    /// Defaults each plain view was created under (else the session's).
    view_defaults: HashMap<QualifiedName, (String, String)>,
    /// Materialized views to fingerprint at a given state rather than
    /// their latest (see [`Self::with_pins`]).
    pins: HashMap<QualifiedName, Arc<ViewVersion>>,
    /// The version of each materialized view fingerprinted.
    read: Mutex<BTreeMap<QualifiedName, u64>>,
    /// Each file-backed table's fingerprint, listed once: every view
    /// checked by one fingerprinter (a statement, or one pass of the
    /// scheduler) is checked against the same listing of a table.
    listed: Mutex<HashMap<QualifiedName, Fingerprint>>,
}

impl<'a> Fingerprinter<'a> {
    pub(crate) fn new(
        state: SessionState,
        catalog: &'a Catalog,
        view_defaults: HashMap<QualifiedName, (String, String)>,
    ) -> Self {
        // Sources are looked up, and tables found by path built, from the
        // files there now.
        crate::refresh::plan::forget_listings(&state);
        Self {
            catalogs: Arc::clone(state.catalog_list()),
            state,
            catalog,
            view_defaults,
            pins: HashMap::new(),
            read: Mutex::new(BTreeMap::new()),
            listed: Mutex::new(HashMap::new()),
        }
    }

    /// The session state it fingerprints with.
    pub(crate) fn state(&self) -> &SessionState {
        &self.state
    }

    /// Fingerprints each view of `pins` at the state given there (what a
    /// refresh that reads it pinned reads) instead of its latest.
    pub(crate) fn with_pins(mut self, pins: HashMap<QualifiedName, Arc<ViewVersion>>) -> Self {
        self.pins = pins;
        self
    }

    /// The materialized views fingerprinted so far (also under plain
    /// views), each with the version of its log that was read.
    pub(crate) fn versions_read(&self) -> BTreeMap<QualifiedName, u64> {
        self.read.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The fingerprints of `sources`, now.
    pub(crate) async fn sources(
        &self,
        sources: &[QualifiedName],
    ) -> Result<Vec<SourceFingerprint>> {
        let mut out = Vec::with_capacity(sources.len());
        for name in sources {
            out.push(SourceFingerprint {
                name: name.clone(),
                fingerprint: self.fingerprint(name, 0).await?,
            });
        }
        Ok(out)
    }

    /// The view's freshness: its recorded fingerprints against today's.
    pub(crate) async fn freshness(&self, view: &ViewEntry) -> Result<Freshness> {
        let Some(snapshot) = &view.snapshot else {
            return Ok(Freshness::Stale(vec![]));
        };
        if view.definition.not_reproducible.is_some() {
            return Ok(Freshness::Unknown(vec![]));
        }
        let now = self.sources(&view.definition.sources).await?;
        Ok(compare(
            &snapshot.sources,
            &now,
            !view.definition.sources.is_empty(),
        ))
    }

    fn fingerprint(
        &'a self,
        name: &'a QualifiedName,
        depth: usize,
    ) -> BoxFuture<'a, Result<Fingerprint>> {
        Box::pin(async move {
            let state = match self.pins.get(name) {
                Some(state) => Some(Arc::clone(state)),
                None => self.catalog.view(name).await?,
            };
            if let Some(state) = state {
                self.read
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.clone(), state.version);
                let view = &state.view;
                return Ok(Fingerprint::Snapshot {
                    definition: view.id.clone(),
                    id: view.snapshot.as_ref().map(|s| s.id.clone()),
                    files: view
                        .snapshot
                        .iter()
                        .flat_map(|s| &s.files)
                        .map(|f| FileFingerprint {
                            path: f.path.clone(),
                            size: f.size,
                            version: String::new(),
                        })
                        .collect(),
                });
            }
            let Some(table) = registered(&self.catalogs, name).await? else {
                return Ok(Fingerprint::Unknown);
            };
            if let Some(listing) =
                (table.as_ref() as &dyn std::any::Any).downcast_ref::<ListingTable>()
            {
                let listed = |m: &Mutex<HashMap<QualifiedName, Fingerprint>>| {
                    m.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(name)
                        .cloned()
                };
                if let Some(fingerprint) = listed(&self.listed) {
                    return Ok(fingerprint);
                }
                let fingerprint = Fingerprint::Files {
                    files: self.list(listing).await?,
                    definition: listing_definition(listing),
                };
                self.listed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.clone(), fingerprint.clone());
                return Ok(fingerprint);
            }
            if table.table_type() == TableType::View
                && depth < MAX_DEPTH
                && let Some(plan) = table.get_logical_plan()
            {
                let (catalog, schema) =
                    self.view_defaults.get(name).cloned().unwrap_or_else(|| {
                        let options = self.state.config().options();
                        (
                            options.catalog.default_catalog.clone(),
                            options.catalog.default_schema.clone(),
                        )
                    });
                let mut sources = vec![];
                for source in sources_of(&self.catalogs, &plan, &catalog, &schema).await? {
                    let fingerprint = self.fingerprint(&source, depth + 1).await?;
                    sources.push(SourceFingerprint {
                        name: source,
                        fingerprint,
                    });
                }
                return Ok(Fingerprint::View {
                    sources,
                    definition: digest(&format!(
                        "{catalog}\n{schema}\n{}",
                        plan.display_indent_schema()
                    )),
                });
            }
            Ok(Fingerprint::Unknown)
        })
    }

    /// A file-backed table's files, listed now (not from DataFusion's
    /// listing cache).
    async fn list(&self, table: &ListingTable) -> Result<Vec<FileFingerprint>> {
        let extension = &table.options().file_extension;
        let ignore_subdirectory = self
            .state
            .config()
            .options()
            .execution
            .listing_table_ignore_subdirectory;
        let mut files = vec![];
        for url in table.table_paths() {
            let store = self.state.runtime_env().object_store(url)?;
            let keep = |meta: &ObjectMeta| {
                meta.location.as_ref().ends_with(extension.as_str())
                    && url.contains(&meta.location, ignore_subdirectory)
            };
            let local = url.scheme() == "file";
            #[cfg(unix)]
            let in_one_look = match local && url.is_collection() {
                true => local::list_dir(store.as_ref(), url.prefix()).await,
                false => None,
            };
            #[cfg(not(unix))]
            let in_one_look: Option<Vec<(ObjectMeta, String)>> = None;
            let listed: Vec<(ObjectMeta, String)> = match in_one_look {
                Some(listed) => listed.into_iter().filter(|(meta, _)| keep(meta)).collect(),
                None => {
                    let metas: Vec<ObjectMeta> = if url.is_collection() {
                        store.list(Some(url.prefix())).try_collect().await?
                    } else {
                        match store.head(url.prefix()).await {
                            Ok(meta) => vec![meta],
                            Err(object_store::Error::NotFound { .. }) => {
                                store.list(Some(url.prefix())).try_collect().await?
                            }
                            Err(e) => return Err(e.into()),
                        }
                    };
                    let metas: Vec<ObjectMeta> = metas.into_iter().filter(keep).collect();
                    #[cfg(unix)]
                    let versions = match local {
                        true => local::versions(&metas).await,
                        false => metas.iter().map(store_version).collect(),
                    };
                    #[cfg(not(unix))]
                    let versions: Vec<String> = metas.iter().map(store_version).collect();
                    metas.into_iter().zip(versions).collect()
                }
            };
            for (meta, version) in listed {
                files.push(FileFingerprint {
                    path: format!("{}{}", url.object_store().as_str(), meta.location),
                    size: meta.size,
                    version,
                });
            }
        }
        files.sort();
        files.dedup();
        Ok(files)
    }
}

/// What an object store shows of a file's version: its e-tag, else its
/// last-modified time; empty (unknown) when it shows neither (an HTTP
/// server without `ETag` and `Last-Modified` headers, which
/// `object_store` reports as modified at the epoch), so that a file
/// rewritten with the same size is never taken as unchanged.
fn store_version(meta: &ObjectMeta) -> String {
    match &meta.e_tag {
        Some(e_tag) if !e_tag.is_empty() => e_tag.clone(),
        _ if meta.last_modified.timestamp_nanos_opt() == Some(0) => String::new(),
        _ => meta.last_modified.to_rfc3339(),
    }
}

/// A digest of what defines a listing table apart from its files: where
/// and how it reads (format, every format option, file extension), its
/// schema, partition columns and declared sort order. Option maps are
/// sorted, so the same definition gives the same digest in every process.
pub(crate) fn listing_definition(table: &ListingTable) -> String {
    let options = table.options();
    let format = options.format.as_ref() as &dyn std::any::Any;
    let mut settings = Settings::default();
    if let Some(csv) = format.downcast_ref::<CsvFormat>() {
        csv.options().visit(&mut settings, "csv", "");
    } else if let Some(parquet) = format.downcast_ref::<ParquetFormat>() {
        parquet.options().visit(&mut settings, "parquet", "");
    } else if let Some(json) = format.downcast_ref::<JsonFormat>() {
        json.options().visit(&mut settings, "json", "");
    } else {
        // Other formats: their debug form is all that is known of them.
        settings
            .0
            .insert("format".into(), format!("{:?}", options.format));
    }
    let mut text = String::new();
    let paths: Vec<&str> = table.table_paths().iter().map(|p| p.as_str()).collect();
    text.push_str(&format!("paths {paths:?}\n"));
    text.push_str(&format!(
        "format {} extension {:?}\n",
        options.format.get_ext(),
        options.file_extension
    ));
    for (key, value) in &settings.0 {
        text.push_str(&format!("{key}={value}\n"));
    }
    for field in TableProvider::schema(table).fields() {
        text.push_str(&format!(
            "column {:?} {} {}\n",
            field.name(),
            field.data_type(),
            field.is_nullable()
        ));
    }
    for (name, data_type) in &options.table_partition_cols {
        text.push_str(&format!("partition {name:?} {data_type}\n"));
    }
    for order in &options.file_sort_order {
        let exprs: Vec<String> = order.iter().map(|e| e.to_string()).collect();
        text.push_str(&format!("order {}\n", exprs.join(", ")));
    }
    digest(&text)
}

/// Option values collected by key, in key order.
#[derive(Default)]
struct Settings(BTreeMap<String, String>);

impl Visit for Settings {
    fn some<V: std::fmt::Display>(&mut self, key: &str, value: V, _: &'static str) {
        self.0.insert(key.to_owned(), value.to_string());
    }

    fn none(&mut self, key: &str, _: &'static str) {
        self.0.insert(key.to_owned(), "(none)".into());
    }
}

/// A short, stable digest of `text` (hex of SHA-256's first 16 bytes).
fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compares the fingerprints recorded at the last refresh with today's.
/// `has_sources` is false for a view that reads no relation (always fresh).
pub(crate) fn compare(
    recorded: &[SourceFingerprint],
    now: &[SourceFingerprint],
    has_sources: bool,
) -> Freshness {
    freshness(recorded, now, has_sources)
}

/// What differs between the fingerprints recorded with a snapshot and
/// today's, worked out once: the view's [`Freshness`], and for a refresh
/// what changed underneath (relations redefined anywhere on the paths,
/// tables whose files changed, plain views expanded).
#[derive(Debug)]
pub(crate) struct Diff<'a> {
    freshness: Freshness,
    /// Every relation on the paths, with its definition digest or id.
    definitions: Then<'a, Option<&'a str>>,
    /// The tables under the sources (plain views expanded).
    leaves: Then<'a, &'a Fingerprint>,
}

/// A map by name as recorded with the snapshot, and as it is now.
#[derive(Debug)]
struct Then<'a, T> {
    then: BTreeMap<&'a QualifiedName, T>,
    now: BTreeMap<&'a QualifiedName, T>,
}

impl<T> Then<'_, T> {
    fn new() -> Self {
        Self {
            then: BTreeMap::new(),
            now: BTreeMap::new(),
        }
    }
}

/// Why an incremental refresh cannot work from a [`Diff`]: a relation
/// whose definition changed (or was not recorded) changes every row.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Redefinition<'a> {
    Redefined(&'a QualifiedName),
    NotRecorded(&'a QualifiedName),
}

impl<'a> Diff<'a> {
    /// `has_sources`: whether the view reads any relation (one that reads
    /// none is always fresh).
    pub(crate) fn new(
        recorded: &'a [SourceFingerprint],
        now: &'a [SourceFingerprint],
        has_sources: bool,
    ) -> Self {
        let mut definitions = Then::new();
        definitions_under(recorded, &mut definitions.then);
        definitions_under(now, &mut definitions.now);
        let mut leaves = Then::new();
        leaves_under(recorded, &mut leaves.then);
        leaves_under(now, &mut leaves.now);
        Self {
            freshness: freshness(recorded, now, has_sources),
            definitions,
            leaves,
        }
    }

    /// Fresh, stale (with the sources that changed) or unknown.
    pub(crate) fn freshness(&self) -> Freshness {
        self.freshness.clone()
    }

    /// The first relation on the paths (in name order) whose definition
    /// differs from the recorded one, or was not recorded.
    pub(crate) fn redefinition(&self) -> Option<Redefinition<'a>> {
        for (name, definition) in &self.definitions.now {
            match self.definitions.then.get(name) {
                Some(Some("")) => return Some(Redefinition::NotRecorded(name)),
                Some(recorded) if recorded != definition => {
                    return Some(Redefinition::Redefined(name));
                }
                _ => {}
            }
        }
        None
    }

    /// The tables (plain views expanded) whose fingerprint changed, came
    /// or went.
    pub(crate) fn changed_tables(&self) -> Vec<&'a QualifiedName> {
        let Then { then, now } = &self.leaves;
        now.iter()
            .filter(|(name, f)| then.get(*name) != Some(*f))
            .map(|(name, _)| *name)
            .chain(then.keys().filter(|n| !now.contains_key(*n)).copied())
            .collect()
    }

    /// Table `name`'s fingerprint as recorded and as it is now.
    pub(crate) fn table(
        &self,
        name: &QualifiedName,
    ) -> (Option<&'a Fingerprint>, Option<&'a Fingerprint>) {
        (
            self.leaves.then.get(name).copied(),
            self.leaves.now.get(name).copied(),
        )
    }

    /// How many tables the view reads now.
    pub(crate) fn table_count(&self) -> usize {
        self.leaves.now.len()
    }
}

fn freshness(
    recorded: &[SourceFingerprint],
    now: &[SourceFingerprint],
    has_sources: bool,
) -> Freshness {
    let recorded: BTreeMap<&QualifiedName, &Fingerprint> =
        recorded.iter().map(|s| (&s.name, &s.fingerprint)).collect();
    let unknown: Vec<QualifiedName> = now
        .iter()
        .filter(|s| {
            s.fingerprint.is_unknown() || recorded.get(&s.name).is_none_or(|f| f.is_unknown())
        })
        .map(|s| s.name.clone())
        .collect();
    if has_sources && recorded.is_empty() || !unknown.is_empty() {
        return Freshness::Unknown(unknown);
    }
    let changed: Vec<QualifiedName> = now
        .iter()
        .filter(|s| recorded.get(&s.name) != Some(&&s.fingerprint))
        .map(|s| s.name.clone())
        .collect();
    if changed.is_empty() {
        Freshness::Fresh
    } else {
        Freshness::Stale(changed)
    }
}

/// The tables under `sources`, plain views expanded.
pub(crate) fn leaves_under<'a>(
    sources: &'a [SourceFingerprint],
    out: &mut BTreeMap<&'a QualifiedName, &'a Fingerprint>,
) {
    for source in sources {
        match &source.fingerprint {
            Fingerprint::View { sources, .. } => leaves_under(sources, out),
            fingerprint => {
                out.insert(&source.name, fingerprint);
            }
        }
    }
}

/// Every relation on the paths under `sources` (plain views, what they
/// read, and so on), with its definition digest or id.
fn definitions_under<'a>(
    sources: &'a [SourceFingerprint],
    out: &mut BTreeMap<&'a QualifiedName, Option<&'a str>>,
) {
    for source in sources {
        out.insert(&source.name, source.fingerprint.definition());
        if let Fingerprint::View { sources, .. } = &source.fingerprint {
            definitions_under(sources, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, u64)]) -> Fingerprint {
        Fingerprint::Files {
            files: entries
                .iter()
                .map(|(p, s)| FileFingerprint {
                    path: p.to_string(),
                    size: *s,
                    version: "1".into(),
                })
                .collect(),
            definition: "csv".into(),
        }
    }

    fn source(name: &str, fingerprint: Fingerprint) -> SourceFingerprint {
        SourceFingerprint {
            name: QualifiedName::new("datafusion", "public", name),
            fingerprint,
        }
    }

    #[test]
    fn unchanged_changed_and_unknown() {
        let then = [
            source("t", files(&[("a", 1)])),
            source(
                "m",
                Fingerprint::Snapshot {
                    definition: "m1".into(),
                    id: Some("s1".into()),
                    files: vec![],
                },
            ),
        ];
        assert_eq!(compare(&then, &then, true), Freshness::Fresh);
        let appended = [source("t", files(&[("a", 1), ("b", 2)])), then[1].clone()];
        assert_eq!(
            compare(&then, &appended, true),
            Freshness::Stale(vec![QualifiedName::new("datafusion", "public", "t")])
        );
        let memory = [source("t", Fingerprint::Unknown)];
        assert!(matches!(
            compare(&memory, &memory, true),
            Freshness::Unknown(_)
        ));
        let nested = [source(
            "v",
            Fingerprint::View {
                sources: memory.to_vec(),
                definition: "select".into(),
            },
        )];
        assert!(matches!(
            compare(&nested, &nested, true),
            Freshness::Unknown(_)
        ));
        // Refreshed before fingerprints were recorded.
        assert!(matches!(compare(&[], &then, true), Freshness::Unknown(_)));
        // Reads nothing: always fresh.
        assert_eq!(compare(&[], &[], false), Freshness::Fresh);
    }
}
