//! The typed entry points (`create_view`, `refresh_view`, `drop_views`):
//! names and options instead of SQL text or parser values, with the same
//! outcomes and errors as the statements.

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::SessionContext;
use datafusion_matview::spec::QualifiedName;
use datafusion_matview::{
    CreateAction, CreateOptions, DropOptions, Error, ErrorCode, MatviewSession, RefreshMode,
    RefreshOptions,
};

async fn run(s: &MatviewSession, sql: &str) {
    s.sql(sql).await.unwrap().collect().await.unwrap();
}

async fn count(s: &MatviewSession, sql: &str) -> i64 {
    let batches = s.sql(sql).await.unwrap().collect().await.unwrap();
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

#[tokio::test]
async fn views_are_created_refreshed_and_dropped_by_name_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let s = MatviewSession::open(SessionContext::new(), dir.path().to_str().unwrap())
        .await
        .unwrap();
    run(&s, "CREATE TABLE t (x BIGINT) AS VALUES (1), (2)").await;
    // A name is taken exactly as it is: no case folding, no quoting.
    let mixed = QualifiedName::new("datafusion", "public", "Big Sums");
    let options = CreateOptions {
        columns: vec!["Total".into()],
        ..CreateOptions::default()
    };
    let created = s
        .create_view(&mixed, "SELECT sum(x) FROM t", &options)
        .await
        .unwrap();
    assert_eq!(created.action, CreateAction::Created);
    assert_eq!(created.rows_written, Some(1));
    assert_eq!(count(&s, r#"SELECT "Total" FROM "Big Sums""#).await, 3);
    // A quote inside a name is part of the name.
    let quoted = QualifiedName::new("datafusion", "public", "My \"v\"");
    s.create_view(&quoted, "SELECT 7 AS x", &CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(count(&s, r#"SELECT x FROM "My ""v""""#).await, 7);
    s.drop_views(&[quoted], DropOptions::default())
        .await
        .unwrap();
    // IF NOT EXISTS over it: skipped, as the statement is.
    let again = CreateOptions {
        if_not_exists: true,
        ..options.clone()
    };
    let skipped = s.create_view(&mixed, "SELECT 1", &again).await.unwrap();
    assert_eq!(skipped.action, CreateAction::Skipped);
    // A view over it, refreshed with CASCADE after the source changed.
    let over = QualifiedName::new("datafusion", "public", "over");
    s.create_view(
        &over,
        r#"SELECT "Total" * 2 AS d FROM "Big Sums""#,
        &CreateOptions::default(),
    )
    .await
    .unwrap();
    run(&s, "INSERT INTO t VALUES (4)").await;
    let refreshed = s
        .refresh_view(
            &over,
            &RefreshOptions {
                cascade: true,
                ..RefreshOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(refreshed.len(), 2, "{refreshed:?}");
    assert_eq!(refreshed[0].view, "Big Sums");
    assert_eq!(refreshed[1].mode, RefreshMode::Full);
    assert_eq!(count(&s, "SELECT d FROM over").await, 14);
    // Unchanged: nothing to do.
    let again = s
        .refresh_view(&over, &RefreshOptions::default())
        .await
        .unwrap();
    assert_eq!(again[0].mode, RefreshMode::NoOp);
    // DROP without CASCADE is refused by its dependent; with it, both go.
    let refused = s
        .drop_views(std::slice::from_ref(&mixed), DropOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        ErrorCode::DependentObjectsStillExist,
        "{refused}"
    );
    let cascaded = s
        .drop_views(
            std::slice::from_ref(&mixed),
            DropOptions {
                cascade: true,
                ..DropOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cascaded, [(over.clone(), "materialized view")]);
    let gone = s
        .refresh_view(&over, &RefreshOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(gone, Error::NotFound { .. }), "{gone}");
    // IF EXISTS: no error for a name that is no view.
    s.drop_views(
        &[over],
        DropOptions {
            if_exists: true,
            ..DropOptions::default()
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_query_is_one_query_and_nothing_else() {
    let s = MatviewSession::open(SessionContext::new(), "memory://")
        .await
        .unwrap();
    let name = QualifiedName::new("datafusion", "public", "v");
    for text in [
        "SELECT 1; DROP TABLE t",
        "DROP TABLE t",
        "CREATE TABLE u (x INT)",
    ] {
        let e = s
            .create_view(&name, text, &CreateOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::SyntaxError, "{text}: {e}");
        assert!(e.to_string().contains("must be one query"), "{text}: {e}");
    }
    assert!(s.catalog().index().view(&name).is_none());
}

#[tokio::test]
async fn every_view_statement_is_dispatched_once_and_answers_typed() {
    use datafusion_matview::StatementOutcome;
    use datafusion_matview::sql::parse_sql_with_text;

    let s = MatviewSession::open(SessionContext::new(), "memory://")
        .await
        .unwrap();
    let run = |sql: &'static str| {
        let s = s.clone();
        async move {
            let mut parsed = parse_sql_with_text(sql, "generic", 50).unwrap();
            let (statement, text) = parsed.pop().unwrap();
            s.run_statement(statement, Some(&text)).await.unwrap()
        }
    };
    run("CREATE TABLE t (x BIGINT) AS VALUES (1), (2)").await;
    match run("CREATE MATERIALIZED VIEW v AS SELECT sum(x) AS s FROM t").await {
        StatementOutcome::Created(outcome) => {
            assert_eq!(
                (outcome.action, outcome.rows_written),
                (CreateAction::Created, Some(1))
            );
        }
        other => panic!("{other:?}"),
    }
    match run("CREATE MATERIALIZED VIEW w AS SELECT s FROM v").await {
        StatementOutcome::Created(_) => {}
        other => panic!("{other:?}"),
    }
    match run("REFRESH MATERIALIZED VIEW v").await {
        StatementOutcome::Refreshed(outcomes) => {
            // An in-memory table has no files to fingerprint: full.
            assert_eq!(outcomes.len(), 1);
            assert_eq!(outcomes[0].mode, RefreshMode::Full);
        }
        other => panic!("{other:?}"),
    }
    match run("SHOW MATERIALIZED VIEWS").await {
        StatementOutcome::Shown(df) => assert_eq!(df.count().await.unwrap(), 2),
        other => panic!("{other:?}"),
    }
    match run("DROP MATERIALIZED VIEW v CASCADE").await {
        StatementOutcome::Dropped(cascaded) => {
            let names: Vec<_> = cascaded
                .iter()
                .map(|(n, k)| (n.name.as_str(), *k))
                .collect();
            assert_eq!(names, [("w", "materialized view")]);
        }
        other => panic!("{other:?}"),
    }
    match run("VACUUM MATERIALIZED VIEWS").await {
        StatementOutcome::Vacuumed(_) => {}
        other => panic!("{other:?}"),
    }
    // sql() gives the outcome's rows: none for DROP, a row per view for
    // REFRESH, the query's for the rest.
    match run("SELECT count(*) FROM t").await {
        outcome @ StatementOutcome::Rows(_) => {
            let df = outcome.into_dataframe(s.context()).unwrap();
            assert_eq!(df.count().await.unwrap(), 1);
        }
        other => panic!("{other:?}"),
    }
}
