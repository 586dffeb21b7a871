//! Unit tests of shapes and strategies.

use super::shape::Merge;
use super::*;
use crate::freshness::Diff;
use crate::refresh::decide::changed_table;
use datafusion::prelude::{CsvReadOptions, SessionContext};

/// A session with CSV tables `t (a, b)` and `d (a, c)`.
async fn session() -> (tempfile::TempDir, SessionContext) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = SessionContext::new();
    for (name, header) in [("t", "a,b"), ("d", "a,c")] {
        let path = dir.path().join(format!("{name}.csv"));
        std::fs::write(&path, format!("{header}\n1,x\n2,y\n")).unwrap();
        ctx.register_csv(name, path.to_str().unwrap(), CsvReadOptions::new())
            .await
            .unwrap();
    }
    (dir, ctx)
}

async fn plan(ctx: &SessionContext, sql: &str) -> LogicalPlan {
    ctx.state().create_logical_plan(sql).await.unwrap()
}

#[tokio::test]
async fn row_wise_in_the_changed_table() {
    let (_dir, ctx) = session().await;
    let t = ctx.table_provider("t").await.unwrap();
    let cases: &[(&str, std::result::Result<bool, &str>)] = &[
        ("SELECT a, upper(b) FROM t WHERE a > 1", Ok(true)),
        ("SELECT unnest(make_array(a, a)) FROM t", Ok(true)),
        ("SELECT t.a, d.c FROM t JOIN d ON t.a = d.a", Ok(true)),
        ("SELECT t.a FROM t LEFT JOIN d ON t.a = d.a", Ok(true)),
        (
            "SELECT d.a FROM d LEFT SEMI JOIN t ON t.a = d.a",
            Err("not incremental: a leftsemi join does not keep the rows of t one by one"),
        ),
        (
            "SELECT t.a FROM d LEFT JOIN t ON t.a = d.a",
            Err("not incremental: a left join does not keep the rows of t one by one"),
        ),
        (
            "SELECT x.a FROM t x JOIN t y ON x.a = y.a",
            Err("not incremental: t is joined with itself"),
        ),
        ("SELECT a FROM t ORDER BY a", Err("not incremental: Sort")),
        (
            "SELECT a FROM t UNION ALL SELECT a FROM t WHERE a > 1",
            Ok(true),
        ),
        (
            "SELECT a FROM t UNION ALL SELECT a FROM d",
            Err("not incremental: a UNION ALL branch does not read t"),
        ),
        (
            "SELECT a FROM t UNION ALL SELECT 1",
            Err("not incremental: a UNION ALL branch does not read t"),
        ),
        ("SELECT DISTINCT a FROM t", Err("not incremental: Distinct")),
        (
            "SELECT a FROM d WHERE a IN (SELECT a FROM t)",
            Err("not incremental: a subquery reads t"),
        ),
        // An unchanged table may be read in any shape.
        (
            "SELECT a FROM d WHERE a IN (SELECT max(a) FROM d)",
            Ok(false),
        ),
    ];
    for (sql, expected) in cases {
        let got = linear(&plan(&ctx, sql).await, &t, "t").map_err(|why| why.to_string());
        assert_eq!(got, expected.map_err(str::to_owned), "{sql}");
    }
}

#[tokio::test]
async fn which_aggregates_merge() {
    let (_dir, ctx) = session().await;
    let shape = |sql: &'static str| {
        let ctx = &ctx;
        async move { Shape::of(&plan(ctx, sql).await) }
    };
    match shape("SELECT b, count(*) AS n, min(a), avg(a) AS m FROM t GROUP BY b").await {
        Shape::Aggregate(a) => {
            assert_eq!(a.state_columns, ["__dfmv_sum_3", "__dfmv_count_3"]);
            assert_eq!(
                a.merges,
                [
                    Merge::Key,
                    Merge::Sum,
                    Merge::Min,
                    Merge::Avg { sum: 4, count: 5 },
                    Merge::Sum,
                    Merge::Sum
                ]
            );
            let names: Vec<&String> = a.plan.schema().fields().iter().map(|f| f.name()).collect();
            assert_eq!(
                names,
                ["b", "n", "min(t.a)", "m", "__dfmv_sum_3", "__dfmv_count_3"]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(shape("SELECT a FROM t").await, Shape::Rows));
    // Computing over the aggregate, filtering it (HAVING) or leaving a key
    // out: pieces hold the aggregate's own columns, and the view is
    // computed from their merge.
    for sql in [
        "SELECT count(*) + 1 AS n FROM t",
        "SELECT count(*) AS n FROM t GROUP BY b",
        "SELECT b, avg(a) AS m FROM t GROUP BY b HAVING count(*) > 1",
        // Pieces keep each key's distinct values; the count is over them.
        "SELECT b, count(DISTINCT a) AS d, max(a) AS hi FROM t GROUP BY b",
        // An aggregate over an aggregate: the lower one merges.
        "SELECT max(n) AS most FROM (SELECT b, count(*) AS n FROM t GROUP BY b)",
    ] {
        match shape(sql).await {
            Shape::Aggregate(a) => {
                assert!(a.computes_over_aggregate(), "{sql}");
                assert!(a.state_columns.is_empty(), "{sql}");
                let names: Vec<&String> =
                    a.plan.schema().fields().iter().map(|f| f.name()).collect();
                assert!(
                    names.iter().all(|n| n.starts_with("__dfmv_")),
                    "{sql}: {names:?}"
                );
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    for (sql, why) in [
        (
            "SELECT b, count(DISTINCT a), count(DISTINCT b) FROM t GROUP BY b",
            "not incremental: count(DISTINCT ...) cannot be merged",
        ),
        (
            "SELECT b, count(DISTINCT a), count(*) FROM t GROUP BY b",
            "not incremental: count(DISTINCT ...) cannot be merged",
        ),
        (
            "SELECT b, count(*) AS n FROM t GROUP BY b HAVING count(*) > (SELECT count(*) FROM d)",
            "not incremental: a subquery over the aggregate",
        ),
        (
            "SELECT b, median(a) FROM t GROUP BY b",
            "not incremental: median() cannot be merged",
        ),
    ] {
        match shape(sql).await {
            Shape::Other(reason) => assert_eq!(reason.to_string(), why, "{sql}"),
            other => panic!("{sql}: {other:?}"),
        }
    }
}

/// A source file of `size` bytes at `path`.
pub(super) fn file(path: &str, size: u64) -> FileFingerprint {
    FileFingerprint {
        path: path.into(),
        size,
        version: "1".into(),
    }
}

#[test]
fn groups_are_consecutive_and_balanced() {
    let files: Vec<_> = (0..100).map(|i| file(&format!("f{i:03}"), 10)).collect();
    let g = groups(&files, LINEAGE_GROUPS);
    assert!((LINEAGE_GROUPS / 2..=LINEAGE_GROUPS).contains(&g.len()));
    assert_eq!(g.iter().map(Vec::len).sum::<usize>(), 100);
    let flat: Vec<&String> = g.iter().flatten().collect();
    assert!(flat.windows(2).all(|w| w[0] < w[1]));
    assert!(groups(&[], LINEAGE_GROUPS).is_empty());
    // One huge file does not drag the rest with it.
    let skewed = [file("a", 1000), file("b", 1), file("c", 1)];
    assert_eq!(groups(&skewed, LINEAGE_GROUPS), [vec!["a"], vec!["b", "c"]]);
}

fn source(name: &str, fingerprint: Fingerprint) -> SourceFingerprint {
    SourceFingerprint {
        name: QualifiedName::new("datafusion", "public", name),
        fingerprint,
    }
}

/// Lineage follows the largest listing table or materialized view, in as
/// many groups of its files as read the others again for at most a
/// quarter of its bytes.
#[test]
fn lineage_follows_the_largest_table_beside_small_ones() {
    let sized = |n: usize, size: u64| Fingerprint::Files {
        files: (0..n).map(|i| file(&format!("f{i}"), size)).collect(),
        definition: "csv".into(),
    };
    let found = |sources: &[SourceFingerprint]| {
        lineage_table(sources).map(|(n, _, most)| (n.name.clone(), most))
    };
    // 1,000 bytes beside 10: at most 4 groups beside other tables.
    let fact = [source("dim", sized(1, 10)), source("fact", sized(10, 100))];
    assert_eq!(found(&fact), Some(("fact".into(), 4)));
    // Beside 100: 2 more reads at most (200 bytes).
    let dim = [source("dim", sized(1, 100)), source("fact", sized(10, 100))];
    assert_eq!(found(&dim), Some(("fact".into(), 3)));
    // Beside 300: not even one more.
    let big = [source("dim", sized(1, 300)), source("fact", sized(10, 100))];
    assert_eq!(found(&big), None);
    // A table of unknown size beside it: no lineage.
    let unknown = [
        source("mem", Fingerprint::Unknown),
        source("fact", sized(10, 100)),
    ];
    assert_eq!(found(&unknown), None);
    // A materialized view's data files, as a listing table's: the larger
    // beside a table, and alone.
    let view = |n: usize, size: u64| Fingerprint::Snapshot {
        id: Some("s".into()),
        files: (0..n).map(|i| file(&format!("m/s/{i}"), size)).collect(),
        definition: "m1".into(),
    };
    let layered = [source("dim", sized(1, 10)), source("m", view(10, 100))];
    assert_eq!(found(&layered), Some(("m".into(), 4)));
    assert_eq!(found(&layered[1..]), Some(("m".into(), 16)));
    // Alone, whatever its size; two alike, the first by name.
    assert_eq!(found(&fact[..1]), Some(("dim".into(), 16)));
    let two = [source("a", sized(1, 0)), source("b", sized(1, 0))];
    assert_eq!(found(&two), Some(("a".into(), 4)));
}

#[test]
fn the_one_changed_table_is_found_through_plain_views() {
    let files = |n: usize| Fingerprint::Files {
        files: (0..n).map(|i| file(&format!("f{i}"), 1)).collect(),
        definition: "csv".into(),
    };
    let then = [
        source("dim", files(1)),
        source(
            "v",
            Fingerprint::View {
                sources: vec![source("t", files(2))],
                definition: "select".into(),
            },
        ),
    ];
    let now = [
        source("dim", files(1)),
        source(
            "v",
            Fingerprint::View {
                sources: vec![source("t", files(3))],
                definition: "select".into(),
            },
        ),
    ];
    let show = |n: &QualifiedName| n.name.clone();
    // Two tables of about one size: reading dim once per group of t's
    // files would cost more than recomputing, so no lineage.
    assert!(lineage_table(&now).is_none());
    let (name, t_files, _) = lineage_table(&now[1..]).unwrap();
    assert_eq!((name.name.as_str(), t_files.len()), ("t", 3));
    let change = changed_table(&Diff::new(&then, &now, true), show).unwrap();
    assert_eq!(change.name.name, "t");
    assert_eq!((change.before.len(), change.after.len()), (2, 3));
    assert!(!change.only_source);

    let both = [source("dim", files(2)), now[1].clone()];
    assert_eq!(
        changed_table(&Diff::new(&then, &both, true), show).unwrap_err(),
        FullReason::SeveralChanged {
            tables: vec!["dim".into(), "t".into()]
        }
    );
    // A materialized view: its data files are what changed.
    let refreshed = [source(
        "m",
        Fingerprint::Snapshot {
            definition: "m1".into(),
            id: Some("b".into()),
            files: vec![file("m/a/1", 1), file("m/b/2", 1)],
        },
    )];
    let before = [source(
        "m",
        Fingerprint::Snapshot {
            definition: "m1".into(),
            id: Some("a".into()),
            files: vec![file("m/a/1", 1)],
        },
    )];
    let change = changed_table(&Diff::new(&before, &refreshed, true), show).unwrap();
    assert_eq!((change.before.len(), change.after.len()), (1, 2));
    assert!(change.only_source);
    let emptied = [source(
        "m",
        Fingerprint::Snapshot {
            definition: "m1".into(),
            id: None,
            files: vec![],
        },
    )];
    assert_eq!(
        changed_table(&Diff::new(&before, &emptied, true), show).unwrap_err(),
        FullReason::ViewEmptiedOrPopulated { view: "m".into() }
    );
}

#[test]
fn no_incremental_refresh_across_a_redefinition() {
    let show = |n: &QualifiedName| n.name.clone();
    let table = |files: usize, definition: &str| Fingerprint::Files {
        files: (0..files).map(|i| file(&format!("f{i}"), 1)).collect(),
        definition: definition.into(),
    };
    let view = |t: Fingerprint, definition: &str| {
        vec![source(
            "v",
            Fingerprint::View {
                sources: vec![source("t", t)],
                definition: definition.into(),
            },
        )]
    };
    let then = view(table(2, "csv"), "select a");
    // Appended under the same definitions: incremental is possible.
    assert!(
        changed_table(
            &Diff::new(&then, &view(table(3, "csv"), "select a"), true),
            show
        )
        .is_ok()
    );
    // The plain view was redefined, even with the same table files.
    assert_eq!(
        changed_table(
            &Diff::new(&then, &view(table(3, "csv"), "select b"), true),
            show
        )
        .unwrap_err(),
        FullReason::Redefined {
            relation: "v".into()
        }
    );
    // The table was re-created with other options over the same files.
    assert_eq!(
        changed_table(
            &Diff::new(&then, &view(table(3, "csv;"), "select a"), true),
            show
        )
        .unwrap_err(),
        FullReason::Redefined {
            relation: "t".into()
        }
    );
    // Recorded before definitions were: never assumed unchanged.
    assert_eq!(
        changed_table(
            &Diff::new(&view(table(2, ""), "select a"), &then, true),
            show
        )
        .unwrap_err()
        .to_string(),
        "the definition of t was not recorded at the last refresh"
    );
}
