//! The refresh history: bounded per view, read by another process,
//! removed with the views it describes, off when asked.

use std::time::Duration;

use datafusion::prelude::SessionContext;
use datafusion_matview::history::{AttemptState, Trigger};
use datafusion_matview::spec::QualifiedName;
use datafusion_matview::{MatviewOptions, MatviewSession};

async fn open(catalog: &std::path::Path, options: MatviewOptions) -> MatviewSession {
    MatviewSession::open_with_options(
        SessionContext::new(),
        &catalog.display().to_string(),
        options,
    )
    .await
    .unwrap()
}

fn records(catalog: &std::path::Path) -> usize {
    crate::common::files_under(&catalog.join("_matview/history")).len()
}

fn name(view: &str) -> QualifiedName {
    QualifiedName::new("datafusion", "public", view)
}

/// With `history_per_view` 3, six attempts leave the newest three: what
/// the history reads, in this process and another, and what stays on
/// disk after VACUUM. A dropped view's history goes with VACUUM once it is
/// older than the retention window (zero here); a live view's stays.
#[tokio::test]
async fn the_history_keeps_the_newest_attempts_of_each_view() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    let options = MatviewOptions {
        history_per_view: 3,
        retention: Duration::ZERO,
        ..Default::default()
    };
    let s = open(&catalog, options.clone()).await;
    s.sql("CREATE TABLE t AS VALUES (1), (2)").await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT column1 AS x FROM t")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW gone AS SELECT column1 AS x FROM t")
        .await
        .unwrap();
    for _ in 0..5 {
        s.sql("REFRESH MATERIALIZED VIEW v FULL").await.unwrap();
    }
    let history = s.refresh_history(Some(&name("v"))).await.unwrap();
    let versions: Vec<Option<u64>> = history.iter().map(|a| a.version).collect();
    assert_eq!(versions, [Some(4), Some(5), Some(6)]);
    assert!(history.iter().all(|a| a.state == AttemptState::Succeeded
        && a.trigger == Trigger::Statement
        && a.mode.as_deref() == Some("full")));

    // Another process reads the same.
    let other = open(&catalog, options.clone()).await;
    assert_eq!(
        other.refresh_history(Some(&name("v"))).await.unwrap(),
        history
    );
    let all = other.refresh_history(None).await.unwrap();
    assert_eq!(all.len(), 4, "three of v, the create of gone");

    // Pruning after writes runs in the background; VACUUM makes it exact.
    s.sql("DROP MATERIALIZED VIEW gone").await.unwrap();
    let report = s.cleanup().await.unwrap();
    assert!(report.history_deleted >= 1, "{report:?}");
    assert_eq!(records(&catalog), 3);
    assert_eq!(s.refresh_history(None).await.unwrap(), history);
}

/// `history_per_view` 0 records nothing.
#[tokio::test]
async fn a_history_of_zero_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    let s = open(
        &catalog,
        MatviewOptions {
            history_per_view: 0,
            ..Default::default()
        },
    )
    .await;
    s.sql("CREATE TABLE t AS VALUES (1)").await.unwrap();
    s.sql("CREATE MATERIALIZED VIEW v AS SELECT column1 AS x FROM t")
        .await
        .unwrap();
    s.sql("REFRESH MATERIALIZED VIEW v FULL").await.unwrap();
    assert_eq!(records(&catalog), 0);
    assert!(s.refresh_history(None).await.unwrap().is_empty());
}

/// A statement dropped while its refresh runs (a timeout in the caller,
/// Ctrl-C in dfmv) is recorded as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_dropped_midway_is_recorded_as_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    let s = open(&catalog, MatviewOptions::default()).await;
    s.sql("CREATE TABLE big AS SELECT * FROM generate_series(1, 10) AS t(x)")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW slow AS SELECT sum(a.x * b.x + c.x) AS n FROM big a, big b, big c")
        .await
        .unwrap();
    s.sql("INSERT INTO big SELECT * FROM generate_series(11, 3000)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let refresh = async {
        s.sql("REFRESH MATERIALIZED VIEW slow")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
    };
    assert!(
        tokio::time::timeout(Duration::from_millis(500), refresh)
            .await
            .is_err(),
        "the refresh should still be running"
    );
    let mut states = vec![];
    for _ in 0..500 {
        states = s
            .refresh_history(Some(&name("slow")))
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.trigger, a.state, a.version))
            .collect();
        if states.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        states,
        [
            (Trigger::Create, AttemptState::Succeeded, Some(1)),
            (Trigger::Statement, AttemptState::Cancelled, None),
        ]
    );
}
