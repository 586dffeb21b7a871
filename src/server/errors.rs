//! Errors as the server answers them: an HTTP status, and a JSON body
//! shaped as the Lance Namespace spec's `ErrorResponse` — `{error, code,
//! detail, instance}`, `code` the spec's integer error code (4
//! TableNotFound, 5 TableAlreadyExists, 13 InvalidInput, ...; see
//! [`lance_code`]) — plus `condition`, PostgreSQL's condition name
//! (`undefined_table`, `duplicate_table`, `serialization_failure`, ...) or
//! the server's own, and `retryable`. `error` is the first line of the
//! crate's message (PostgreSQL's words), `detail` the rest (its `DETAIL:`
//! and `HINT:` lines).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use datafusion::error::DataFusionError;
use serde::Serialize;

use crate::error::Error;

/// An error answer of the REST API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiError {
    /// The HTTP status.
    #[serde(skip)]
    pub status: StatusCode,
    /// What is wrong, in one line.
    pub error: String,
    /// The Lance Namespace error code (see [`lance_code`]).
    pub code: u32,
    /// PostgreSQL's condition name (`undefined_table`, `duplicate_table`,
    /// `serialization_failure`, ...) or the server's own
    /// (`unauthorized`, `payload_too_large`, `job_queue_full`).
    pub condition: &'static str,
    /// The message's further lines (`DETAIL:`, `HINT:`), if any.
    pub detail: Option<String>,
    /// The route that answered (filled in by the router).
    pub instance: Option<String>,
    /// Whether sending the same request again may succeed.
    pub retryable: bool,
}

/// The Lance Namespace error code for an answer with `status` and
/// `condition`: 0 Unsupported, 1 NamespaceNotFound, 4 TableNotFound,
/// 5 TableAlreadyExists, 13 InvalidInput, 14 ConcurrentModification,
/// 15 PermissionDenied, 16 Unauthenticated, 17 ServiceUnavailable,
/// 18 Internal, 19 InvalidTableState, 20 TableSchemaValidationError (a
/// materialized view is a table to the spec). A full job queue is 503,
/// so 17 (the spec's 21 Throttling goes with 429).
pub fn lance_code(status: StatusCode, condition: &str) -> u32 {
    match condition {
        "feature_not_supported" => return 0,
        "invalid_schema_name" => return 1,
        "undefined_table" => return 4,
        "duplicate_table" => return 5,
        "serialization_failure" => return 14,
        "object_not_in_prerequisite_state" | "dependent_objects_still_exist" => return 19,
        "schema_mismatch" => return 20,
        _ => {}
    }
    match status.as_u16() {
        400 | 404 | 413 | 415 => 13,
        401 => 16,
        403 | 421 => 15,
        409 => 14,
        408 | 502 | 503 => 17,
        _ => 18,
    }
}

impl ApiError {
    /// An error with a one-line message.
    pub fn new(status: StatusCode, condition: &'static str, error: impl Into<String>) -> Self {
        Self {
            status,
            error: error.into(),
            code: lance_code(status, condition),
            condition,
            detail: None,
            instance: None,
            retryable: false,
        }
    }

    /// A 400 answer for a request the server cannot read.
    pub fn bad_request(error: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", error)
    }

    /// Splits a multi-line message into `error` and `detail`.
    fn from_message(status: StatusCode, condition: &'static str, message: &str) -> Self {
        let (error, detail) = match message.split_once('\n') {
            Some((first, rest)) => (first.to_owned(), Some(rest.to_owned())),
            None => (message.to_owned(), None),
        };
        Self {
            detail,
            ..Self::new(status, condition, error)
        }
    }
}

impl From<&Error> for ApiError {
    fn from(e: &Error) -> Self {
        let (status, code, retryable) = classify(e);
        ApiError {
            retryable,
            ..ApiError::from_message(status, code, &e.to_string())
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::from(&e)
    }
}

/// The status, condition name and retryability of a crate error.
fn classify(e: &Error) -> (StatusCode, &'static str, bool) {
    use StatusCode as S;
    match e {
        Error::NotFound { .. } | Error::RelationNotFound { .. } => {
            (S::NOT_FOUND, "undefined_table", false)
        }
        Error::SchemaNotFound { .. } => (S::NOT_FOUND, "invalid_schema_name", false),
        Error::AlreadyExists { .. } => (S::CONFLICT, "duplicate_table", false),
        Error::CommitConflict { .. } | Error::TooManyRetries { .. } | Error::WriteLost { .. } => {
            (S::CONFLICT, "serialization_failure", true)
        }
        Error::DefinitionChanged { .. } => (S::CONFLICT, "object_not_in_prerequisite_state", false),
        Error::NotPopulated { .. } => (S::CONFLICT, "object_not_in_prerequisite_state", false),
        Error::DependentObjects { .. } => (S::CONFLICT, "dependent_objects_still_exist", false),
        Error::WrongObjectType { .. } => (S::BAD_REQUEST, "wrong_object_type", false),
        Error::TooManyColumnNames
        | Error::DuplicateColumn { .. }
        | Error::ColumnsInUse { .. }
        | Error::ZeroLengthIdentifier
        | Error::InvalidCharacter { .. }
        | Error::UnsupportedDefinition { .. }
        | Error::ColumnsMismatch { .. } => (
            S::BAD_REQUEST,
            "syntax_error_or_access_rule_violation",
            false,
        ),
        Error::NotSupported(_) => (S::BAD_REQUEST, "feature_not_supported", false),
        Error::SourceVersionUnavailable { .. } => {
            (S::BAD_REQUEST, "invalid_parameter_value", false)
        }
        Error::StatementTimeout { .. } => (S::REQUEST_TIMEOUT, "query_canceled", true),
        Error::ResultTooLarge { .. } => (S::PAYLOAD_TOO_LARGE, "program_limit_exceeded", false),
        Error::PermissionDenied { .. } => (S::FORBIDDEN, "insufficient_privilege", false),
        Error::ReadOnly { .. } | Error::ReadOnlyCatalog { .. } => {
            (S::FORBIDDEN, "read_only_sql_transaction", false)
        }
        Error::RefreshFailed { source, .. } => {
            let (status, code, retryable) = classify(source);
            // A refresh that could not run is the server's failure unless
            // the request itself was wrong.
            match status {
                S::BAD_REQUEST
                | S::NOT_FOUND
                | S::CONFLICT
                | S::FORBIDDEN
                | S::UNPROCESSABLE_ENTITY => (status, code, retryable),
                _ => (S::INTERNAL_SERVER_ERROR, code, retryable),
            }
        }
        Error::MismatchedSourceFile { .. } => (S::UNPROCESSABLE_ENTITY, "data_exception", false),
        Error::CommitOutcomeUnknown { .. } => (S::SERVICE_UNAVAILABLE, "io_error", true),
        Error::DataFusion(e) => classify_datafusion(e),
        Error::ObjectStore(_) => (S::BAD_GATEWAY, "io_error", true),
        _ => (S::INTERNAL_SERVER_ERROR, "internal_error", false),
    }
}

fn classify_datafusion(e: &DataFusionError) -> (StatusCode, &'static str, bool) {
    use StatusCode as S;
    match e.find_root() {
        DataFusionError::SQL(..) => (S::BAD_REQUEST, "syntax_error", false),
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => {
            (S::BAD_REQUEST, "undefined_object", false)
        }
        DataFusionError::NotImplemented(_) => (S::BAD_REQUEST, "feature_not_supported", false),
        DataFusionError::Configuration(_) => (S::BAD_REQUEST, "invalid_parameter_value", false),
        DataFusionError::ResourcesExhausted(_) => (S::SERVICE_UNAVAILABLE, "out_of_memory", true),
        DataFusionError::ObjectStore(_) => (S::BAD_GATEWAY, "io_error", true),
        _ => (S::INTERNAL_SERVER_ERROR, "internal_error", false),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        (status, axum::Json(self)).into_response()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)?;
        if let Some(detail) = &self.detail {
            write!(f, "\n{detail}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_into_error_and_detail_with_postgres_codes() {
        let e = ApiError::from(Error::NotPopulated { name: "v".into() });
        assert_eq!(e.status, StatusCode::CONFLICT);
        assert_eq!(e.error, "materialized view \"v\" has not been populated");
        assert_eq!(
            e.detail.as_deref(),
            Some("HINT: Use the REFRESH MATERIALIZED VIEW command.")
        );
        let e = ApiError::from(Error::NotFound { name: "v".into() });
        assert_eq!(
            (e.status, e.condition, e.code),
            (StatusCode::NOT_FOUND, "undefined_table", 4)
        );
        let e = ApiError::from(Error::CommitConflict {
            name: "v".into(),
            reason: "refreshed".into(),
        });
        assert_eq!(e.status, StatusCode::CONFLICT);
        assert!(e.retryable);
        let plan = Error::DataFusion(DataFusionError::Context(
            "planning".into(),
            Box::new(DataFusionError::Plan("table 'x' not found".into())),
        ));
        assert_eq!(ApiError::from(plan).status, StatusCode::BAD_REQUEST);
        let wrapped = Error::RefreshFailed {
            name: "v".into(),
            source: Box::new(Error::DataFusion(DataFusionError::Execution("disk".into()))),
        };
        assert_eq!(
            ApiError::from(wrapped).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
