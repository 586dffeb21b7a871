//! Unit tests of the catalog.

use super::index::CHECKPOINT_FIRST_READ;
use super::journal::LatestPointer;
use super::*;
use crate::spec::RelationEntry;
use object_store::memory::InMemory;

async fn catalog(store: Arc<dyn ObjectStore>, retention: Duration) -> Catalog {
    open_catalog(store, retention).await.unwrap()
}

/// Opens the catalog under `cat/` of `store`, or says why it cannot.
async fn open_catalog(store: Arc<dyn ObjectStore>, retention: Duration) -> Result<Catalog> {
    Catalog::open(
        "memory:///cat",
        ObjectStoreUrl::parse("memory://").unwrap(),
        store,
        Path::from("cat"),
        retention,
    )
    .await
}

#[tokio::test]
async fn commits_are_numbered_and_visible_to_a_second_reader() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let b = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    assert_eq!(a.index().version, 0);
    let ((), m) = a.commit_change(|_| Ok(())).await.unwrap();
    assert_eq!(m.version, 1);
    // b is behind; its commit must land on top of a's, not beside it.
    let ((), m) = b.commit_change(|_| Ok(())).await.unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(a.reload().await.unwrap().version, 2);
}

#[tokio::test]
async fn a_commit_whose_put_failed_after_landing_is_known_as_its_own() {
    use datafusion_matview_testing::{Fault, FaultAction, InstrumentedStore};
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store = Arc::new(InstrumentedStore::new(Arc::clone(&memory)));
    let c = catalog(
        Arc::clone(&store) as Arc<dyn ObjectStore>,
        DEFAULT_RETENTION,
    )
    .await;
    c.commit_change(|_| Ok(())).await.unwrap();
    c.index_log.settle_pointer().await;
    // The put of version 2 reaches the store, then reports an error (a
    // timeout after S3 kept the object): read back, it is this commit's.
    store.set_fault(Some(Fault {
        at_write: 1,
        after: true,
        action: FaultAction::Error,
    }));
    let (runs, m) = c.commit_change(|_| Ok(1)).await.unwrap();
    assert_eq!((runs, m.version), (1, 2));
    let reader = catalog(Arc::clone(&memory), DEFAULT_RETENTION).await;
    assert_eq!(reader.index().commit_id, m.commit_id);
    assert_eq!(reader.index().version, 2);
    c.index_log.settle_pointer().await;
    // A put that fails before reaching the store: the error is the
    // put's, and it does not prove the commit was rejected (the caller
    // keeps its files for the orphan sweep).
    store.set_fault(Some(Fault {
        at_write: 1,
        after: false,
        action: FaultAction::Error,
    }));
    let err = c.commit_change(|_| Ok(())).await.unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(matches!(err, CommitFailure::Unknown(_)), "{err:?}");
    assert_eq!(reader.reload().await.unwrap().version, 2);
    // A precondition that fails does prove it.
    store.set_fault(None);
    let err = c
        .commit_change(|_| -> Result<()> {
            Err(Error::CommitConflict {
                name: "v".into(),
                reason: "test".into(),
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, CommitFailure::Rejected(Error::CommitConflict { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_conflicting_commit_reruns_the_change_on_the_winner() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let b = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    a.commit_change(|_| Ok(())).await.unwrap();
    let mut seen = vec![];
    // b still believes version 0 is the latest until its put fails.
    *b.index.write().unwrap() = Arc::new(Index::default());
    b.commit_change(|m| {
        seen.push(m.version);
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(seen, vec![1]);
}

#[tokio::test]
async fn a_commit_gives_up_after_its_last_lost_race_only() {
    let mut retries = super::commit::Retries::new("memory:///cat");
    for _ in 1..MAX_COMMIT_ATTEMPTS {
        retries.lost().await.unwrap();
    }
    let failure = retries.lost().await.unwrap_err();
    assert!(
        matches!(failure, CommitFailure::Rejected(Error::TooManyRetries { attempts, .. }) if attempts == MAX_COMMIT_ATTEMPTS),
        "{failure:?}"
    );
}

#[tokio::test]
async fn a_commit_s_requirements_are_checked_on_the_index_it_lands_on() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let b = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let view = test_view("w", &crate::spec::new_id());
    let name = view.name.clone();
    let slot = a.create_view_log(&view).await.unwrap();
    let create = IndexCommit::new("w")
        .require([Requirement::ViewAbsent(name.clone())])
        .update(IndexUpdate::PutView(index_entry(&view, slot.clone())));
    // b still believes the index is empty while a creates the view.
    *b.index.write().unwrap() = Arc::new(Index::default());
    let landed = a.commit(&create).await.unwrap();
    assert!(landed.view(&name).is_some());
    // The same commit from b: its requirement is checked on the index
    // that has the view now, not the one b started from, and nothing
    // lands.
    let failure = b.commit(&create).await.unwrap_err();
    assert!(
        matches!(&failure, CommitFailure::Rejected(Error::AlreadyExists { name }) if name == "w"),
        "{failure:?}"
    );
    assert_eq!(b.reload().await.unwrap().version, landed.version);
    // A drop that requires no readers of w, and a view reading w created
    // by another writer meanwhile: the drop is refused.
    let mut reader = test_view("r", &crate::spec::new_id());
    reader.definition.sources = vec![name.clone()];
    let reader_slot = a.create_view_log(&reader).await.unwrap();
    let drop = IndexCommit::new("w")
        .require([Requirement::NoDependents {
            name: name.clone(),
            kind: "materialized view".into(),
            dropping: vec![name.clone()],
        }])
        .update(IndexUpdate::RemoveView(name.clone()));
    a.commit(
        &IndexCommit::new("r").update(IndexUpdate::PutView(index_entry(&reader, reader_slot))),
    )
    .await
    .unwrap();
    let failure = b.commit(&drop).await.unwrap_err();
    assert!(
        matches!(
            failure,
            CommitFailure::Rejected(Error::DependentObjects { .. })
        ),
        "{failure:?}"
    );
    assert!(b.reload().await.unwrap().view(&name).is_some());
}

#[tokio::test]
async fn a_view_commit_checks_the_snapshot_it_was_planned_against() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let b = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    const S1: &str = "11111111111111111111111111111111";
    const S2: &str = "22222222222222222222222222222222";
    let view = test_view("v", S1);
    let name = view.name.clone();
    let slot = a.create_view_log(&view).await.unwrap();
    put_views(&a, &[index_entry(&view, slot)]).await;
    let planned = [Requirement::SnapshotIs {
        name: name.clone(),
        id: Some(S1.into()),
    }];
    let next = test_view("v", S2).snapshot.unwrap();
    let refreshed = a
        .commit_view(
            &name,
            "v",
            &ViewCommit::new()
                .require(planned.clone())
                .set_snapshot(next.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        refreshed.view.snapshot.as_ref().map(|s| s.id.as_str()),
        Some(S2)
    );
    // A second refresh planned against S1 lands on S2: refused, nothing
    // written.
    let failure = b
        .commit_view(
            &name,
            "v",
            &ViewCommit::new().require(planned).set_snapshot(next),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&failure, CommitFailure::Rejected(Error::CommitConflict { reason, .. }) if reason.contains("refreshed")),
        "{failure:?}"
    );
    assert_eq!(
        b.view(&name).await.unwrap().unwrap().version,
        refreshed.version
    );
}

#[tokio::test]
async fn a_remembered_table_s_schema_is_kept_only_while_it_is_unchanged() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let relation = RelationEntry {
        name: QualifiedName::new("datafusion", "public", "t"),
        kind: crate::spec::RelationKind::ExternalTable,
        sql: "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/a/'".into(),
        default_catalog: "datafusion".into(),
        default_schema: "public".into(),
        withheld_options: vec![],
        resolved: None,
    };
    c.commit(&IndexCommit::new("t").update(IndexUpdate::PutRelation(relation.clone())))
        .await
        .unwrap();
    let replaced = RelationEntry {
        sql: "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/b/'".into(),
        ..relation.clone()
    };
    c.commit(&IndexCommit::new("t").update(IndexUpdate::PutRelation(replaced.clone())))
        .await
        .unwrap();
    let resolved = crate::spec::ResolvedTable {
        schema: datafusion::arrow::datatypes::Schema::empty(),
        partition_columns: vec![],
        locations: vec![],
        file_extension: ".parquet".into(),
    };
    let keep = |relation: &RelationEntry| {
        IndexCommit::new("t").update(IndexUpdate::KeepResolved {
            relation: relation.clone(),
            resolved: resolved.clone(),
        })
    };
    // What was read before the replacement is not kept over it.
    let failure = c.commit(&keep(&relation)).await.unwrap_err();
    assert!(failure.is_rejected(), "{failure:?}");
    assert!(c.index().relations[0].resolved.is_none());
    let kept = c.commit(&keep(&replaced)).await.unwrap();
    assert_eq!(kept.relations[0].resolved.as_ref(), Some(&resolved));
}

#[tokio::test]
async fn an_idle_writer_commits_after_versions_cleaned_up_under_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idle = catalog(Arc::clone(&store), Duration::ZERO).await;
    idle.commit_change(|_| Ok(())).await.unwrap();
    let busy = catalog(Arc::clone(&store), Duration::ZERO).await;
    busy.commit_change(|_| Ok(())).await.unwrap();
    busy.commit_change(|_| Ok(())).await.unwrap();
    // Versions 1 and 2 are gone: version 2 no longer exists to tell the
    // idle writer that version 1 was superseded.
    let report = busy.cleanup(Sweep::Full).await.unwrap();
    assert_eq!(report.manifests_deleted, 2);
    let ((), m) = idle.commit_change(|_| Ok(())).await.unwrap();
    assert_eq!(m.version, 4, "lands on top of version 3, not beside it");
    assert_eq!(busy.reload().await.unwrap().version, 4);
}

#[tokio::test]
async fn a_reader_repairs_a_pointer_left_far_behind() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    for _ in 0..6 {
        c.commit_change(|_| Ok(())).await.unwrap();
    }
    c.reload().await.unwrap();
    let pointer = || async {
        let bytes = store
            .get(&c.path("_matview/_latest.json"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        serde_json::from_slice::<LatestPointer>(&bytes)
            .unwrap()
            .version
    };
    assert_eq!(pointer().await, 6, "commits keep it current");
    // As if the pointer writes of five commits had been lost.
    store
        .put(
            &c.path("_matview/_latest.json"),
            PutPayload::from(r#"{"version":1}"#),
        )
        .await
        .unwrap();
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    assert_eq!(reader.index().version, 6);
    reader.reload().await.unwrap();
    assert_eq!(pointer().await, 6, "repaired by the reader");
}

#[tokio::test]
async fn versions_are_deleted_once_expired_without_listing_each_commit() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = catalog(Arc::clone(&store), Duration::from_millis(300)).await;
    c.commit_change(|_| Ok(())).await.unwrap();
    c.commit_change(|_| Ok(())).await.unwrap();
    assert_eq!(c.cleanup(Sweep::Quick).await.unwrap().manifests_deleted, 0);
    let due = c.log_sweep_due().expect("scheduled after listing");
    assert!(due > Utc::now(), "not due before version 2 expires");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(c.cleanup(Sweep::Quick).await.unwrap().manifests_deleted, 1);
    assert_eq!(c.index_log.list_versions().await.unwrap().len(), 1);
    // Nothing else can expire until the next commit.
    assert_eq!(c.log_sweep_due(), Some(DateTime::<Utc>::MAX_UTC));
    c.commit_change(|_| Ok(())).await.unwrap();
    assert!(c.log_sweep_due() < Some(DateTime::<Utc>::MAX_UTC));
}

#[tokio::test]
async fn unreadable_and_newer_manifests_are_named() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    store
        .put(
            &Path::from("cat/_matview/log/00000000000000000001.json"),
            PutPayload::from("{not json"),
        )
        .await
        .unwrap();
    let err = open_catalog(Arc::clone(&store), DEFAULT_RETENTION)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cat/_matview/log/00000000000000000001.json is unreadable"),
        "{err}"
    );
    store
        .put(
            &Path::from("cat/_matview/log/00000000000000000002.json"),
            PutPayload::from(r#"{"format_version": 99}"#),
        )
        .await
        .unwrap();
    let err = Catalog::open(
        "m",
        ObjectStoreUrl::parse("memory://").unwrap(),
        store,
        Path::from("cat"),
        DEFAULT_RETENTION,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedFormat { found: 99, .. }),
        "{err}"
    );
}

/// A one-row Parquet file whose key-value metadata names `snapshot`,
/// as the catalog's writers leave it.
fn parquet_of_snapshot(snapshot: &str) -> Vec<u8> {
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::metadata::KeyValue;
    use datafusion::parquet::file::properties::WriterProperties;
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(Int64Array::from(vec![1]))],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_key_value_metadata(Some(vec![KeyValue::new(
            META_SNAPSHOT.to_owned(),
            snapshot.to_owned(),
        )]))
        .build();
    let mut bytes = vec![];
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    bytes
}

#[tokio::test]
async fn cleanup_keeps_the_latest_version_and_live_files() {
    const S1: &str = "11111111111111111111111111111111";
    const S2: &str = "22222222222222222222222222222222";
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = catalog(Arc::clone(&store), Duration::ZERO).await;
    store
        .put(
            &c.path("public/v/11111111111111111111111111111111/a.parquet"),
            PutPayload::from("x"),
        )
        .await
        .unwrap();
    store
        .put(
            &c.path("public/v/22222222222222222222222222222222/b.parquet"),
            PutPayload::from("y"),
        )
        .await
        .unwrap();
    let name = crate::spec::QualifiedName::new("datafusion", "public", "v");
    // The view's snapshot holds the one file each test file above is.
    let entry = |snap: &str, file: &str| {
        let mut view = test_view("v", snap);
        if let Some(snapshot) = view.snapshot.as_mut() {
            snapshot.files[0].path = file.into();
        }
        view
    };
    let first = entry(S1, "public/v/11111111111111111111111111111111/a.parquet");
    let slot = c.create_view_log(&first).await.unwrap();
    c.commit_change(|index| {
        index.put_view(index_entry(&first, slot.clone()));
        Ok(())
    })
    .await
    .unwrap();
    let second = entry(S2, "public/v/22222222222222222222222222222222/b.parquet");
    c.commit_view_change(&name, "v", |_, view| {
        view.set_snapshot(second.snapshot.clone().unwrap());
        Ok(())
    })
    .await
    .unwrap();
    // What the catalog did not write, inside and around a view's
    // folder: never deleted, however old.
    let strangers = [
        "other/data.txt",
        "public/stranger/x.parquet",
        "public/stranger/99999999999999999999999999999999/part-00000.parquet",
        "public/v/notes.txt",
        "public/v/x.parquet",
        "public/v/not-a-snapshot/part-00000.parquet",
        "public/v/99999999999999999999999999999999/notes.txt",
        "public/v/99999999999999999999999999999999/sub/part-00000.parquet",
        "_matview/notes.txt",
    ];
    for stranger in strangers {
        store
            .put(&c.path(stranger), PutPayload::from("mine"))
            .await
            .unwrap();
    }
    // A file no version references, as a crashed writer leaves it: its
    // footer names its snapshot.
    store
        .put(
            &c.path("public/v/99999999999999999999999999999999/orphan.parquet"),
            PutPayload::from(parquet_of_snapshot("99999999999999999999999999999999")),
        )
        .await
        .unwrap();
    // A Parquet file of the right shape that is not the catalog's.
    store
        .put(
            &c.path("public/v/88888888888888888888888888888888/part-00000.parquet"),
            PutPayload::from(parquet_of_snapshot("someone else's")),
        )
        .await
        .unwrap();
    let report = c.cleanup(Sweep::Quick).await.unwrap();
    // s1 was retired by the view's version 2, which superseded version 1.
    assert_eq!(
        report,
        CleanupReport {
            manifests_deleted: 1,
            files_deleted: 1,
            history_deleted: 0
        }
    );
    let view_log = c.view_log(&slot);
    assert_eq!(view_log.log.list_versions().await.unwrap().len(), 1);
    assert!(
        store
            .head(&c.path("public/v/22222222222222222222222222222222/b.parquet"))
            .await
            .is_ok()
    );
    assert!(
        store
            .head(&c.path("public/v/11111111111111111111111111111111/a.parquet"))
            .await
            .is_err()
    );
    // The entry of the deleted files leaves with the view's next commit;
    // a second cleanup does not delete them again.
    assert_eq!(c.view(&name).await.unwrap().unwrap().retired.len(), 1);
    assert_eq!(
        c.cleanup(Sweep::Quick).await.unwrap(),
        CleanupReport::default()
    );
    let (_, state) = c
        .commit_view_change(&name, "v", |_, _| Ok(()))
        .await
        .unwrap();
    assert!(state.retired.is_empty());
    assert_eq!(state.version, 3);
    // The catalog still opens at the latest version.
    let again = catalog(Arc::clone(&store), Duration::ZERO).await;
    assert_eq!(again.index().version, 1);
    assert_eq!(again.view(&name).await.unwrap().unwrap().version, 3);
    assert!(
        store
            .head(&c.path("public/v/99999999999999999999999999999999/orphan.parquet"))
            .await
            .is_ok()
    );
    // The full sweep finds the orphan and the view's version 2, and
    // nothing else.
    assert_eq!(
        c.cleanup(Sweep::Full).await.unwrap(),
        CleanupReport {
            manifests_deleted: 1,
            files_deleted: 1,
            history_deleted: 0
        }
    );
    assert!(
        store
            .head(&c.path("public/v/22222222222222222222222222222222/b.parquet"))
            .await
            .is_ok()
    );
    assert_eq!(
        c.cleanup(Sweep::Full).await.unwrap(),
        CleanupReport::default()
    );
    for stranger in strangers
        .iter()
        .chain(&["public/v/88888888888888888888888888888888/part-00000.parquet"])
    {
        assert!(store.head(&c.path(stranger)).await.is_ok(), "{stranger}");
    }
}

#[test]
fn only_refusals_under_the_root_are_the_catalogs() {
    #[derive(Debug)]
    struct Local(String);
    impl std::fmt::Display for Local {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "Unable to open file {}: Permission denied (os error 13)",
                self.0
            )
        }
    }
    impl std::error::Error for Local {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*DENIED)
        }
    }
    static DENIED: std::sync::LazyLock<std::io::Error> =
        std::sync::LazyLock::new(|| std::io::Error::from(std::io::ErrorKind::PermissionDenied));
    let c = Catalog::unloaded(
        "/data/cat",
        ObjectStoreUrl::parse("file://").unwrap(),
        Arc::new(InMemory::new()),
        Path::from("data/cat"),
        DEFAULT_RETENTION,
    );
    let local = |file: &str| {
        Error::ObjectStore(object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(Local(file.into())),
        })
    };
    assert!(c.refused(&local("/data/cat/_matview/log/00000000000000000002.json")));
    assert!(c.refused(&local("/data/cat")));
    assert!(!c.refused(&local("/data/cats/a.csv")));
    assert!(!c.refused(&local("/data/cat.old/a.csv")));
    let s3 = |path: &str| {
        Error::ObjectStore(object_store::Error::PermissionDenied {
            path: path.into(),
            source: "403".into(),
        })
    };
    assert!(c.refused(&s3("data/cat/public/v/x.parquet")));
    assert!(!c.refused(&s3("data/cats/x.parquet")));
    // Not a refusal at all.
    assert!(
        !c.refused(&Error::ObjectStore(object_store::Error::NotFound {
            path: "data/cat/x".into(),
            source: "gone".into(),
        }))
    );
}

/// A view entry for unit tests, populated with one file.
fn test_view(name: &str, snapshot: &str) -> ViewEntry {
    let name = QualifiedName::new("datafusion", "public", name);
    let dir = crate::spec::view_dir(&name);
    ViewEntry {
        id: crate::spec::new_id(),
        definition: crate::spec::Definition {
            format: 1,
            sql: "SELECT 1".into(),
            column_names: vec![],
            default_catalog: "datafusion".into(),
            default_schema: "public".into(),
            schema: datafusion::arrow::datatypes::Schema::empty(),
            sources: vec![],
            not_reproducible: None,
            settings: None,
        },
        created_at: Utc::now(),
        snapshot: Some(crate::spec::Snapshot {
            id: snapshot.into(),
            files: vec![crate::spec::DataFile {
                path: format!("{dir}/{snapshot}/part-0.parquet"),
                size: 1,
                rows: 1,
                columns: vec![],
                lineage: None,
            }],
            row_count: 1,
            size_bytes: 1,
            refreshed_at: Utc::now(),
            sources: vec![],
            state_columns: vec![],
            partials: vec![],
            lineage_of: None,
        }),
        name,
        dir,
        auto_refresh: Default::default(),
    }
}

/// Creates views `v0..v{n}` in one index commit.
async fn create_views(c: &Catalog, n: usize) {
    let mut entries = vec![];
    for i in 0..n {
        let view = test_view(&format!("v{i}"), &crate::spec::new_id());
        let slot = c.create_view_log(&view).await.unwrap();
        entries.push(index_entry(&view, slot));
    }
    put_views(c, &entries).await;
}

/// Commits `entries` to the index in one version.
async fn put_views(c: &Catalog, entries: &[IndexEntry]) {
    c.commit_change(|index| {
        for entry in entries {
            index.put_view(entry.clone());
        }
        Ok(())
    })
    .await
    .unwrap();
}

/// The size of the file a view commit wrote (its log's latest version).
async fn bytes_of_view_commit(c: &Catalog, name: &str) -> u64 {
    let name = QualifiedName::new("datafusion", "public", name);
    let (_, state) = c
        .commit_view_change(&name, name.name.as_str(), |_, view| {
            view.set_snapshot(
                test_view(&name.name, &crate::spec::new_id())
                    .snapshot
                    .unwrap(),
            );
            Ok(())
        })
        .await
        .unwrap();
    let slot = c.index().view(&name).unwrap().slot.clone();
    let log = c.view_log(&slot);
    c.store
        .head(&log.log.version_path(state.version))
        .await
        .unwrap()
        .size
}

#[tokio::test]
async fn a_view_commit_writes_the_same_bytes_whatever_the_number_of_views() {
    let small = catalog(Arc::new(InMemory::new()), DEFAULT_RETENTION).await;
    create_views(&small, 1).await;
    let large = catalog(Arc::new(InMemory::new()), DEFAULT_RETENTION).await;
    create_views(&large, 2000).await;
    let one = bytes_of_view_commit(&small, "v0").await;
    let many = bytes_of_view_commit(&large, "v0").await;
    // The same view with the same kind of snapshot: only the ids differ.
    assert_eq!(one, many, "{one} bytes with 1 view, {many} with 2000");
    assert!(one < 2000, "{one}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_to_different_views_never_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let setup = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    create_views(&setup, 4).await;
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = vec![];
    for i in 0..4 {
        let (store, attempts) = (Arc::clone(&store), Arc::clone(&attempts));
        tasks.push(tokio::spawn(async move {
            let c = catalog(store, DEFAULT_RETENTION).await;
            let name = QualifiedName::new("datafusion", "public", format!("v{i}"));
            for _ in 0..20 {
                c.commit_view_change(&name, "v", |_, view| {
                    attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    view.set_snapshot(test_view("v", &crate::spec::new_id()).snapshot.unwrap());
                    Ok(())
                })
                .await
                .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // One attempt per commit: no writer ever lost a race and retried.
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 80);
    assert_eq!(
        setup.reload().await.unwrap().version,
        1,
        "the index untouched"
    );
    for i in 0..4 {
        let name = QualifiedName::new("datafusion", "public", format!("v{i}"));
        assert_eq!(setup.view(&name).await.unwrap().unwrap().version, 21);
    }
    // The same writers committing to one log (the index) do race: the
    // count above would show it.
    let index_attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = vec![];
    for _ in 0..4 {
        let (store, attempts) = (Arc::clone(&store), Arc::clone(&index_attempts));
        tasks.push(tokio::spawn(async move {
            let c = catalog(store, DEFAULT_RETENTION).await;
            for _ in 0..20 {
                c.commit_change(|_| {
                    attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok(())
                })
                .await
                .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let raced = index_attempts.load(std::sync::atomic::Ordering::SeqCst);
    assert!(raced > 80, "{raced} attempts for 80 index commits");
}

#[tokio::test]
async fn a_reader_opens_from_a_checkpoint_not_the_whole_log() {
    use datafusion_matview_testing::InstrumentedStore;
    use std::sync::atomic::Ordering::SeqCst;
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = catalog(Arc::clone(&memory), DEFAULT_RETENTION).await;
    for i in 0..150 {
        create_views(&c, 1).await;
        if i % 2 == 1 {
            c.commit_change(|index| {
                let name = QualifiedName::new("datafusion", "public", "v0");
                index.remove_view(&name);
                Ok(())
            })
            .await
            .unwrap();
        }
    }
    let latest = c.index();
    assert!(latest.version > 2 * CHECKPOINT_INTERVAL);
    c.index_log.settle_pointer().await;
    let store = Arc::new(InstrumentedStore::new(Arc::clone(&memory)));
    let reader = catalog(
        Arc::clone(&store) as Arc<dyn ObjectStore>,
        DEFAULT_RETENTION,
    )
    .await;
    assert_eq!(*reader.index(), *latest);
    let gets = store.counters().gets.load(SeqCst);
    assert!(
        gets <= 2 + CHECKPOINT_INTERVAL,
        "{gets} reads for {} versions",
        latest.version
    );
    // The pointer names the newest checkpoint.
    let pointer: LatestPointer = serde_json::from_slice(
        &memory
            .get(&c.path("_matview/_latest.json"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        pointer.checkpoint,
        Some(latest.version / CHECKPOINT_INTERVAL * CHECKPOINT_INTERVAL)
    );
    // A reader whose pointer names an older checkpoint, or none, still
    // reads the latest index.
    memory
        .put(
            &c.path("_matview/_latest.json"),
            PutPayload::from(r#"{"version":1}"#),
        )
        .await
        .unwrap();
    let reader = catalog(Arc::clone(&memory), DEFAULT_RETENTION).await;
    assert_eq!(*reader.index(), *latest);
}

#[tokio::test]
async fn a_migration_that_loses_the_race_deletes_its_view_logs() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let manifest = Manifest {
        version: 3,
        committed_at: Utc::now(),
        commit_id: crate::spec::new_id(),
        views: vec![
            test_view("a", "11111111111111111111111111111111"),
            test_view("b", "22222222222222222222222222222222"),
        ],
        format_version: 1,
        ..Manifest::default()
    };
    for v in 1..=3 {
        let manifest = Manifest {
            version: v,
            ..manifest.clone()
        };
        store
            .put(
                &Path::from(format!("cat/_matview/log/{v:020}.json")),
                PutPayload::from(serde_json::to_vec(&manifest).unwrap()),
            )
            .await
            .unwrap();
    }
    let a = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let b = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    assert!(a.is_format_1() && b.is_format_1());
    let name = QualifiedName::new("datafusion", "public", "a");
    assert_eq!(
        a.view(&name).await.unwrap().unwrap().view,
        manifest.views[0]
    );
    assert!(a.migrate().await.unwrap());
    // b still holds format 1 version 3: its migration writes logs, loses
    // the put of version 4, and deletes them.
    let base = b.index();
    b.migrate_from(&base).await.unwrap();
    let logs: Vec<_> = store
        .list(Some(&Path::from("cat/_matview/views")))
        .try_collect()
        .await
        .unwrap();
    // Nothing of the losing migration's logs is left, pointers included.
    let slots: std::collections::BTreeSet<String> = logs
        .iter()
        .map(|m| m.location.parts().nth(3).unwrap().as_ref().to_owned())
        .collect();
    let named: std::collections::BTreeSet<String> =
        a.index().views.values().map(|e| e.slot.clone()).collect();
    assert_eq!(slots, named);
    b.reload().await.unwrap();
    assert!(!b.is_format_1());
    assert_eq!(
        b.view(&name).await.unwrap().unwrap().view,
        manifest.views[0]
    );
    assert_eq!(b.index().version, 4);
}

#[tokio::test]
async fn a_checkpoint_whose_views_do_not_parse_fails_every_statement() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    for _ in 0..CHECKPOINT_INTERVAL {
        create_views(&c, 1).await;
    }
    c.index_log.settle_pointer().await;
    let path = c.checkpoint_path(CHECKPOINT_INTERVAL);
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    // Same length, not JSON: only parsing the views finds it.
    let mut broken = bytes.to_vec();
    let last = broken.len() - 2;
    broken[last] = b'#';
    store.put(&path, PutPayload::from(broken)).await.unwrap();
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    // Opening parses no view; finding one parses its block.
    reader.reload().await.unwrap();
    let name = QualifiedName::new("datafusion", "public", "v0");
    let err = reader.view(&name).await.unwrap_err();
    assert!(
        matches!(&err, Error::CorruptManifest { reason, .. } if reason.contains("views do not parse")),
        "{err}"
    );
    assert!(reader.load_latest().await.is_err(), "and stays failed");

    // What must see every view refuses to work without them: a cleanup
    // (which would take their logs for orphans) and a commit (whose checks
    // and diff would miss them).
    let corrupt = |e: &Error| matches!(e, Error::CorruptManifest { reason, .. } if reason.contains("views do not parse"));
    let live = c.index().view(&name).unwrap().slot.clone();
    let cleaner = catalog(Arc::clone(&store), Duration::ZERO).await;
    let err = cleaner.cleanup(Sweep::Full).await.unwrap_err();
    assert!(corrupt(&err), "{err}");
    let writer = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let err = writer
        .commit_change(|index| {
            index.remove_view(&name);
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(corrupt(err.error()), "{err}");
    let files: Vec<_> = store
        .list(Some(&Path::from(format!("cat/_matview/views/{live}"))))
        .try_collect()
        .await
        .unwrap();
    assert!(!files.is_empty(), "the view's log is still there");
}

#[tokio::test]
async fn opening_stops_at_a_base_whatever_lies_below_it() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = catalog(Arc::clone(&memory), DEFAULT_RETENTION).await;
    for _ in 0..5 {
        c.commit_change(|_| Ok(())).await.unwrap();
    }
    // Version 6 holds the whole index as its base, as a recovery writes it.
    let mut index = (*c.index()).clone();
    index.version = 6;
    index.commit_id = crate::spec::new_id();
    let record = IndexVersion {
        format_version: MANIFEST_FORMAT,
        version: 6,
        committed_at: index.committed_at,
        commit_id: index.commit_id.clone(),
        base: Some(Box::new(index)),
        actions: vec![],
    };
    memory
        .put(
            &c.index_log.version_path(6),
            PutPayload::from(index::encode("an index version", &record).unwrap()),
        )
        .await
        .unwrap();
    for _ in 0..3 {
        c.commit_change(|_| Ok(())).await.unwrap();
    }
    assert_eq!(c.index().version, 9);
    // Versions are read several at a time, 3 among them; below the base,
    // it is never needed.
    memory
        .put(&c.index_log.version_path(3), PutPayload::from("not json"))
        .await
        .unwrap();
    let reader = catalog(Arc::clone(&memory), DEFAULT_RETENTION).await;
    assert_eq!(reader.index().version, 9);
    // Above it, it is, and named.
    memory
        .put(&c.index_log.version_path(8), PutPayload::from("not json"))
        .await
        .unwrap();
    let err = open_catalog(Arc::clone(&memory), DEFAULT_RETENTION)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("00000000000000000008.json"),
        "{err}"
    );
}

/// A checkpoint of the index at version 64 holding the 100 views
/// `create_views` makes, as this build writes it.
async fn checkpoint_of_100_views(store: &Arc<dyn ObjectStore>) -> (Catalog, Path) {
    let c = catalog(Arc::clone(store), DEFAULT_RETENTION).await;
    create_views(&c, 100).await;
    for _ in 1..CHECKPOINT_INTERVAL {
        c.commit_change(|_| Ok(())).await.unwrap();
    }
    c.index_log.settle_pointer().await;
    let path = c.checkpoint_path(CHECKPOINT_INTERVAL);
    (c, path)
}

#[tokio::test]
async fn a_checkpoint_keeps_its_views_in_blocks_in_name_order() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (c, path) = checkpoint_of_100_views(&store).await;
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    let mut lines = text.split('\n');
    let header: CheckpointHeader = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header.format_version, MANIFEST_FORMAT);
    let blocks: Vec<Vec<IndexEntry>> = lines
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        blocks.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![
            crate::spec::CHECKPOINT_BLOCK_VIEWS,
            100 - crate::spec::CHECKPOINT_BLOCK_VIEWS
        ]
    );
    let all: Vec<IndexEntry> = blocks.concat();
    assert_eq!(all, c.index().views.values().cloned().collect::<Vec<_>>());
    assert!(all.windows(2).all(|w| w[0].name < w[1].name));
    for (block, entries) in header.blocks.iter().zip(&blocks) {
        assert_eq!(block.first, entries[0].name);
    }
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    assert_eq!(
        reader.index().views.checkpoint_blocks_parsed(),
        Some((0, 2))
    );
    let last = &all[99];
    assert_eq!(reader.index().view(&last.name), Some(last));
    assert_eq!(
        reader.index().views.checkpoint_blocks_parsed(),
        Some((1, 2))
    );
}

/// A format 3 build kept a checkpoint's views on one line: this build
/// reads it as one block.
#[tokio::test]
async fn a_format_3_checkpoint_is_read_as_one_block() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (c, path) = checkpoint_of_100_views(&store).await;
    let views: Vec<IndexEntry> = c.index().views.values().cloned().collect();
    let line = serde_json::to_vec(&views).unwrap();
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    let header = bytes.split(|b| *b == b'\n').next().unwrap();
    let mut header: CheckpointHeader = serde_json::from_slice(header).unwrap();
    header.format_version = 3;
    header.blocks.clear();
    header.views_bytes = line.len() as u64;
    let mut old = serde_json::to_vec(&header).unwrap();
    old.push(b'\n');
    old.extend(line);
    store.put(&path, PutPayload::from(old)).await.unwrap();
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    assert_eq!(
        reader.index().views.checkpoint_blocks_parsed(),
        Some((0, 1))
    );
    assert_eq!(reader.index().view(&views[57].name), Some(&views[57]));
    assert_eq!(
        reader.index().views.values().cloned().collect::<Vec<_>>(),
        views
    );
}

/// Commits 2,000 index entries (no view logs: only the index is read)
/// named `v0000` to `v1999`, each `v..01` reading the view before it,
/// then empty commits up to version `to`.
async fn index_of_2000_views(c: &Catalog, to: u64) -> Vec<IndexEntry> {
    let name = |i: usize| QualifiedName::new("datafusion", "public", format!("v{i:04}"));
    let entries: Vec<IndexEntry> = (0..2000)
        .map(|i| IndexEntry {
            name: name(i),
            id: format!("id-{i}"),
            slot: format!("slot-{i}"),
            sources: if i % 100 == 1 {
                vec![name(i - 1)]
            } else {
                vec![]
            },
        })
        .collect();
    put_views(c, &entries).await;
    while c.index().version < to {
        c.commit_change(|_| Ok(())).await.unwrap();
    }
    c.index_log.settle_pointer().await;
    entries
}

/// Opens `store` anew, finds one view in the middle, then lists them all;
/// returns the checkpoint bytes read after opening, after the lookup and
/// after the listing, and their total.
async fn bytes_read_by_one_lookup(
    reader: &Catalog,
    entries: &[IndexEntry],
) -> (u64, u64, u64, u64) {
    let (opened, total) = reader.index().views.checkpoint_bytes_read().unwrap();
    assert_eq!(
        reader.index().view(&entries[1234].name),
        Some(&entries[1234])
    );
    let (found, _) = reader.index().views.checkpoint_bytes_read().unwrap();
    assert_eq!(reader.view_names().unwrap().len(), 2000);
    let (listed, _) = reader.index().views.checkpoint_bytes_read().unwrap();
    (opened, found, listed, total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_reads_the_header_and_one_block_of_a_large_checkpoint() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let entries = index_of_2000_views(&writer, CHECKPOINT_INTERVAL).await;
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let (opened, found, listed, total) = bytes_read_by_one_lookup(&reader, &entries).await;
    let block = total / 2000 * crate::spec::CHECKPOINT_BLOCK_VIEWS as u64;
    assert!(total > 3 * CHECKPOINT_FIRST_READ, "{total}");
    assert!(opened <= CHECKPOINT_FIRST_READ, "{opened}");
    assert!(
        found - opened < 2 * block,
        "{found} after {opened}: one block"
    );
    assert!(listed >= total, "{listed} of {total}");
}

/// From a local folder the reads need no runtime: a single-threaded one
/// reads blocks as they are needed too.
#[tokio::test]
async fn a_local_checkpoint_is_read_a_block_at_a_time_on_any_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let open = || async {
        Catalog::open(
            "file:///cat",
            ObjectStoreUrl::parse("file://").unwrap(),
            Arc::clone(&store),
            Path::from("cat"),
            DEFAULT_RETENTION,
        )
        .await
        .unwrap()
    };
    let writer = open().await;
    let entries = index_of_2000_views(&writer, CHECKPOINT_INTERVAL).await;
    let (opened, found, listed, total) = bytes_read_by_one_lookup(&open().await, &entries).await;
    assert!(opened <= CHECKPOINT_FIRST_READ, "{opened}");
    assert!(found < opened + total / 10, "{found} of {total}");
    assert!(listed >= total, "{listed} of {total}");
}

/// A remote store on a single-threaded runtime cannot wait for a block:
/// its checkpoints are read whole.
#[tokio::test]
async fn a_remote_checkpoint_on_a_single_threaded_runtime_is_read_whole() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let entries = index_of_2000_views(&writer, CHECKPOINT_INTERVAL).await;
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let (opened, found, _, total) = bytes_read_by_one_lookup(&reader, &entries).await;
    assert_eq!((opened, found), (total, total));
}

/// A reader still reading blocks from a checkpoint reads the rest of it
/// once a newer one is written (before a second newer one deletes it);
/// one that did not (it opened the older one just as it went) reads the
/// index again on its next reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_is_never_left_with_a_deleted_checkpoint() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let entries = index_of_2000_views(&writer, CHECKPOINT_INTERVAL).await;
    let early = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let late = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    assert_eq!(early.index().views.reading_checkpoint(), Some(64));
    while writer.index().version < 2 * CHECKPOINT_INTERVAL {
        writer.commit_change(|_| Ok(())).await.unwrap();
    }
    writer.index_log.settle_pointer().await;
    early.reload().await.unwrap();
    assert_eq!(early.index().views.reading_checkpoint(), None);
    while writer.index().version < 3 * CHECKPOINT_INTERVAL {
        writer.commit_change(|_| Ok(())).await.unwrap();
    }
    writer.index_log.settle_pointer().await;
    assert!(
        store
            .head(&writer.checkpoint_path(CHECKPOINT_INTERVAL))
            .await
            .is_err(),
        "the checkpoint the readers opened is gone"
    );
    assert_eq!(
        early.index().view(&entries[1999].name),
        Some(&entries[1999])
    );
    // `late` never reloaded: its lookup fails, its reload mends it.
    assert_eq!(late.index().view(&entries[1999].name), None);
    let err = late.check_poisoned().unwrap_err().to_string();
    assert!(err.contains("run the statement again"), "{err}");
    let index = late.reload().await.unwrap();
    assert_eq!(index.version, 3 * CHECKPOINT_INTERVAL);
    assert_eq!(index.view(&entries[1999].name), Some(&entries[1999]));
}

/// A format 4 checkpoint keeps no readers: this build finds them by going
/// through its views, and a DROP's requirement still sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_4_checkpoint_finds_readers_through_its_views() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let entries = index_of_2000_views(&writer, CHECKPOINT_INTERVAL).await;
    let path = writer.checkpoint_path(CHECKPOINT_INTERVAL);
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let mut header: CheckpointHeader = serde_json::from_slice(lines[0]).unwrap();
    let readers = header.readers.len();
    assert!(readers > 0);
    lines.truncate(lines.len() - readers);
    header.format_version = 4;
    header.readers.clear();
    header.readers_bytes = 0;
    let head = serde_json::to_vec(&header).unwrap();
    lines[0] = &head;
    store
        .put(&path, PutPayload::from(lines.join(&b'\n')))
        .await
        .unwrap();
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let index = reader.index();
    assert_eq!(
        index.views.readers_of(&entries[1200].name),
        vec![entries[1201].name.clone()]
    );
    let requirement = Requirement::NoDependents {
        name: entries[1200].name.clone(),
        kind: "materialized view".into(),
        dropping: vec![entries[1200].name.clone()],
    };
    let err = requirement.check(&index, None, "v1200").unwrap_err();
    assert!(err.to_string().contains("v1201 depends on"), "{err}");
}

/// A checkpoint written again under a reader (the same path, another
/// object) is never read at the old header's offsets: the read fails as
/// unread, and a reload reads the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_replaced_under_a_reader_is_read_again() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let writer = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let entries = index_of_2000_views(&writer, CHECKPOINT_INTERVAL).await;
    let reader = catalog(Arc::clone(&store), DEFAULT_RETENTION).await;
    let path = writer.checkpoint_path(CHECKPOINT_INTERVAL);
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    store.put(&path, PutPayload::from(bytes)).await.unwrap();
    assert_eq!(reader.index().view(&entries[1999].name), None);
    assert!(reader.index().views.unread_failure());
    let index = reader.reload().await.unwrap();
    assert_eq!(index.view(&entries[1999].name), Some(&entries[1999]));
}
