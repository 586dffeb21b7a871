//! The OpenAPI 3.1 document of the REST API, served at `/openapi.json`.

use serde_json::{Value, json};

use super::Condition;
use super::jobs::{JobState, JobType, Phase};

fn ok(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

fn body(schema: Value, required: bool) -> Value {
    json!({ "required": required, "content": { "application/json": { "schema": schema } } })
}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn errors(statuses: &[&str]) -> serde_json::Map<String, Value> {
    statuses
        .iter()
        .map(|s| {
            let response = json!({
                "description": "error",
                "content": { "application/json": { "schema": reference("Error") } }
            });
            ((*s).to_owned(), response)
        })
        .collect()
}

fn responses(success: &[(&str, Value)], failures: &[&str]) -> Value {
    let mut map = errors(failures);
    for (status, response) in success {
        map.insert((*status).to_owned(), response.clone());
    }
    Value::Object(map)
}

fn id_parameter(what: &str) -> Value {
    json!([
        { "name": "id", "in": "path", "required": true, "schema": { "type": "string" },
          "description": format!("the {what}'s identifier, parts joined by the delimiter (`analytics$daily_sales`)") },
        { "name": "delimiter", "in": "query", "required": false, "schema": { "type": "string", "default": "$" } }
    ])
}

/// The document.
pub(crate) fn document() -> Value {
    let job_id = json!({ "type": "object", "required": ["job_id"], "additionalProperties": false,
        "properties": { "job_id": { "type": "string" } } });
    let view_errors = ["400", "401", "404", "409", "413", "503"];
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "datafusion-matview server",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Materialized views over Apache DataFusion: LanceDB-shaped REST routes with asynchronous jobs."
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" },
                "api_key": { "type": "apiKey", "in": "header", "name": "x-api-key" } },
            "schemas": {
                "Error": { "type": "object", "required": ["code"], "description": "the Lance Namespace ErrorResponse, plus condition and retryable", "properties": {
                    "error": { "type": "string" },
                    "code": { "type": "integer", "minimum": 0, "description": "Lance Namespace error code: 0 Unsupported, 1 NamespaceNotFound, 4 TableNotFound, 5 TableAlreadyExists, 13 InvalidInput, 14 ConcurrentModification, 15 PermissionDenied, 16 Unauthenticated, 17 ServiceUnavailable, 18 Internal, 19 InvalidTableState, 20 TableSchemaValidationError, 21 Throttling" },
                    "condition": { "enum": Condition::all().map(Condition::name).collect::<Vec<_>>(),
                        "description": "PostgreSQL's condition name, or the server's own" },
                    "detail": { "type": ["string", "null"] }, "instance": { "type": ["string", "null"] },
                    "retryable": { "type": "boolean" } } },
                "JobId": job_id,
                "Column": { "type": "object", "properties": {
                    "name": { "type": "string" }, "type": { "type": "string" }, "nullable": { "type": "boolean" } } },
                "View": { "type": "object", "properties": {
                    "id": { "type": "string" }, "name": { "type": "string" },
                    "namespace": { "type": "array", "items": { "type": "string" } },
                    "query": { "type": "string" },
                    "columns": { "type": "array", "items": reference("Column") },
                    "populated": { "type": "boolean" },
                    "freshness": { "enum": ["fresh", "stale", "unknown"] },
                    "changed_sources": { "type": "array", "items": { "type": "string" } },
                    "row_count": { "type": ["integer", "null"] },
                    "size_bytes": { "type": ["integer", "null"] },
                    "last_refreshed": { "type": ["string", "null"], "format": "date-time" },
                    "version": { "type": "integer" },
                    "format_version": { "type": "integer" },
                    "versions": { "type": "array", "description": "the versions that materialized_view_at can still read, oldest first",
                        "items": { "type": "object", "properties": {
                            "version": { "type": "integer" },
                            "committed_at": { "type": "string", "format": "date-time" },
                            "refreshed_at": { "type": "string", "format": "date-time" },
                            "row_count": { "type": "integer" } } } } } },
                "RefreshAttempt": { "type": "object", "properties": {
                    "view": { "type": "string" }, "definition": { "type": "string" },
                    "attempt_id": { "type": "string" },
                    "version": { "type": ["integer", "null"] },
                    "state": { "enum": ["succeeded", "failed", "cancelled", "no_op"] },
                    "trigger": { "enum": ["statement", "cascade", "auto", "create", "server job"] },
                    "mode": { "type": ["string", "null"] }, "reason": { "type": ["string", "null"] },
                    "started_at": { "type": "string", "format": "date-time" },
                    "ended_at": { "type": "string", "format": "date-time" },
                    "duration_ms": { "type": "integer" },
                    "rows_written": { "type": ["integer", "null"] }, "rows_deleted": { "type": ["integer", "null"] },
                    "files_read": { "type": ["integer", "null"] }, "bytes_read": { "type": ["integer", "null"] },
                    "sources": { "type": ["string", "null"] }, "error": { "type": ["string", "null"] },
                    "ran_by": { "type": "string" }, "job_id": { "type": ["string", "null"] } } },
                "RefreshResult": { "type": "object", "properties": {
                    "view": { "type": "string" }, "mode": { "enum": ["no_op", "incremental", "full"] },
                    "rows_written": { "type": "integer" }, "rows_deleted": { "type": "integer" },
                    "detail": { "type": "string" },
                    "source_version": { "type": "integer", "description": "the catalog index version the refresh started from (the views and tables that existed); view snapshots have their own per-view versions" },
                    "source_versions": { "type": "object", "additionalProperties": { "type": "integer" },
                        "description": "each materialized view the refresh read (by id), with the version of its own log it read" },
                    "version": { "type": "integer" },
                    "upstream": { "type": "array", "items": { "type": "object" } } } },
                "Job": { "type": "object", "properties": {
                    "job_id": { "type": "string" },
                    "job_type": { "enum": JobType::ALL },
                    "job_state": { "enum": JobState::ALL },
                    "creation_ms": { "type": "integer" }, "spec": { "type": "object" },
                    "table": { "type": "string", "description": "the view's id (LanceDB's SDK reads table, state, created_at_millis)" },
                    "state": { "enum": JobState::ALL },
                    "created_at_millis": { "type": "integer" },
                    "result": {}, "failure": { "type": ["object", "null"], "properties": {
                        "phase": { "enum": Phase::ALL }, "message": { "type": "string" },
                        "retryable": { "type": "boolean" } } } } }
            }
        },
        "security": [{ "bearer": [] }, { "api_key": [] }],
        "paths": {
            "/v1/materialized_view/{id}/create": { "post": {
                "summary": "CREATE MATERIALIZED VIEW (the Lance Namespace CreateMaterializedViewRequest); with with_no_data false the first population runs as a job",
                "parameters": id_parameter("view"),
                "requestBody": body(json!({ "type": "object", "required": ["source_query"], "additionalProperties": false,
                    "properties": { "kind": { "enum": ["query", "udtf", "chunker"], "default": "query", "description": "udtf and chunker answer 400 with code 0 (Unsupported)" },
                        "source_query": { "type": "string", "description": "a SQL query (query is accepted too)" },
                        "output_schema": { "type": "string", "description": "base64 Arrow IPC schema; must match the query's column names and types (else 400, code 20)" },
                        "with_no_data": { "type": "boolean", "default": true },
                        "auto_refresh": { "type": ["boolean", "null"] },
                        "udtf_spec": { "type": "null" },
                        "id": { "type": "array", "items": { "type": "string" } },
                        "identity": { "type": "object" }, "context": { "type": "object" },
                        "or_replace": { "type": "boolean" }, "if_not_exists": { "type": "boolean" },
                        "columns": { "type": "array", "items": { "type": "string" } } } }), true),
                "responses": responses(&[("201", ok("created (or skipped by IF NOT EXISTS)", json!({ "type": "object", "required": ["version"], "properties": {
                    "version": { "type": "integer", "minimum": 0 }, "job_id": { "type": ["string", "null"] },
                    "id": { "type": "string" }, "action": { "enum": ["created", "replaced", "skipped"] } } })))], &view_errors) } },
            "/v1/materialized_view/{id}/describe": { "post": {
                "summary": "definition and state of a view",
                "parameters": id_parameter("view"),
                "responses": responses(&[("200", ok("the view", reference("View")))], &["400", "401", "404"]) } },
            "/v1/materialized_view/{id}/refresh": { "post": {
                "summary": "REFRESH MATERIALIZED VIEW as a job (its result: RefreshResult)",
                "parameters": id_parameter("view"),
                "requestBody": body(json!({ "type": "object", "additionalProperties": false, "properties": {
                    "full": { "type": "boolean" }, "cascade": { "type": "boolean" },
                    "incremental": { "type": "boolean", "description": "REFRESH ... INCREMENTAL: only what changed, or the job fails with the reason" },
                    "id": { "type": "array", "items": { "type": "string" } },
                    "identity": { "type": "object" }, "context": { "type": "object" },
                    "src_version": { "type": "null", "description": "refused when set: use source_version" },
                    "max_rows_per_fragment": { "type": "null" }, "concurrency": { "type": "null" },
                    "intra_applier_concurrency": { "type": "null" }, "source_task_size": { "type": "null" },
                    "cluster": { "type": "null" }, "output_limit": { "type": "null" }, "manifest": { "type": "null" },
                    "source_version": { "type": "object", "additionalProperties": { "type": "integer", "minimum": 1 },
                        "description": "source materialized views (by id) to read at that version of their own log instead of their latest, while retention holds it; not with cascade" } } }), false),
                "responses": responses(&[("202", ok("the refresh job", reference("JobId")))], &view_errors) } },
            "/v1/materialized_view/{id}/drop": { "post": {
                "summary": "DROP MATERIALIZED VIEW",
                "parameters": id_parameter("view"),
                "requestBody": body(json!({ "type": "object", "additionalProperties": false, "properties": {
                    "cascade": { "type": "boolean" } } }), false),
                "responses": responses(&[("200", ok("what was dropped", json!({ "type": "object", "properties": {
                    "dropped": { "type": "array", "items": { "type": "object", "properties": {
                        "id": { "type": "string" }, "kind": { "type": "string" } } } } } })))], &view_errors) } },
            "/v1/materialized_view/{id}/refreshes": { "get": {
                "summary": "the view's refresh history (every attempt: succeeded, failed, cancelled, no_op), newest first, a page at a time",
                "parameters": [
                    { "name": "id", "in": "path", "required": true, "schema": { "type": "string" } },
                    { "name": "delimiter", "in": "query", "schema": { "type": "string", "default": "$" } },
                    { "name": "page_token", "in": "query", "schema": { "type": "string" } },
                    { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 1000 } }
                ],
                "responses": responses(&[("200", ok("a page of attempts", json!({ "type": "object", "properties": {
                    "refreshes": { "type": "array", "items": reference("RefreshAttempt") },
                    "page_token": { "type": ["string", "null"] } } })))], &["400", "401", "404"]) } },
            "/v1/namespace/{id}/materialized_view/list": { "get": {
                "summary": "the views of a namespace (`$` alone: all), sorted, a page at a time",
                "parameters": [
                    { "name": "id", "in": "path", "required": true, "schema": { "type": "string" } },
                    { "name": "delimiter", "in": "query", "schema": { "type": "string", "default": "$" } },
                    { "name": "page_token", "in": "query", "schema": { "type": "string" } },
                    { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1, "maximum": 1000 } }
                ],
                "responses": responses(&[("200", ok("a page of names", json!({ "type": "object", "properties": {
                    "views": { "type": "array", "items": { "type": "string" } },
                    "page_token": { "type": ["string", "null"] } } })))], &["400", "401", "404"]) } },
            "/v1/jobs/describe": { "post": {
                "summary": "one job",
                "requestBody": body(reference("JobId"), true),
                "responses": responses(&[("200", ok("the job", reference("Job")))], &["400", "401", "404"]) } },
            "/v1/jobs/list": { "post": {
                "summary": "jobs, newest first",
                "requestBody": body(json!({ "type": "object", "additionalProperties": false, "properties": {
                    "page_token": { "type": "string" }, "limit": { "type": "integer" } } }), false),
                "responses": responses(&[("200", ok("a page of jobs", json!({ "type": "object", "properties": {
                    "jobs": { "type": "array", "items": reference("Job") },
                    "page_token": { "type": ["string", "null"] } } })))], &["400", "401"]) } },
            "/v1/jobs/cancel": { "post": {
                "summary": "cancel a job; the view keeps a committed state",
                "requestBody": body(reference("JobId"), true),
                "responses": responses(&[("200", ok("the job after", reference("Job")))], &["400", "401", "404"]) } },
            "/v1/sql": { "post": {
                "summary": "run SQL (every statement of the session, the view statements included)",
                "requestBody": body(json!({ "type": "object", "required": ["sql"], "additionalProperties": false,
                    "properties": { "sql": { "type": "string" } } }), true),
                "responses": responses(&[("200", json!({ "description": "the last statement's rows",
                    "content": { "application/vnd.apache.arrow.stream": {},
                        "application/json": { "schema": { "type": "array", "items": { "type": "object" } } } } }))],
                    &["400", "401", "404", "409", "413"]) } },
            "/healthz": { "get": { "summary": "liveness", "security": [],
                "responses": { "200": ok("alive", json!({ "type": "object" })) } } },
            "/openapi.json": { "get": { "summary": "this document",
                "responses": { "200": ok("the document", json!({ "type": "object" })) } } }
        }
    })
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::ApiError;

    fn listed(schema: &Value) -> Vec<String> {
        schema["enum"]
            .as_array()
            .expect("an enum")
            .iter()
            .map(|v| v.as_str().expect("a name").to_owned())
            .collect()
    }

    #[test]
    fn the_document_lists_what_the_server_answers_with() {
        let document = document();
        let schemas = &document["components"]["schemas"];
        let conditions = listed(&schemas["Error"]["properties"]["condition"]);
        let unique: std::collections::BTreeSet<_> = conditions.iter().collect();
        assert_eq!(unique.len(), conditions.len(), "{conditions:?}");
        // Every condition an answer can carry, serialised as it goes out.
        for condition in Condition::all() {
            let answer = serde_json::to_value(ApiError::new(StatusCode::CONFLICT, condition, "x"))
                .expect("an answer serialises");
            let name = answer["condition"].as_str().expect("a name");
            assert!(conditions.iter().any(|c| c == name), "{name}");
        }
        let job = &schemas["Job"]["properties"];
        assert_eq!(
            listed(&job["job_type"]),
            ["CREATE_MATERIALIZED_VIEW", "REFRESH_MATERIALIZED_VIEW"]
        );
        assert_eq!(
            listed(&job["job_state"]),
            ["IN_PROGRESS", "DONE", "FAILED", "CANCELLED"]
        );
        assert_eq!(
            listed(&job["failure"]["properties"]["phase"]),
            ["execute", "commit", "shutdown"]
        );
    }
}
