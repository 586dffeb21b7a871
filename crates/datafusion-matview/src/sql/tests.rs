//! Unit tests of parsing.

use super::*;

fn one(sql: &str) -> Statement {
    let mut v = parse_sql(sql, "generic", 50).unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

#[test]
fn create_with_every_option() {
    let Statement::Create(c) = one(
        r#"CREATE OR REPLACE MATERIALIZED VIEW IF NOT EXISTS s."My View" (a, "B") AS SELECT 1, 2 WITH NO DATA"#,
    ) else {
        panic!()
    };
    assert!(c.or_replace && c.if_not_exists && !c.with_data);
    assert_eq!(c.name.to_string(), r#"s."My View""#);
    assert_eq!(
        c.columns
            .iter()
            .map(|i| i.value.as_str())
            .collect::<Vec<_>>(),
        ["a", "B"]
    );
    assert_eq!(c.query.to_string(), "SELECT 1, 2");
}

#[test]
fn with_data_is_the_default() {
    let Statement::Create(c) = one("create materialized view v as select * from t with data")
    else {
        panic!()
    };
    assert!(c.with_data);
    let Statement::Create(c) = one("create materialized view v as select * from t") else {
        panic!()
    };
    assert!(c.with_data);
}

#[test]
fn with_no_data_after_group_by() {
    let v = parse_sql(
        "CREATE MATERIALIZED VIEW a AS SELECT k, sum(x) FROM t GROUP BY k WITH NO DATA;\n\
         CREATE OR REPLACE MATERIALIZED VIEW b AS SELECT k FROM t GROUP BY k WITH DATA; \
         create materialized view c as select 1 with   no /* c */ data",
        "generic",
        50,
    )
    .unwrap();
    let flags: Vec<_> = v
        .iter()
        .map(|s| match s {
            Statement::Create(c) => (c.name.to_string(), c.with_data, c.query.to_string()),
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        flags,
        [
            (
                "a".into(),
                false,
                "SELECT k, sum(x) FROM t GROUP BY k".into()
            ),
            ("b".into(), true, "SELECT k FROM t GROUP BY k".into()),
            ("c".into(), false, "SELECT 1".into()),
        ]
    );
    // Only materialized views lose their suffix.
    assert!(
        parse_sql(
            "CREATE VIEW v AS SELECT k FROM t GROUP BY k WITH NO DATA",
            "generic",
            50
        )
        .is_err()
    );
}

#[test]
fn statements_keep_their_own_text() {
    let v = parse_sql_with_text(
        "CREATE EXTERNAL TABLE t (a INT) STORED AS CSV LOCATION 'x.csv' OPTIONS ('format.has_header' 'true');\n  -- next\nSELECT 1 ;",
        "generic",
        50,
    )
    .unwrap();
    let texts: Vec<&str> = v.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "CREATE EXTERNAL TABLE t (a INT) STORED AS CSV LOCATION 'x.csv' OPTIONS ('format.has_header' 'true')",
            "-- next\nSELECT 1"
        ]
    );
}

#[test]
fn statement_text_is_the_users_bytes_with_escapes_kept() {
    let texts = |sql: &str, dialect: &str| -> Vec<String> {
        parse_sql_with_text(sql, dialect, 50)
            .unwrap()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    };
    // A doubled quote is not the end of the string: one statement.
    let injection = "SELECT 'x''; DROP MATERIALIZED VIEW victim; SELECT ''y' AS s";
    assert_eq!(texts(injection, "generic"), [injection]);
    // Comments inside a statement are part of its text; a comment
    // after its last token is not.
    assert_eq!(
        texts(
            "SELECT 'O''Brien' AS \"x\"\"y\"; SELECT /* ; */ 2 /* ; */",
            "generic"
        ),
        ["SELECT 'O''Brien' AS \"x\"\"y\"", "SELECT /* ; */ 2"]
    );
    assert_eq!(
        texts("SELECT E'a\\'b;' AS s;SELECT $$x;y$$ -- ;\n", "postgresql"),
        ["SELECT E'a\\'b;' AS s", "SELECT $$x;y$$"]
    );
    // Multi-byte characters before a statement keep the slice aligned.
    assert_eq!(
        texts("SELECT 'é€'; SELECT 'ü''ß'", "generic"),
        ["SELECT 'é€'", "SELECT 'ü''ß'"]
    );
    // The WITH [NO] DATA suffix is part of the text as written.
    assert_eq!(
        texts(
            "CREATE MATERIALIZED VIEW v AS SELECT 'a''b' AS s WITH NO DATA;\nCREATE MATERIALIZED VIEW w AS SELECT 1 WITH  DATA",
            "generic"
        ),
        [
            "CREATE MATERIALIZED VIEW v AS SELECT 'a''b' AS s WITH NO DATA",
            "CREATE MATERIALIZED VIEW w AS SELECT 1 WITH  DATA"
        ]
    );
}

#[test]
fn secret_options_are_left_out_of_the_text() {
    let sql = "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://b/it''s/' OPTIONS (\n  'aws.access_key_id' 'AKIA',\n  'aws.secret_access_key' 'hush''d',\n  aws.region 'eu-west-1', 'aws.session_token' 'tok', 'format.footer_key_as_hex' 'ab'\n) -- done";
    let (text, withheld) = without_secret_options(sql, "generic").unwrap();
    assert_eq!(
        text,
        "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://b/it''s/' OPTIONS (aws.region 'eu-west-1') -- done"
    );
    assert_eq!(
        withheld,
        [
            "aws.access_key_id",
            "aws.secret_access_key",
            "aws.session_token",
            "format.footer_key_as_hex"
        ]
    );
    // Only secrets: the clause goes; no secret: the text is untouched.
    let (text, _) = without_secret_options(
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x' OPTIONS ('gcp.service_account_key' '{}')",
        "generic",
    )
    .unwrap();
    assert_eq!(text, "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x'");
    let plain = "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x' OPTIONS ('format.has_header' 'true', 'gcp.application_credentials_path' '/k.json')";
    assert_eq!(
        without_secret_options(plain, "generic").unwrap(),
        (plain.to_owned(), vec![])
    );
    for key in [
        "aws.password",
        "azure.client_secret",
        "hf.token",
        "x.api_key",
    ] {
        assert!(is_secret_option(key), "{key}");
    }
    for key in [
        "aws.region",
        "format.has_header",
        "format.footer_key_metadata_as_hex",
    ] {
        assert!(!is_secret_option(key), "{key}");
    }
}

/// Every credential or key option of the object stores (object_store's
/// aws, gcp and azure config keys, and datafusion-cli's `aws.`/`gcp.`
/// spellings of them) and of Parquet encryption, in every spelling SQL
/// allows for an option key: none may reach the stored text.
#[test]
fn every_secret_option_in_every_spelling_is_left_out() {
    let keys = [
        // object_store AmazonS3ConfigKey and datafusion-cli's aws.*
        "aws_access_key_id",
        "access_key_id",
        "aws_secret_access_key",
        "secret_access_key",
        "aws_session_token",
        "aws_token",
        "session_token",
        "token",
        "aws_sse_customer_key_base64",
        "sse_customer_key_base64",
        "aws.access_key_id",
        "aws.secret_access_key",
        "aws.session_token",
        "aws.token",
        "aws.sse_customer_key_base64",
        // GoogleConfigKey and gcp.*
        "google_service_account_key",
        "service_account_key",
        "gcp.service_account_key",
        // AzureConfigKey and azure.*
        "azure_storage_account_key",
        "azure_storage_access_key",
        "access_key",
        "azure_client_secret",
        "client_secret",
        "azure_storage_sas_key",
        "azure_storage_sas_token",
        "sas_token",
        "azure_storage_token",
        "bearer_token",
        "azure.account_key",
        // HTTP and Hugging Face
        "hf.token",
        // Parquet modular encryption: footer and per-column keys
        "format.crypto.file_encryption.footer_key_as_hex",
        "format.crypto.file_decryption.footer_key_as_hex",
        "format.crypto.file_encryption.column_key_as_hex::ssn",
        "format.crypto.file_decryption.column_key_as_hex::\"Mixed Case\"",
    ];
    for key in keys {
        let upper = key.to_ascii_uppercase();
        let spellings = [
            format!("'{key}'"),
            format!("E'{key}'"),
            format!("N'{key}'"),
            format!("$${key}$$"),
            format!("'{upper}'"),
        ];
        for spelled in spellings {
            let sql = format!(
                "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 'x' OPTIONS ('format.pushdown_filters' 'true', {spelled} 'S3CR3T')"
            );
            let (text, withheld) = without_secret_options(&sql, "postgresql").unwrap();
            assert!(!text.contains("S3CR3T"), "{spelled}: {text}");
            assert!(text.contains("'format.pushdown_filters' 'true'"), "{text}");
            assert_eq!(withheld.len(), 1, "{spelled}");
        }
    }
    // Bare words (a key without quotes), also with a column suffix.
    let sql = "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 'x' OPTIONS (aws.secret_access_key 'S3CR3T', format.crypto.file_decryption.column_key_as_hex::ssn 'S3CR3T')";
    let (text, withheld) = without_secret_options(sql, "generic").unwrap();
    assert!(!text.contains("S3CR3T"), "{text}");
    assert_eq!(withheld.len(), 2);
    // A key that is not a string or words is kept out too.
    let sql = "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x' OPTIONS (X'6b6579' 'S3CR3T')";
    let (text, _) = without_secret_options(sql, "generic").unwrap();
    assert!(!text.contains("S3CR3T"), "{text}");
}

#[test]
fn refresh_drop_show() {
    assert_eq!(
        one("REFRESH MATERIALIZED VIEW a.b.c FULL"),
        Statement::Refresh(RefreshMaterializedView {
            name: ObjectName::from(vec![Ident::new("a"), Ident::new("b"), Ident::new("c")]),
            full: true,
            incremental: false,
            cascade: false,
        })
    );
    assert_eq!(
        one("REFRESH MATERIALIZED VIEW v INCREMENTAL CASCADE"),
        Statement::Refresh(RefreshMaterializedView {
            name: ObjectName::from(vec![Ident::new("v")]),
            full: false,
            incremental: true,
            cascade: true,
        })
    );
    let Statement::Drop(d) = one("DROP MATERIALIZED VIEW IF EXISTS v1, v2 CASCADE") else {
        panic!()
    };
    assert!(d.if_exists && d.cascade);
    assert_eq!(d.names.len(), 2);
    assert_eq!(
        one("SHOW MATERIALIZED VIEWS LIKE 'x%'"),
        Statement::Show {
            like: Some("x%".into())
        }
    );
    assert_eq!(
        one("show materialized views"),
        Statement::Show { like: None }
    );
    assert_eq!(one("VACUUM MATERIALIZED VIEWS"), Statement::Vacuum);
}

#[test]
fn several_statements_and_comments() {
    let v = parse_sql(
        "-- a comment\nCREATE TABLE t AS VALUES (1); /* block */ REFRESH MATERIALIZED VIEW v;; SELECT 1;",
        "generic",
        50,
    )
    .unwrap();
    assert_eq!(v.len(), 3);
    assert!(matches!(v[0], Statement::DataFusion(_)));
    assert!(matches!(v[1], Statement::Refresh(_)));
    assert!(matches!(v[2], Statement::DataFusion(_)));
}

#[test]
fn syntax_errors_say_what_was_expected() {
    let e = parse_sql("REFRESH VIEW v", "generic", 50)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Expected: MATERIALIZED VIEW after REFRESH"),
        "{e}"
    );
    let e = parse_sql("REFRESH MATERIALIZED VIEW v junk", "generic", 50)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Expected: end of statement, found: junk"), "{e}");
    let e = parse_sql(
        "CREATE MATERIALIZED VIEW v AS SELECT 1 WITH NO",
        "generic",
        50,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("end of statement"), "{e}");
}

#[test]
fn other_statements_pass_through() {
    for sql in [
        "CREATE VIEW v AS SELECT 1",
        "DROP VIEW v",
        "SHOW TABLES",
        "COPY (SELECT 1) TO 'x.parquet'",
    ] {
        assert!(matches!(one(sql), Statement::DataFusion(_)), "{sql}");
    }
}
