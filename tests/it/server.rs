//! The server end to end: a real HTTP client against the REST API and the
//! Rust Flight SQL client against Flight SQL, each server on an ephemeral
//! loopback port over a temporary catalog.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables, SqlInfo};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::SessionContext;
use datafusion_matview::{MatviewOptions, MatviewSession};
use datafusion_matview_server::{Server, ServerOptions};
use futures::TryStreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tonic::transport::Channel;

use crate::common;

/// A server over a catalog in a temporary folder, with `orders` (CSV files
/// under `src/`) registered and remembered.
struct TestServer {
    dir: Arc<tempfile::TempDir>,
    http: SocketAddr,
    flight: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<datafusion_matview::Result<()>>>,
    client: reqwest::Client,
    token: Option<String>,
}

impl TestServer {
    async fn start(options: ServerOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(
            dir.path().join("src/jan.csv"),
            "region,amount\nnorth,10\nsouth,5\nnorth,2\n",
        )
        .unwrap();
        Self::start_in(Arc::new(dir), options).await
    }

    /// A server over the catalog in `dir` (which another may be serving).
    async fn start_in(dir: Arc<tempfile::TempDir>, options: ServerOptions) -> Self {
        Self::start_with(dir, SessionContext::new(), options).await
    }

    /// A server over the catalog in `dir` whose session starts from `ctx`
    /// (e.g. with an instrumented store).
    async fn start_with(
        dir: Arc<tempfile::TempDir>,
        ctx: SessionContext,
        options: ServerOptions,
    ) -> Self {
        // Paths in FROM work, as in dfmv and datafusion-cli.
        let session = MatviewSession::open_with_options(
            ctx.enable_url_table(),
            dir.path().join("catalog").to_str().unwrap(),
            MatviewOptions {
                remember_relations: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let src = dir.path().join("src");
        session
            .sql(&format!(
                "CREATE EXTERNAL TABLE IF NOT EXISTS orders STORED AS CSV LOCATION '{}/'",
                src.display()
            ))
            .await
            .unwrap();
        let token = options.token.clone();
        let server = Server::bind(session, options).await.unwrap();
        let (http, flight) = (server.http_addr(), server.flight_sql_addr());
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Self {
            dir,
            http,
            flight,
            stop: Some(stop),
            done: Some(done),
            client: reqwest::Client::new(),
            token,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, self.url(path));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// POSTs `body` to `path`. A create here populates the view unless the
    /// body says `with_no_data` (the spec's default is to leave it
    /// unpopulated; `lance_namespace_routes_answer_the_spec_models` checks
    /// that).
    async fn post(&self, path: &str, mut body: Value) -> (StatusCode, Value) {
        if path.ends_with("/create")
            && let Value::Object(fields) = &mut body
        {
            fields.entry("with_no_data").or_insert(json!(false));
        }
        let response = self
            .request(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The job's description once it has finished.
    async fn wait(&self, job_id: &str) -> Value {
        for _ in 0..2000 {
            let (status, job) = self
                .post("/v1/jobs/describe", json!({ "job_id": job_id }))
                .await;
            assert_eq!(status, StatusCode::OK, "{job}");
            if job["job_state"] != "IN_PROGRESS" {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("job {job_id} did not finish");
    }

    /// Submits a job and waits for it; it must end DONE.
    async fn job(&self, path: &str, body: Value) -> Value {
        let (status, answer) = self.post(path, body).await;
        let expected = if path.ends_with("/create") {
            StatusCode::CREATED
        } else {
            StatusCode::ACCEPTED
        };
        assert_eq!(status, expected, "{answer}");
        let job = self.wait(answer["job_id"].as_str().unwrap()).await;
        assert_eq!(job["job_state"], "DONE", "{job}");
        job["result"].clone()
    }

    /// The JSON rows of `sql`.
    async fn rows(&self, sql: &str) -> Value {
        let response = self
            .request(reqwest::Method::POST, "/v1/sql")
            .header("accept", "application/json")
            .json(&json!({ "sql": sql }))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, StatusCode::OK, "{sql}: {body}");
        body
    }

    /// Every file under the catalog, with its contents.
    fn catalog_files(&self) -> Vec<(String, Vec<u8>)> {
        common::files_under(&self.dir.path().join("catalog"))
            .into_iter()
            .map(|f| {
                let bytes = std::fs::read(self.dir.path().join("catalog").join(&f)).unwrap();
                (f, bytes)
            })
            .collect()
    }

    async fn stop(mut self) -> Arc<tempfile::TempDir> {
        self.stop.take().unwrap().send(()).unwrap();
        self.done.take().unwrap().await.unwrap().unwrap();
        self.dir
    }
}

fn rest_only() -> ServerOptions {
    ServerOptions {
        http: "127.0.0.1:0".parse().unwrap(),
        flight_sql: None,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_create_describe_query_refresh_list_and_drop() {
    let server = TestServer::start(rest_only()).await;
    let (status, _) = server
        .post("/v1/sql", json!({ "sql": "CREATE SCHEMA analytics" }))
        .await;
    assert_eq!(status, StatusCode::OK);

    // CREATE commits the view, then populates it in a job (a refresh: the
    // view's version 2).
    let query = "SELECT region, count(*) AS n, sum(amount) AS total FROM orders GROUP BY region";
    let created = server
        .job(
            "/v1/materialized_view/analytics$totals/create",
            json!({ "query": query }),
        )
        .await;
    assert_eq!(
        (
            &created["view"],
            &created["mode"],
            &created["rows_written"],
            &created["version"]
        ),
        (
            &json!("analytics.totals"),
            &json!("full"),
            &json!(2),
            &json!(2)
        ),
        "{created}"
    );
    let (status, view) = server
        .post("/v1/materialized_view/analytics$totals/describe", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["id"], "datafusion$analytics$totals");
    assert_eq!(view["name"], "totals");
    assert_eq!(view["namespace"], json!(["datafusion", "analytics"]));
    assert_eq!(view["populated"], true);
    assert_eq!(view["freshness"], "fresh");
    assert_eq!(view["row_count"], 2);
    assert_eq!(view["version"], 2);
    assert_eq!(
        view["format_version"],
        datafusion_matview::spec::MANIFEST_FORMAT
    );
    assert_eq!(
        view["columns"],
        json!([
            { "name": "region", "type": "Utf8", "nullable": true },
            { "name": "n", "type": "Int64", "nullable": false },
            { "name": "total", "type": "Int64", "nullable": true },
        ])
    );
    assert!(view["query"].as_str().unwrap().contains("GROUP BY region"));
    assert_eq!(
        server
            .rows("SELECT * FROM analytics.totals ORDER BY region")
            .await,
        json!([{ "region": "north", "n": 2, "total": 12 }, { "region": "south", "n": 1, "total": 5 }])
    );

    // The source changes: the view says so, and two refreshes queued at
    // once run one after the other: the first incremental, the second
    // finds nothing left to do.
    std::fs::write(
        server.dir.path().join("src/feb.csv"),
        "region,amount\neast,7\nnorth,1\n",
    )
    .unwrap();
    let (_, view) = server
        .post("/v1/materialized_view/analytics$totals/describe", json!({}))
        .await;
    assert_eq!(view["freshness"], "stale");
    assert_eq!(view["changed_sources"], json!(["orders"]));
    let (s1, first) = server
        .post("/v1/materialized_view/analytics$totals/refresh", json!({}))
        .await;
    let (s2, second) = server
        .post("/v1/materialized_view/analytics$totals/refresh", json!({}))
        .await;
    assert_eq!((s1, s2), (StatusCode::ACCEPTED, StatusCode::ACCEPTED));
    let first = server.wait(first["job_id"].as_str().unwrap()).await;
    let second = server.wait(second["job_id"].as_str().unwrap()).await;
    assert_eq!(first["job_type"], "REFRESH_MATERIALIZED_VIEW");
    assert_eq!(first["job_state"], "DONE", "{first}");
    let result = &first["result"];
    assert_eq!(result["mode"], "incremental", "{result}");
    assert_eq!(result["rows_written"], 3);
    assert_eq!(result["rows_deleted"], 2);
    assert_eq!(result["version"], 3);
    assert_eq!(
        result["detail"],
        "orders: 1 file(s) appended; merged into the existing groups"
    );
    assert!(result["source_version"].as_u64().unwrap() >= 1);
    assert_eq!(result["upstream"], json!([]));
    assert_eq!(second["result"]["mode"], "no_op", "{second}");
    assert_eq!(second["result"]["version"], 3);
    assert_eq!(
        server
            .rows("SELECT * FROM analytics.totals ORDER BY region")
            .await,
        json!([{ "region": "east", "n": 1, "total": 7 }, { "region": "north", "n": 3, "total": 13 },
               { "region": "south", "n": 1, "total": 5 }])
    );
    let full = server
        .job(
            "/v1/materialized_view/analytics$totals/refresh",
            json!({ "full": true }),
        )
        .await;
    assert_eq!(full["mode"], "full");
    assert_eq!(full["rows_written"], 3);

    // The jobs are listed newest first, a page at a time.
    let (_, page) = server.post("/v1/jobs/list", json!({ "limit": 2 })).await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(page["jobs"][0]["result"]["mode"], "full");
    let (_, rest) = server
        .post(
            "/v1/jobs/list",
            json!({ "limit": 10, "page_token": page["page_token"] }),
        )
        .await;
    assert_eq!(rest["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(rest["jobs"][1]["job_type"], "CREATE_MATERIALIZED_VIEW");
    assert_eq!(rest["page_token"], Value::Null);

    // WITH NO DATA answers at once, with no job.
    for name in ["v1", "v2", "v3", "v4", "v5"] {
        let (status, view) = server
            .post(
                &format!("/v1/materialized_view/{name}/create"),
                json!({ "query": "SELECT region FROM orders", "with_no_data": true }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{view}");
        assert_eq!(
            (&view["version"], &view["job_id"], &view["action"]),
            (&json!(1), &Value::Null, &json!("created"))
        );
    }
    // Pages of two; views created and dropped between pages are neither
    // skipped nor repeated among the ones that stay.
    let (status, page) = server
        .get("/v1/namespace/public/materialized_view/list?limit=2")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["views"], json!(["v1", "v2"]));
    let (status, _) = server
        .post("/v1/materialized_view/v1/drop", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    server
        .post(
            "/v1/materialized_view/v0/create",
            json!({ "query": "SELECT 1 AS one", "with_no_data": true }),
        )
        .await;
    let token = page["page_token"].as_str().unwrap();
    let (_, page) = server
        .get(&format!(
            "/v1/namespace/public/materialized_view/list?limit=2&page_token={token}"
        ))
        .await;
    assert_eq!(page["views"], json!(["v3", "v4"]));
    let token = page["page_token"].as_str().unwrap();
    let (_, page) = server
        .get(&format!(
            "/v1/namespace/public/materialized_view/list?limit=2&page_token={token}"
        ))
        .await;
    assert_eq!(page["views"], json!(["v5"]));
    assert_eq!(page["page_token"], Value::Null);
    // The root namespace lists every view by its whole id.
    let (_, all) = server.get("/v1/namespace/$/materialized_view/list").await;
    assert_eq!(
        all["views"],
        json!([
            "datafusion$analytics$totals",
            "datafusion$public$v0",
            "datafusion$public$v2",
            "datafusion$public$v3",
            "datafusion$public$v4",
            "datafusion$public$v5"
        ])
    );
    // Another delimiter.
    let (status, view) = server
        .post(
            "/v1/materialized_view/analytics.totals/describe?delimiter=.",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["id"], "datafusion.analytics.totals");

    let (status, dropped) = server
        .post("/v1/materialized_view/analytics$totals/drop", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        dropped,
        json!({ "dropped": [{ "id": "datafusion$analytics$totals", "kind": "materialized view" }] })
    );
    let (status, error) = server
        .post("/v1/materialized_view/analytics$totals/describe", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        error,
        json!({ "error": "materialized view \"analytics.totals\" does not exist",
                "code": 4, "condition": "undefined_table", "detail": null,
                "instance": "/v1/materialized_view/analytics$totals/describe", "retryable": false })
    );

    // The Arrow answer of /v1/sql is an IPC stream.
    let response = server
        .request(reqwest::Method::POST, "/v1/sql")
        .json(&json!({ "sql": "SELECT 41 + 1 AS answer" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "application/vnd.apache.arrow.stream"
    );
    let bytes = response.bytes().await.unwrap();
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .unwrap();
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
    assert_eq!(
        batches[0].column(0).as_primitive::<Int64Type>().value(0),
        42
    );

    let dir = server.stop().await;
    // A new process finds what the server left.
    let session = MatviewSession::open(
        SessionContext::new(),
        dir.path().join("catalog").to_str().unwrap(),
    )
    .await
    .unwrap();
    let names: Vec<String> = session
        .list_views(None, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, ["v0", "v2", "v3", "v4", "v5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_refresh_reads_a_source_view_at_a_pinned_version() {
    let server = TestServer::start(rest_only()).await;
    server
        .job(
            "/v1/materialized_view/base/create",
            json!({ "query": "SELECT region, amount FROM orders" }),
        )
        .await;
    server
        .job(
            "/v1/materialized_view/top/create",
            json!({ "query": "SELECT sum(amount) AS total FROM base" }),
        )
        .await;
    std::fs::write(
        server.dir.path().join("src/feb.csv"),
        "region,amount\neast,7\n",
    )
    .unwrap();
    let base = server
        .job("/v1/materialized_view/base/refresh", json!({}))
        .await;
    assert_eq!(base["version"], 3, "{base}");
    assert_eq!(base["source_versions"], json!({}), "a table has no version");
    let top = server
        .job("/v1/materialized_view/top/refresh", json!({}))
        .await;
    assert_eq!(
        top["source_versions"],
        json!({ "datafusion$public$base": 3 })
    );
    assert_eq!(
        server.rows("SELECT total FROM top").await,
        json!([{ "total": 24 }])
    );

    // Read base as its version 2 (its first data) had it.
    let pinned = server
        .job(
            "/v1/materialized_view/top/refresh",
            json!({ "source_version": { "base": 2 } }),
        )
        .await;
    assert_eq!(
        pinned["source_versions"],
        json!({ "datafusion$public$base": 2 })
    );
    assert_eq!(pinned["version"], 4);
    assert!(
        pinned["detail"]
            .as_str()
            .unwrap()
            .ends_with("; read base at version 2"),
        "{pinned}"
    );
    assert_eq!(
        server.rows("SELECT total FROM top").await,
        json!([{ "total": 17 }])
    );
    let (_, view) = server
        .post("/v1/materialized_view/top/describe", json!({}))
        .await;
    assert_eq!(view["freshness"], "stale", "{view}");
    assert_eq!(view["changed_sources"], json!(["base"]), "{view}");

    // A view it does not read cannot be pinned: the job fails and says why.
    server
        .job(
            "/v1/materialized_view/other/create",
            json!({ "query": "SELECT 1 AS one" }),
        )
        .await;
    let (status, answer) = server
        .post(
            "/v1/materialized_view/top/refresh",
            json!({ "source_version": { "other": 2 } }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let job = server.wait(answer["job_id"].as_str().unwrap()).await;
    assert_eq!(job["job_state"], "FAILED", "{job}");
    assert_eq!(
        job["failure"]["message"],
        "cannot read materialized view \"other\" at version 2: materialized view \"top\" does not read it\nHINT: Describe the view for its current version, or refresh without pinning it.",
        "{job}"
    );
    assert_eq!(job["spec"]["source_version"], json!({ "other": 2 }));
    assert_eq!(
        server.rows("SELECT total FROM top").await,
        json!([{ "total": 17 }])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_errors_have_the_right_status_and_change_nothing() {
    let server = TestServer::start(ServerOptions {
        max_body_bytes: 4096,
        ..rest_only()
    })
    .await;
    server
        .job(
            "/v1/materialized_view/v/create",
            json!({ "query": "SELECT region, amount FROM orders" }),
        )
        .await;
    let before = server.catalog_files();

    let raw = |body: &'static str| {
        server
            .request(reqwest::Method::POST, "/v1/materialized_view/w/create")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // Bad JSON, an unknown field, a missing one.
    for body in [
        "{\"query\": ",
        "{\"query\": \"SELECT 1\", \"colour\": 1}",
        "{}",
    ] {
        let response = raw(body).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["condition"], "invalid_request");
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .starts_with("invalid JSON body: "),
            "{error}"
        );
    }
    // A huge body.
    let huge = format!("{{\"query\": \"SELECT '{}'\"}}", "x".repeat(10_000));
    let response = server
        .request(reqwest::Method::POST, "/v1/materialized_view/w/create")
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["condition"], "payload_too_large");
    // Ids that look like paths.
    // (A bare `..` segment never reaches the server: the client's URL
    // parser resolves it, as every HTTP client does.)
    for id in ["a$..", "..$b", "a%2Fb", "a$$b", "a$b$c$d"] {
        let (status, error) = server
            .post(
                &format!("/v1/materialized_view/{id}/create"),
                json!({ "query": "SELECT 1" }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{id}: {error}");
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .starts_with("invalid identifier"),
            "{error}"
        );
    }
    // A query that does not plan, one that is not a query, a name taken.
    let (status, error) = server
        .post(
            "/v1/materialized_view/w/create",
            json!({ "query": "SELECT nope FROM orders" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("No field named nope"),
        "{error}"
    );
    let (status, error) = server
        .post(
            "/v1/materialized_view/w/create",
            json!({ "query": "SELECT 1; DROP TABLE orders" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    let (status, error) = server
        .post(
            "/v1/materialized_view/v/create",
            json!({ "query": "SELECT 1" }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["error"], "relation \"v\" already exists");
    assert_eq!(error["condition"], "duplicate_table");
    let (status, error) = server
        .post("/v1/materialized_view/orders/refresh", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    for (pins, code, message) in [
        (
            json!(3),
            "feature_not_supported",
            "source_version must name each source materialized view with the version of its own log, e.g. {\"analytics$daily\": 7}: each view commits to its own log, so no single catalog version names the snapshots of several views",
        ),
        (
            json!({ "orders": 1 }),
            "feature_not_supported",
            "cannot read \"orders\" at version 1: only materialized views have versions (a table's files do not)",
        ),
        (
            json!({ "v": 9 }),
            "invalid_parameter_value",
            "cannot read materialized view \"v\" at version 9: its versions are 1 to 2",
        ),
        (
            json!({ "v": "latest" }),
            "invalid_parameter_value",
            "source_version of \"v\" must be a version number, not \"latest\"",
        ),
    ] {
        let (status, error) = server
            .post(
                "/v1/materialized_view/v/refresh",
                json!({ "source_version": pins }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
        assert_eq!(error["condition"], code, "{error}");
        assert_eq!(error["error"], message, "{error}");
    }
    let (status, error) = server
        .post("/v1/materialized_view/orders/drop", json!({}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["condition"], "wrong_object_type");
    assert_eq!(error["detail"], "HINT: Use DROP TABLE to remove a table.");
    let (status, _) = server
        .post("/v1/jobs/describe", json!({ "job_id": "no-such-job" }))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = server
        .get("/v1/namespace/nowhere/materialized_view/list")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = server
        .get("/v1/namespace/public/materialized_view/list?page_token=zz")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, error) = server.post("/v1/sql", json!({ "sql": "SELEC 1" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["condition"], "syntax_error");
    let (status, _) = server.get("/v1/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    assert_eq!(
        server.catalog_files(),
        before,
        "an error changed the catalog"
    );
    let (_, openapi) = server.get("/openapi.json").await;
    assert_eq!(openapi["openapi"], "3.1.0");
    assert!(openapi["paths"]["/v1/materialized_view/{id}/refresh"]["post"].is_object());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_token_is_required_but_not_for_healthz() {
    let mut server = TestServer::start(ServerOptions {
        token: Some("s3cret".into()),
        ..rest_only()
    })
    .await;
    let (status, _) = server.post("/v1/sql", json!({ "sql": "SELECT 1" })).await;
    assert_eq!(status, StatusCode::OK);
    server.token = Some("wrong".into());
    let (status, error) = server.post("/v1/sql", json!({ "sql": "SELECT 1" })).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error["condition"], "unauthorized");
    server.token = None;
    let (status, _) = server.get("/v1/namespace/$/materialized_view/list").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, health) = server.get("/healthz").await;
    assert_eq!(
        (status, health),
        (StatusCode::OK, json!({ "status": "ok" }))
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_cancel_of_a_long_refresh_keeps_the_old_data() {
    let server = TestServer::start(rest_only()).await;
    // A view whose refresh takes long: a count over a large cross join of
    // a table that a statement can grow.
    server
        .rows("CREATE TABLE big AS SELECT * FROM generate_series(1, 10) AS t(x)")
        .await;
    server
        .job(
            "/v1/materialized_view/slow/create",
            // (Not count(*): DataFusion answers that from statistics.)
            json!({ "query": "SELECT sum(a.x * b.x + c.x) AS n FROM big a, big b, big c" }),
        )
        .await;
    server
        .rows("INSERT INTO big SELECT * FROM generate_series(11, 3000)")
        .await;
    let (_, before) = server
        .post("/v1/materialized_view/slow/describe", json!({}))
        .await;
    let (status, job) = server
        .post("/v1/materialized_view/slow/refresh", json!({}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, cancelled) = server
        .post("/v1/jobs/cancel", json!({ "job_id": job["job_id"] }))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cancelled["job_state"], "CANCELLED", "{cancelled}");
    assert_eq!(cancelled["result"]["started"], true);
    assert_eq!(cancelled["result"]["view_version_after"], 2);
    let (_, after) = server
        .post("/v1/materialized_view/slow/describe", json!({}))
        .await;
    assert_eq!(after["version"], before["version"]);
    assert_eq!(
        server.rows("SELECT n FROM slow").await,
        json!([{ "n": 35750 }])
    );
    // Cancelling again answers the same state.
    let (_, again) = server
        .post("/v1/jobs/cancel", json!({ "job_id": job["job_id"] }))
        .await;
    assert_eq!(again["job_state"], "CANCELLED");

    // The history has the cancelled attempt (written by a task of its
    // own once the job's work was dropped), newest first, with its job;
    // then the create's population, a job too.
    let mut history = Value::Null;
    for _ in 0..500 {
        let (status, page) = server.get("/v1/materialized_view/slow/refreshes").await;
        assert_eq!(status, StatusCode::OK, "{page}");
        if page["refreshes"].as_array().is_some_and(|a| a.len() == 2) {
            history = page;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let attempts = history["refreshes"].as_array().expect("two attempts");
    assert_eq!(attempts[0]["state"], "cancelled", "{history}");
    assert_eq!(attempts[0]["job_id"], job["job_id"]);
    assert_eq!(attempts[0]["trigger"], "server job");
    assert_eq!(attempts[0]["version"], Value::Null);
    assert_eq!(attempts[0]["mode"], "full");
    assert_eq!(attempts[0]["view"], "datafusion$public$slow");
    assert_eq!(attempts[1]["state"], "succeeded");
    assert_eq!(attempts[1]["version"], 2);
    assert_eq!(attempts[1]["trigger"], "server job");
    assert!(attempts[1]["ran_by"].as_str().unwrap().contains(" pid "));
    assert_eq!(history["page_token"], Value::Null);
    // A page at a time.
    let (_, first) = server
        .get("/v1/materialized_view/slow/refreshes?limit=1")
        .await;
    assert_eq!(
        first["refreshes"][0]["attempt_id"],
        attempts[0]["attempt_id"]
    );
    let token = first["page_token"].as_str().expect("a next page");
    let (_, second) = server
        .get(&format!(
            "/v1/materialized_view/slow/refreshes?limit=1&page_token={token}"
        ))
        .await;
    assert_eq!(
        second["refreshes"][0]["attempt_id"],
        attempts[1]["attempt_id"]
    );
    assert_eq!(second["page_token"], Value::Null);
    let (status, missing) = server.get("/v1/materialized_view/nope/refreshes").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    server.stop().await;
}

async fn flight_client(addr: SocketAddr) -> FlightSqlServiceClient<Channel> {
    let channel = tonic::transport::Endpoint::new(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

async fn fetch(
    client: &mut FlightSqlServiceClient<Channel>,
    info: arrow_flight::FlightInfo,
) -> Vec<RecordBatch> {
    let mut batches = vec![];
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.unwrap();
        let stream = client.do_get(ticket).await.unwrap();
        batches.extend(stream.try_collect::<Vec<_>>().await.unwrap());
    }
    batches
}

async fn query(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> Vec<RecordBatch> {
    let info = client.execute(sql.to_string(), None).await.unwrap();
    fetch(client, info).await
}

/// The error `sql` fails with, whether at its fetch's start or mid-stream.
async fn query_error(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> String {
    let info = client.execute(sql.to_string(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    match client.do_get(ticket).await {
        Err(e) => e.to_string(),
        Ok(stream) => stream
            .try_collect::<Vec<_>>()
            .await
            .unwrap_err()
            .to_string(),
    }
}

fn strings(batches: &[RecordBatch], column: &str) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(column).unwrap();
            let c =
                datafusion::arrow::compute::cast(c, &datafusion::arrow::datatypes::DataType::Utf8)
                    .unwrap();
            let c = c.as_string::<i32>().clone();
            (0..c.len())
                .map(move |i| c.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn with_flight() -> ServerOptions {
    ServerOptions {
        http: "127.0.0.1:0".parse().unwrap(),
        flight_sql: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_creates_refreshes_queries_and_lists_views() {
    let server = TestServer::start(with_flight()).await;
    let mut client = flight_client(server.flight.unwrap()).await;

    let created = query(
        &mut client,
        "CREATE MATERIALIZED VIEW totals AS SELECT region, sum(amount) AS total FROM orders GROUP BY region",
    )
    .await;
    assert_eq!(strings(&created, "action"), ["created"]);
    assert_eq!(strings(&created, "rows_written"), ["2"]);
    let rows = query(
        &mut client,
        "SELECT region, total FROM totals ORDER BY region",
    )
    .await;
    assert_eq!(strings(&rows, "region"), ["north", "south"]);
    assert_eq!(strings(&rows, "total"), ["12", "5"]);

    std::fs::write(
        server.dir.path().join("src/feb.csv"),
        "region,amount\neast,7\n",
    )
    .unwrap();
    let refreshed = query(&mut client, "REFRESH MATERIALIZED VIEW totals").await;
    assert_eq!(strings(&refreshed, "mode"), ["incremental"]);
    let rows = query(&mut client, "SELECT region FROM totals ORDER BY region").await;
    assert_eq!(strings(&rows, "region"), ["east", "north", "south"]);
    // The update call answers a count.
    let written = client
        .execute_update("REFRESH MATERIALIZED VIEW totals FULL".into(), None)
        .await
        .unwrap();
    assert_eq!(written, 3);

    // A prepared query with a parameter.
    let mut prepared = client
        .prepare(
            "SELECT region FROM totals WHERE total > $1 ORDER BY region".into(),
            None,
        )
        .await
        .unwrap();
    let parameters = prepared.parameter_schema().unwrap().clone();
    assert_eq!(parameters.fields().len(), 1);
    let value: std::sync::Arc<dyn Array> =
        std::sync::Arc::new(datafusion::arrow::array::Int64Array::from(vec![6]));
    prepared
        .set_parameters(
            RecordBatch::try_new(
                std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
                    datafusion::arrow::datatypes::Field::new(
                        "$1",
                        datafusion::arrow::datatypes::DataType::Int64,
                        true,
                    ),
                ])),
                vec![value],
            )
            .unwrap(),
        )
        .unwrap();
    let info = prepared.execute().await.unwrap();
    let rows = fetch(&mut client, info).await;
    assert_eq!(strings(&rows, "region"), ["east", "north"]);
    prepared.close().await.unwrap();

    // Metadata: the view is a table of the catalog, of type MATERIALIZED VIEW.
    let info = client.get_catalogs().await.unwrap();
    assert_eq!(
        strings(&fetch(&mut client, info).await, "catalog_name"),
        ["datafusion"]
    );
    let info = client
        .get_db_schemas(CommandGetDbSchemas {
            catalog: Some("datafusion".into()),
            db_schema_filter_pattern: None,
        })
        .await
        .unwrap();
    assert!(
        strings(&fetch(&mut client, info).await, "db_schema_name").contains(&"public".to_string())
    );
    let info = client
        .get_tables(CommandGetTables {
            catalog: Some("datafusion".into()),
            db_schema_filter_pattern: Some("public".into()),
            table_name_filter_pattern: None,
            table_types: vec![],
            include_schema: true,
        })
        .await
        .unwrap();
    let tables = fetch(&mut client, info).await;
    let names = strings(&tables, "table_name");
    let types = strings(&tables, "table_type");
    let listed: Vec<(String, String)> = names.into_iter().zip(types).collect();
    assert!(
        listed.contains(&("totals".into(), "MATERIALIZED VIEW".into())),
        "{listed:?}"
    );
    assert!(
        listed.contains(&("orders".into(), "TABLE".into())),
        "{listed:?}"
    );
    let info = client.get_table_types().await.unwrap();
    assert!(
        strings(&fetch(&mut client, info).await, "table_type")
            .contains(&"MATERIALIZED VIEW".to_string())
    );
    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerVersion,
        ])
        .await
        .unwrap();
    let info = fetch(&mut client, info).await;
    let values = format!("{:?}", info[0].column(1));
    assert!(values.contains("dfmv"), "{values}");
    assert!(values.contains(env!("CARGO_PKG_VERSION")), "{values}");

    // A statement that fails answers the session's message.
    let error = client
        .execute("SELECT * FROM missing".into(), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("missing"), "{error}");

    // The REST API sees what Flight SQL made.
    let (_, view) = server
        .post("/v1/materialized_view/totals/describe", json!({}))
        .await;
    assert_eq!(view["version"], 3);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_requires_the_token_and_hands_it_out_on_handshake() {
    let server = TestServer::start(ServerOptions {
        token: Some("s3cret".into()),
        ..with_flight()
    })
    .await;
    let mut client = flight_client(server.flight.unwrap()).await;
    let error = client.execute("SELECT 1".into(), None).await.unwrap_err();
    assert!(error.to_string().contains("bearer token"), "{error}");
    assert!(client.handshake("anyone", "wrong").await.is_err());
    client.handshake("anyone", "s3cret").await.unwrap();
    let rows = query(&mut client, "SELECT 1 AS one").await;
    assert_eq!(strings(&rows, "one"), ["1"]);
    let mut bearer = flight_client(server.flight.unwrap()).await;
    bearer.set_header("authorization", "Bearer s3cret");
    assert_eq!(
        strings(&query(&mut bearer, "SELECT 2 AS two").await, "two"),
        ["2"]
    );
    server.stop().await;
}

// ---- load ---------------------------------------------------------------------

/// What one load client saw: each counted request's kind and latency, and
/// the jobs it submitted.
#[derive(Default)]
struct ClientLog {
    latencies: Vec<(&'static str, Duration)>,
    jobs: Vec<(String, &'static str, String)>,
}

/// A view the load client owns, as the client last saw it.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Owned {
    Absent,
    /// Its CREATE job was submitted (which may yet fail).
    Creating,
    Present,
}

/// 8 clients × 200 mixed requests (create, refresh, query, list, describe,
/// drop), half against one server and half against a second server over
/// the same catalog, with full refreshes of one view that every client
/// shares. Every job must end DONE or FAILED with a reason; no commit may
/// be lost (each DONE refresh of the shared view has its own version, and
/// the view's version counts them all); every view a client owns is where
/// its last acknowledged statement left it; the catalog opens clean after.
/// Prints requests per second and latencies (the numbers in docs/server.md come
/// from `cargo test --test it server::load -- --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_8_clients_200_requests_two_servers_one_catalog() {
    const CLIENTS: usize = 8;
    const REQUESTS: usize = 200;
    let options = || ServerOptions {
        max_jobs: 256,
        ..rest_only()
    };
    let a = TestServer::start(options()).await;
    let b = TestServer::start_in(Arc::clone(&a.dir), options()).await;
    let shared_query = "SELECT x, x % 7 AS g FROM generate_series(1, 1000) AS t(x)";
    let created = a
        .job(
            "/v1/materialized_view/shared/create",
            json!({ "query": shared_query }),
        )
        .await;
    let first_version = created["version"].as_u64().unwrap();
    let servers = Arc::new([a, b]);

    let started = std::time::Instant::now();
    let mut clients = vec![];
    for c in 0..CLIENTS {
        let servers = Arc::clone(&servers);
        clients.push(tokio::spawn(async move {
            let server = &servers[c % 2];
            let mut log = ClientLog::default();
            let mut owned = [Owned::Absent; 3];
            // The jobs not yet waited for, per owned view.
            let mut pending: [Vec<String>; 3] = Default::default();
            let n = |k: usize| 10 * (c + 1) + k;
            for j in 0..REQUESTS {
                let k = (j / 8) % 3;
                let view = format!("c{c}_v{k}");
                let timed = std::time::Instant::now();
                let kind = match (j % 8, owned[k]) {
                    (0, Owned::Absent) => {
                        let query = format!("SELECT x FROM generate_series(1, {}) AS t(x)", n(k));
                        let (status, job) = server
                            .post(
                                &format!("/v1/materialized_view/{view}/create"),
                                json!({ "query": query }),
                            )
                            .await;
                        assert_eq!(status, StatusCode::CREATED, "{job}");
                        let id = job["job_id"].as_str().unwrap().to_owned();
                        log.jobs.push((id.clone(), "create", view.clone()));
                        pending[k].push(id);
                        owned[k] = Owned::Creating;
                        "create"
                    }
                    (0 | 6, _) | (1, _) => {
                        // A full refresh of the shared view (or of the
                        // client's own when it has one, at 6).
                        let target = if j % 8 == 6 && owned[k] == Owned::Present {
                            view.as_str()
                        } else {
                            "shared"
                        };
                        let (status, job) = server
                            .post(
                                &format!("/v1/materialized_view/{target}/refresh"),
                                json!({ "full": true }),
                            )
                            .await;
                        assert_eq!(status, StatusCode::ACCEPTED, "{job}");
                        let id = job["job_id"].as_str().unwrap().to_owned();
                        log.jobs.push((id.clone(), "refresh", target.to_owned()));
                        if target != "shared" {
                            pending[k].push(id);
                        }
                        "refresh"
                    }
                    (2 | 5, state) => {
                        // The shared view, or the client's own once it is known to be there.
                        if state == Owned::Present && j % 8 == 5 {
                            let rows = server
                                .rows(&format!("SELECT count(*) AS n FROM {view}"))
                                .await;
                            assert_eq!(rows, json!([{ "n": n(k) }]));
                        } else {
                            let rows = server
                                .rows("SELECT count(*) AS n, sum(g) AS s FROM shared")
                                .await;
                            assert_eq!(rows, json!([{ "n": 1000, "s": 3003 }]));
                        }
                        "query"
                    }
                    (3, _) => {
                        let (status, page) = server
                            .get("/v1/namespace/public/materialized_view/list?limit=5")
                            .await;
                        assert_eq!(status, StatusCode::OK, "{page}");
                        assert!(page["views"].as_array().unwrap().len() <= 5);
                        "list"
                    }
                    (4, _) => {
                        let (status, view) = server
                            .post("/v1/materialized_view/shared/describe", json!({}))
                            .await;
                        assert_eq!(status, StatusCode::OK, "{view}");
                        "describe"
                    }
                    (7, Owned::Absent) => {
                        let (status, _) =
                            server.post("/v1/jobs/list", json!({ "limit": 10 })).await;
                        assert_eq!(status, StatusCode::OK);
                        "jobs list"
                    }
                    (7, _) => {
                        // Settle what runs on the view, then drop it.
                        let mut present = owned[k] == Owned::Present;
                        for id in pending[k].drain(..) {
                            let job = server.wait(&id).await;
                            if log
                                .jobs
                                .iter()
                                .any(|(j, kind, _)| *j == id && *kind == "create")
                            {
                                present = job["job_state"] == "DONE";
                            }
                        }
                        let timed = std::time::Instant::now();
                        let (status, answer) = server
                            .post(&format!("/v1/materialized_view/{view}/drop"), json!({}))
                            .await;
                        if present {
                            assert_eq!(status, StatusCode::OK, "{answer}");
                        } else {
                            assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
                        }
                        owned[k] = Owned::Absent;
                        log.latencies.push(("drop", timed.elapsed()));
                        continue;
                    }
                    (_, _) => unreachable!(),
                };
                log.latencies.push((kind, timed.elapsed()));
                // A create that has finished makes the view the client's.
                if owned[k] == Owned::Creating && j % 8 == 4 {
                    let id = pending[k].remove(0);
                    let job = server.wait(&id).await;
                    owned[k] = if job["job_state"] == "DONE" {
                        Owned::Present
                    } else {
                        Owned::Absent
                    };
                }
            }
            // Settle every job the client still has running.
            for (k, ids) in pending.iter_mut().enumerate() {
                for id in ids.drain(..) {
                    let job = server.wait(&id).await;
                    if owned[k] == Owned::Creating {
                        owned[k] = if job["job_state"] == "DONE" {
                            Owned::Present
                        } else {
                            Owned::Absent
                        };
                    }
                }
            }
            (log, owned)
        }));
    }
    let mut logs = vec![];
    for client in clients {
        logs.push(client.await.unwrap());
    }
    let elapsed = started.elapsed();

    // Every job ended DONE or FAILED with a reason.
    let (mut done, mut failed, mut shared_versions) = (0, 0, vec![]);
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    for (c, (log, _)) in logs.iter().enumerate() {
        for (id, kind, view) in &log.jobs {
            let job = servers[c % 2].wait(id).await;
            match job["job_state"].as_str().unwrap() {
                "DONE" => {
                    done += 1;
                    if *kind == "refresh" && view == "shared" {
                        assert_eq!(job["result"]["mode"], "full", "{job}");
                        shared_versions.push(job["result"]["version"].as_u64().unwrap());
                    }
                }
                "FAILED" => {
                    failed += 1;
                    let message = job["failure"]["message"].as_str().unwrap_or("");
                    assert!(!message.is_empty(), "a failure without a reason: {job}");
                    // Two servers racing on one view: the loser is told to retry.
                    if job["failure"]["phase"] == "commit" {
                        assert_eq!(job["failure"]["retryable"], true, "{job}");
                    }
                    let reason = format!(
                        "{kind} {}: {}",
                        job["failure"]["phase"],
                        message.split(':').next().unwrap()
                    );
                    *reasons.entry(reason).or_default() += 1;
                }
                other => panic!("job {id} ended {other}: {job}"),
            }
        }
    }
    // No lost commit: each DONE refresh of the shared view made its own
    // version, and the view's version counts them all.
    let refreshes = shared_versions.len() as u64;
    shared_versions.sort_unstable();
    shared_versions.dedup();
    assert_eq!(
        shared_versions.len() as u64,
        refreshes,
        "two refreshes claim one version"
    );
    let (_, shared) = servers[1]
        .post("/v1/materialized_view/shared/describe", json!({}))
        .await;
    assert_eq!(
        shared["version"].as_u64().unwrap(),
        first_version + refreshes,
        "{shared}"
    );

    // Each client's views are where it left them.
    let (_, listed) = servers[0]
        .get("/v1/namespace/public/materialized_view/list?limit=1000")
        .await;
    let listed: Vec<&str> = listed["views"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut expected = vec!["shared".to_owned()];
    for (c, (_, owned)) in logs.iter().enumerate() {
        for (k, state) in owned.iter().enumerate() {
            assert_ne!(*state, Owned::Creating);
            if *state == Owned::Present {
                expected.push(format!("c{c}_v{k}"));
            }
        }
    }
    expected.sort();
    assert_eq!(listed, expected);

    // The numbers.
    let mut all: Vec<Duration> = logs
        .iter()
        .flat_map(|(l, _)| l.latencies.iter().map(|(_, d)| *d))
        .collect();
    assert_eq!(all.len(), CLIENTS * REQUESTS);
    let quantile =
        |sorted: &[Duration], q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    all.sort_unstable();
    println!(
        "load: {} requests from {CLIENTS} clients on 2 servers in {:.2} s: {:.0} requests/s; \
         p50 {:.1} ms, p99 {:.1} ms; jobs {done} DONE, {failed} FAILED; {refreshes} refreshes of one shared view",
        all.len(),
        elapsed.as_secs_f64(),
        all.len() as f64 / elapsed.as_secs_f64(),
        quantile(&all, 0.5).as_secs_f64() * 1000.0,
        quantile(&all, 0.99).as_secs_f64() * 1000.0,
    );
    for (reason, count) in &reasons {
        println!("  FAILED {count:>3}: {reason}");
    }
    for kind in [
        "create",
        "refresh",
        "query",
        "list",
        "describe",
        "jobs list",
        "drop",
    ] {
        let mut these: Vec<Duration> = logs
            .iter()
            .flat_map(|(l, _)| {
                l.latencies
                    .iter()
                    .filter(|(k, _)| *k == kind)
                    .map(|(_, d)| *d)
            })
            .collect();
        these.sort_unstable();
        if !these.is_empty() {
            println!(
                "  {kind:<9} {:>4} requests, p50 {:>7.1} ms, p99 {:>7.1} ms",
                these.len(),
                quantile(&these, 0.5).as_secs_f64() * 1000.0,
                quantile(&these, 0.99).as_secs_f64() * 1000.0
            );
        }
    }

    // Both servers stop; the catalog opens clean in a new session.
    let [a, b] = Arc::into_inner(servers).unwrap();
    b.stop().await;
    let dir = a.stop().await;
    let session = MatviewSession::open(
        SessionContext::new(),
        dir.path().join("catalog").to_str().unwrap(),
    )
    .await
    .unwrap();
    let batches = session
        .sql("SELECT count(*) AS n, sum(g) AS s FROM shared")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        batches[0].column(0).as_primitive::<Int64Type>().value(0),
        1000
    );
    let names = session.list_views(None, None, 1000).await.unwrap();
    assert_eq!(names.len(), expected.len());
}

/// A burst beyond `max_jobs` is refused with 503 (nothing queued, nothing
/// changed), and the server takes jobs again once the queue drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_a_full_job_queue_answers_503_and_recovers() {
    let server = TestServer::start(ServerOptions {
        max_jobs: 1,
        max_running_jobs: 1,
        ..rest_only()
    })
    .await;
    server
        .rows("CREATE TABLE big AS SELECT * FROM generate_series(1, 3000) AS t(x)")
        .await;
    let (status, slow) = server
        .post(
            "/v1/materialized_view/slow/create",
            json!({ "query": "SELECT sum(a.x * b.x + c.x) AS n FROM big a, big b, big c" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{slow}");
    let (status, error) = server
        .post(
            "/v1/materialized_view/quick/create",
            json!({ "query": "SELECT 1 AS one" }),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{error}");
    assert_eq!(error["condition"], "job_queue_full");
    assert_eq!(error["retryable"], true);
    let (_, jobs) = server.post("/v1/jobs/list", json!({})).await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
    let (status, cancelled) = server
        .post("/v1/jobs/cancel", json!({ "job_id": slow["job_id"] }))
        .await;
    assert_eq!(
        (status, &cancelled["job_state"]),
        (StatusCode::OK, &json!("CANCELLED"))
    );
    // The cancelled population left the view created without data, and
    // the queue has room again.
    let (status, view) = server
        .post("/v1/materialized_view/slow/describe", json!({}))
        .await;
    assert_eq!(
        (status, &view["populated"]),
        (StatusCode::OK, &json!(false))
    );
    let mut accepted = None;
    for _ in 0..200 {
        let (status, job) = server
            .post(
                "/v1/materialized_view/quick/create",
                json!({ "query": "SELECT 1 AS one" }),
            )
            .await;
        if status == StatusCode::CREATED {
            accepted = Some(job);
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{job}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let job = accepted.expect("the queue took a job again");
    let done = server.wait(job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    assert_eq!(
        server.rows("SELECT one FROM quick").await,
        json!([{ "one": 1 }])
    );
    server.stop().await;
}

impl TestServer {
    /// `/v1/sql` with `sql`: the status and the JSON answer (rows or error).
    async fn sql(&self, sql: &str) -> (StatusCode, Value) {
        self.post_sql(sql, |r| r).await
    }

    async fn post_sql(
        &self,
        sql: &str,
        adjust: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> (StatusCode, Value) {
        let request = self
            .request(reqwest::Method::POST, "/v1/sql")
            .header("accept", "application/json")
            .json(&json!({ "sql": sql }));
        let response = adjust(request).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_cannot_drive_the_server() {
    let server = TestServer::start(ServerOptions {
        allow_origins: vec!["https://app.example.com".into()],
        allowed_hosts: vec!["dfmv.internal".into()],
        ..rest_only()
    })
    .await;
    let catalog = server.dir.path().join("catalog");
    let target = catalog.join("written-by-a-page.csv");
    let copy = format!("COPY (SELECT 1 AS x) TO '{}'", target.display());
    // A form or text/plain POST needs no preflight: refused for its type.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let response = server
            .request(reqwest::Method::POST, "/v1/sql")
            .header("content-type", content_type)
            .body(json!({ "sql": copy }).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type}"
        );
    }
    // A foreign origin, whatever the body.
    let (status, error) = server
        .post_sql("SELECT 1", |r| r.header("origin", "https://evil.example"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert_eq!(error["condition"], "forbidden_origin");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("--allow-origin https://evil.example"),
        "{error}"
    );
    let (status, _) = server
        .post_sql("SELECT 1", |r| r.header("origin", "null"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = server
        .post_sql("SELECT 1", |r| {
            r.header("origin", "https://app.example.com")
        })
        .await;
    assert_eq!(status, StatusCode::OK);
    // DNS rebinding: a name that is not this server's.
    let port = server.http.port();
    let (status, error) = server
        .post_sql("SELECT 1", |r| {
            r.header("host", format!("rebind.evil.example:{port}"))
        })
        .await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{error}");
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        format!("dfmv.internal:{port}"),
    ] {
        let (status, error) = server
            .post_sql("SELECT 1", |r| r.header("host", &host))
            .await;
        assert_eq!(status, StatusCode::OK, "{host}: {error}");
    }
    // GET routes check the host and origin too.
    let response = server
        .request(
            reqwest::Method::GET,
            "/v1/namespace/default$public/materialized_view/list",
        )
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    // A POST with no body at all needs no content type (curl -X POST).
    server
        .job(
            "/v1/materialized_view/v/create",
            json!({ "query": "SELECT region FROM orders" }),
        )
        .await;
    let response = server
        .request(reqwest::Method::POST, "/v1/materialized_view/v/describe")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(!target.exists(), "a refused request wrote a file");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_another_address_needs_a_token_or_no_auth() {
    let dir = tempfile::tempdir().unwrap();
    let open = || async {
        MatviewSession::open(SessionContext::new(), dir.path().to_str().unwrap())
            .await
            .unwrap()
    };
    let exposed = ServerOptions {
        http: "0.0.0.0:0".parse().unwrap(),
        ..rest_only()
    };
    let Err(error) = Server::bind(open().await, exposed.clone()).await else {
        panic!("bound 0.0.0.0 without a token");
    };
    assert!(error.to_string().contains("--no-auth"), "{error}");
    Server::bind(
        open().await,
        ServerOptions {
            token: Some("t".into()),
            ..exposed.clone()
        },
    )
    .await
    .unwrap();
    Server::bind(
        open().await,
        ServerOptions {
            no_auth: true,
            ..exposed
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_use_only_the_catalog_the_data_folders_and_remembered_tables() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    for folder in ["src", "data", "private"] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    std::fs::write(root.join("src/jan.csv"), "region,amount\nnorth,10\n").unwrap();
    std::fs::write(root.join("data/feb.csv"), "region,amount\nsouth,7\n").unwrap();
    std::fs::write(root.join("private/secret.csv"), "k,v\npassword,hunter2\n").unwrap();
    let server = TestServer::start_in(
        Arc::new(dir),
        ServerOptions {
            data_dirs: vec![root.join("data")],
            ..rest_only()
        },
    )
    .await;
    let secret = root.join("private/secret.csv");
    let refused = |status: StatusCode, error: &Value, path: &std::path::Path| {
        assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
        assert_eq!(error["condition"], "insufficient_privilege", "{error}");
        let text = format!("{} {}", error["error"], error["detail"]);
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("--data-dir"), "{text}");
    };
    // A table over a file outside: refused, and not remembered.
    let (status, error) = server
        .sql(&format!(
            "CREATE EXTERNAL TABLE stolen STORED AS CSV LOCATION '{}'",
            secret.display()
        ))
        .await;
    refused(status, &error, &secret);
    let (status, _) = server.sql("SELECT * FROM stolen").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // COPY out of the allowed folders writes nothing.
    let written = root.join("private/out.csv");
    let (status, error) = server
        .sql(&format!("COPY (SELECT 1 AS x) TO '{}'", written.display()))
        .await;
    refused(status, &error, &written);
    assert!(!written.exists());
    // Into the catalog's folder: refused too (views are read-only).
    let (status, error) = server
        .sql(&format!(
            "COPY (SELECT 1 AS x) TO '{}'",
            root.join("catalog/x.csv").display()
        ))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("inside the catalog's folder"),
        "{error}"
    );
    // Under --data-dir: a table, a COPY, a view over both.
    let (status, error) = server
        .sql(&format!(
            "CREATE EXTERNAL TABLE feb STORED AS CSV LOCATION '{}/'",
            root.join("data").display()
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let (status, error) = server
        .sql(&format!(
            "COPY (SELECT 'east' AS region, 1 AS amount) TO '{}'",
            root.join("data/mar.csv").display()
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    // The table the catalog remembers (outside every folder given) reads.
    let rows = server
        .rows("SELECT region FROM orders UNION ALL SELECT region FROM feb ORDER BY region")
        .await;
    assert_eq!(
        rows,
        json!([{"region": "east"}, {"region": "north"}, {"region": "south"}])
    );
    server
        .job(
            "/v1/materialized_view/both/create",
            json!({ "query": "SELECT region FROM orders UNION ALL SELECT region FROM feb" }),
        )
        .await;
    assert_eq!(
        server.rows("SELECT count(*) AS n FROM both").await,
        json!([{"n": 3}])
    );
    // A path in FROM.
    let (status, error) = server
        .sql(&format!("SELECT * FROM '{}'", secret.display()))
        .await;
    refused(status, &error, &secret);
    // A view's query is a client's statement too.
    let (status, answer) = server
        .post(
            "/v1/materialized_view/leak/create",
            json!({ "query": format!("SELECT * FROM '{}'", secret.display()) }),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{answer}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_has_its_own_settings_and_none_reach_the_server() {
    let server = TestServer::start(with_flight()).await;
    server
        .job(
            "/v1/materialized_view/totals/create",
            json!({ "query": "SELECT region, sum(amount) AS total FROM orders GROUP BY region" }),
        )
        .await;
    let mut a = flight_client(server.flight.unwrap()).await;
    let mut b = flight_client(server.flight.unwrap()).await;
    query(&mut a, "CREATE SCHEMA other").await;
    query(&mut a, "SET datafusion.catalog.default_schema = 'other'").await;
    // A's own statements resolve names in `other` now ...
    let error = a
        .execute("SELECT * FROM totals".into(), None)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("totals"), "{error}");
    // ... and no one else's do.
    assert_eq!(
        strings(
            &query(&mut b, "SELECT count(*) AS n FROM totals").await,
            "n"
        ),
        ["2"]
    );
    let (status, _) = server
        .post("/v1/materialized_view/totals/describe", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        server.rows("SELECT count(*) AS n FROM totals").await,
        json!([{"n": 2}])
    );
    // A SET through /v1/sql lasts for its request only.
    server
        .rows("SET datafusion.catalog.default_schema = 'other'")
        .await;
    assert_eq!(
        server.rows("SELECT count(*) AS n FROM totals").await,
        json!([{"n": 2}])
    );
    // Settings that reach beyond a client, or can hang or crash the
    // server, are refused: over REST and Flight SQL alike.
    for set in [
        "SET datafusion.sql_parser.dialect = 'PostgreSQL'",
        "SET datafusion.sql_parser.recursion_limit = 100000",
        "SET datafusion.runtime.temp_directory = '/tmp/elsewhere'",
        "SET datafusion.runtime.memory_limit = '1G'",
        "SET datafusion.execution.target_partitions = 100000",
        "RESET datafusion.runtime.memory_limit",
    ] {
        let (status, error) = server.sql(set).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{set}: {error}");
        assert_eq!(
            error["condition"], "insufficient_privilege",
            "{set}: {error}"
        );
        let error = b.execute(set.into(), None).await.unwrap_err();
        assert!(
            error.to_string().contains("permission denied"),
            "{set}: {error}"
        );
    }
    // Lowering a limit is the client's own business.
    query(&mut b, "SET datafusion.execution.target_partitions = 1").await;
    query(&mut b, "SET datafusion.sql_parser.recursion_limit = 10").await;
    assert_eq!(
        strings(
            &query(&mut b, "SELECT count(*) AS n FROM totals").await,
            "n"
        ),
        ["2"]
    );
    server.stop().await;
}

/// A prepared query over a table, with a parameter, is answered from a
/// view once its value is bound. Seen under `stale_ok`: after the table's
/// file is rewritten, the view (not compensated, and stale) answers with
/// its own total, not the table's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_query_with_a_parameter_is_answered_from_a_view() {
    let server = TestServer::start(with_flight()).await;
    let mut a = flight_client(server.flight.unwrap()).await;
    query(
        &mut a,
        "CREATE MATERIALIZED VIEW totals AS SELECT region, sum(amount) AS total FROM orders GROUP BY region",
    )
    .await;
    let mut prepared = a
        .prepare(
            "SELECT region, sum(amount) AS total FROM orders WHERE region = $1 GROUP BY region"
                .into(),
            None,
        )
        .await
        .unwrap();
    // `$1` as the type the server announced for it.
    let parameters = Arc::new(prepared.parameter_schema().unwrap().clone());
    let north: Arc<dyn Array> =
        Arc::new(datafusion::arrow::array::StringArray::from(vec!["north"]));
    let north = datafusion::arrow::compute::cast(&north, parameters.field(0).data_type()).unwrap();
    prepared
        .set_parameters(RecordBatch::try_new(parameters, vec![north]).unwrap())
        .unwrap();
    async fn total(
        client: &mut FlightSqlServiceClient<Channel>,
        prepared: &mut arrow_flight::sql::client::PreparedStatement<Channel>,
    ) -> Vec<String> {
        let info = prepared.execute().await.unwrap();
        strings(&fetch(client, info).await, "total")
    }
    assert_eq!(total(&mut a, &mut prepared).await, ["12"]);
    std::fs::write(
        server.dir.path().join("src/jan.csv"),
        "region,amount\nnorth,10\nsouth,5\nnorth,20\n",
    )
    .unwrap();
    assert_eq!(
        total(&mut a, &mut prepared).await,
        ["30"],
        "the table's total"
    );
    query(&mut a, "SET matview.rewrite = 'stale_ok'").await;
    assert_eq!(
        total(&mut a, &mut prepared).await,
        ["12"],
        "the view's total"
    );
    query(&mut a, "REFRESH MATERIALIZED VIEW totals").await;
    assert_eq!(
        total(&mut a, &mut prepared).await,
        ["30"],
        "the view's total, refreshed"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_statement_reads_what_the_names_mean_now() {
    let server = TestServer::start(with_flight()).await;
    let mut a = flight_client(server.flight.unwrap()).await;
    let mut b = flight_client(server.flight.unwrap()).await;
    query(
        &mut a,
        "CREATE MATERIALIZED VIEW v AS SELECT region, sum(amount) AS total FROM orders GROUP BY region",
    )
    .await;
    let mut same = a
        .prepare("SELECT region, total FROM v ORDER BY region".into(), None)
        .await
        .unwrap();
    let mut star = a.prepare("SELECT * FROM v".into(), None).await.unwrap();
    let info = same.execute().await.unwrap();
    assert_eq!(strings(&fetch(&mut a, info).await, "total"), ["12", "5"]);
    // Another client redefines v: new columns, new rows.
    std::fs::write(
        server.dir.path().join("src/feb.csv"),
        "region,amount\nwest,4\n",
    )
    .unwrap();
    query(
        &mut b,
        "CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT region, count(*) AS total, max(amount) AS most FROM orders GROUP BY region",
    )
    .await;
    // Same columns: planned again, it reads the new definition.
    let info = same.execute().await.unwrap();
    assert_eq!(
        strings(&fetch(&mut a, info).await, "total"),
        ["2", "1", "1"]
    );
    // Other columns: a clear error, and nothing changes for anyone.
    let error = star.execute().await.unwrap_err();
    assert!(error.to_string().contains("prepare it again"), "{error}");
    assert!(
        matches!(&error, arrow_flight::error::FlightError::Tonic(s) if s.code() == tonic::Code::FailedPrecondition),
        "{error:?}"
    );
    for client in [&mut a, &mut b] {
        let rows = query(client, "SELECT region, total, most FROM v ORDER BY region").await;
        assert_eq!(strings(&rows, "most"), ["10", "5", "4"]);
    }
    assert_eq!(
        server.rows("SELECT most FROM v ORDER BY region").await,
        json!([{"most": 10}, {"most": 5}, {"most": 4}])
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_enforced_and_recovered_from() {
    let server = TestServer::start(ServerOptions {
        statement_timeout: Duration::from_secs(2),
        max_result_bytes: 64 << 10,
        max_handles_per_client: 2,
        max_handles: 3,
        ..with_flight()
    })
    .await;
    // Time: a statement that would run for minutes is stopped.
    // (10^12 rows: hours without the limit. The limit is kept as closely
    // as DataFusion's operators yield to the runtime: a scan yields after
    // each few batches, a cross join's inner loop does not.)
    let slow = "SELECT sum(value) AS n FROM generate_series(1, 1000000000000)";
    let started = std::time::Instant::now();
    let (status, error) = server.sql(slow).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{error}");
    assert_eq!(error["condition"], "query_canceled");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let mut a = flight_client(server.flight.unwrap()).await;
    let error = query_error(&mut a, slow).await;
    assert!(error.contains("statement timeout"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // Size: a large answer over REST is refused; Flight SQL streams it.
    let big = "SELECT value FROM generate_series(1, 100000)";
    let (status, error) = server.sql(big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{error}");
    assert!(
        error["detail"].as_str().unwrap().contains("Flight SQL"),
        "{error}"
    );
    let rows: usize = query(&mut a, big).await.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 100_000);
    // Handles: two open tickets per connection, three in all.
    let first = a.execute("SELECT 1".into(), None).await.unwrap();
    a.execute("SELECT 2".into(), None).await.unwrap();
    let error = a.execute("SELECT 3".into(), None).await.unwrap_err();
    assert!(
        error.to_string().contains("this connection holds 2"),
        "{error}"
    );
    let mut b = flight_client(server.flight.unwrap()).await;
    b.execute("SELECT 4".into(), None).await.unwrap();
    let error = b.execute("SELECT 5".into(), None).await.unwrap_err();
    assert!(error.to_string().contains("the server holds 3"), "{error}");
    // Fetching a ticket frees it.
    assert_eq!(fetch(&mut a, first).await[0].num_rows(), 1);
    let info = b.execute("SELECT 6".into(), None).await.unwrap();
    assert_eq!(fetch(&mut b, info).await[0].num_rows(), 1);
    assert_eq!(server.rows("SELECT 7 AS n").await, json!([{"n": 7}]));
    server.stop().await;
}

/// A statement sent to `/v1/sql` that changes a view waits for the view's
/// job, as a second job would: a DROP sent while a refresh job is writing
/// does not run until that refresh has committed (without the lock it
/// would drop the view under the job, which then fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_statements_take_the_views_job_lock() {
    use datafusion_matview_testing::InstrumentedStore;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/jan.csv"), "region,amount\nnorth,10\n").unwrap();
    let store = InstrumentedStore::new(Arc::new(object_store::local::LocalFileSystem::new()));
    let ctx = SessionContext::new();
    ctx.register_object_store(
        &url::Url::parse("file://").unwrap(),
        Arc::new(store.clone()),
    );
    let server = TestServer::start_with(Arc::new(dir), ctx, rest_only()).await;
    server
        .job(
            "/v1/materialized_view/v/create",
            json!({ "query": "SELECT sum(amount) AS n FROM orders" }),
        )
        .await;
    std::fs::write(
        server.dir.path().join("src/feb.csv"),
        "region,amount\nsouth,5\n",
    )
    .unwrap();

    // The refresh job has written its data; its snapshot marker waits.
    let hold = store.hold_next_put(datafusion_matview::spec::SNAPSHOT_MARKER);
    let (status, job) = server
        .post("/v1/materialized_view/v/refresh", json!({ "full": true }))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    hold.reached().await;
    let (tx, mut dropped) = oneshot::channel();
    let client = server.client.clone();
    let url = server.url("/v1/sql");
    tokio::spawn(async move {
        let response = client
            .post(url)
            .header("accept", "application/json")
            .json(&json!({ "sql": "DROP MATERIALIZED VIEW v" }))
            .send()
            .await
            .unwrap();
        let _ = tx.send(response.status());
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        dropped.try_recv().is_err(),
        "the DROP ran while the view's refresh job was writing"
    );
    hold.release();
    let job = server.wait(job["job_id"].as_str().unwrap()).await;
    assert_eq!(job["job_state"], "DONE", "{job}");
    assert_eq!(dropped.await.unwrap(), StatusCode::OK);
    let (status, _) = server
        .post("/v1/materialized_view/v/describe", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.stop().await;
}

/// Issue 37: a long-running server answers from the files that are there
/// now, over REST and Flight SQL, and a view agrees with its table after a
/// refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_see_files_that_landed_since_the_last_one() {
    let server = TestServer::start(with_flight()).await;
    let mut client = flight_client(server.flight.unwrap()).await;
    let count = "SELECT count(*) AS n FROM orders";
    assert_eq!(server.rows(count).await, json!([{"n": 3}]));
    assert_eq!(strings(&query(&mut client, count).await, "n"), ["3"]);
    server
        .job(
            "/v1/materialized_view/n/create",
            json!({ "query": "SELECT count(*) AS n FROM orders" }),
        )
        .await;
    std::fs::write(
        server.dir.path().join("src/feb.csv"),
        "region,amount\neast,1\nwest,2\n",
    )
    .unwrap();
    assert_eq!(server.rows(count).await, json!([{"n": 5}]));
    assert_eq!(strings(&query(&mut client, count).await, "n"), ["5"]);
    server
        .job("/v1/materialized_view/n/refresh", json!({}))
        .await;
    assert_eq!(server.rows("SELECT n FROM n").await, json!([{"n": 5}]));
    server.stop().await;
}

/// A source file whose column is of another type than the table's fails
/// the statement over REST and Flight SQL naming the file and the column
/// (issue 36), as a data error rather than the server's.
#[tokio::test]
async fn a_source_file_of_another_type_is_named_to_every_client() {
    let server = TestServer::start(with_flight()).await;
    let bad = server.dir.path().join("src/bad.csv");
    std::fs::write(&bad, "region,amount\nwest,lots\n").unwrap();
    let detail = format!(
        "DETAIL: file file://{} of table \"orders\" has column \"amount\" as Utf8",
        bad.display()
    );
    let sum = "SELECT sum(amount) AS s FROM orders";
    let (status, error) = server.sql(sum).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert_eq!(error["condition"], "data_exception");
    let message = error["detail"].as_str().unwrap();
    assert!(
        message.starts_with(&detail) && message.contains("but the table reads it as Int64."),
        "{error}"
    );
    assert!(
        error["error"].as_str().unwrap().contains("'lots'"),
        "{error}"
    );
    let mut client = flight_client(server.flight.unwrap()).await;
    let error = query_error(&mut client, sum).await;
    // (tonic's message shows quotes escaped.)
    assert!(
        error.contains("failed_precondition") || error.contains("not in a state required"),
        "{error}"
    );
    assert!(
        error.contains(&format!("DETAIL: file file://{}", bad.display()))
            && error.contains("has column")
            && error.contains("amount")
            && error.contains("HINT: Correct or remove the file"),
        "{error}"
    );
    std::fs::remove_file(&bad).unwrap();
    assert_eq!(server.rows(sum).await.as_array().unwrap().len(), 1);
    server.stop().await;
}

/// Issue 30's load test: 8 Flight SQL clients, each on its own connection
/// with its own settings (its default schema), 50 statements each, mixed:
/// queries of a view named alike in every client's schema, prepared
/// statements with a parameter, queries of the shared table, refreshes.
/// Every answer must be the client's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_8_flight_sql_clients_each_in_its_own_session() {
    const CLIENTS: i64 = 8;
    const STATEMENTS: usize = 50;
    let server = TestServer::start(with_flight()).await;
    let addr = server.flight.unwrap();
    let started = std::time::Instant::now();
    let mut tasks = vec![];
    for k in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let mut client = flight_client(addr).await;
            query(&mut client, &format!("CREATE SCHEMA c{k}")).await;
            query(
                &mut client,
                &format!("SET datafusion.catalog.default_schema = 'c{k}'"),
            )
            .await;
            query(
                &mut client,
                &format!("CREATE MATERIALIZED VIEW mine AS SELECT {k} AS k"),
            )
            .await;
            let mut prepared = client
                .prepare("SELECT k + $1 AS k FROM mine".into(), None)
                .await
                .unwrap();
            let mut latencies = vec![];
            for i in 0..STATEMENTS {
                let at = std::time::Instant::now();
                match i % 5 {
                    0 | 1 => {
                        let rows = query(&mut client, "SELECT k FROM mine").await;
                        assert_eq!(strings(&rows, "k"), [k.to_string()], "client {k}");
                    }
                    2 => {
                        let params = RecordBatch::try_from_iter([(
                            "$1",
                            Arc::new(datafusion::arrow::array::Int64Array::from(vec![i as i64]))
                                as Arc<dyn Array>,
                        )])
                        .unwrap();
                        prepared.set_parameters(params).unwrap();
                        let info = prepared.execute().await.unwrap();
                        let rows = fetch(&mut client, info).await;
                        assert_eq!(strings(&rows, "k"), [(k + i as i64).to_string()]);
                    }
                    3 => {
                        let rows =
                            query(&mut client, "SELECT count(*) AS n FROM public.orders").await;
                        assert_eq!(strings(&rows, "n"), ["3"]);
                    }
                    _ => {
                        let rows = query(&mut client, "REFRESH MATERIALIZED VIEW mine").await;
                        assert_eq!(strings(&rows, "mode"), ["no_op"], "client {k}");
                    }
                }
                latencies.push(at.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = vec![];
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
    println!(
        "flight load: {} statements from {CLIENTS} clients, each in its own session, in {:.2} s: \
         {:.0} statements/s; p50 {:.1} ms, p99 {:.1} ms",
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        at(0.5),
        at(0.99)
    );
    // The server's own session was not moved by any client's SET.
    assert_eq!(
        server.rows("SELECT count(*) AS n FROM orders").await,
        json!([{"n": 3}])
    );
    server.stop().await;
}

/// Two servers auto-refresh one catalog while its source changes: after
/// each change every automatically refreshed view shows it within twice
/// its target lag, whichever server is asked; `downstream` views are
/// refreshed for the views over them; a view without `auto_refresh` is
/// never touched; and the history holds every attempt, each change
/// refreshed exactly once (the claims keep the two servers from both
/// refreshing a view).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_auto_refresh_one_catalog() {
    use datafusion_matview::session::auto::AutoRefreshOptions;
    let options = || ServerOptions {
        auto_refresh: Some(AutoRefreshOptions {
            tick: Duration::from_millis(100),
            ..Default::default()
        }),
        ..rest_only()
    };
    let a = TestServer::start(options()).await;
    let b = TestServer::start_in(Arc::clone(&a.dir), options()).await;
    for sql in [
        "CREATE MATERIALIZED VIEW totals WITH (auto_refresh = true, target_lag = '3 seconds') AS SELECT region, sum(amount) AS total FROM orders GROUP BY region",
        "CREATE MATERIALIZED VIEW base WITH (auto_refresh = true, target_lag = 'downstream') AS SELECT region, amount FROM orders",
        "CREATE MATERIALIZED VIEW top WITH (auto_refresh = true, target_lag = '3 seconds') AS SELECT count(*) AS n FROM base",
        "CREATE MATERIALIZED VIEW manual AS SELECT count(*) AS n FROM orders",
    ] {
        a.rows(sql).await;
    }
    let target = Duration::from_secs(3);
    for round in 1..=4i64 {
        std::fs::write(
            a.dir.path().join(format!("src/r{round}.csv")),
            format!("region,amount\nr{round},{round}\n"),
        )
        .unwrap();
        let written = std::time::Instant::now();
        loop {
            let server = if round % 2 == 0 { &a } else { &b };
            let seen = server
                .rows(&format!(
                    "SELECT (SELECT count(*) FROM totals WHERE region = 'r{round}') AS totals, (SELECT n FROM top) AS top"
                ))
                .await;
            if seen == json!([{ "totals": 1, "top": 3 + round }]) {
                break;
            }
            assert!(
                written.elapsed() < 2 * target,
                "round {round}: not refreshed after {:?}: {seen}",
                written.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert_eq!(a.rows("SELECT n FROM manual").await, json!([{ "n": 3 }]));
    // Every attempt, by view, trigger and state: one create each, then one
    // automatic refresh per change (base through top's, as `cascade`).
    // Nothing failed; an attempt that found nothing to do may appear.
    let history = b
        .rows(
            "SELECT table_name, trigger, state, count(*) AS n FROM materialized_view_refreshes() \
             WHERE state <> 'no_op' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        )
        .await;
    assert_eq!(
        history,
        json!([
            { "table_name": "base", "trigger": "cascade", "state": "succeeded", "n": 4 },
            { "table_name": "base", "trigger": "create", "state": "succeeded", "n": 1 },
            { "table_name": "manual", "trigger": "create", "state": "succeeded", "n": 1 },
            { "table_name": "top", "trigger": "auto", "state": "succeeded", "n": 4 },
            { "table_name": "top", "trigger": "create", "state": "succeeded", "n": 1 },
            { "table_name": "totals", "trigger": "auto", "state": "succeeded", "n": 4 },
            { "table_name": "totals", "trigger": "create", "state": "succeeded", "n": 1 },
        ])
    );
    // Both servers refreshed, each naming itself.
    let ran_by = a
        .rows("SELECT count(DISTINCT ran_by) AS n FROM materialized_view_refreshes() WHERE trigger = 'auto'")
        .await;
    assert!(ran_by[0]["n"].as_i64().unwrap() >= 1, "{ran_by}");
    // Fresh views lag by nothing.
    assert_eq!(
        a.rows("SELECT table_name, arrow_cast(lag, 'Int64') AS lag FROM materialized_views() WHERE auto_refresh ORDER BY 1")
            .await,
        json!([
            { "table_name": "base", "lag": 0 },
            { "table_name": "top", "lag": 0 },
            { "table_name": "totals", "lag": 0 },
        ])
    );
    b.stop().await;
    a.stop().await;
}
