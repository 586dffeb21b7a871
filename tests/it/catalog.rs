//! One shared suite of catalog tests that every storage backend must pass:
//! views survive closing the session, a session's defaults do not change
//! what a view reads, and no file of a committed snapshot is ever deleted
//! early or overwritten.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_matview::{Error, MatviewOptions, MatviewSession, RefreshMode};
use futures::TryStreamExt;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// Where a catalog lives; each call of `context` is a new "process".
trait Backend {
    fn location(&self) -> String;
    fn context(&self) -> SessionContext;
    /// The store and the catalog root inside it, to inspect files.
    fn store(&self) -> (Arc<dyn ObjectStore>, Path);
}

struct Memory {
    store: Arc<InMemory>,
}

impl Backend for Memory {
    fn location(&self) -> String {
        "memory:///catalogs/test".into()
    }
    fn context(&self) -> SessionContext {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        let url = url::Url::parse("memory://").unwrap();
        ctx.register_object_store(&url, Arc::clone(&self.store) as _);
        ctx
    }
    fn store(&self) -> (Arc<dyn ObjectStore>, Path) {
        (Arc::clone(&self.store) as _, Path::from("catalogs/test"))
    }
}

struct Local {
    dir: tempfile::TempDir,
}

impl Backend for Local {
    fn location(&self) -> String {
        self.dir
            .path()
            .join("catalog")
            .to_string_lossy()
            .into_owned()
    }
    fn context(&self) -> SessionContext {
        SessionContext::new_with_config(SessionConfig::new().with_information_schema(true))
    }
    fn store(&self) -> (Arc<dyn ObjectStore>, Path) {
        let root = std::fs::canonicalize(self.dir.path())
            .unwrap()
            .join("catalog");
        (
            Arc::new(object_store::local::LocalFileSystem::new()),
            Path::from_absolute_path(root).unwrap(),
        )
    }
}

/// An S3-compatible server on loopback (`.ci/run` starts one): the bucket
/// named by `DFMV_TEST_S3_BUCKET` (default `dfmv-test`) at
/// `DFMV_TEST_S3_ENDPOINT`. Each test gets a prefix of its own.
struct S3 {
    bucket: String,
    prefix: String,
    store: Arc<dyn ObjectStore>,
}

impl S3 {
    /// `None` when no server is configured; in CI that is an error.
    fn from_env() -> Option<Self> {
        let endpoint = common::s3_endpoint()?;
        Some(Self {
            bucket: common::s3_bucket(),
            prefix: format!("tests/{}", uuid::Uuid::new_v4().simple()),
            store: common::s3_store(&endpoint),
        })
    }
}

impl Backend for S3 {
    fn location(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
    fn context(&self) -> SessionContext {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        let url = url::Url::parse(&format!("s3://{}", self.bucket)).unwrap();
        ctx.register_object_store(&url, Arc::clone(&self.store));
        ctx
    }
    fn store(&self) -> (Arc<dyn ObjectStore>, Path) {
        (Arc::clone(&self.store), Path::from(self.prefix.as_str()))
    }
}

/// Source data lives in a CSV folder outside the catalog, as users have it.
struct Source {
    dir: tempfile::TempDir,
}

impl Source {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn write(&self, file: &str, rows: &[(i64, &str)]) {
        let mut text = String::from("id,name\n");
        for (id, name) in rows {
            text.push_str(&format!("{id},{name}\n"));
        }
        std::fs::write(self.dir.path().join(file), text).unwrap();
    }
    fn remove(&self, file: &str) {
        std::fs::remove_file(self.dir.path().join(file)).unwrap();
    }
    fn register_sql(&self, table: &str) -> String {
        format!(
            "CREATE EXTERNAL TABLE {table} (id BIGINT, name VARCHAR) STORED AS CSV LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
            self.dir.path().display()
        )
    }
}

async fn open(backend: &dyn Backend, retention: Duration) -> MatviewSession {
    let options = MatviewOptions {
        retention,
        ..Default::default()
    };
    MatviewSession::open_with_options(backend.context(), &backend.location(), options)
        .await
        .unwrap()
}

async fn rows(session: &MatviewSession, sql: &str) -> Vec<RecordBatch> {
    session.sql(sql).await.unwrap().collect().await.unwrap()
}

async fn ids(session: &MatviewSession, sql: &str) -> Vec<i64> {
    let mut out = vec![];
    for batch in rows(session, sql).await {
        let col = batch.column(0).as_primitive::<Int64Type>();
        out.extend((0..col.len()).map(|i| col.value(i)));
    }
    out
}

/// Every object under the catalog root with its content.
async fn files(backend: &dyn Backend) -> BTreeMap<String, Vec<u8>> {
    let (store, root) = backend.store();
    let metas: Vec<_> = store.list(Some(&root)).try_collect().await.unwrap();
    let mut out = BTreeMap::new();
    for meta in metas {
        // Deleted since the listing (a write's lease, given back).
        let bytes = match store.get(&meta.location).await {
            Ok(got) => got.bytes().await.unwrap(),
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => panic!("{e}"),
        };
        out.insert(meta.location.to_string(), bytes.to_vec());
    }
    out
}

fn parquet_files(all: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    all.iter()
        .filter(|(k, _)| k.ends_with(".parquet"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

async fn views_survive_a_new_session(backend: &dyn Backend) {
    let source = Source::new();
    source.write("a.csv", &[(1, "ann"), (2, "bob"), (3, "cy")]);
    {
        let s = open(backend, Duration::from_secs(3600)).await;
        s.sql(&source.register_sql("people")).await.unwrap();
        s.sql("CREATE MATERIALIZED VIEW big AS SELECT id, name FROM people WHERE id >= 2")
            .await
            .unwrap();
        s.sql("CREATE MATERIALIZED VIEW later AS SELECT count(*) AS n FROM people WITH NO DATA")
            .await
            .unwrap();
        s.sql("CREATE VIEW plain AS SELECT id FROM big")
            .await
            .unwrap();
        assert_eq!(ids(&s, "SELECT id FROM big ORDER BY id").await, [2, 3]);
    }
    // The source is gone: a query of the view must not recompute it.
    source.remove("a.csv");
    let s = open(backend, Duration::from_secs(3600)).await;
    assert_eq!(ids(&s, "SELECT id FROM big ORDER BY id").await, [2, 3]);
    let err = s.sql("SELECT * FROM later").await.unwrap_err();
    assert!(matches!(err, Error::NotPopulated { .. }), "{err}");
    let listed = rows(
        &s,
        "SELECT table_name, populated, row_count FROM materialized_views() ORDER BY table_name",
    )
    .await;
    let names = listed[0].column(0).as_string::<i32>();
    assert_eq!(
        (0..names.len()).map(|i| names.value(i)).collect::<Vec<_>>(),
        ["big", "later"]
    );
    assert_eq!(listed[0].column(2).as_primitive::<Int64Type>().value(0), 2);
    assert!(listed[0].column(2).is_null(1));
    // Dependencies are restored with the definitions.
    source.write("b.csv", &[(7, "dee")]);
    s.sql(&source.register_sql("people")).await.unwrap();
    let err = s.sql("DROP TABLE people").await.unwrap_err().to_string();
    assert_eq!(
        err,
        "cannot drop table people because other objects depend on it\n\
         DETAIL: materialized view big depends on table people\n\
         materialized view later depends on table people\n\
         HINT: Use DROP ... CASCADE to drop the dependent objects too."
    );
    let refreshed = rows(&s, "REFRESH MATERIALIZED VIEW later").await;
    assert_eq!(
        refreshed[0].column(2).as_primitive::<Int64Type>().value(0),
        1
    );
    assert_eq!(ids(&s, "SELECT n FROM later").await, [1]);
}

async fn defaults_do_not_change_what_a_view_reads(backend: &dyn Backend) {
    let s = open(backend, Duration::from_secs(3600)).await;
    s.sql("CREATE SCHEMA other").await.unwrap();
    s.sql("CREATE TABLE public.t (x BIGINT) AS VALUES (1)")
        .await
        .unwrap();
    s.sql("CREATE TABLE other.t (x BIGINT) AS VALUES (100)")
        .await
        .unwrap();
    s.sql("SET datafusion.catalog.default_schema = 'other'")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT x FROM t")
        .await
        .unwrap();
    s.sql("SET datafusion.catalog.default_schema = 'public'")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    s.sql("INSERT INTO other.t VALUES (200)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    s.sql("REFRESH MATERIALIZED VIEW other.v")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        ids(&s, "SELECT x FROM other.v ORDER BY x").await,
        [100, 200]
    );
    // A second session with other defaults refreshes against the same source.
    let ctx = backend.context();
    ctx.sql("CREATE SCHEMA other").await.unwrap();
    ctx.sql("CREATE TABLE other.t (x BIGINT) AS VALUES (5)")
        .await
        .unwrap();
    ctx.sql("CREATE TABLE public.t (x BIGINT) AS VALUES (6)")
        .await
        .unwrap();
    let s2 = MatviewSession::open(ctx, &backend.location())
        .await
        .unwrap();
    s2.sql("REFRESH MATERIALIZED VIEW other.v")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(ids(&s2, "SELECT x FROM other.v").await, [5]);
}

async fn committed_files_are_never_overwritten_or_deleted_early(backend: &dyn Backend) {
    let s = open(backend, Duration::from_secs(3600)).await;
    s.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2)")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT x FROM t")
        .await
        .unwrap();
    let first = parquet_files(&files(backend).await);
    assert!(!first.is_empty());
    s.sql("INSERT INTO t VALUES (3)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    s.sql("REFRESH MATERIALIZED VIEW v")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let second = parquet_files(&files(backend).await);
    // Within the retention window every old file is still there, unchanged,
    // and the new snapshot is made of new files only.
    for (path, bytes) in &first {
        assert_eq!(second.get(path), Some(bytes), "{path} changed or vanished");
    }
    assert!(second.len() > first.len());
    // A refresh that fails keeps the old data and leaves no file behind.
    s.sql("CREATE OR REPLACE TABLE t (x BIGINT) AS VALUES (0)")
        .await
        .unwrap();
    s.sql("CREATE OR REPLACE MATERIALIZED VIEW d AS SELECT 10 / x AS y FROM t WITH NO DATA")
        .await
        .unwrap();
    let before = files(backend).await;
    let err = s
        .sql("REFRESH MATERIALIZED VIEW d")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("could not refresh materialized view \"d\": "),
        "{err}"
    );
    assert!(err.contains("Divide by zero"), "{err}");
    let after = files(backend).await;
    assert_eq!(parquet_files(&before), parquet_files(&after));
    assert_eq!(ids(&s, "SELECT x FROM v ORDER BY x").await, [1, 2, 3]);

    // With no retention, cleanup removes superseded files at once, and
    // never a file of the committed snapshot.
    drop(s);
    let s = open(backend, Duration::ZERO).await;
    let report = s.cleanup().await.unwrap();
    assert!(report.files_deleted >= first.len(), "{report:?}");
    let now = parquet_files(&files(backend).await);
    for path in first.keys() {
        assert!(
            !now.contains_key(path),
            "{path} should have been cleaned up"
        );
    }
    assert_eq!(ids(&s, "SELECT x FROM v ORDER BY x").await, [1, 2, 3]);
    s.sql("DROP MATERIALIZED VIEW v, d").await.unwrap();
    assert!(parquet_files(&files(backend).await).is_empty());
}

async fn replace_is_atomic_and_keeps_identity_checks(backend: &dyn Backend) {
    let s = open(backend, Duration::from_secs(3600)).await;
    s.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2), (3)")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT x FROM t WHERE x > 1")
        .await
        .unwrap();
    let version = s.catalog().index().version;
    s.sql("CREATE OR REPLACE MATERIALIZED VIEW v (y) AS SELECT x * 10 FROM t")
        .await
        .unwrap();
    // One index commit replaced both definition and data.
    assert_eq!(s.catalog().index().version, version + 1);
    assert_eq!(ids(&s, "SELECT y FROM v ORDER BY y").await, [10, 20, 30]);
    // A second session sees the replacement.
    let s2 = open(backend, Duration::from_secs(3600)).await;
    let entry = common::view(&s2, "v").await.view.clone();
    assert_eq!(entry.definition.column_names, ["y"]);
    assert_eq!(entry.snapshot.unwrap().row_count, 3);
}

async fn remembered_relations_come_back_in_a_new_session(backend: &dyn Backend) {
    let remembering = || async {
        let options = MatviewOptions {
            remember_relations: true,
            ..Default::default()
        };
        MatviewSession::open_with_options(backend.context(), &backend.location(), options)
            .await
            .unwrap()
    };
    let source = Source::new();
    source.write("a.csv", &[(1, "ann"), (2, "bob")]);
    let single = tempfile::tempdir().unwrap();
    let single_file = single.path().join("one.csv");
    std::fs::write(&single_file, "x\n1\n").unwrap();
    {
        let s = remembering().await;
        s.sql(&source.register_sql("people")).await.unwrap();
        s.sql("CREATE VIEW adults AS SELECT id, name FROM people WHERE id > 1")
            .await
            .unwrap();
        s.sql("CREATE MATERIALIZED VIEW n_adults AS SELECT count(*) AS n FROM adults")
            .await
            .unwrap();
        s.sql(&format!(
            "CREATE EXTERNAL TABLE one STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
            single_file.display()
        ))
        .await
        .unwrap();
        // IF NOT EXISTS on an existing table changes nothing remembered.
        s.sql(&source.register_sql("IF NOT EXISTS adults"))
            .await
            .unwrap();
        assert_eq!(s.catalog().index().relations.len(), 3);
    }
    std::fs::remove_file(&single_file).unwrap();
    source.write("b.csv", &[(3, "cy")]);
    let s = remembering().await;
    // The table and view are back, with no set-up. The table whose file
    // is gone is too, as it was created (with its column, no inference):
    // it lists no file, so it has no rows, as in the process that made it.
    assert_eq!(ids(&s, "SELECT id FROM adults ORDER BY id").await, [2, 3]);
    assert_eq!(ids(&s, "SELECT count(x) FROM one").await, [0]);
    assert_eq!(
        s.sql("SELECT column_name FROM information_schema.columns WHERE table_name = 'one'")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()[0]
            .num_rows(),
        1
    );
    s.sql("REFRESH MATERIALIZED VIEW n_adults").await.unwrap();
    assert_eq!(ids(&s, "SELECT n FROM n_adults").await, [2]);
    let err = s.sql("DROP VIEW adults").await.unwrap_err().to_string();
    assert!(
        err.starts_with("cannot drop view adults because other objects depend on it"),
        "{err}"
    );
    s.sql("DROP VIEW adults CASCADE").await.unwrap();
    s.sql("DROP TABLE one").await.unwrap();
    let remembered: Vec<String> = s
        .catalog()
        .index()
        .relations
        .iter()
        .map(|r| r.name.name.clone())
        .collect();
    assert_eq!(remembered, ["people"]);
    let s = remembering().await;
    assert!(s.sql("SELECT * FROM adults").await.is_err());
    assert!(s.catalog().index().views.is_empty());
    assert_eq!(
        ids(&s, "SELECT id FROM people ORDER BY id").await,
        [1, 2, 3]
    );
}

/// Two sessions commit at the same time: conditional puts make every
/// commit land exactly once, on top of the others.
async fn concurrent_sessions_lose_no_commit(backend: &dyn Backend) {
    let a = open(backend, Duration::from_secs(3600)).await;
    let b = open(backend, Duration::from_secs(3600)).await;
    a.sql("CREATE MATERIALIZED VIEW shared AS SELECT 1 AS v")
        .await
        .unwrap();
    let creates = |s: MatviewSession, prefix: &'static str| async move {
        for i in 0..8 {
            s.sql(&format!(
                "CREATE MATERIALIZED VIEW {prefix}{i} AS SELECT {i} AS v"
            ))
            .await
            .unwrap();
        }
    };
    let refreshes = |s: MatviewSession| async move {
        let mut landed = 0;
        for _ in 0..8 {
            match s.sql("REFRESH MATERIALIZED VIEW shared FULL").await {
                Ok(_) => landed += 1,
                Err(Error::CommitConflict { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        landed
    };
    let ((), (), landed_a, landed_b) = tokio::join!(
        creates(a.clone(), "a"),
        creates(b.clone(), "b"),
        refreshes(a.clone()),
        refreshes(b.clone())
    );
    let c = open(backend, Duration::from_secs(3600)).await;
    let index = c.catalog().index();
    assert_eq!(index.views.len(), 17);
    // One index commit per create, one version of the shared view's log per
    // landed refresh: nothing lost or doubled.
    assert_eq!(index.version, 1 + 16);
    let shared = common::view(&c, "shared").await;
    assert_eq!(shared.version, 1 + landed_a + landed_b);
    let retired = common::retired_snapshots(&c, "shared").await as u64;
    assert_eq!(retired, landed_a + landed_b);
}

/// Two cleanups at once: nothing committed is lost, every leftover goes.
/// (No refresh runs meanwhile: with a zero retention window, files of a
/// refresh still being written count as abandoned, which is why the window
/// must be longer than the longest refresh.)
async fn concurrent_cleanups_are_safe(backend: &dyn Backend) {
    let a = open(backend, Duration::ZERO).await;
    let b = open(backend, Duration::ZERO).await;
    a.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2)")
        .await
        .unwrap();
    b.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2)")
        .await
        .unwrap();
    a.sql("CREATE MATERIALIZED VIEW v AS SELECT x FROM t")
        .await
        .unwrap();
    for _ in 0..3 {
        a.sql("REFRESH MATERIALIZED VIEW v FULL").await.unwrap();
    }
    let (ra, rb) = tokio::join!(a.cleanup(), b.cleanup());
    ra.unwrap();
    rb.unwrap();
    let c = open(backend, Duration::ZERO).await;
    c.cleanup().await.unwrap();
    assert_eq!(ids(&c, "SELECT x FROM v ORDER BY x").await, [1, 2]);
    // Only the committed snapshot's files are left.
    let state = common::view(&c, "v").await;
    let data = parquet_files(&files(backend).await);
    let snapshot = state.view.snapshot.as_ref().unwrap();
    assert_eq!(data.len(), snapshot.files.len());
}

macro_rules! suite {
    ($($test:ident),*) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(&Memory { store: Arc::new(InMemory::new()) }).await;
                }
            )*
        }
        mod local {
            use super::*;
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(&Local { dir: tempfile::tempdir().unwrap() }).await;
                }
            )*
        }
        mod s3 {
            use super::*;
            $(
                #[tokio::test]
                async fn $test() {
                    if let Some(s3) = S3::from_env() {
                        super::$test(&s3).await;
                    }
                }
            )*
        }
    };
}

suite!(
    views_survive_a_new_session,
    defaults_do_not_change_what_a_view_reads,
    committed_files_are_never_overwritten_or_deleted_early,
    replace_is_atomic_and_keeps_identity_checks,
    remembered_relations_come_back_in_a_new_session,
    concurrent_sessions_lose_no_commit,
    concurrent_cleanups_are_safe
);

/// Not per backend: what the scan of a view pushes into DataFusion's Parquet reader.
#[tokio::test]
async fn scans_prune_row_groups_and_push_down_projection_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        SessionConfig::new().set_usize("datafusion.execution.parquet.max_row_group_size", 100);
    let s = MatviewSession::open(
        SessionContext::new_with_config(config),
        &dir.path().display().to_string(),
    )
    .await
    .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT value AS id, value * 2 AS twice FROM generate_series(1, 1000) ORDER BY id")
        .await
        .unwrap();
    let plan = |sql: &'static str| {
        let s = s.clone();
        async move {
            let batches = s.sql(sql).await.unwrap().collect().await.unwrap();
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .unwrap()
                .to_string()
        }
    };
    let analyzed = plan("EXPLAIN ANALYZE SELECT twice FROM v WHERE id = 500").await;
    assert!(analyzed.contains("DataSourceExec"), "{analyzed}");
    assert!(analyzed.contains("predicate=id@0 = 500"), "{analyzed}");
    assert!(
        analyzed.contains("row_groups_pruned_statistics=10 total \u{2192} 1 matched"),
        "{analyzed}"
    );
    let limited = plan("EXPLAIN SELECT id FROM v LIMIT 3").await;
    assert!(limited.contains("limit=3"), "{limited}");
    assert!(limited.contains("projection=[id]"), "{limited}");
    // The exact row count comes from the manifest.
    let counted = plan("EXPLAIN SELECT count(*) FROM v").await;
    assert!(counted.contains("1000"), "{counted}");
}

#[tokio::test]
async fn a_refresh_whose_source_is_gone_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().display().to_string();
    let source = Source::new();
    source.write("a.csv", &[(1, "a")]);
    let s = MatviewSession::open(SessionContext::new(), &location)
        .await
        .unwrap();
    s.sql(&source.register_sql("people")).await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT * FROM people")
        .await
        .unwrap();
    // A new process that has not registered the source.
    let s = MatviewSession::open(SessionContext::new(), &location)
        .await
        .unwrap();
    let err = s.sql("REFRESH MATERIALIZED VIEW v").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "could not refresh materialized view \"v\": relation \"people\" does not exist"
    );
    assert_eq!(ids(&s, "SELECT id FROM v").await, [1]);
}

#[derive(Debug, Default)]
struct Recorder {
    calls: std::sync::Mutex<Vec<(String, u64)>>,
    finished: std::sync::Mutex<Vec<String>>,
}

impl datafusion_matview::ProgressListener for Recorder {
    fn progress(&self, view: &str, rows: u64, _elapsed: Duration) {
        self.calls.lock().unwrap().push((view.to_owned(), rows));
    }
    fn finished(&self, view: &str) {
        self.finished.lock().unwrap().push(view.to_owned());
    }
}

#[tokio::test]
async fn refresh_reports_progress_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let s = MatviewSession::open(SessionContext::new(), &dir.path().display().to_string())
        .await
        .unwrap()
        .with_progress_listener(Arc::clone(&recorder) as _);
    s.sql("CREATE MATERIALIZED VIEW big AS SELECT value AS v FROM generate_series(1, 2000000)")
        .await
        .unwrap();
    s.sql("REFRESH MATERIALIZED VIEW big").await.unwrap();
    assert_eq!(*recorder.finished.lock().unwrap(), ["big", "big"]);
    let calls = recorder.calls.lock().unwrap();
    assert!(!calls.is_empty());
    assert!(
        calls
            .iter()
            .all(|(v, rows)| v == "big" && *rows <= 2_000_000)
    );
}

#[tokio::test]
async fn existing_parquet_results_can_be_adopted() {
    let (dir, s) = temp_session().await;
    s.sql("CREATE TABLE t (x BIGINT) AS VALUES (1), (2), (3)")
        .await
        .unwrap();
    // The old way: COPY the result out.
    let old = dir.path().join("old.parquet");
    s.sql(&format!(
        "COPY (SELECT x * 10 AS y FROM t) TO '{}'",
        old.display()
    ))
    .await
    .unwrap()
    .collect()
    .await
    .unwrap();
    // The source moves on; the adopted view keeps the data it was given.
    s.sql("INSERT INTO t VALUES (4)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let old = old.display().to_string();
    s.adopt(
        "tens",
        "SELECT x * 10 AS y FROM t",
        std::slice::from_ref(&old),
    )
    .await
    .unwrap();
    assert_eq!(ids(&s, "SELECT y FROM tens ORDER BY y").await, [10, 20, 30]);
    // The original file stays where it was; the view has its own copy.
    assert!(std::path::Path::new(&old).exists());
    s.sql("REFRESH MATERIALIZED VIEW tens").await.unwrap();
    assert_eq!(
        ids(&s, "SELECT y FROM tens ORDER BY y").await,
        [10, 20, 30, 40]
    );

    let err = s
        .adopt(
            "wrong",
            "SELECT x AS y, x AS z FROM t",
            std::slice::from_ref(&old),
        )
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "the columns of {old} (y Int64) are not those of the view's query (y Int64, z Int64)"
        )
    );
    assert!(s.sql("SELECT * FROM wrong").await.is_err());
}

/// Adopted data may predate the sources' files of today: nothing records
/// which state it was computed from, so the view is not fresh and its
/// first refresh is full (it was `fresh` and a `no_op` once).
#[tokio::test]
async fn adopted_data_is_not_trusted_as_fresh() {
    let (dir, s) = temp_session().await;
    let source = Source::new();
    source.write("a.csv", &[(1, "a"), (2, "b")]);
    s.sql(&source.register_sql("people")).await.unwrap();
    let old = dir.path().join("old.parquet").display().to_string();
    rows(
        &s,
        &format!("COPY (SELECT count(*) AS n FROM people) TO '{old}'"),
    )
    .await;
    source.write("b.csv", &[(3, "c")]);
    s.adopt(
        "n",
        "SELECT count(*) AS n FROM people",
        std::slice::from_ref(&old),
    )
    .await
    .unwrap();
    assert_eq!(ids(&s, "SELECT n FROM n").await, [2]);
    let freshness = rows(&s, "SELECT freshness FROM materialized_views()").await;
    assert_eq!(
        freshness[0].column(0).as_string::<i32>().value(0),
        "unknown"
    );
    let statements =
        datafusion_matview::sql::parse_sql("REFRESH MATERIALIZED VIEW n", "generic", 50).unwrap();
    let [datafusion_matview::sql::Statement::Refresh(refresh)] = statements.as_slice() else {
        panic!("{statements:?}")
    };
    let outcomes = s.refresh(refresh).await.unwrap();
    assert_eq!(outcomes.last().map(|o| o.mode), Some(RefreshMode::Full));
    assert_eq!(ids(&s, "SELECT n FROM n").await, [3]);
    // From then on it is fresh, as any view.
    let outcomes = s.refresh(refresh).await.unwrap();
    assert_eq!(outcomes.last().map(|o| o.mode), Some(RefreshMode::NoOp));
}

/// DataFusion caches directory listings for the life of a session; a
/// refresh must still see files added to a source since it was last read.
#[tokio::test]
async fn a_refresh_sees_files_added_since_the_source_was_last_listed() {
    let dir = tempfile::tempdir().unwrap();
    let source = Source::new();
    source.write("a.csv", &[(1, "a")]);
    let s = MatviewSession::open(SessionContext::new(), &dir.path().display().to_string())
        .await
        .unwrap();
    s.sql(&source.register_sql("people")).await.unwrap();
    assert_eq!(ids(&s, "SELECT id FROM people").await, [1]);
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT id FROM people")
        .await
        .unwrap();
    source.write("b.csv", &[(2, "b")]);
    s.sql("REFRESH MATERIALIZED VIEW v").await.unwrap();
    assert_eq!(ids(&s, "SELECT id FROM v ORDER BY id").await, [1, 2]);
}

async fn freshness_of(s: &MatviewSession, view: &str) -> (String, Option<String>) {
    let batches = rows(
        s,
        &format!("SELECT freshness, changed_sources FROM materialized_views() WHERE table_name = '{view}'"),
    )
    .await;
    let freshness = batches[0].column(0).as_string::<i32>().value(0).to_owned();
    let changed = batches[0].column(1).as_string::<i32>();
    (
        freshness,
        (!changed.is_null(0)).then(|| changed.value(0).to_owned()),
    )
}

async fn refresh_row(s: &MatviewSession, sql: &str) -> (String, i64, String) {
    let batches = rows(s, sql).await;
    let b = &batches[0];
    (
        b.column(1).as_string::<i32>().value(0).to_owned(),
        b.column(2).as_primitive::<Int64Type>().value(0),
        b.column(5).as_string::<i32>().value(0).to_owned(),
    )
}

/// A session over a new catalog in a temporary folder (removed when the
/// returned guard is dropped).
async fn temp_session() -> (tempfile::TempDir, MatviewSession) {
    let dir = tempfile::tempdir().unwrap();
    let s = MatviewSession::open(
        SessionContext::new(),
        &dir.path().join("cat").display().to_string(),
    )
    .await
    .unwrap();
    (dir, s)
}

/// A session over a new catalog folder (`<dir>/cat`) with a retention
/// window of zero: what a refresh replaces goes at the next cleanup.
async fn session_without_retention() -> (tempfile::TempDir, MatviewSession) {
    let dir = tempfile::tempdir().unwrap();
    let options = MatviewOptions {
        retention: Duration::ZERO,
        ..Default::default()
    };
    let s = MatviewSession::open_with_options(
        SessionContext::new(),
        &dir.path().join("cat").display().to_string(),
        options,
    )
    .await
    .unwrap();
    (dir, s)
}

/// What a REFRESH of unchanged sources asks of the catalog's store: the
/// index is loaded once per statement (two `HEAD`s when nothing changed),
/// each view's log once to plan it and once to commit, and nothing else is
/// read; the only write is the attempt's record in the history; CASCADE
/// loads the index no more often than a single refresh.
#[tokio::test]
async fn a_refresh_loads_the_index_once_per_statement() {
    use datafusion_matview_testing::InstrumentedStore;
    use std::sync::atomic::Ordering::SeqCst;

    let dir = tempfile::tempdir().unwrap();
    // The catalog's store is counted; the source lives in another.
    let catalog_store =
        InstrumentedStore::new(Arc::new(object_store::local::LocalFileSystem::new()));
    let ctx = SessionContext::new();
    ctx.register_object_store(
        &url::Url::parse("file://").unwrap(),
        Arc::new(catalog_store.clone()),
    );
    let sources = Arc::new(InMemory::new());
    ctx.register_object_store(&url::Url::parse("mem://src").unwrap(), sources.clone());
    sources
        .put(&Path::from("t/a.csv"), "n\n1\n2\n".into())
        .await
        .unwrap();
    let s = MatviewSession::open(ctx, &dir.path().join("cat").display().to_string())
        .await
        .unwrap();
    rows(
        &s,
        "CREATE EXTERNAL TABLE t (n BIGINT) STORED AS CSV LOCATION 'mem://src/t/' \
         OPTIONS ('format.has_header' 'true')",
    )
    .await;
    rows(&s, "CREATE MATERIALIZED VIEW v AS SELECT n FROM t").await;
    rows(
        &s,
        "CREATE MATERIALIZED VIEW w AS SELECT count(*) AS c FROM v",
    )
    .await;
    let counted = || {
        let c = catalog_store.counters();
        (
            c.heads.load(SeqCst),
            c.gets.load(SeqCst),
            c.lists.load(SeqCst),
            c.writes.load(SeqCst),
        )
    };
    let cost = |before: (u64, u64, u64, u64)| {
        let after = counted();
        (
            after.0 - before.0,
            after.1 - before.1,
            after.2 - before.2,
            after.3 - before.3,
        )
    };
    let before = counted();
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW v").await.0,
        "no_op"
    );
    // The index (two HEADs: nothing changed) and v's log (one HEAD); the
    // attempt's record in the history (one PUT).
    assert_eq!(cost(before), (3, 0, 0, 1));
    let before = counted();
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW w").await.0,
        "no_op"
    );
    // The index (2), w's log (1), and v's log three times: planning w's
    // query looks v up, fingerprinting reads it, pinning looks it up; the
    // record.
    assert_eq!(cost(before), (6, 0, 0, 1));
    let before = counted();
    let cascade = rows(&s, "REFRESH MATERIALIZED VIEW w CASCADE").await;
    assert_eq!(cascade[0].num_rows(), 2);
    // Both refreshes above, with the index loaded once: 3 + 6 - 2; a
    // record each.
    assert_eq!(cost(before), (7, 0, 0, 2));
}

/// Freshness from listings only, and REFRESH skipping work when nothing changed.
#[tokio::test]
async fn freshness_follows_the_sources_and_skips_unchanged_refreshes() {
    let dir = tempfile::tempdir().unwrap();
    let store = datafusion_matview_testing::InstrumentedStore::new(Arc::new(
        object_store::local::LocalFileSystem::new(),
    ));
    let ctx = SessionContext::new();
    ctx.register_object_store(
        &url::Url::parse("file://").unwrap(),
        Arc::new(store.clone()),
    );
    let s = MatviewSession::open(ctx, &dir.path().join("cat").display().to_string())
        .await
        .unwrap();
    let source = Source::new();
    source.write("a.csv", &[(1, "a"), (2, "b")]);
    s.sql(&source.register_sql("people")).await.unwrap();
    s.sql("CREATE VIEW plain AS SELECT id FROM people WHERE id > 0")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW base AS SELECT id, name FROM people")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW over_base AS SELECT count(*) AS n FROM base")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW over_plain AS SELECT id FROM plain")
        .await
        .unwrap();
    s.sql("CREATE TABLE mem AS VALUES (1)").await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW over_mem AS SELECT * FROM mem")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW dice AS SELECT random() AS r")
        .await
        .unwrap();
    for view in ["base", "over_base", "over_plain"] {
        assert_eq!(
            freshness_of(&s, view).await,
            ("fresh".into(), None),
            "{view}"
        );
    }
    assert_eq!(
        freshness_of(&s, "over_mem").await,
        ("unknown".into(), Some("mem".into()))
    );
    assert_eq!(freshness_of(&s, "dice").await.0, "unknown");

    // Computing freshness reads no data file: listings and HEADs only.
    use std::sync::atomic::Ordering::SeqCst;
    let gets = store.counters().gets.load(SeqCst);
    freshness_of(&s, "base").await;
    assert_eq!(store.counters().gets.load(SeqCst), gets);

    // Nothing changed: no query, no commit, no data file; the one write is
    // the attempt's record in the history.
    let version = common::view(&s, "base").await.version;
    let writes = store.counters().writes.load(SeqCst);
    let history = common::files_under(&dir.path().join("cat/_matview/history")).len();
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW base").await,
        ("no_op".into(), 0, "sources unchanged".into())
    );
    assert_eq!(common::view(&s, "base").await.version, version);
    assert_eq!(store.counters().writes.load(SeqCst), writes + 1);
    assert_eq!(
        common::files_under(&dir.path().join("cat/_matview/history")).len(),
        history + 1
    );
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW base FULL").await,
        ("full".into(), 2, "FULL requested".into())
    );
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW dice").await,
        ("full".into(), 1, "non-deterministic: random()".into())
    );
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW over_mem").await,
        ("full".into(), 1, "cannot tell whether mem changed".into())
    );

    // A file appended to the source: stale, through a plain view too.
    source.write("b.csv", &[(3, "c")]);
    assert_eq!(
        freshness_of(&s, "base").await,
        ("stale".into(), Some("people".into()))
    );
    assert_eq!(
        freshness_of(&s, "over_plain").await,
        ("stale".into(), Some("plain".into()))
    );
    // over_base reads base, whose snapshot the FULL refresh above replaced.
    assert_eq!(
        freshness_of(&s, "over_base").await,
        ("stale".into(), Some("base".into()))
    );
    // Only appended: the new file alone is read and its rows added.
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW base").await,
        (
            "incremental".into(),
            1,
            "people: 1 file(s) appended; read the new files alone".into()
        )
    );
    assert_eq!(ids(&s, "SELECT id FROM base ORDER BY id").await, [1, 2, 3]);
    assert_eq!(freshness_of(&s, "base").await, ("fresh".into(), None));
    assert_eq!(
        freshness_of(&s, "over_base").await,
        ("stale".into(), Some("base".into()))
    );
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW over_base").await,
        (
            "full".into(),
            1,
            "changed: base; base: 2 file(s) appended, 1 file(s) removed; rows cannot be taken back out of an aggregate".into()
        )
    );
    assert_eq!(ids(&s, "SELECT n FROM over_base").await, [3]);

    // A file rewritten that is most of the source: recomputed.
    source.write("a.csv", &[(1, "a"), (2, "B"), (4, "d")]);
    assert_eq!(freshness_of(&s, "base").await.0, "stale");
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW base").await,
        (
            "full".into(),
            4,
            "changed: people; people: 1 file(s) rewritten; computing only that would cost 62% of recomputing"
                .into()
        )
    );
    // More files, recomputed (FULL writes one data file per group of
    // source files, with lineage); then one removed and one rewritten: the
    // data files computed from them are evicted and only the rewritten
    // one is read again.
    for (file, first) in [("c.csv", 10), ("d.csv", 20), ("e.csv", 30)] {
        let rows: Vec<(i64, &str)> = (first..first + 5).map(|i| (i, "x")).collect();
        source.write(file, &rows);
    }
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW base FULL").await,
        ("full".into(), 19, "FULL requested".into())
    );
    source.remove("b.csv");
    source.write("c.csv", &[(11, "y")]);
    let outcome = rows(&s, "REFRESH MATERIALIZED VIEW base").await;
    let b = &outcome[0];
    assert_eq!(b.column(1).as_string::<i32>().value(0), "incremental");
    assert_eq!(
        b.column(5).as_string::<i32>().value(0),
        "people: 1 file(s) removed, 1 file(s) rewritten; evicted 2 data file(s) (6 rows), read 1 source file(s)"
    );
    // rows_written, rows_deleted
    assert_eq!(b.column(2).as_primitive::<Int64Type>().value(0), 1);
    assert_eq!(b.column(4).as_primitive::<Int64Type>().value(0), 6);
    assert_eq!(
        ids(&s, "SELECT id FROM base ORDER BY id").await,
        [1, 2, 4, 11, 20, 21, 22, 23, 24, 30, 31, 32, 33, 34]
    );
    assert_eq!(freshness_of(&s, "base").await, ("fresh".into(), None));
}

/// Data files evicted by lineage are deleted once the retention window
/// has passed, while the files kept beside them stay.
#[tokio::test]
async fn evicted_data_files_are_deleted_after_retention() {
    let (dir, s) = session_without_retention().await;
    let source = Source::new();
    for (file, first) in [("a.csv", 0), ("b.csv", 10), ("c.csv", 20)] {
        let rows: Vec<(i64, &str)> = (first..first + 5).map(|i| (i, "x")).collect();
        source.write(file, &rows);
    }
    s.sql(&source.register_sql("people")).await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT id FROM people")
        .await
        .unwrap();
    // Data files in the order of the source files they come from.
    let files = |state: Arc<datafusion_matview::spec::ViewVersion>| -> Vec<String> {
        let mut files: Vec<_> = state
            .view
            .snapshot
            .as_ref()
            .unwrap()
            .files
            .iter()
            .map(|f| (f.lineage.clone().unwrap_or_default(), f.path.clone()))
            .collect();
        files.sort();
        files.into_iter().map(|(_, path)| path).collect()
    };
    let before = files(common::view(&s, "v").await);
    // One data file per source file, each with its lineage.
    assert_eq!(before.len(), 3);
    source.remove("b.csv");
    let (mode, rows, _) = refresh_row(&s, "REFRESH MATERIALIZED VIEW v").await;
    assert_eq!((mode.as_str(), rows), ("incremental", 0));
    let after = files(common::view(&s, "v").await);
    assert_eq!(after, [before[0].clone(), before[2].clone()]);
    let on_disk = |path: &str| dir.path().join("cat").join(path).exists();
    // Retired by this refresh; removed by the next cleanup (each refresh
    // runs one, and so does VACUUM / `cleanup()`).
    assert!(
        on_disk(&before[1]),
        "the evicted file is retired, not yet deleted"
    );
    assert_eq!(common::view(&s, "v").await.retired.len(), 1);
    s.cleanup().await.unwrap();
    assert!(!on_disk(&before[1]), "the evicted file is deleted");
    assert!(after.iter().all(|p| on_disk(p)), "the kept files stay");
    assert!(common::view(&s, "v").await.retired.is_empty());
    assert_eq!(
        ids(&s, "SELECT id FROM v ORDER BY id").await,
        [0, 1, 2, 3, 4, 20, 21, 22, 23, 24]
    );
}

/// The partial aggregates a refresh keeps from an older snapshot outlive
/// that snapshot's data files: with a retention of zero, the cleanup after
/// a removal deletes the replaced data but not the partials the view still
/// merges, so the next removal can recompute from them.
#[tokio::test]
async fn kept_partial_aggregates_survive_cleanup() {
    let (dir, s) = session_without_retention().await;
    let source = Source::new();
    for (file, first) in [("a.csv", 0), ("b.csv", 10), ("c.csv", 20), ("d.csv", 30)] {
        let rows: Vec<(i64, &str)> = (first..first + 5)
            .map(|i| (i, if i % 2 == 0 { "even" } else { "odd" }))
            .collect();
        source.write(file, &rows);
    }
    s.sql(&source.register_sql("people")).await.unwrap();
    s.sql(
        "CREATE MATERIALIZED VIEW g AS SELECT name, count(*) AS n, min(id) AS lo, max(id) AS hi \
         FROM people GROUP BY name",
    )
    .await
    .unwrap();
    let snapshot = || async { common::view(&s, "g").await.view.snapshot.clone().unwrap() };
    let created = snapshot().await;
    assert_eq!(created.partials.len(), 4, "one partial per source file");
    assert!(created.partials.iter().all(|p| p.lineage.is_some()));
    let query = "SELECT name, count(*) AS n, min(id) AS lo, max(id) AS hi FROM people \
                 GROUP BY name ORDER BY name";
    let text = |sql: &'static str| {
        let s = &s;
        async move {
            datafusion::arrow::util::pretty::pretty_format_batches(&rows(s, sql).await)
                .unwrap()
                .to_string()
        }
    };
    // The minimum (0) and the maximum (34) go with their files.
    for removed in ["a.csv", "d.csv"] {
        source.remove(removed);
        let (mode, _, detail) = refresh_row(&s, "REFRESH MATERIALIZED VIEW g").await;
        assert_eq!(mode, "incremental", "{detail}");
        s.cleanup().await.unwrap();
        let on_disk = |path: &str| dir.path().join("cat").join(path).exists();
        let now = snapshot().await;
        assert!(now.stored_files().all(|f| on_disk(&f.path)), "{now:?}");
        assert!(
            created.files.iter().all(|f| !on_disk(&f.path)),
            "the replaced data is deleted"
        );
        assert_eq!(
            text("SELECT * FROM g ORDER BY name").await,
            text(query).await
        );
    }
    assert_eq!(
        rows(&s, "SELECT min(lo), max(hi) FROM g").await[0]
            .column(0)
            .as_primitive::<Int64Type>()
            .value(0),
        10
    );
}

/// GROUP BY views merge appended rows into their groups.
#[tokio::test]
async fn group_by_views_merge_appends() {
    let (_dir, s) = temp_session().await;
    let source = Source::new();
    let rows_of = |ids: std::ops::Range<i64>| -> Vec<(i64, &'static str)> {
        ids.map(|i| (i, if i % 2 == 0 { "even" } else { "odd" }))
            .collect()
    };
    source.write("a.csv", &rows_of(0..10));
    source.write("b.csv", &rows_of(10..20));
    s.sql(&source.register_sql("people")).await.unwrap();
    s.sql(
        "CREATE MATERIALIZED VIEW g AS SELECT name, count(*) AS n, sum(id) AS total, \
         min(id) AS lo, max(id) AS hi, avg(id) AS mean FROM people GROUP BY name",
    )
    .await
    .unwrap();
    source.write("c.csv", &rows_of(20..23));
    let explained = rows(&s, "EXPLAIN REFRESH MATERIALIZED VIEW g").await;
    assert_eq!(
        explained[0].column(2).as_string::<i32>().value(0),
        "people: 1 file(s) appended; merged into the existing groups"
    );
    let plan = explained[0].column(3).as_string::<i32>().value(0);
    assert!(
        plan.contains("__dfmv_partials"),
        "the merge reads the stored groups"
    );
    assert!(
        plan.contains("(written as 1 partial aggregate(s), then merged with 1 stored file(s):)"),
        "the new files' partial is merged with the stored groups"
    );
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW g").await,
        (
            "incremental".into(),
            2,
            "people: 1 file(s) appended; merged into the existing groups".into()
        )
    );
    let text = |sql: &'static str| {
        let s = &s;
        async move {
            let batches = rows(s, sql).await;
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .unwrap()
                .to_string()
        }
    };
    let query = "SELECT name, count(*) AS n, sum(id) AS total, min(id) AS lo, max(id) AS hi, \
                 avg(id) AS mean FROM people GROUP BY name ORDER BY name";
    assert_eq!(
        text("SELECT * FROM g ORDER BY name").await,
        text(query).await
    );
    // The hidden state behind avg stays hidden.
    assert_eq!(
        rows(&s, "SELECT * FROM g").await[0].schema().fields().len(),
        6
    );
    // A removal drops the partial aggregate of the removed file's group
    // (a.csv, b.csv and c.csv are one group each) and merges the others:
    // b.csv's and c.csv's.
    source.remove("a.csv");
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW g").await,
        (
            "incremental".into(),
            2,
            "people: 1 file(s) removed; dropped 1 of 3 partial aggregate(s), merged with the others"
                .into()
        )
    );
    assert_eq!(
        text("SELECT * FROM g ORDER BY name").await,
        text(query).await
    );
    // A group that appears with a file and goes when it is rewritten.
    source.write("d.csv", &[(30, "third")]);
    let (mode, _, _) = refresh_row(&s, "REFRESH MATERIALIZED VIEW g").await;
    assert_eq!(mode, "incremental");
    assert_eq!(ids(&s, "SELECT count(*) FROM g").await, [3]);
    source.write("d.csv", &[(31, "odd")]);
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW g").await,
        (
            "incremental".into(),
            2,
            "people: 1 file(s) rewritten; recomputed 1 of 3 partial aggregate(s), merged with the others"
                .into()
        )
    );
    assert_eq!(
        text("SELECT * FROM g ORDER BY name").await,
        text(query).await
    );
}

/// A Hive-partitioned source refreshes incrementally like any other
/// listing table: files appended to a partition, a new partition, a
/// dropped partition and a rewritten file; each refresh reads the files
/// it fingerprinted (through a store that lists only those), and the
/// views equal their queries after each step.
#[tokio::test]
async fn partitioned_sources_refresh_incrementally() {
    let (_dir, s) = temp_session().await;
    let root = tempfile::tempdir().unwrap();
    let write = |day: &str, file: &str, ids: std::ops::Range<i64>| {
        let dir = root.path().join(format!("day={day}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("id,name\n");
        for id in ids {
            text.push_str(&format!("{id},n{}\n", id % 3));
        }
        std::fs::write(dir.join(file), text).unwrap();
    };
    write("2026-12-01", "a.csv", 0..10);
    write("2026-12-02", "b.csv", 10..20);
    s.sql(&format!(
        "CREATE EXTERNAL TABLE events (id BIGINT, name VARCHAR, day VARCHAR) STORED AS CSV \
         PARTITIONED BY (day) LOCATION '{}/' OPTIONS ('format.has_header' 'true')",
        root.path().display()
    ))
    .await
    .unwrap();
    let views = [
        (
            "picked",
            "SELECT id, name, day FROM events WHERE id % 2 = 0",
        ),
        (
            "per_day",
            "SELECT day, count(*) AS n, sum(id) AS total, max(name) AS top FROM events GROUP BY day",
        ),
    ];
    for (name, query) in views {
        s.sql(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    let text = |sql: String| {
        let s = &s;
        async move { common::sorted_text(rows(s, &sql).await) }
    };
    for (name, query) in views {
        assert_eq!(
            text(format!("SELECT * FROM {name}")).await,
            text(query.to_owned()).await,
            "created: {name}"
        );
    }
    for step in [
        "append to a partition",
        "a new partition",
        "a partition dropped",
        "a file rewritten",
    ] {
        match step {
            "append to a partition" => write("2026-12-02", "c.csv", 20..25),
            "a new partition" => write("2026-12-03", "d.csv", 30..33),
            "a partition dropped" => {
                std::fs::remove_dir_all(root.path().join("day=2026-12-01")).unwrap()
            }
            _ => write("2026-12-02", "b.csv", 40..44),
        }
        for (name, query) in views {
            let (mode, _, detail) =
                refresh_row(&s, &format!("REFRESH MATERIALIZED VIEW {name}")).await;
            assert_eq!(mode, "incremental", "{step}: {name}: {detail}");
            assert_eq!(
                text(format!("SELECT * FROM {name}")).await,
                text(query.to_owned()).await,
                "{step}: {name}"
            );
        }
    }
    // The stores registered for reading held files are gone with the
    // refreshes that used them.
    let registry = format!("{:?}", s.context().runtime_env().object_store_registry);
    assert!(!registry.contains("dfmv-pinned"), "{registry}");
}

/// `EXPLAIN REFRESH` shows what the cost rule compared; `INCREMENTAL`
/// skips the rule, and fails with the reason where the shape rules it out.
#[tokio::test]
async fn refresh_incremental_skips_the_cost_rule() {
    let (_dir, s) = temp_session().await;
    let source = Source::new();
    source.write("a.csv", &[(1, "a")]);
    s.sql(&source.register_sql("people")).await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT id, name FROM people WHERE id > 0")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW first AS SELECT id FROM people ORDER BY id LIMIT 1")
        .await
        .unwrap();
    // Ten times the rows of a.csv: more than half of the table.
    let more: Vec<(i64, &str)> = (2..12).map(|i| (i, "b")).collect();
    source.write("b.csv", &more);
    let explain = |sql: &'static str| {
        let s = &s;
        async move {
            let b = &rows(s, sql).await[0];
            let text = |i: usize| b.column(i).as_string::<i32>().value(0).to_owned();
            (text(1), text(4))
        }
    };
    let (mode, estimate) = explain("EXPLAIN REFRESH MATERIALIZED VIEW v").await;
    assert_eq!(mode, "full");
    let sizes = (
        std::fs::metadata(source.dir.path().join("a.csv"))
            .unwrap()
            .len(),
        std::fs::metadata(source.dir.path().join("b.csv"))
            .unwrap()
            .len(),
    );
    let total = sizes.0 + sizes.1;
    let share = sizes.1 as f64 * 100.0 / total as f64;
    assert_eq!(
        estimate,
        format!(
            "incremental reads {} bytes, full reads {total} ({share:.1}%); the cost rule (at most 50%) picks full",
            sizes.1
        )
    );
    let (mode, estimate) = explain("EXPLAIN REFRESH MATERIALIZED VIEW v INCREMENTAL").await;
    assert_eq!(mode, "incremental");
    assert!(
        estimate.ends_with("picks full; INCREMENTAL requested"),
        "{estimate}"
    );
    assert_eq!(
        refresh_row(&s, "REFRESH MATERIALIZED VIEW v INCREMENTAL").await,
        (
            "incremental".into(),
            10,
            "people: 1 file(s) appended; read the new files alone".into()
        )
    );
    assert_eq!(ids(&s, "SELECT count(*) FROM v").await, [11]);
    // A shape that cannot: the error says why, and nothing changes.
    let version = common::view(&s, "first").await.version;
    let options = datafusion_matview::RefreshOptions {
        incremental: true,
        ..Default::default()
    };
    let first = datafusion_matview::spec::QualifiedName::new("datafusion", "public", "first");
    let e = s.refresh_view(&first, &options).await.unwrap_err();
    assert_eq!(
        e.code(),
        datafusion_matview::ErrorCode::ObjectNotInPrerequisiteState
    );
    assert!(
        e.to_string().starts_with(
            "materialized view \"first\" cannot be refreshed incrementally: changed: people; not incremental: Limit"
        ),
        "{e}"
    );
    assert_eq!(common::view(&s, "first").await.version, version);
}

#[tokio::test]
async fn refresh_cascade_and_explain_refresh() {
    let (_dir, s) = temp_session().await;
    let source = Source::new();
    source.write("a.csv", &[(1, "a"), (2, "b"), (3, "c"), (4, "d")]);
    s.sql(&source.register_sql("people")).await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW base AS SELECT id FROM people WHERE id > 1")
        .await
        .unwrap();
    s.sql("CREATE VIEW plain AS SELECT id FROM base")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW top AS SELECT count(*) AS n FROM plain")
        .await
        .unwrap();
    source.write("b.csv", &[(5, "e")]);

    // EXPLAIN REFRESH says what would happen and changes nothing.
    let version = common::view(&s, "base").await.version;
    let explained = rows(&s, "EXPLAIN REFRESH MATERIALIZED VIEW base").await;
    let b = &explained[0];
    assert_eq!(b.column(1).as_string::<i32>().value(0), "incremental");
    assert_eq!(
        b.column(2).as_string::<i32>().value(0),
        "people: 1 file(s) appended; read the new files alone"
    );
    assert!(
        b.column(3)
            .as_string::<i32>()
            .value(0)
            .contains("TableScan"),
        "{:?}",
        b.column(3)
    );
    assert_eq!(common::view(&s, "base").await.version, version);
    assert_eq!(ids(&s, "SELECT count(*) FROM base").await, [3]);

    // Without CASCADE, only top: it reads base, which has not changed yet.
    let outcome = rows(&s, "REFRESH MATERIALIZED VIEW top").await;
    assert_eq!(outcome[0].column(1).as_string::<i32>().value(0), "no_op");
    // With CASCADE, base first (through the plain view), then top.
    let outcome = rows(&s, "REFRESH MATERIALIZED VIEW top CASCADE").await;
    let b = &outcome[0];
    let views: Vec<&str> = (0..b.num_rows())
        .map(|i| b.column(0).as_string::<i32>().value(i))
        .collect();
    let modes: Vec<&str> = (0..b.num_rows())
        .map(|i| b.column(1).as_string::<i32>().value(i))
        .collect();
    assert_eq!(views, ["base", "top"]);
    // top counts base's rows: it merges the count of base's new file.
    assert_eq!(modes, ["incremental", "incremental"]);
    assert_eq!(ids(&s, "SELECT n FROM top").await, [4]);
    // Nothing changed since: every view is a no_op.
    let outcome = rows(&s, "REFRESH MATERIALIZED VIEW top CASCADE").await;
    let b = &outcome[0];
    let modes: Vec<&str> = (0..b.num_rows())
        .map(|i| b.column(1).as_string::<i32>().value(i))
        .collect();
    assert_eq!(modes, ["no_op", "no_op"]);
}

/// Column statistics recorded at refresh let a scan skip whole files.
#[tokio::test]
async fn scans_skip_files_by_recorded_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let config = SessionConfig::new()
        .set_usize("datafusion.execution.soft_max_rows_per_output_file", 100)
        .set_usize("datafusion.execution.minimum_parallel_output_files", 1)
        .with_batch_size(100);
    let s = MatviewSession::open(
        SessionContext::new_with_config(config),
        &dir.path().display().to_string(),
    )
    .await
    .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT value AS id, 'x' AS tag FROM generate_series(1, 1000) ORDER BY id")
        .await
        .unwrap();
    let state = common::view(&s, "v").await;
    let files = &state.view.snapshot.as_ref().unwrap().files;
    assert!(files.len() >= 5, "{} files", files.len());
    assert_eq!(files[0].columns[0].min.as_deref(), Some("1"));
    assert_eq!(files[0].columns[1].max.as_deref(), Some("x"));
    let batches = rows(&s, "EXPLAIN ANALYZE SELECT tag FROM v WHERE id = 500").await;
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let expected = format!(
        "files_ranges_pruned_statistics={} total \u{2192} 1 matched",
        files.len()
    );
    assert!(text.contains(&expected), "{text}");
    assert_eq!(ids(&s, "SELECT id FROM v WHERE id = 500").await, [500]);
}

async fn row_count(s: &MatviewSession, sql: &str) -> usize {
    let batches = s.sql(sql).await.unwrap().collect().await.unwrap();
    batches.iter().map(|b| b.num_rows()).sum()
}

#[tokio::test]
async fn a_read_only_catalog_serves_reads_and_refuses_writes_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("cat").display().to_string();
    let store = datafusion_matview_testing::InstrumentedStore::new(Arc::new(
        object_store::local::LocalFileSystem::new(),
    ));
    let open = || async {
        let ctx = SessionContext::new();
        ctx.register_object_store(
            &url::Url::parse("file://").unwrap(),
            Arc::new(store.clone()),
        );
        let options = MatviewOptions {
            remember_relations: true,
            ..MatviewOptions::default()
        };
        MatviewSession::open_with_options(ctx, &location, options)
            .await
            .unwrap()
    };
    {
        let s = open().await;
        s.sql("CREATE VIEW p AS SELECT 1 AS x").await.unwrap();
        s.sql("CREATE VIEW p2 AS SELECT 3 AS z").await.unwrap();
        s.sql("CREATE MATERIALIZED VIEW v AS SELECT x FROM p")
            .await
            .unwrap();
        s.sql("CREATE MATERIALIZED VIEW w AS SELECT 2 AS y WITH NO DATA")
            .await
            .unwrap();
    }
    store.set_read_only(true);
    let s = open().await;
    // Reads work: the view, the remembered plain view, SHOW, a no_op.
    assert_eq!(row_count(&s, "SELECT x FROM v").await, 1);
    assert_eq!(row_count(&s, "SELECT x FROM p").await, 1);
    assert_eq!(row_count(&s, "SHOW MATERIALIZED VIEWS").await, 2);
    s.sql("REFRESH MATERIALIZED VIEW v").await.unwrap();
    for (statement, command) in [
        (
            "REFRESH MATERIALIZED VIEW v FULL",
            "REFRESH MATERIALIZED VIEW",
        ),
        ("REFRESH MATERIALIZED VIEW w", "REFRESH MATERIALIZED VIEW"),
        (
            "CREATE MATERIALIZED VIEW n AS SELECT 1 AS x",
            "CREATE MATERIALIZED VIEW",
        ),
        (
            "CREATE MATERIALIZED VIEW n AS SELECT 1 AS x WITH NO DATA",
            "CREATE MATERIALIZED VIEW",
        ),
        ("DROP MATERIALIZED VIEW v", "DROP MATERIALIZED VIEW"),
        ("CREATE VIEW q AS SELECT 1 AS x", "CREATE VIEW"),
        ("CREATE OR REPLACE VIEW p2 AS SELECT 4 AS z", "CREATE VIEW"),
        ("DROP VIEW p2", "DROP VIEW"),
    ] {
        let err = s.sql(statement).await.unwrap_err().to_string();
        let expected = format!(
            "cannot execute {command}: catalog \"{location}\" is read-only\n\
             DETAIL: "
        );
        assert!(err.starts_with(&expected), "{statement}: {err}");
        assert!(
            err.ends_with("HINT: Open a catalog you may write to; queries of this one still work."),
            "{statement}: {err}"
        );
    }
    // A relation that could not be remembered was not created (nor
    // replaced); one whose drop could not be recorded was not dropped, nor
    // was the view.
    assert!(s.sql("SELECT * FROM q").await.is_err());
    assert_eq!(ids(&s, "SELECT z FROM p2").await, [3]);
    s.sql("SELECT x FROM v").await.unwrap();
    // A refusal outside the catalog is not the catalog's.
    let other = tempfile::tempdir().unwrap();
    let err = s
        .sql(&format!(
            "COPY (SELECT 1 AS x) TO '{}/out.parquet'",
            other.path().display()
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(!err.contains("is read-only\nDETAIL"), "{err}");
    // Nothing changed.
    store.set_read_only(false);
    let s = open().await;
    assert_eq!(row_count(&s, "SELECT x FROM v").await, 1);
    assert!(s.sql("SELECT * FROM n").await.is_err());
}

#[tokio::test]
async fn create_says_what_it_did() {
    use datafusion_matview::sql::{Statement, parse_sql};
    use datafusion_matview::{CreateAction, CreateOutcome};
    let s = MatviewSession::open(SessionContext::new(), "memory:///cat")
        .await
        .unwrap();
    let create = |sql: &str| {
        let Some(Statement::Create(c)) = parse_sql(sql, "generic", 50).unwrap().pop() else {
            panic!("{sql}")
        };
        c
    };
    let outcome = |view: &str, action, rows_written, version| CreateOutcome {
        view: view.into(),
        action,
        rows_written,
        version,
    };
    let run = |sql: &'static str| {
        let c = create(sql);
        let s = &s;
        async move { s.create_materialized_view(&c).await.unwrap() }
    };
    assert_eq!(
        run("CREATE MATERIALIZED VIEW v AS SELECT 1 AS x UNION ALL SELECT 2").await,
        outcome("v", CreateAction::Created, Some(2), 1)
    );
    assert_eq!(
        run("CREATE MATERIALIZED VIEW IF NOT EXISTS v AS SELECT 1 AS x").await,
        outcome("v", CreateAction::Skipped, None, 1)
    );
    assert_eq!(
        run("CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT 1 AS x WITH NO DATA").await,
        // A new definition starts a new log of its own.
        outcome("v", CreateAction::Replaced, None, 1)
    );
    let batch = CreateOutcome::batch(&[outcome("v", CreateAction::Replaced, None, 2)]);
    assert_eq!(batch.num_columns(), 5);
    assert!(batch.column(3).is_null(0));
}

/// `n total → m matched` of metric `name` in EXPLAIN ANALYZE's text.
fn pruning(explained: &str, name: &str) -> (u64, u64) {
    let at = explained.find(&format!("{name}=")).expect(name) + name.len() + 1;
    let mut words = explained[at..].split_whitespace();
    let total = words.next().unwrap().parse().unwrap();
    assert_eq!((words.next(), words.next()), (Some("total"), Some("→")));
    (total, words.next().unwrap().parse().unwrap())
}

#[tokio::test]
async fn a_filter_prunes_files_and_row_groups_of_a_view() {
    let s = MatviewSession::open(SessionContext::new(), "memory:///cat")
        .await
        .unwrap();
    // The session's Parquet settings shape the view's files: row groups
    // of at most 1,000 rows.
    s.sql("SET datafusion.execution.parquet.max_row_group_size = 1000")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT value AS n FROM generate_series(1, 10000)")
        .await
        .unwrap();
    let explain = |sql: &'static str| {
        let s = &s;
        async move {
            let batches = s
                .sql(&format!("EXPLAIN ANALYZE {sql}"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .unwrap()
                .to_string()
        }
    };
    let text = explain("SELECT count(*) FROM v WHERE n > 9500").await;
    // However the writer split the rows into files, at most one row group
    // (1,000 rows) reaches the filter: the others were skipped unread.
    let (total, matched) = pruning(&text, "row_groups_pruned_statistics");
    assert!(matched < total, "{text}");
    let at = text.find("selectivity=").unwrap();
    let read: u64 = text[at..]
        .split(&['/', ')'][..])
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!((500..=1000).contains(&read), "{read} rows read: {text}");
    let rows = s
        .sql("SELECT count(*) FROM v WHERE n > 9500")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows[0].column(0).as_primitive::<Int64Type>().value(0), 500);
    // Whole files are skipped on the manifest's statistics.
    s.sql(
        "CREATE MATERIALIZED VIEW w AS SELECT value AS n FROM generate_series(1, 1000) \
           UNION ALL SELECT value + 5000 FROM generate_series(1, 1000)",
    )
    .await
    .unwrap();
    let name = datafusion_matview::spec::QualifiedName::new("datafusion", "public", "w");
    let state = s.catalog().view(&name).await.unwrap().unwrap();
    let files = state.view.snapshot.as_ref().unwrap().files.len();
    assert_eq!(files, 2);
    let text = explain("SELECT count(*) FROM w WHERE n > 5500").await;
    assert_eq!(
        pruning(&text, "files_ranges_pruned_statistics"),
        (2, 1),
        "{text}"
    );
}

#[tokio::test]
async fn commit_requirements_say_what_another_session_did() {
    use datafusion_matview::Requirement;
    use datafusion_matview::spec::QualifiedName;
    let s = MatviewSession::open(SessionContext::new(), "memory:///cat")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT 1 AS x")
        .await
        .unwrap();
    let m = s.catalog().index();
    let name = |n: &str| QualifiedName::new("datafusion", "public", n);
    let state = s.catalog().view(&name("v")).await.unwrap().unwrap();
    let view = &state.view;
    let met = [
        Requirement::ViewAbsent(name("w")),
        Requirement::ViewIs {
            name: name("v"),
            id: view.id.clone(),
        },
        Requirement::SnapshotIs {
            name: name("v"),
            id: view.snapshot.as_ref().map(|s| s.id.clone()),
        },
        Requirement::SnapshotIs {
            name: name("w"),
            id: None,
        },
    ];
    Requirement::check_all(&met, &m, Some(&state), "v").unwrap();
    let unmet = |r: Requirement| {
        Requirement::check_all(&[r], &m, Some(&state), "v")
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        unmet(Requirement::ViewAbsent(name("v"))),
        "relation \"v\" already exists"
    );
    let conflict = |why: &str| {
        format!(
            "{}",
            Error::CommitConflict {
                name: "v".into(),
                reason: why.into()
            }
        )
    };
    assert_eq!(
        unmet(Requirement::ViewIs {
            name: name("w"),
            id: view.id.clone()
        }),
        conflict("it was dropped by another session")
    );
    assert_eq!(
        unmet(Requirement::ViewIs {
            name: name("v"),
            id: "another".into()
        }),
        conflict("it was replaced by another session")
    );
    assert_eq!(
        unmet(Requirement::SnapshotIs {
            name: name("v"),
            id: None
        }),
        conflict("it was refreshed by another session")
    );
}

/// Writes a Parquet file of `(k Int64, c <string type>)` rows.
fn write_parquet(
    path: &std::path::Path,
    keys: &[i64],
    strings: datafusion::arrow::array::ArrayRef,
) {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", datafusion::arrow::datatypes::DataType::Int64, false),
        Field::new("c", strings.data_type().clone(), true),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(Int64Array::from(keys.to_vec())), strings],
    )
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// Issue 36: a remembered table comes back in another process as it was
/// created — its schema, not one inferred again — and only when a
/// statement names it: opening the catalog reads and lists no source file.
/// A file written later with another string type neither loses the table
/// nor changes what it means; a catalog written before schemas were kept
/// infers once and then keeps the schema.
#[tokio::test]
async fn remembered_tables_are_built_when_first_used_with_their_schema() {
    use datafusion::arrow::array::{StringArray, StringViewArray};
    use datafusion_matview_testing::InstrumentedStore;
    let catalog = Arc::new(InMemory::new());
    let src = tempfile::tempdir().unwrap();
    let folder = src.path().join("t");
    std::fs::create_dir(&folder).unwrap();
    write_parquet(
        &folder.join("a.parquet"),
        &[1, 2],
        Arc::new(StringViewArray::from(vec!["x", "y"])),
    );
    // Each call is a new process: its own context, the shared catalog, and
    // the source files read through a store that counts requests.
    let process = || {
        let catalog = Arc::clone(&catalog);
        async move {
            let files =
                InstrumentedStore::new(Arc::new(object_store::local::LocalFileSystem::new()));
            let ctx =
                SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
            ctx.register_object_store(&url::Url::parse("memory://").unwrap(), catalog as _);
            ctx.register_object_store(
                &url::Url::parse("file://").unwrap(),
                Arc::new(files.clone()),
            );
            let s = MatviewSession::open_with_options(
                ctx,
                "memory:///catalog",
                MatviewOptions {
                    remember_relations: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            (s, files)
        }
    };
    let requests = |files: &InstrumentedStore| {
        use std::sync::atomic::Ordering::SeqCst;
        let c = files.counters();
        c.gets.load(SeqCst) + c.heads.load(SeqCst) + c.lists.load(SeqCst)
    };
    let type_of = |s: MatviewSession, column: &'static str| async move {
        let batches = rows(
            &s,
            &format!(
                "SELECT data_type FROM information_schema.columns \
                 WHERE table_name = 't' AND column_name = '{column}'"
            ),
        )
        .await;
        batches[0].column(0).as_string::<i32>().value(0).to_owned()
    };

    let (a, _) = process().await;
    a.sql(&format!(
        "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}/'",
        folder.display()
    ))
    .await
    .unwrap();
    a.sql("CREATE VIEW pv AS SELECT k, c FROM t").await.unwrap();
    a.sql("CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n, max(c) AS m FROM pv")
        .await
        .unwrap();
    let created_as = type_of(a.clone(), "c").await;
    assert_eq!(created_as, "Utf8View");

    // A catalog from before schemas were kept: the next process infers the
    // table once and keeps what it found.
    a.catalog()
        .commit_unchecked(|index| {
            for relation in &mut index.relations {
                relation.resolved = None;
            }
            Ok(())
        })
        .await
        .unwrap();
    let (old, _) = process().await;
    assert_eq!(ids(&old, "SELECT count(*) FROM t").await, [2]);
    let kept = old
        .catalog()
        .relation(&datafusion_matview::spec::QualifiedName::new(
            "datafusion",
            "public",
            "t",
        ));
    let resolved = kept.and_then(|r| r.resolved).expect("the schema is kept");
    assert_eq!(
        resolved
            .schema
            .field_with_name("c")
            .unwrap()
            .data_type()
            .to_string(),
        "Utf8View"
    );

    // Another writer adds a file whose strings are plain Utf8.
    write_parquet(
        &folder.join("b.parquet"),
        &[3],
        Arc::new(StringArray::from(vec!["z"])),
    );
    let (b, files) = process().await;
    rows(&b, "SELECT 1").await;
    assert_eq!(requests(&files), 0, "opening the catalog read source files");
    // The table is there, as it was created, with every file's rows.
    assert_eq!(type_of(b.clone(), "c").await, created_as);
    assert_eq!(ids(&b, "SELECT k FROM t ORDER BY k").await, [1, 2, 3]);
    assert!(requests(&files) > 0);
    // And the views over it work.
    b.sql("REFRESH MATERIALIZED VIEW mv").await.unwrap();
    let batches = rows(&b, "SELECT n, m FROM mv").await;
    assert_eq!(batches[0].column(0).as_primitive::<Int64Type>().value(0), 3);
    let (c, _) = process().await;
    assert_eq!(freshness_of(&c, "mv").await, ("fresh".to_owned(), None));
}

/// A file written later with another type for a column fails the
/// statements that read it, naming the file and the column (queries
/// through dfmv and the server, and REFRESH), and leaves the table and
/// its views in the catalog; once the file is gone, everything works
/// again (issue 36).
#[tokio::test]
async fn a_file_of_another_type_is_named_and_the_table_stays() {
    use datafusion::arrow::array::{Int64Array, StringArray};
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("t");
    std::fs::create_dir(&folder).unwrap();
    // `c` holds numbers here (the helper names its second column `c`).
    write_parquet(
        &folder.join("a.parquet"),
        &[1, 2],
        Arc::new(Int64Array::from(vec![10, 20])),
    );
    let location = dir.path().join("catalog").display().to_string();
    let open = || async {
        MatviewSession::open_with_options(
            SessionContext::new(),
            &location,
            MatviewOptions {
                remember_relations: true,
                ..Default::default()
            },
        )
        .await
        .unwrap()
    };
    let a = open().await;
    a.sql(&format!(
        "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}/'",
        folder.display()
    ))
    .await
    .unwrap();
    a.sql("CREATE MATERIALIZED VIEW v AS SELECT sum(c) AS s FROM t")
        .await
        .unwrap();
    // Another writer adds a file whose `c` is a string.
    let bad = folder.join("b.parquet");
    write_parquet(&bad, &[3], Arc::new(StringArray::from(vec!["x"])));

    let b = open().await;
    let df = b.sql("SELECT sum(c) FROM t").await.unwrap();
    let plan = df.logical_plan().clone();
    let err = df.collect().await.unwrap_err();
    assert!(datafusion_matview::session::is_cast_error(&err), "{err}");
    let file = b.mismatched_file(&plan).await.expect("the file is found");
    assert_eq!(file.path, format!("file://{}", bad.display()));
    assert_eq!((file.table.as_str(), file.column.as_str()), ("t", "c"));
    assert!(file.file_type.is_string(), "{}", file.file_type);
    assert_eq!(
        file.table_type,
        datafusion::arrow::datatypes::DataType::Int64
    );
    // Through a plain view too.
    b.sql("CREATE VIEW pv AS SELECT k, c FROM t").await.unwrap();
    let plan = b
        .sql("SELECT c + 1 FROM pv")
        .await
        .unwrap()
        .logical_plan()
        .clone();
    assert_eq!(b.mismatched_file(&plan).await, Some(file.clone()));

    let err = b
        .sql("REFRESH MATERIALIZED VIEW v")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("could not refresh materialized view \"v\": ")
            && err.contains(&format!(
                "DETAIL: file file://{} of table \"t\" has column \"c\" as",
                bad.display()
            ))
            && err.contains("but the table reads it as Int64.\nHINT: "),
        "{err}"
    );
    // CREATE too: it names the file, and leaves no view behind.
    let err = b
        .sql("CREATE MATERIALIZED VIEW w AS SELECT sum(c) AS s FROM t")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("DETAIL: file file://{} of table", bad.display())),
        "{err}"
    );
    assert!(b.sql("SELECT * FROM w").await.is_err());
    // The table and the view stay, the view with its data.
    assert!(b.catalog().relations().iter().any(|r| r.name.name == "t"));
    assert_eq!(ids(&b, "SELECT s FROM v").await, [30]);
    std::fs::remove_file(&bad).unwrap();
    let c = open().await;
    c.sql("REFRESH MATERIALIZED VIEW v").await.unwrap();
    assert_eq!(ids(&c, "SELECT s FROM v").await, [30]);
    assert_eq!(ids(&c, "SELECT sum(c) FROM t").await, [30]);

    // When the files are right and the table is not, the user asks for
    // the schema to be inferred again, and every later process keeps that.
    let other = dir.path().join("u");
    std::fs::create_dir(&other).unwrap();
    write_parquet(
        &other.join("a.parquet"),
        &[1],
        Arc::new(Int64Array::from(vec![10])),
    );
    let create = format!(
        "CREATE OR REPLACE EXTERNAL TABLE u STORED AS PARQUET LOCATION '{}/'",
        other.display()
    );
    c.sql(&create).await.unwrap();
    write_parquet(
        &other.join("a.parquet"),
        &[1],
        Arc::new(StringArray::from(vec!["ten"])),
    );
    let d = open().await;
    let err = d
        .sql("SELECT c FROM u")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(datafusion_matview::session::is_cast_error(&err), "{err}");
    d.sql(&create).await.unwrap();
    let e = open().await;
    let batches = rows(&e, "SELECT c FROM u").await;
    assert_eq!(
        datafusion::arrow::util::display::array_value_to_string(batches[0].column(0), 0).unwrap(),
        "ten"
    );
    let u = e
        .catalog()
        .relations()
        .into_iter()
        .find(|r| r.name.name == "u")
        .unwrap();
    assert!(
        u.resolved
            .unwrap()
            .schema
            .field_with_name("c")
            .unwrap()
            .data_type()
            .is_string()
    );
}

/// A statement that names one view, in a process that has just opened a
/// catalog of many views, parses only that view's block of the newest
/// checkpoint: querying, refreshing and describing it, committing a new
/// view, and dropping one (issue 35); a page of the listing parses the
/// blocks it shows.
/// Listing every view parses the rest.
#[tokio::test]
async fn one_view_statements_parse_one_block_of_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("catalog").to_string_lossy().into_owned();
    let s = MatviewSession::open(SessionContext::new(), &location)
        .await
        .unwrap();
    // 200 views, unpopulated but v100, v150 reading v100; the newest
    // checkpoint, at index version 192, holds v000 to v191 in three blocks
    // of 64, and that v150 reads v100.
    for i in 0..200 {
        let data = if i == 100 { "" } else { " WITH NO DATA" };
        let from = if i == 150 { " FROM v100" } else { "" };
        s.sql(&format!(
            "CREATE MATERIALIZED VIEW v{i:03} AS SELECT {i} AS x{from}{data}"
        ))
        .await
        .unwrap();
    }
    let s = MatviewSession::open(SessionContext::new(), &location)
        .await
        .unwrap();
    let parsed = |s: &MatviewSession| s.catalog().index().views.checkpoint_blocks_parsed();
    assert_eq!(parsed(&s), Some((0, 3)), "opening parses no view");
    // A query also looks up the views that read what it names (v150 reads
    // v100), which may answer it: see the end.
    s.sql("SET matview.rewrite = 'off'").await.unwrap();
    let rows = s
        .sql("SELECT x FROM v100")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows[0].column(0).as_primitive::<Int64Type>().value(0), 100);
    s.sql("REFRESH MATERIALIZED VIEW v100 FULL")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let name = datafusion_matview::spec::QualifiedName::new("datafusion", "public", "v100");
    assert_eq!(s.describe(&name).await.unwrap().name, "v100");
    assert_eq!(
        parsed(&s),
        Some((1, 3)),
        "one view's statements parse its block"
    );
    // Its name falls in v100's block, which says it is new.
    s.sql("CREATE MATERIALIZED VIEW v100a AS SELECT 1 AS y")
        .await
        .unwrap();
    assert_eq!(
        parsed(&s),
        Some((1, 3)),
        "committing a new view parses only the block of its name"
    );
    // Dropping finds what depends on a view in the checkpoint's readers
    // (v150, whose entry is in another block), and drops one on which
    // nothing depends, parsing nothing more.
    let err = s
        .sql("DROP MATERIALIZED VIEW v100")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("materialized view v150 depends on materialized view v100"),
        "{err}"
    );
    s.sql("DROP MATERIALIZED VIEW v101").await.unwrap();
    assert_eq!(
        parsed(&s),
        Some((1, 3)),
        "dropping a view parses only the block of its name"
    );
    // A page of the listing from a name parses the blocks it shows.
    let page = s.list_views(None, Some(&name), 3).await.unwrap();
    let page: Vec<&str> = page.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(page, ["v100a", "v102", "v103"]);
    assert_eq!(
        parsed(&s),
        Some((1, 3)),
        "a page parses the blocks it shows"
    );
    // With the rewrite on, a query over v100 also reads the entry of v150,
    // which reads v100 (another block).
    s.sql("RESET matview.rewrite").await.unwrap();
    s.sql("SELECT x FROM v100")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        parsed(&s),
        Some((2, 3)),
        "a query parses the blocks of the views that read what it names"
    );
    let listed = s.list_views(None, None, 1000).await.unwrap();
    assert_eq!(listed.len(), 200);
    assert_eq!(parsed(&s), Some((3, 3)), "listing parses every block");
}
