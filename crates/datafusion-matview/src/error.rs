//! The crate's one error type.
//!
//! Messages follow PostgreSQL's wording where PostgreSQL has one, and say
//! what to do next (`HINT:` lines) where there is something to do.

use datafusion::error::DataFusionError;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `datafusion-matview`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The view was created `WITH NO DATA` and never refreshed.
    #[error(
        "materialized view \"{name}\" has not been populated\nHINT: Use the REFRESH MATERIALIZED VIEW command."
    )]
    NotPopulated {
        /// View name as the user wrote it.
        name: String,
    },

    /// `REFRESH ... INCREMENTAL` of a view that cannot be refreshed
    /// incrementally now.
    #[error(
        "materialized view \"{name}\" cannot be refreshed incrementally: {reason}\nHINT: Use REFRESH MATERIALIZED VIEW without INCREMENTAL to let it choose, or with FULL."
    )]
    NotIncremental {
        /// View name as the user wrote it.
        name: String,
        /// Why (the words a full refresh's `detail` would give).
        reason: String,
    },

    /// A `WITH (...)`, `SET (...)` or `RESET (...)` option of a
    /// materialized view that is not one, or has a bad value (the message
    /// says which, with a HINT).
    #[error("{0}")]
    InvalidOption(String),

    /// A table, view or materialized view of that name already exists.
    #[error("relation \"{name}\" already exists")]
    AlreadyExists {
        /// Relation name.
        name: String,
    },

    /// A relation a view reads is not registered in the session.
    #[error("relation \"{name}\" does not exist")]
    RelationNotFound {
        /// Relation name.
        name: String,
    },

    /// No materialized view of that name.
    #[error("materialized view \"{name}\" does not exist")]
    NotFound {
        /// View name.
        name: String,
    },

    /// The statement names an object of another kind, e.g. `REFRESH
    /// MATERIALIZED VIEW` on a table, or `DROP TABLE` on a materialized view.
    #[error("\"{name}\" is not a {expected}{}", hint.map(|h| format!("\nHINT: {h}")).unwrap_or_default())]
    WrongObjectType {
        /// Relation name.
        name: String,
        /// The kind the statement expected: `table`, `view`, `materialized view`.
        expected: &'static str,
        /// What to use instead, if anything.
        hint: Option<&'static str>,
    },

    /// `INSERT`, `UPDATE`, `DELETE` or `TRUNCATE` on a materialized view.
    #[error(
        "cannot change materialized view \"{name}\"\nHINT: Change its sources and use REFRESH MATERIALIZED VIEW."
    )]
    ReadOnly {
        /// View name.
        name: String,
    },

    /// The column list of `CREATE MATERIALIZED VIEW v (a, b, ...)` is longer
    /// than the query's output.
    #[error("too many column names were specified")]
    TooManyColumnNames,

    /// Two output columns of a view would share one name.
    #[error("column \"{name}\" specified more than once")]
    DuplicateColumn {
        /// Column name.
        name: String,
    },

    /// `DROP` of objects that other objects depend on, without `CASCADE`.
    #[error(
        "cannot drop {} because other objects depend on {}\nDETAIL: {}\nHINT: Use DROP ... CASCADE to drop the dependent objects too.",
        object.as_deref().unwrap_or("desired object(s)"),
        if object.is_some() { "it" } else { "them" },
        details.join("\n")
    )]
    DependentObjects {
        /// Kind and name of the one object being dropped (`table t`), or
        /// `None` when the statement drops several.
        object: Option<String>,
        /// One line per dependent: `materialized view m depends on table t`.
        details: Vec<String>,
    },

    /// `CREATE OR REPLACE` would change the columns other objects read.
    #[error(
        "cannot change the columns of materialized view {name} because other objects depend on it\nDETAIL: {}\nHINT: Keep the view's columns, or drop the dependent objects first.",
        details.join("\n")
    )]
    ColumnsInUse {
        /// The view.
        name: String,
        /// One line per dependent.
        details: Vec<String>,
    },

    /// A quoted name with nothing between its quotes (`""`).
    #[error("zero-length delimited identifier at or near \"\"\"\"")]
    ZeroLengthIdentifier,

    /// A name holding a control character, which no identifier may hold.
    #[error("invalid character {} in identifier \"{}\"", format_args!("U+{:04X}", *.character as u32), .name.escape_debug())]
    InvalidCharacter {
        /// The name as written.
        name: String,
        /// The first offending character.
        character: char,
    },

    /// The schema a view is to be created in does not exist.
    #[error("schema \"{name}\" does not exist")]
    SchemaNotFound {
        /// Schema name.
        name: String,
    },

    /// Running a view's query failed; the view keeps its previous data.
    #[error("could not refresh materialized view \"{name}\": {source}")]
    RefreshFailed {
        /// View name.
        name: String,
        /// What failed.
        source: Box<Error>,
    },

    /// A statement failed casting a value from a source file, and a file of
    /// a table it reads has a column of another type than the table's.
    #[error("{source}\n{}", file.detail())]
    MismatchedSourceFile {
        /// The error the statement failed with.
        source: Box<Error>,
        /// The file, and the column.
        file: Box<crate::session::MismatchedFile>,
    },

    /// The query of a view no longer produces the schema the view was created with.
    #[error(
        "materialized view \"{name}\" no longer matches its definition: {reason}\nHINT: Recreate it with CREATE OR REPLACE MATERIALIZED VIEW."
    )]
    DefinitionChanged {
        /// View name.
        name: String,
        /// What differs.
        reason: String,
    },

    /// The view was defined by a newer version of this crate.
    #[error(
        "materialized view \"{name}\" was defined with definition format {found}, but this build reads up to {supported}: it can be queried but not refreshed\nHINT: Upgrade datafusion-matview to refresh it."
    )]
    UnsupportedDefinition {
        /// View name.
        name: String,
        /// Format found.
        found: u32,
        /// Newest format this build understands.
        supported: u32,
    },

    /// A refresh was asked to read a source materialized view at a
    /// version of its log that it cannot read.
    #[error(
        "cannot read materialized view \"{name}\" at version {version}: {reason}\nHINT: Describe the view for its current version, or refresh without pinning it."
    )]
    SourceVersionUnavailable {
        /// The source view.
        name: String,
        /// The version asked for.
        version: u64,
        /// Why it cannot be read.
        reason: String,
    },

    /// A query asked for a version of a materialized view
    /// (`materialized_view_at`, `VERSION AS OF`, `materialized_view_changes`)
    /// that cannot be read.
    #[error(
        "cannot read materialized view \"{name}\" at version {version}: {reason}\nHINT: {}",
        match oldest {
            Some(oldest) => format!("The oldest version it retains is {oldest}; versions are kept for the retention window after a refresh replaces them."),
            None => "It retains no populated version; use the REFRESH MATERIALIZED VIEW command.".to_owned(),
        }
    )]
    VersionNotRetained {
        /// The view, as the query named it.
        name: String,
        /// The version asked for.
        version: u64,
        /// Why it cannot be read.
        reason: String,
        /// The oldest version that can be read, if any.
        oldest: Option<u64>,
    },

    /// Another writer committed a change that collides with this one.
    /// Retrying the statement is safe.
    #[error(
        "could not commit to materialized view \"{name}\": {reason}\nHINT: Another session changed it concurrently; retry the statement."
    )]
    CommitConflict {
        /// View name.
        name: String,
        /// What the other writer did.
        reason: String,
    },

    /// Commits kept losing races with other writers.
    #[error(
        "gave up committing to catalog {catalog} after {attempts} attempts: other writers kept committing first; retry the statement"
    )]
    TooManyRetries {
        /// Catalog URL.
        catalog: String,
        /// How often it was tried.
        attempts: usize,
    },

    /// The conditional put of a manifest version failed, and reading the
    /// version back could not tell whether it landed. The new data files
    /// are kept (a later VACUUM removes them if the commit did not land).
    #[error(
        "the commit of version {version} to catalog {catalog} may have landed: {source}\nHINT: Check with SHOW MATERIALIZED VIEWS before retrying the statement."
    )]
    CommitOutcomeUnknown {
        /// Catalog URL.
        catalog: String,
        /// The version it tried to write.
        version: u64,
        /// What failed.
        source: Box<Error>,
    },

    /// A manifest file could not be read.
    #[error(
        "manifest {path} is unreadable: {reason}\nHINT: Restore the file from a backup, or rebuild the catalog from its data with `dfmv recover` (MatviewSession::recover)."
    )]
    CorruptManifest {
        /// Object-store path of the file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A manifest version is missing between two that exist: committing
    /// on the one before it would be hidden by the one after.
    #[error(
        "manifest {missing} is missing: the log goes from version {before} to version {after}\nHINT: Restore the file from a backup, or rebuild the catalog from its data with `dfmv recover` (MatviewSession::recover)."
    )]
    LogGap {
        /// Where the missing version belongs.
        missing: String,
        /// The version before it.
        before: u64,
        /// The next version that exists.
        after: u64,
    },

    /// `recover` found the catalog's log readable and every view's data
    /// present: there is nothing to rebuild.
    #[error("catalog {catalog} is readable at version {version}: nothing to recover")]
    NothingToRecover {
        /// Catalog location.
        catalog: String,
        /// Its latest version.
        version: u64,
    },

    /// `recover` found neither a manifest log nor snapshot markers.
    #[error(
        "{location} holds no catalog: no manifest log and no snapshot markers\nHINT: Check the catalog location."
    )]
    NoCatalogData {
        /// The location given.
        location: String,
    },

    /// A manifest was written by a newer version of this crate.
    #[error(
        "manifest {path} has format version {found}, but this build reads up to {supported}\nHINT: Upgrade datafusion-matview to use this catalog."
    )]
    UnsupportedFormat {
        /// Object-store path of the file.
        path: String,
        /// Format found.
        found: u32,
        /// Newest format this build understands.
        supported: u32,
    },

    /// The catalog URL cannot be used.
    #[error("invalid catalog location \"{location}\": {reason}")]
    InvalidLocation {
        /// What the user passed.
        location: String,
        /// Why it is refused.
        reason: String,
    },

    /// A refresh's written files do not hold every row it wrote (nothing
    /// was committed).
    #[error(
        "refresh wrote {expected} rows but {found} are readable under {dir}; nothing was committed\nHINT: A write task was lost or ran twice (an executor failed, or the store lost a file); retry the statement."
    )]
    IncompleteWrite {
        /// Snapshot directory, relative to the catalog root.
        dir: String,
        /// Rows the writer reported.
        expected: u64,
        /// Rows the files hold.
        found: u64,
    },

    /// A file a refresh or CREATE wrote was removed or changed before the
    /// commit (a cleanup ran while its lease had lapsed, or another
    /// program touched the catalog's folder). Nothing was committed.
    #[error(
        "a file written for the new snapshot changed before the commit: {file}: {problem}; nothing was committed\nHINT: A VACUUM or another program removed it while the write was stalled; retry the statement."
    )]
    WriteLost {
        /// The file, as people know it.
        file: String,
        /// What is wrong with it.
        problem: String,
    },

    /// Existing data offered to `adopt` does not have the view's columns.
    #[error("the columns of {file} ({found}) are not those of the view's query ({wanted})")]
    ColumnsMismatch {
        /// The file.
        file: String,
        /// Its columns and types.
        found: String,
        /// The query's.
        wanted: String,
    },

    /// Encoding a manifest, marker or definition as JSON failed.
    #[error("could not encode {what} as JSON: {reason}")]
    Encoding {
        /// What was being encoded.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },

    /// A statement that writes to the catalog was refused by its store for
    /// lack of rights (a read-only folder, a bucket the credentials may
    /// only read). Queries of the catalog keep working.
    #[error(
        "cannot execute {command}: catalog \"{location}\" is read-only\nDETAIL: {detail}\nHINT: Open a catalog you may write to; queries of this one still work."
    )]
    ReadOnlyCatalog {
        /// The statement, as PostgreSQL names it: `REFRESH MATERIALIZED VIEW`.
        command: &'static str,
        /// The catalog's location.
        location: String,
        /// The store's refusal.
        detail: String,
    },

    /// A server's client asked for something the server does not let its
    /// clients do (PostgreSQL's `insufficient_privilege`).
    #[error("permission denied {what}\nHINT: {hint}")]
    PermissionDenied {
        /// What was refused: `to use "/etc/passwd"`, `to set ...`.
        what: String,
        /// What would allow it.
        hint: String,
    },

    /// A server's client ran a statement longer than the server allows
    /// (PostgreSQL's words for `statement_timeout`).
    #[error("canceling statement due to statement timeout\nDETAIL: The server stops a statement after {} s.\nHINT: Make the statement cheaper, or start the server with a longer --statement-timeout.", .limit.as_secs_f64())]
    StatementTimeout {
        /// The server's limit.
        limit: std::time::Duration,
    },

    /// A result larger than a server answers in one response.
    #[error(
        "the result is larger than the server's limit of {limit} bytes\nHINT: Fetch it through Flight SQL, which streams results, or add a LIMIT; dfmv serve --max-result-bytes raises the limit."
    )]
    ResultTooLarge {
        /// The server's limit, in bytes of Arrow data.
        limit: usize,
    },

    /// A statement this crate parses but does not support.
    #[error("{0}")]
    NotSupported(String),

    /// The server could not listen or serve (`dfmv serve`).
    #[error("could not {what}: {reason}")]
    Serve {
        /// What it was doing: `listen on 127.0.0.1:2333`.
        what: String,
        /// Why it failed.
        reason: String,
    },

    /// An error from DataFusion: planning, execution, parsing.
    #[error(transparent)]
    DataFusion(DataFusionError),

    /// An error from the object store.
    #[error(transparent)]
    ObjectStore(#[from] object_store::Error),
}

/// What kind of error an [`Error`] is, as PostgreSQL names its conditions
/// (SQLSTATE classes and condition names, Appendix A of its manual). Every
/// front door (the server's REST answers and Flight SQL statuses, `dfmv`,
/// the clients) reads the kind from here, never from a message's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `42P01`: no relation (materialized view, table, view) of that name.
    UndefinedTable,
    /// `3F000`: no schema of that name.
    InvalidSchemaName,
    /// `42P07`: a relation of that name exists.
    DuplicateTable,
    /// `40001`: another writer committed first; running again may succeed.
    SerializationFailure,
    /// `08007`: a commit's outcome is unknown (its conditional put failed
    /// and reading back could not tell whether it landed).
    TransactionResolutionUnknown,
    /// `55000`: the object is not in the state the statement needs (not
    /// populated, redefined meanwhile).
    ObjectNotInPrerequisiteState,
    /// `2BP01`: other objects depend on the one to drop.
    DependentObjectsStillExist,
    /// `42809`: the statement names an object of another kind.
    WrongObjectType,
    /// `42000`: the definition breaks a naming or column rule.
    SyntaxErrorOrAccessRuleViolation,
    /// `42601`: the statement does not parse.
    SyntaxError,
    /// `42704`: the query names something that does not exist.
    UndefinedObject,
    /// `0A000`: parsed, but not supported.
    FeatureNotSupported,
    /// `22023`: a parameter or setting has a value that cannot be used.
    InvalidParameterValue,
    /// `22000`: data read does not fit what the table says it is.
    DataException,
    /// `57014`: the statement ran past its time limit.
    QueryCanceled,
    /// `54000`: the result is larger than a limit.
    ProgramLimitExceeded,
    /// `42501`: the statement needs a right it does not have.
    InsufficientPrivilege,
    /// `25006`: a write into something read-only.
    ReadOnlySqlTransaction,
    /// `53200`: memory ran out.
    OutOfMemory,
    /// `58030`: reading or writing storage failed.
    IoError,
    /// `XX000`: anything else.
    InternalError,
}

impl ErrorCode {
    /// Every code, in declaration order (the server's OpenAPI document
    /// lists them).
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::UndefinedTable,
        ErrorCode::InvalidSchemaName,
        ErrorCode::DuplicateTable,
        ErrorCode::SerializationFailure,
        ErrorCode::TransactionResolutionUnknown,
        ErrorCode::ObjectNotInPrerequisiteState,
        ErrorCode::DependentObjectsStillExist,
        ErrorCode::WrongObjectType,
        ErrorCode::SyntaxErrorOrAccessRuleViolation,
        ErrorCode::SyntaxError,
        ErrorCode::UndefinedObject,
        ErrorCode::FeatureNotSupported,
        ErrorCode::InvalidParameterValue,
        ErrorCode::DataException,
        ErrorCode::QueryCanceled,
        ErrorCode::ProgramLimitExceeded,
        ErrorCode::InsufficientPrivilege,
        ErrorCode::ReadOnlySqlTransaction,
        ErrorCode::OutOfMemory,
        ErrorCode::IoError,
        ErrorCode::InternalError,
    ];

    /// PostgreSQL's condition name: `undefined_table`.
    pub fn name(self) -> &'static str {
        self.parts().0
    }

    /// PostgreSQL's five-character SQLSTATE: `42P01`.
    pub fn sqlstate(self) -> &'static str {
        self.parts().1
    }

    fn parts(self) -> (&'static str, &'static str) {
        use ErrorCode as C;
        match self {
            C::UndefinedTable => ("undefined_table", "42P01"),
            C::InvalidSchemaName => ("invalid_schema_name", "3F000"),
            C::DuplicateTable => ("duplicate_table", "42P07"),
            C::SerializationFailure => ("serialization_failure", "40001"),
            C::TransactionResolutionUnknown => ("transaction_resolution_unknown", "08007"),
            C::ObjectNotInPrerequisiteState => ("object_not_in_prerequisite_state", "55000"),
            C::DependentObjectsStillExist => ("dependent_objects_still_exist", "2BP01"),
            C::WrongObjectType => ("wrong_object_type", "42809"),
            C::SyntaxErrorOrAccessRuleViolation => {
                ("syntax_error_or_access_rule_violation", "42000")
            }
            C::SyntaxError => ("syntax_error", "42601"),
            C::UndefinedObject => ("undefined_object", "42704"),
            C::FeatureNotSupported => ("feature_not_supported", "0A000"),
            C::InvalidParameterValue => ("invalid_parameter_value", "22023"),
            C::DataException => ("data_exception", "22000"),
            C::QueryCanceled => ("query_canceled", "57014"),
            C::ProgramLimitExceeded => ("program_limit_exceeded", "54000"),
            C::InsufficientPrivilege => ("insufficient_privilege", "42501"),
            C::ReadOnlySqlTransaction => ("read_only_sql_transaction", "25006"),
            C::OutOfMemory => ("out_of_memory", "53200"),
            C::IoError => ("io_error", "58030"),
            C::InternalError => ("internal_error", "XX000"),
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// What kind of error this is. Every variant is listed here, so a new
    /// one must choose its code.
    pub fn code(&self) -> ErrorCode {
        use ErrorCode as C;
        match self {
            Error::NotFound { .. } | Error::RelationNotFound { .. } => C::UndefinedTable,
            Error::SchemaNotFound { .. } => C::InvalidSchemaName,
            Error::AlreadyExists { .. } => C::DuplicateTable,
            Error::CommitConflict { .. }
            | Error::TooManyRetries { .. }
            | Error::WriteLost { .. } => C::SerializationFailure,
            Error::CommitOutcomeUnknown { .. } => C::TransactionResolutionUnknown,
            Error::DefinitionChanged { .. }
            | Error::NotPopulated { .. }
            | Error::NotIncremental { .. } => C::ObjectNotInPrerequisiteState,
            Error::DependentObjects { .. } => C::DependentObjectsStillExist,
            Error::WrongObjectType { .. } => C::WrongObjectType,
            Error::TooManyColumnNames
            | Error::DuplicateColumn { .. }
            | Error::ColumnsInUse { .. }
            | Error::ZeroLengthIdentifier
            | Error::InvalidCharacter { .. }
            | Error::UnsupportedDefinition { .. }
            | Error::ColumnsMismatch { .. } => C::SyntaxErrorOrAccessRuleViolation,
            Error::NotSupported(_) => C::FeatureNotSupported,
            Error::SourceVersionUnavailable { .. }
            | Error::VersionNotRetained { .. }
            | Error::InvalidOption(_) => C::InvalidParameterValue,
            Error::StatementTimeout { .. } => C::QueryCanceled,
            Error::ResultTooLarge { .. } => C::ProgramLimitExceeded,
            Error::PermissionDenied { .. } => C::InsufficientPrivilege,
            Error::ReadOnly { .. } | Error::ReadOnlyCatalog { .. } => C::ReadOnlySqlTransaction,
            Error::RefreshFailed { source, .. } => source.code(),
            Error::MismatchedSourceFile { .. } => C::DataException,
            Error::ObjectStore(_) => C::IoError,
            Error::DataFusion(e) => datafusion_code(e),
            Error::CorruptManifest { .. }
            | Error::LogGap { .. }
            | Error::NothingToRecover { .. }
            | Error::NoCatalogData { .. }
            | Error::UnsupportedFormat { .. }
            | Error::InvalidLocation { .. }
            | Error::IncompleteWrite { .. }
            | Error::Encoding { .. }
            | Error::Serve { .. } => C::InternalError,
        }
    }

    /// Whether running the same statement again may succeed: another
    /// writer won a race, the store failed, time or memory ran out, or a
    /// commit's outcome is unknown (a refresh run again is then a `no_op`
    /// if it landed).
    pub fn is_retryable(&self) -> bool {
        // A failed refresh has the code of what failed.
        matches!(
            self.code(),
            ErrorCode::SerializationFailure
                | ErrorCode::TransactionResolutionUnknown
                | ErrorCode::QueryCanceled
                | ErrorCode::OutOfMemory
                | ErrorCode::IoError
        )
    }

    /// The refusals for lack of rights in this error's chain of causes:
    /// for each, the object path when the store names it (`None` for a
    /// local file system's I/O error, whose path is only in the text).
    pub(crate) fn refusals(&self) -> Vec<Option<String>> {
        let mut found = vec![];
        for error in self.causes() {
            if let Some(store) = error.downcast_ref::<object_store::Error>() {
                if let object_store::Error::PermissionDenied { path, .. }
                | object_store::Error::Unauthenticated { path, .. } = store
                {
                    found.push(Some(path.clone()));
                }
            } else if let Some(io) = error.downcast_ref::<std::io::Error>()
                && matches!(
                    io.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                )
                && io.get_ref().is_none()
            {
                found.push(None);
            }
        }
        found
    }

    /// This error and its causes, outermost first (see [`causes_of`]).
    pub fn causes(&self) -> Vec<&(dyn std::error::Error + 'static)> {
        causes_of(self)
    }

    /// Wraps this error for returning from a DataFusion trait method.
    pub fn into_datafusion(self) -> DataFusionError {
        match self {
            Error::DataFusion(e) => e,
            other => DataFusionError::External(Box::new(other)),
        }
    }
}

/// `error` and its causes, outermost first: through the error a
/// transparent variant of [`Error`] wraps (whose `source()` skips it) and
/// into an I/O error made from another error (which `source()` hides).
pub fn causes_of<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut chain = vec![];
    let mut next = Some(error);
    while let Some(error) = next {
        let error: &(dyn std::error::Error + 'static) = match error.downcast_ref::<Error>() {
            Some(Error::ObjectStore(e)) => e,
            Some(Error::DataFusion(e)) => e,
            _ => error,
        };
        chain.push(error);
        next = error.source().or_else(|| {
            error
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static))
        });
    }
    chain
}

/// The code of an error DataFusion returned, by the kind of its root cause.
fn datafusion_code(e: &DataFusionError) -> ErrorCode {
    use ErrorCode as C;
    match e.find_root() {
        DataFusionError::SQL(..) => C::SyntaxError,
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => C::UndefinedObject,
        DataFusionError::NotImplemented(_) => C::FeatureNotSupported,
        DataFusionError::Configuration(_) => C::InvalidParameterValue,
        DataFusionError::ResourcesExhausted(_) => C::OutOfMemory,
        DataFusionError::ObjectStore(_) => C::IoError,
        _ => C::InternalError,
    }
}

impl From<DataFusionError> for Error {
    /// Unwraps errors of this crate that travelled through DataFusion (for
    /// example a scan of an unpopulated view), so the user sees our message
    /// rather than `External error: ...`.
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(inner) => match inner.downcast::<Error>() {
                Ok(mine) => *mine,
                Err(other) => Error::DataFusion(DataFusionError::External(other)),
            },
            DataFusionError::Context(ctx, inner) => match Error::from(*inner) {
                Error::DataFusion(e) => {
                    Error::DataFusion(DataFusionError::Context(ctx, Box::new(e)))
                }
                mine => mine,
            },
            DataFusionError::ObjectStore(e) => Error::ObjectStore(*e),
            other => Error::DataFusion(other),
        }
    }
}

impl From<datafusion::sql::sqlparser::parser::ParserError> for Error {
    fn from(e: datafusion::sql::sqlparser::parser::ParserError) -> Self {
        Error::DataFusion(DataFusionError::SQL(Box::new(e), None))
    }
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Error::DataFusion(e.into())
    }
}

impl From<Error> for DataFusionError {
    fn from(e: Error) -> Self {
        e.into_datafusion()
    }
}

/// `name type, ...` of `schema`'s columns, for messages.
pub fn describe_columns(schema: &datafusion::arrow::datatypes::Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_populated_has_postgres_text_and_hint() {
        let e = Error::NotPopulated { name: "v".into() };
        assert_eq!(
            e.to_string(),
            "materialized view \"v\" has not been populated\nHINT: Use the REFRESH MATERIALIZED VIEW command."
        );
    }

    #[test]
    fn errors_survive_a_trip_through_datafusion() {
        let df: DataFusionError = Error::ReadOnly { name: "v".into() }.into();
        let df = DataFusionError::Context("while planning".into(), Box::new(df));
        match Error::from(df) {
            Error::ReadOnly { name } => assert_eq!(name, "v"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn dependents_are_listed_one_per_line() {
        let e = Error::DependentObjects {
            object: Some("table t".into()),
            details: vec![
                "materialized view m depends on table t".into(),
                "view v depends on materialized view m".into(),
            ],
        };
        assert_eq!(
            e.to_string(),
            "cannot drop table t because other objects depend on it\n\
             DETAIL: materialized view m depends on table t\n\
             view v depends on materialized view m\n\
             HINT: Use DROP ... CASCADE to drop the dependent objects too."
        );
    }

    #[test]
    fn wrong_type_hint_is_optional() {
        let e = Error::WrongObjectType {
            name: "t".into(),
            expected: "materialized view",
            hint: None,
        };
        assert_eq!(e.to_string(), "\"t\" is not a materialized view");
        let e = Error::WrongObjectType {
            name: "m".into(),
            expected: "table",
            hint: Some("Use DROP MATERIALIZED VIEW to remove a materialized view."),
        };
        assert_eq!(
            e.to_string(),
            "\"m\" is not a table\nHINT: Use DROP MATERIALIZED VIEW to remove a materialized view."
        );
    }

    #[test]
    fn codes_have_distinct_postgres_names_and_sqlstates() {
        let names: std::collections::BTreeSet<_> =
            ErrorCode::ALL.iter().map(|c| c.name()).collect();
        let states: std::collections::BTreeSet<_> =
            ErrorCode::ALL.iter().map(|c| c.sqlstate()).collect();
        assert_eq!(names.len(), ErrorCode::ALL.len());
        assert_eq!(states.len(), ErrorCode::ALL.len());
        for code in ErrorCode::ALL {
            let state = code.sqlstate();
            assert_eq!(state.len(), 5, "{code}");
            assert!(
                state
                    .chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
            );
            assert_eq!(code.to_string(), code.name());
        }
    }

    #[test]
    fn a_code_and_retryability_come_from_the_error_not_its_text() {
        let not_found = Error::NotFound { name: "v".into() };
        assert_eq!(not_found.code(), ErrorCode::UndefinedTable);
        assert!(!not_found.is_retryable());
        let conflict = Error::CommitConflict {
            name: "v".into(),
            reason: "refreshed".into(),
        };
        assert_eq!(conflict.code(), ErrorCode::SerializationFailure);
        assert!(conflict.is_retryable());
        // A refresh that failed has the code of what failed.
        let failed = Error::RefreshFailed {
            name: "v".into(),
            source: Box::new(conflict),
        };
        assert_eq!(failed.code(), ErrorCode::SerializationFailure);
        assert!(failed.is_retryable());
        // DataFusion's errors by the kind of their root cause, through
        // context, whatever the message says.
        let plan = Error::DataFusion(DataFusionError::Context(
            "serialization failure while planning".into(),
            Box::new(DataFusionError::Plan("table 'x' not found".into())),
        ));
        assert_eq!(plan.code(), ErrorCode::UndefinedObject);
        assert!(!plan.is_retryable());
        let memory = Error::DataFusion(DataFusionError::ResourcesExhausted("pool".into()));
        assert_eq!(memory.code(), ErrorCode::OutOfMemory);
        assert!(memory.is_retryable());
        let unknown = Error::CommitOutcomeUnknown {
            catalog: "memory:///".into(),
            version: 3,
            source: Box::new(Error::NotSupported("timeout".into())),
        };
        assert_eq!(unknown.code(), ErrorCode::TransactionResolutionUnknown);
        assert!(unknown.is_retryable());
    }

    #[test]
    fn causes_go_through_transparent_variants_and_datafusion() {
        use datafusion::arrow::error::ArrowError;
        let cast = Error::from(DataFusionError::Context(
            "reading".into(),
            Box::new(DataFusionError::Shared(std::sync::Arc::new(
                DataFusionError::ArrowError(Box::new(ArrowError::CastError("x".into())), None),
            ))),
        ));
        let found = causes_of(&cast).into_iter().any(|e| {
            matches!(
                e.downcast_ref::<ArrowError>(),
                Some(ArrowError::CastError(_))
            )
        });
        assert!(found);
        let store = Error::ObjectStore(object_store::Error::NotFound {
            path: "a".into(),
            source: "gone".into(),
        });
        assert!(causes_of(&store)[0].is::<object_store::Error>());
    }
}
