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
use serde::{Serialize, Serializer};

use datafusion_matview::error::{Error, ErrorCode};

/// What kind of error an answer is: one of the library's
/// [`ErrorCode`]s (PostgreSQL's conditions), or one only the server has.
/// It is the answer's `condition`, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// A condition of the library's errors, or one the server answers the
    /// same way (`invalid_parameter_value` for a bad field).
    Sql(ErrorCode),
    /// `not_found`: no such route.
    NoRoute,
    /// `unauthorized`: no token, or the wrong one.
    Unauthorized,
    /// `forbidden_origin`: a browser page of another origin.
    ForbiddenOrigin,
    /// `misdirected_request`: a `Host` the server does not answer to.
    MisdirectedRequest,
    /// `unsupported_media_type`: a body that is not JSON.
    UnsupportedMediaType,
    /// `payload_too_large`: a body over the limit.
    PayloadTooLarge,
    /// `invalid_request`: a body the server cannot read.
    InvalidRequest,
    /// `schema_mismatch`: columns other than the view's.
    SchemaMismatch,
    /// `shutting_down`: the server takes no new jobs.
    ShuttingDown,
    /// `job_queue_full`: every run slot and queue place is taken.
    JobQueueFull,
}

impl Condition {
    /// Every condition the server can answer with (the OpenAPI document's
    /// enum of `condition`).
    pub fn all() -> impl Iterator<Item = Condition> {
        ErrorCode::ALL.into_iter().map(Condition::Sql).chain([
            Condition::NoRoute,
            Condition::Unauthorized,
            Condition::ForbiddenOrigin,
            Condition::MisdirectedRequest,
            Condition::UnsupportedMediaType,
            Condition::PayloadTooLarge,
            Condition::InvalidRequest,
            Condition::SchemaMismatch,
            Condition::ShuttingDown,
            Condition::JobQueueFull,
        ])
    }

    /// The condition's name, as the answer carries it.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Sql(code) => code.name(),
            Condition::NoRoute => "not_found",
            Condition::Unauthorized => "unauthorized",
            Condition::ForbiddenOrigin => "forbidden_origin",
            Condition::MisdirectedRequest => "misdirected_request",
            Condition::UnsupportedMediaType => "unsupported_media_type",
            Condition::PayloadTooLarge => "payload_too_large",
            Condition::InvalidRequest => "invalid_request",
            Condition::SchemaMismatch => "schema_mismatch",
            Condition::ShuttingDown => "shutting_down",
            Condition::JobQueueFull => "job_queue_full",
        }
    }
}

impl From<ErrorCode> for Condition {
    fn from(code: ErrorCode) -> Self {
        Condition::Sql(code)
    }
}

impl Serialize for Condition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

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
    pub condition: Condition,
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
pub fn lance_code(status: StatusCode, condition: Condition) -> u32 {
    use ErrorCode as C;
    match condition {
        Condition::Sql(C::FeatureNotSupported) => return 0,
        Condition::Sql(C::InvalidSchemaName) => return 1,
        Condition::Sql(C::UndefinedTable) => return 4,
        Condition::Sql(C::DuplicateTable) => return 5,
        Condition::Sql(C::SerializationFailure) => return 14,
        Condition::Sql(C::ObjectNotInPrerequisiteState | C::DependentObjectsStillExist) => {
            return 19;
        }
        Condition::SchemaMismatch => return 20,
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
    pub fn new(
        status: StatusCode,
        condition: impl Into<Condition>,
        error: impl Into<String>,
    ) -> Self {
        let condition = condition.into();
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
        Self::new(StatusCode::BAD_REQUEST, Condition::InvalidRequest, error)
    }

    /// Splits a multi-line message into `error` and `detail`.
    fn from_message(status: StatusCode, condition: Condition, message: &str) -> Self {
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
        let code = e.code();
        ApiError {
            retryable: e.is_retryable(),
            ..ApiError::from_message(status_of(e, code), code.into(), &e.to_string())
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::from(&e)
    }
}

/// The HTTP status of a crate error with `code`.
fn status_of(e: &Error, code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    use StatusCode as S;
    let status = match code {
        C::UndefinedTable | C::InvalidSchemaName => S::NOT_FOUND,
        C::DuplicateTable
        | C::SerializationFailure
        | C::ObjectNotInPrerequisiteState
        | C::DependentObjectsStillExist => S::CONFLICT,
        C::WrongObjectType
        | C::SyntaxErrorOrAccessRuleViolation
        | C::SyntaxError
        | C::UndefinedObject
        | C::FeatureNotSupported
        | C::InvalidParameterValue => S::BAD_REQUEST,
        C::DataException => S::UNPROCESSABLE_ENTITY,
        C::QueryCanceled => S::REQUEST_TIMEOUT,
        C::ProgramLimitExceeded => S::PAYLOAD_TOO_LARGE,
        C::InsufficientPrivilege | C::ReadOnlySqlTransaction => S::FORBIDDEN,
        C::TransactionResolutionUnknown | C::OutOfMemory => S::SERVICE_UNAVAILABLE,
        C::IoError => S::BAD_GATEWAY,
        _ => S::INTERNAL_SERVER_ERROR,
    };
    // A refresh that could not run is the server's failure unless the
    // request itself was wrong.
    let request_was_wrong = matches!(
        status,
        S::BAD_REQUEST | S::NOT_FOUND | S::CONFLICT | S::FORBIDDEN | S::UNPROCESSABLE_ENTITY
    );
    if matches!(e, Error::RefreshFailed { .. }) && !request_was_wrong {
        S::INTERNAL_SERVER_ERROR
    } else {
        status
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
    use datafusion::error::DataFusionError;

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
            (e.status, e.condition.name(), e.code),
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
