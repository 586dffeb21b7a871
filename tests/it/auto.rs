//! The automatic-refresh scheduler on its own: what it costs when nothing
//! changes, and that it refreshes what changed.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
use datafusion_matview::MatviewSession;
use datafusion_matview::session::auto::{AutoRefreshOptions, Scheduler};
use datafusion_matview_testing::InstrumentedStore;
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use object_store::path::Path;

/// The catalog's store and the sources' store, each counted.
async fn counted_session(
    dir: &std::path::Path,
) -> (MatviewSession, InstrumentedStore, InstrumentedStore) {
    let catalog_store =
        InstrumentedStore::new(Arc::new(object_store::local::LocalFileSystem::new()));
    let source_store = InstrumentedStore::new(Arc::new(InMemory::new()));
    let ctx = SessionContext::new();
    ctx.register_object_store(
        &url::Url::parse("file://").unwrap(),
        Arc::new(catalog_store.clone()),
    );
    ctx.register_object_store(
        &url::Url::parse("mem://src").unwrap(),
        Arc::new(source_store.clone()),
    );
    source_store
        .put(&Path::from("t/a.csv"), "n\n1\n2\n".into())
        .await
        .unwrap();
    let s = MatviewSession::open(ctx, &dir.join("cat").display().to_string())
        .await
        .unwrap();
    s.sql("CREATE EXTERNAL TABLE t (n BIGINT) STORED AS CSV LOCATION 'mem://src/t/' OPTIONS ('format.has_header' 'true')")
        .await
        .unwrap();
    (s, catalog_store, source_store)
}

fn requests(store: &InstrumentedStore) -> u64 {
    let c = store.counters();
    c.heads.load(SeqCst) + c.gets.load(SeqCst) + c.lists.load(SeqCst) + c.writes.load(SeqCst)
}

/// CPU seconds this process has used (Linux).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// A stale view is refreshed by a tick, a fresh one is not, and a view
/// without `auto_refresh` never is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_refreshes_what_is_stale_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _, sources) = counted_session(dir.path()).await;
    s.sql("CREATE MATERIALIZED VIEW auto WITH (auto_refresh = true, target_lag = '1 second') AS SELECT sum(n) AS total FROM t")
        .await
        .unwrap();
    s.sql("CREATE MATERIALIZED VIEW manual AS SELECT sum(n) AS total FROM t")
        .await
        .unwrap();
    let options = AutoRefreshOptions {
        tick: Duration::from_millis(100),
        ..Default::default()
    };
    let scheduler = Scheduler::new(s.fork(), options);
    let report = scheduler.tick().await.unwrap();
    assert_eq!(
        (report.checked, report.started.len()),
        (1, 0),
        "fresh: {report:?}"
    );
    sources
        .put(&Path::from("t/b.csv"), "n\n10\n".into())
        .await
        .unwrap();
    // Checked again after half its target lag.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let report = scheduler.tick().await.unwrap();
    assert_eq!(report.started.len(), 1, "{report:?}");
    scheduler.settle().await;
    let total = |view: &str| {
        let s = &s;
        let sql = format!("SELECT total FROM {view}");
        async move {
            let batches = s.sql(&sql).await.unwrap().collect().await.unwrap();
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .unwrap()
                .to_string()
        }
    };
    assert!(
        total("auto").await.contains("| 13 "),
        "{}",
        total("auto").await
    );
    assert!(
        total("manual").await.contains("| 3 "),
        "{}",
        total("manual").await
    );
    let history = s.refresh_history(None).await.unwrap();
    let auto: Vec<_> = history
        .iter()
        .filter(|a| a.trigger == datafusion_matview::history::Trigger::Auto)
        .map(|a| (a.view.name.as_str(), a.state, a.mode.as_deref()))
        .collect();
    assert_eq!(
        auto,
        [(
            "auto",
            datafusion_matview::history::AttemptState::Succeeded,
            Some("incremental")
        )]
    );
}

/// The scheduler's idle cost: 1,000 views refreshed automatically (target
/// lag one hour), all fresh, one tick a second, measured for a minute
/// after the first pass: requests to the catalog's store and to the
/// sources' store per minute, and the CPU the process used. Run with
/// `cargo test --test it -- --ignored auto::scheduler_idle_cost --nocapture`
/// (`DFMV_IDLE_VIEWS`, `DFMV_IDLE_SECONDS` change the size).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn scheduler_idle_cost() {
    let views: usize = std::env::var("DFMV_IDLE_VIEWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let seconds: u64 = std::env::var("DFMV_IDLE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let dir = tempfile::tempdir().unwrap();
    let (s, catalog, sources) = counted_session(dir.path()).await;
    for i in 0..views {
        s.sql(&format!(
            "CREATE MATERIALIZED VIEW v{i} WITH (auto_refresh = true, target_lag = '1 hour') AS SELECT n + {i} AS n FROM t"
        ))
        .await
        .unwrap();
    }
    let scheduler = Scheduler::new(s.fork(), AutoRefreshOptions::default());
    // The first pass reads every view and checks it.
    let first = Instant::now();
    let report = scheduler.tick().await.unwrap();
    assert_eq!((report.checked, report.started.len()), (views, 0));
    println!("first pass over {views} views: {:?}", first.elapsed());
    let (catalog_before, sources_before, cpu_before) =
        (requests(&catalog), requests(&sources), cpu_seconds());
    let started = Instant::now();
    let mut ticks = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let report = scheduler.tick().await.unwrap();
        assert!(report.started.is_empty());
        ticks += 1;
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let per_minute = |n: u64| n as f64 / minutes;
    println!(
        "{views} views, {ticks} ticks in {:.1} s: catalog store {:.0} requests/min, sources {:.0} requests/min, CPU {:.2} s/min ({:.1}% of one core)",
        started.elapsed().as_secs_f64(),
        per_minute(requests(&catalog) - catalog_before),
        per_minute(requests(&sources) - sources_before),
        (cpu_seconds() - cpu_before) / minutes,
        (cpu_seconds() - cpu_before) / started.elapsed().as_secs_f64() * 100.0,
    );
}
