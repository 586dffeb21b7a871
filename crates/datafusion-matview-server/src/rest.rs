//! The REST API: LanceDB's materialized-view routes over this crate.
//!
//! | route | does | answers |
//! |---|---|---|
//! | `POST /v1/materialized_view/{id}/create` `{query, with_no_data?, or_replace?, if_not_exists?, columns?}` | CREATE; the first population runs as a job | `202 {job_id}`; `200` with the description for `with_no_data` (and when IF NOT EXISTS skips) |
//! | `POST /v1/materialized_view/{id}/describe` | definition and state | `200` [`ViewDescription`](datafusion_matview::session::ViewDescription) plus `id` |
//! | `POST /v1/materialized_view/{id}/refresh` `{full?, cascade?, source_version?}` | REFRESH as a job | `202 {job_id}`; the job's result `{view, mode, rows_written, rows_deleted, detail, source_version, source_versions, version, upstream}` |
//! | `POST /v1/materialized_view/{id}/drop` `{cascade?}` | DROP | `200 {dropped: [{id, kind}]}` |
//! | `GET /v1/materialized_view/{id}/refreshes?page_token=&limit=` | the view's refresh history, newest first | `{refreshes, page_token}` |
//! | `GET /v1/namespace/{id}/materialized_view/list?page_token=&limit=` | names, sorted | `{views, page_token}` |
//! | `POST /v1/jobs/describe {job_id}` | one job | [`JobInfo`](super::jobs::JobInfo) |
//! | `POST /v1/jobs/list {page_token?, limit?}` | jobs, newest first | `{jobs, page_token}` |
//! | `POST /v1/jobs/cancel {job_id}` | cancel | the job |
//! | `POST /v1/sql {sql}` | any statement | Arrow IPC stream, or JSON rows with `Accept: application/json` |
//! | `GET /healthz`, `GET /openapi.json` | liveness, this API | |
//!
//! Ids are namespaced with `$` (see [`super::ids`]). Errors are
//! [`ApiError`] bodies. Bodies are JSON objects with no unknown fields.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::ids::{self, DEFAULT_DELIMITER};
use super::jobs::{JobType, Phase};
use super::{ApiError, Condition, Shared};
use datafusion_matview::error::{Error, ErrorCode};
use datafusion_matview::session::{DropOptions, RefreshOptions};
use datafusion_matview::spec::QualifiedName;

type ApiResult<T> = Result<T, ApiError>;

/// The router over `shared`, with the token check, the body limit and the
/// request log.
pub(crate) fn router(shared: Shared) -> Router {
    let limit = shared.options.max_body_bytes;
    let log = shared.options.log_requests;
    let api = Router::new()
        .route("/v1/materialized_view/{id}/create", post(create))
        .route("/v1/materialized_view/{id}/describe", post(describe))
        .route("/v1/materialized_view/{id}/refresh", post(refresh))
        .route("/v1/materialized_view/{id}/drop", post(drop_view))
        .route("/v1/materialized_view/{id}/refreshes", get(refreshes))
        .route("/v1/namespace/{id}/materialized_view/list", get(list))
        .route("/v1/jobs/describe", post(job_describe))
        .route("/v1/jobs/list", post(job_list))
        .route("/v1/jobs/cancel", post(job_cancel))
        .route("/v1/sql", post(sql))
        .route("/openapi.json", get(openapi))
        .route_layer(middleware::from_fn_with_state(shared.clone(), authorize));
    let app = api
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, Condition::NoRoute, "no such route")
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(shared.clone(), same_site))
        .layer(middleware::from_fn(error_instance))
        .with_state(shared);
    if log {
        app.layer(middleware::from_fn(log_request))
    } else {
        app
    }
}

async fn authorize(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // The Lance Namespace spec's API key header carries the same token.
    let api_key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(|key| format!("Bearer {key}"));
    if shared.authorized(header) || (api_key.is_some() && shared.authorized(api_key.as_deref())) {
        next.run(request).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            Condition::Unauthorized,
            "missing or wrong token: send the header \"Authorization: Bearer <token>\" (or \"x-api-key: <token>\")",
        )
        .into_response()
    }
}

/// Refuses what a web page could send: a request naming a foreign
/// `Origin` (unless [`ServerOptions::allow_origins`](super::ServerOptions)
/// lists it), a `Host` that is not this server's (DNS rebinding), and a
/// POST body that is not JSON (a form or `text/plain` needs no CORS
/// preflight).
async fn same_site(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let text =
        |name: header::HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if let Some(origin) = text(header::ORIGIN)
        && !shared
            .options
            .allow_origins
            .iter()
            .any(|o| o.eq_ignore_ascii_case(origin))
    {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            Condition::ForbiddenOrigin,
            format!(
                "requests from web pages at {origin} are not allowed; start the server with \
                 --allow-origin {origin} to allow them"
            ),
        )
        .into_response();
    }
    if let Some(host) = text(header::HOST)
        && !host_allowed(host, &shared)
    {
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            Condition::MisdirectedRequest,
            format!(
                "this server does not answer for host \"{host}\"; start it with \
                 --allowed-host {} to answer for that name",
                host.rsplit_once(':').map_or(host, |(name, _)| name)
            ),
        )
        .into_response();
    }
    if request.method() == axum::http::Method::POST {
        let json = text(header::CONTENT_TYPE).is_some_and(|t| {
            let essence = t.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("application/json")
        });
        // No body at all: `Content-Length: 0`, or neither a length nor
        // chunks (curl -X POST).
        let empty = match headers.get(header::CONTENT_LENGTH) {
            Some(length) => length.as_bytes() == b"0",
            None => !headers.contains_key(header::TRANSFER_ENCODING),
        };
        let bodiless = empty && text(header::CONTENT_TYPE).is_none();
        if !(json || bodiless) {
            return ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Condition::UnsupportedMediaType,
                "request bodies must be JSON: send \"Content-Type: application/json\"",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Fills in an error answer's `instance` with the route that answered.
async fn error_instance(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if response.status().as_u16() < 400 {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let bytes = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(mut error)) if error.get("instance").is_none_or(Value::is_null) => {
            error.insert("instance".into(), json!(path));
            serde_json::to_vec(&error).map(Bytes::from).unwrap_or(bytes)
        }
        _ => bytes,
    };
    let mut response = Response::from_parts(parts, axum::body::Body::from(bytes));
    response.headers_mut().remove(header::CONTENT_LENGTH);
    response
}

/// Whether `host` (a `Host` header) names this server: an IP address
/// (DNS rebinding needs a name), a loopback name, or one of
/// [`ServerOptions::allowed_hosts`](super::ServerOptions).
fn host_allowed(host: &str, shared: &Shared) -> bool {
    let name = match host.strip_prefix('[') {
        // [::1]:2333
        Some(rest) => {
            return rest
                .split(']')
                .next()
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
        }
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || shared
            .options
            .allowed_hosts
            .iter()
            .any(|allowed| allowed.trim_end_matches('.').eq_ignore_ascii_case(&name))
}

async fn log_request(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    eprintln!(
        "{} {method} {path} {} {:.1}ms",
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"),
        response.status().as_u16(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    response
}

/// A JSON body; an empty body is `T::default()` when `empty` allows it.
fn body<T: DeserializeOwned>(
    bytes: Result<Bytes, BytesRejection>,
    empty: Option<T>,
) -> ApiResult<T> {
    let bytes = bytes.map_err(|rejection| {
        let status = rejection.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            Condition::PayloadTooLarge
        } else {
            Condition::InvalidRequest
        };
        ApiError::new(status, code, rejection.body_text())
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace)
        && let Some(default) = empty
    {
        return Ok(default);
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdQuery {
    delimiter: Option<String>,
}

impl IdQuery {
    fn delimiter(&self) -> &str {
        self.delimiter.as_deref().unwrap_or(DEFAULT_DELIMITER)
    }
}

/// The view an id names, and its parts.
fn view_name(
    shared: &Shared,
    id: &str,
    query: &IdQuery,
) -> ApiResult<(QualifiedName, Vec<String>)> {
    let parts = ids::parse(id, query.delimiter())?;
    let name = shared.session.qualify_parts(&parts)?;
    Ok((name, parts))
}

fn id_of(name: &QualifiedName, delimiter: &str) -> String {
    [name.catalog.as_str(), &name.schema, &name.name].join(delimiter)
}

/// The Lance Namespace spec's `CreateMaterializedViewRequest`, plus this
/// server's `or_replace`, `if_not_exists` and `columns`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    /// `query` (a SQL query); the spec's `udtf` and `chunker` are refused.
    #[serde(default = "query_kind")]
    kind: String,
    /// The view's query (`query` is taken too).
    #[serde(alias = "query")]
    source_query: String,
    /// The base64 Arrow IPC schema the client expects; checked against
    /// the query's columns.
    output_schema: Option<String>,
    /// As the spec has it: true (the default) creates the view
    /// unpopulated; false also starts its first refresh as a job.
    #[serde(default = "yes")]
    with_no_data: bool,
    auto_refresh: Option<bool>,
    udtf_spec: Option<Value>,
    /// The view's id as parts; must name the route's view.
    id: Option<Vec<String>>,
    #[allow(dead_code)]
    identity: Option<Value>,
    #[allow(dead_code)]
    context: Option<Value>,
    #[serde(default)]
    or_replace: bool,
    #[serde(default)]
    if_not_exists: bool,
    #[serde(default)]
    columns: Vec<String>,
}

fn query_kind() -> String {
    "query".to_owned()
}

fn yes() -> bool {
    true
}

/// A 400 answer with a Lance `code`: 0 Unsupported, 13 InvalidInput, ...
fn invalid(condition: impl Into<Condition>, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, condition, message)
}

/// Refuses a body `id` that names another view than the route.
fn check_body_id(body_id: Option<&[String]>, parts: &[String], route: &str) -> ApiResult<()> {
    match body_id {
        Some(ids) if !ids.is_empty() && ids != parts => Err(invalid(
            ErrorCode::InvalidParameterValue,
            format!("the body's id {ids:?} does not name the route's view \"{route}\""),
        )),
        _ => Ok(()),
    }
}

/// Checks `encoded` (base64 of an Arrow IPC schema) against `actual`, the
/// columns the view's query answers: the same names and types in the same
/// order (nullability is the query's to decide).
fn check_output_schema(
    actual: &datafusion::arrow::datatypes::Schema,
    encoded: &str,
) -> ApiResult<()> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| {
            invalid(
                ErrorCode::InvalidParameterValue,
                format!("output_schema is not base64: {e}"),
            )
        })?;
    let expected =
        datafusion::arrow::ipc::convert::try_schema_from_ipc_buffer(&bytes).map_err(|e| {
            invalid(
                ErrorCode::InvalidParameterValue,
                format!("output_schema is not an Arrow IPC schema: {e}"),
            )
        })?;
    let same = actual.fields().len() == expected.fields().len()
        && actual
            .fields()
            .iter()
            .zip(expected.fields())
            .all(|(a, e)| a.name() == e.name() && a.data_type() == e.data_type());
    if !same {
        return Err(invalid(
            Condition::SchemaMismatch,
            format!(
                "output_schema ({}) is not what the query answers ({})",
                datafusion_matview::error::describe_columns(&expected),
                datafusion_matview::error::describe_columns(actual)
            ),
        ));
    }
    Ok(())
}

async fn create(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<IdQuery>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let request: CreateBody = body(bytes, None)?;
    let (name, parts) = view_name(&shared, &id, &query)?;
    check_body_id(request.id.as_deref(), &parts, &id)?;
    if request.kind != "query" {
        return Err(invalid(
            ErrorCode::FeatureNotSupported,
            format!(
                "kind \"{}\" is not supported: this server makes views of SQL queries (kind \"query\")",
                request.kind
            ),
        ));
    }
    if request.udtf_spec.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(invalid(
            ErrorCode::InvalidParameterValue,
            "udtf_spec must be null for kind \"query\"",
        ));
    }
    // Created unpopulated here; populated by a refresh job when asked
    // (the spec's "kicks off an initial refresh").
    let options = datafusion_matview::session::CreateOptions {
        or_replace: request.or_replace,
        if_not_exists: request.if_not_exists,
        columns: request.columns.clone(),
        with_data: false,
        // The spec's `auto_refresh`: `WITH (auto_refresh = true)` (the
        // default target lag; ALTER MATERIALIZED VIEW ... SET changes it).
        options: match request.auto_refresh {
            Some(on) => vec![("auto_refresh".to_owned(), on.to_string())],
            None => vec![],
        },
    };
    let create = shared
        .session
        .create_statement(&name, &request.source_query, &options)?;
    shared.check_paths(&shared.session, create.query.as_ref())?;
    // The errors a CREATE finds before computing anything are answered now.
    let columns = shared.session.check_create_columns(&create).await?;
    if let (Some(encoded), Some(columns)) = (&request.output_schema, &columns) {
        check_output_schema(columns, encoded)?;
    }
    let populate = !request.with_no_data;
    if populate {
        // Refused before anything is created (a queue that fills in the
        // moment between is answered below).
        shared.jobs.check_room()?;
    }
    let outcome = {
        let lock = shared.jobs.view_lock(&name);
        let _guard = lock.lock().await;
        shared.session.create_materialized_view(&create).await?
    };
    let mut answer = json!({
        "version": outcome.version,
        "job_id": null,
        "id": id_of(&name, query.delimiter()),
        "action": outcome.action.as_str(),
    });
    if populate && outcome.action != datafusion_matview::session::CreateAction::Skipped {
        let options = RefreshOptions {
            full: true,
            ..RefreshOptions::default()
        };
        let spec = json!({
            "id": id,
            "source_query": request.source_query,
            "or_replace": request.or_replace,
            "if_not_exists": request.if_not_exists,
            "columns": request.columns,
        });
        let session = shared.session.clone();
        let delimiter = query.delimiter().to_owned();
        let job_id = shared
            .jobs
            .submit(
                JobType::CreateMaterializedView,
                name.clone(),
                spec,
                refresh_job(session, name, options, delimiter),
            )
            .map_err(|mut refused| {
                refused.detail = Some(format!(
                    "The view was created without data (version {}): populate it with the \
                     refresh route.",
                    outcome.version
                ));
                refused
            })?;
        answer["job_id"] = json!(job_id);
    }
    Ok((StatusCode::CREATED, axum::Json(answer)).into_response())
}

/// A refresh job's work: view `name` refreshed with `options`, answering
/// the view's result with those of what CASCADE refreshed first as
/// `upstream`.
async fn refresh_job(
    session: datafusion_matview::session::MatviewSession,
    name: QualifiedName,
    options: RefreshOptions,
    delimiter: String,
) -> super::jobs::JobOutcome {
    let options = RefreshOptions {
        job_id: super::jobs::current_job(),
        ..options
    };
    let source_version = match session.catalog().reload().await {
        Ok(index) => index.version,
        Err(e) => return Err((Phase::Execute, e)),
    };
    let outcomes = session
        .refresh_view(&name, &options)
        .await
        .map_err(|e| (phase_of(&e), e))?;
    let result = |o| refresh_result(o, source_version, &delimiter);
    let (last, upstream) = outcomes.split_last().ok_or_else(|| {
        (
            Phase::Execute,
            Error::NotSupported("the refresh refreshed nothing".into()),
        )
    })?;
    let mut value = result(last);
    value["upstream"] = Value::Array(upstream.iter().map(result).collect());
    Ok(value)
}

/// Where a job's error happened.
fn phase_of(e: &Error) -> Phase {
    let e = match e {
        Error::RefreshFailed { source, .. } => source.as_ref(),
        e => e,
    };
    match e {
        Error::CommitConflict { .. }
        | Error::TooManyRetries { .. }
        | Error::CommitOutcomeUnknown { .. }
        | Error::DefinitionChanged { .. } => Phase::Commit,
        _ => Phase::Execute,
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

async fn describe_json(shared: &Shared, name: &QualifiedName, delimiter: &str) -> ApiResult<Value> {
    let description = shared.session.describe(name).await?;
    let mut value = serde_json::to_value(&description).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            e.to_string(),
        )
    })?;
    value["id"] = json!(id_of(name, delimiter));
    Ok(value)
}

async fn describe(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<IdQuery>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<Value>> {
    let Empty {} = body(bytes, Some(Empty {}))?;
    let (name, _) = view_name(&shared, &id, &query)?;
    Ok(axum::Json(
        describe_json(&shared, &name, query.delimiter()).await?,
    ))
}

/// The Lance Namespace spec's `RefreshMaterializedViewRequest`, plus this
/// server's `full`, `incremental`, `cascade` and `source_version`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefreshBody {
    #[serde(default)]
    full: bool,
    #[serde(default)]
    incremental: bool,
    #[serde(default)]
    cascade: bool,
    /// `{"<source view id>": <version of its log>, ...}`.
    source_version: Option<Value>,
    id: Option<Vec<String>>,
    #[allow(dead_code)]
    identity: Option<Value>,
    #[allow(dead_code)]
    context: Option<Value>,
    /// The spec's one source version: refused (see `source_version`).
    src_version: Option<Value>,
    max_rows_per_fragment: Option<Value>,
    concurrency: Option<Value>,
    intra_applier_concurrency: Option<Value>,
    source_task_size: Option<Value>,
    cluster: Option<Value>,
    output_limit: Option<Value>,
    manifest: Option<Value>,
}

impl RefreshBody {
    /// Refuses the spec's fields this server has no use for, when set.
    fn check_spec_fields(&self) -> ApiResult<()> {
        if self.src_version.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(invalid(
                ErrorCode::InvalidParameterValue,
                "src_version is not supported: each view commits to its own log, so no single \
                 version names the snapshots of several sources; pin source views with \
                 source_version, e.g. {\"source_version\": {\"analytics$daily\": 7}}",
            ));
        }
        if self.output_limit.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(invalid(
                ErrorCode::InvalidParameterValue,
                "output_limit applies to chunker views only; this server makes query views",
            ));
        }
        let operational = [
            ("max_rows_per_fragment", &self.max_rows_per_fragment),
            ("concurrency", &self.concurrency),
            ("intra_applier_concurrency", &self.intra_applier_concurrency),
            ("source_task_size", &self.source_task_size),
            ("cluster", &self.cluster),
            ("manifest", &self.manifest),
        ];
        for (field, value) in operational {
            if value.as_ref().is_some_and(|v| !v.is_null()) {
                return Err(invalid(
                    ErrorCode::InvalidParameterValue,
                    format!(
                        "{field} is not supported by this server: leave it out (or null); the \
                         server's own settings (--max-running-jobs, the session's \
                         target_partitions) decide how a refresh runs"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The source views a refresh body pins, by name: the ids of `value`'s
/// keys resolved like the route's, each with its version.
fn pinned_sources(
    shared: &Shared,
    value: &Value,
    query: &IdQuery,
) -> ApiResult<BTreeMap<QualifiedName, u64>> {
    let Value::Object(pins) = value else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::FeatureNotSupported,
            "source_version must name each source materialized view with the version of its own log, e.g. {\"analytics$daily\": 7}: each view commits to its own log, so no single catalog version names the snapshots of several views",
        ));
    };
    let mut out = BTreeMap::new();
    for (id, version) in pins {
        let (name, _) = view_name(shared, id, query)?;
        let Some(version) = version.as_u64() else {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidParameterValue,
                format!("source_version of \"{id}\" must be a version number, not {version}"),
            ));
        };
        out.insert(name, version);
    }
    Ok(out)
}

/// The typed result of one view's refresh, as a refresh job reports it.
fn refresh_result(
    outcome: &datafusion_matview::session::RefreshOutcome,
    source_version: u64,
    delimiter: &str,
) -> Value {
    let source_versions: serde_json::Map<String, Value> = outcome
        .source_versions
        .iter()
        .map(|(name, version)| (id_of(name, delimiter), json!(version)))
        .collect();
    json!({
        "view": outcome.view,
        "mode": outcome.mode.as_str(),
        "rows_written": outcome.rows_written,
        "rows_deleted": outcome.rows_deleted,
        "detail": outcome.detail,
        "source_version": source_version,
        "source_versions": source_versions,
        "version": outcome.version,
    })
}

async fn refresh(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<IdQuery>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let request: RefreshBody = body(bytes, Some(RefreshBody::default()))?;
    let (name, parts) = view_name(&shared, &id, &query)?;
    check_body_id(request.id.as_deref(), &parts, &id)?;
    request.check_spec_fields()?;
    let pins = match &request.source_version {
        Some(value) => pinned_sources(&shared, value, &query)?,
        None => BTreeMap::new(),
    };
    let index = shared
        .session
        .catalog()
        .reload()
        .await
        .map_err(ApiError::from)?;
    if index.view(&name).is_none() {
        return Err(Error::NotFound {
            name: shared.session.display(&name),
        }
        .into());
    }
    // What can be checked now is answered now; the job checks again.
    shared.session.check_source_versions(&index, &pins).await?;
    let options = RefreshOptions {
        full: request.full,
        incremental: request.incremental,
        cascade: request.cascade,
        sources_at: pins,
        job_id: None,
    };
    let delimiter = query.delimiter().to_owned();
    let mut spec = json!({
        "id": id,
        "full": request.full,
        "incremental": request.incremental,
        "cascade": request.cascade,
    });
    if let Some(pins) = &request.source_version {
        spec["source_version"] = pins.clone();
    }
    let session = shared.session.clone();
    let job_id = shared.jobs.submit(
        JobType::RefreshMaterializedView,
        name.clone(),
        spec,
        refresh_job(session, name, options, delimiter),
    )?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({ "job_id": job_id })),
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DropBody {
    #[serde(default)]
    cascade: bool,
}

async fn drop_view(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<IdQuery>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<Value>> {
    let request: DropBody = body(bytes, Some(DropBody::default()))?;
    let (name, _) = view_name(&shared, &id, &query)?;
    let options = DropOptions {
        if_exists: false,
        cascade: request.cascade,
    };
    let lock = shared.jobs.view_lock(&name);
    let _guard = lock.lock().await;
    let dropped = shared
        .session
        .drop_views(std::slice::from_ref(&name), options)
        .await?;
    // The named view first, then what CASCADE dropped with it.
    let dropped: Vec<Value> = std::iter::once((&name, "materialized view"))
        .chain(dropped.iter().map(|(name, kind)| (name, *kind)))
        .map(|(name, kind)| json!({ "id": id_of(name, query.delimiter()), "kind": kind }))
        .collect();
    Ok(axum::Json(json!({ "dropped": dropped })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    page_token: Option<String>,
    limit: Option<usize>,
    delimiter: Option<String>,
}

/// Most names or jobs one page holds.
const MAX_PAGE: usize = 1000;
/// Names or jobs per page when the request does not say.
const DEFAULT_PAGE: usize = 100;

fn page_size(limit: Option<usize>) -> ApiResult<usize> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        0 => Err(ApiError::bad_request("limit must be at least 1")),
        n => Ok(n.min(MAX_PAGE)),
    }
}

/// The view's refresh attempts, newest first, a page at a time: each as
/// [`RefreshAttempt`](datafusion_matview::history::RefreshAttempt) with
/// `view` as its id and `duration_ms`.
async fn refreshes(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> ApiResult<axum::Json<Value>> {
    let id_query = IdQuery {
        delimiter: query.delimiter.clone(),
    };
    let delimiter = id_query.delimiter().to_owned();
    let limit = page_size(query.limit)?;
    let (name, _) = view_name(&shared, &id, &id_query)?;
    let before = match &query.page_token {
        Some(token) => match ids::decode_token(token)?.as_slice() {
            [started, attempt] => Some((
                started.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid page token \"{token}\""))
                })?,
                attempt.clone(),
            )),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "invalid page token \"{token}\""
                )));
            }
        },
        None => None,
    };
    let key = |a: &datafusion_matview::history::RefreshAttempt| {
        (a.started_at.timestamp_micros(), a.attempt_id.clone())
    };
    let mut attempts = shared.session.refresh_history(Some(&name)).await?;
    attempts.reverse();
    let mut page: Vec<_> = attempts
        .into_iter()
        .filter(|a| before.as_ref().is_none_or(|b| key(a) < *b))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let page_token = more.then(|| page.last()).flatten().map(|a| {
        let (started, attempt) = key(a);
        ids::encode_token(&[started.to_string(), attempt])
    });
    let refreshes = page
        .iter()
        .map(|a| {
            let mut value = serde_json::to_value(a).unwrap_or(Value::Null);
            value["view"] = json!(id_of(&a.view, &delimiter));
            value["duration_ms"] = json!((a.ended_at - a.started_at).num_milliseconds().max(0));
            value
        })
        .collect::<Vec<_>>();
    Ok(axum::Json(
        json!({ "refreshes": refreshes, "page_token": page_token }),
    ))
}

async fn list(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> ApiResult<axum::Json<Value>> {
    let delimiter = query.delimiter.as_deref().unwrap_or(DEFAULT_DELIMITER);
    let limit = page_size(query.limit)?;
    let namespace = match ids::parse_namespace(&id, delimiter)? {
        None => None,
        Some(parts) => {
            let (default_catalog, _) = datafusion_matview::sql::defaults(shared.session.context());
            let (catalog, schema) = match parts.as_slice() {
                [schema] => (default_catalog, schema.clone()),
                [catalog, schema] => (catalog.clone(), schema.clone()),
                _ => unreachable!("parse_namespace gives one or two parts"),
            };
            let exists = shared
                .session
                .context()
                .catalog(&catalog)
                .is_some_and(|c| c.schema(&schema).is_some());
            if !exists {
                return Err(Error::SchemaNotFound { name: schema }.into());
            }
            Some((catalog, schema))
        }
    };
    let after = match &query.page_token {
        Some(token) => match ids::decode_token(token)?.as_slice() {
            [c, s, n] => Some(QualifiedName::new(c, s, n)),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "invalid page token \"{token}\""
                )));
            }
        },
        None => None,
    };
    let mut names = shared
        .session
        .list_views(
            namespace.as_ref().map(|(c, s)| (c.as_str(), s.as_str())),
            after.as_ref(),
            limit + 1,
        )
        .await?;
    let more = names.len() > limit;
    names.truncate(limit);
    let page_token = more
        .then(|| names.last())
        .flatten()
        .map(|n| ids::encode_token(&[n.catalog.clone(), n.schema.clone(), n.name.clone()]));
    let views: Vec<String> = names
        .iter()
        .map(|n| match namespace {
            Some(_) => n.name.clone(),
            None => id_of(n, delimiter),
        })
        .collect();
    Ok(axum::Json(
        json!({ "views": views, "page_token": page_token }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobId {
    job_id: String,
}

async fn job_describe(
    State(shared): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<Value>> {
    let JobId { job_id } = body(bytes, None)?;
    Ok(axum::Json(json!(shared.jobs.describe(&job_id)?)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobList {
    page_token: Option<String>,
    limit: Option<usize>,
}

async fn job_list(
    State(shared): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<Value>> {
    let request: JobList = body(bytes, Some(JobList::default()))?;
    let limit = page_size(request.limit)?;
    let after =
        match &request.page_token {
            Some(token) => match ids::decode_token(token)?.as_slice() {
                [seq] => Some(seq.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid page token \"{token}\""))
                })?),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "invalid page token \"{token}\""
                    )));
                }
            },
            None => None,
        };
    let (jobs, next) = shared.jobs.list(after, limit);
    let page_token = next.map(|seq| ids::encode_token(&[seq.to_string()]));
    Ok(axum::Json(
        json!({ "jobs": jobs, "page_token": page_token }),
    ))
}

async fn job_cancel(
    State(shared): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<axum::Json<Value>> {
    let JobId { job_id } = body(bytes, None)?;
    let session = shared.session.clone();
    let info = shared
        .jobs
        .cancel(&job_id, |view| async move {
            let _ = session.catalog().reload().await;
            session
                .catalog()
                .view(&view)
                .await
                .ok()
                .flatten()
                .map(|v| v.version)
        })
        .await?;
    Ok(axum::Json(json!(info)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlBody {
    sql: String,
}

/// The media type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

async fn sql(
    State(shared): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let SqlBody { sql } = body(bytes, None)?;
    let session = shared.client();
    let (schema, batches) = shared.run_sql(&session, &sql).await?;
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json"));
    let internal = |e: datafusion::arrow::error::ArrowError| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            e.to_string(),
        )
    };
    if wants_json {
        let body = json_rows(&batches).map_err(internal)?;
        return Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response());
    }
    let body = ipc_stream(&schema, &batches).map_err(internal)?;
    Ok(([(header::CONTENT_TYPE, ARROW_STREAM)], body).into_response())
}

/// `batches` as one Arrow IPC stream.
fn ipc_stream(
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<Vec<u8>, datafusion::arrow::error::ArrowError> {
    let mut out = vec![];
    let mut writer = datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut out, schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// `batches` as a JSON array of objects, one per row.
fn json_rows(batches: &[RecordBatch]) -> Result<Vec<u8>, datafusion::arrow::error::ArrowError> {
    let mut writer = datafusion::arrow::json::ArrayWriter::new(Vec::new());
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    let out = writer.into_inner();
    // An empty result is an empty array, not an empty body.
    Ok(if out.is_empty() { b"[]".to_vec() } else { out })
}

async fn openapi() -> axum::Json<Value> {
    axum::Json(super::openapi::document())
}
