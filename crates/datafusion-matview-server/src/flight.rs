//! Arrow Flight SQL over the same session: `CommandStatementQuery` runs
//! any statement (the view statements included: CREATE and REFRESH answer
//! their result rows), `CommandStatementUpdate` too (answering a count),
//! prepared statements for queries (with `$1` parameters), and the
//! metadata calls a JDBC or ADBC driver makes: `GetCatalogs`,
//! `GetDbSchemas`, `GetTables` (materialized views with table type
//! `MATERIALIZED VIEW`), `GetTableTypes`, `GetSqlInfo`.
//!
//! Statements run when the client asks for their `FlightInfo` (as most
//! DataFusion-based Flight SQL servers do): a query is planned then and
//! executed, streaming, when the client fetches its ticket; a statement
//! that changes something runs then, once. A ticket is good for one fetch
//! within [`TICKET_LIFETIME`].
//!
//! Each client connection has its own session over the server's catalog
//! ([`MatviewSession::fork`]): a `SET` changes only that connection's
//! settings. A prepared statement keeps its SQL, not its plan: every
//! execution plans it again against the definitions current in the catalog,
//! and answers `FAILED_PRECONDITION` ("prepare it again") when the columns
//! it announced have changed. Open tickets and prepared statements are
//! capped per connection and in total
//! ([`ServerOptions::max_handles_per_client`](super::ServerOptions)).
//!
//! The bearer token applies to every call: `Authorization: Bearer <token>`,
//! or a handshake with HTTP Basic whose password is the token (answered
//! with the bearer header, as Flight SQL clients expect).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage,
    SchemaAsIpc, Ticket,
};
use axum::http::StatusCode;
use base64::Engine;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::dataframe::DataFrame;
use datafusion::datasource::TableType;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::{ApiError, Condition, Shared};
use datafusion_matview::error::{Error, ErrorCode, Result};
use datafusion_matview::session::MatviewSession;
use datafusion_matview::sql::Statement;

/// One log line per gRPC call (as the REST API logs its requests): the
/// method, its gRPC status when the answer carries it in the headers (a
/// failure before any data; `0` otherwise), and the time to the headers.
#[derive(Clone)]
struct Logged<S> {
    inner: S,
    log: bool,
}

impl<S, B, R> tower::Service<axum::http::Request<B>> for Logged<S>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::result::Result<S::Response, S::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let future = self.inner.call(request);
        if !self.log {
            return Box::pin(future);
        }
        let started = std::time::Instant::now();
        Box::pin(async move {
            let response = future.await;
            let status = match &response {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("0")
                    .to_owned(),
                Err(_) => "transport error".to_owned(),
            };
            eprintln!(
                "{} GRPC {path} {status} {:.1}ms",
                chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                started.elapsed().as_secs_f64() * 1000.0
            );
            response
        })
    }
}

/// How long a ticket (a statement planned by `GetFlightInfo`) waits for
/// its fetch.
pub const TICKET_LIFETIME: Duration = Duration::from_secs(600);

/// Serves Flight SQL on `listener` until `stop`.
pub(crate) async fn serve(
    shared: Shared,
    listener: TcpListener,
    stop: CancellationToken,
) -> Result<()> {
    let log = shared.options.log_requests;
    let service =
        FlightServiceServer::new(FlightSql::new(shared)).max_decoding_message_size(64 << 20);
    tonic::transport::Server::builder()
        .layer(tower::layer::layer_fn(move |inner| Logged { inner, log }))
        .add_service(service)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            stop.cancelled_owned(),
        )
        .await
        .map_err(|e| Error::Serve {
            what: "serve Flight SQL".into(),
            reason: e.to_string(),
        })
}

/// A prepared statement: its SQL, planned again at every execution, the
/// columns it announced (for a query) and its parameters.
struct Prepared {
    owner: String,
    sql: String,
    /// For a query: the columns its first planning answered.
    dataset: Option<SchemaRef>,
    params: Option<ParamValues>,
    created: Instant,
}

/// A planned statement waiting for its fetch.
struct Planned {
    owner: String,
    df: DataFrame,
    created: Instant,
}

/// One client connection's session.
struct Client {
    session: MatviewSession,
    last_used: Instant,
}

/// How long a connection's session outlives its last call.
const CLIENT_IDLE: Duration = Duration::from_secs(3600);

/// How long a prepared statement a client did not close is kept.
const PREPARED_LIFETIME: Duration = Duration::from_secs(86_400);

/// The Flight SQL service.
pub struct FlightSql {
    shared: Shared,
    /// Sessions by client connection (its peer address).
    clients: Mutex<HashMap<String, Client>>,
    tickets: Mutex<HashMap<String, Planned>>,
    prepared: Mutex<HashMap<String, Prepared>>,
}

type DoGetStream =
    Pin<Box<dyn Stream<Item = std::result::Result<arrow_flight::FlightData, Status>> + Send>>;

static SQL_INFO: LazyLock<SqlInfoData> = LazyLock::new(|| {
    let mut builder = SqlInfoDataBuilder::new();
    builder.append(SqlInfo::FlightSqlServerName, "dfmv");
    builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    builder.append(SqlInfo::FlightSqlServerArrowVersion, "59.3.2");
    builder.append(SqlInfo::FlightSqlServerReadOnly, false);
    builder.append(SqlInfo::FlightSqlServerSql, true);
    builder.append(SqlInfo::FlightSqlServerSubstrait, false);
    builder.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    builder.append(SqlInfo::FlightSqlServerCancel, false);
    builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    builder
        .build()
        .expect("the server's SQL info is well formed")
});

/// The table types `GetTables` reports.
const TABLE_TYPES: [&str; 4] = ["TABLE", "VIEW", "MATERIALIZED VIEW", "LOCAL TEMPORARY"];

fn status(e: impl Into<ApiError>) -> Status {
    let e: ApiError = e.into();
    let message = e.to_string();
    match (e.status, e.condition) {
        (StatusCode::BAD_REQUEST, _) => Status::invalid_argument(message),
        (StatusCode::NOT_FOUND, _) => Status::not_found(message),
        (StatusCode::CONFLICT, Condition::Sql(ErrorCode::DuplicateTable)) => {
            Status::already_exists(message)
        }
        (StatusCode::CONFLICT, Condition::Sql(ErrorCode::SerializationFailure)) => {
            Status::aborted(message)
        }
        (StatusCode::CONFLICT, _) => Status::failed_precondition(message),
        (StatusCode::UNAUTHORIZED, _) => Status::unauthenticated(message),
        (StatusCode::FORBIDDEN, _) => Status::permission_denied(message),
        (StatusCode::SERVICE_UNAVAILABLE, _) => Status::unavailable(message),
        (StatusCode::PAYLOAD_TOO_LARGE, _) => Status::resource_exhausted(message),
        (StatusCode::REQUEST_TIMEOUT, _) => Status::deadline_exceeded(message),
        // Data the statement read is not what the table says it is.
        (StatusCode::UNPROCESSABLE_ENTITY, _) => Status::failed_precondition(message),
        _ => Status::internal(message),
    }
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

fn ticket_for(handle: String) -> Ticket {
    let ticket = TicketStatementQuery {
        statement_handle: handle.into_bytes().into(),
    };
    Ticket::new(ticket.as_any().encode_to_vec())
}

fn info(
    schema: &Schema,
    ticket: Ticket,
    descriptor: FlightDescriptor,
) -> std::result::Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(schema)
        .map_err(internal)?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(descriptor))
}

fn stream_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> Response<DoGetStream> {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .map_err(Status::from);
    Response::new(Box::pin(stream))
}

fn one_batch(
    batch: std::result::Result<RecordBatch, impl std::fmt::Display>,
) -> std::result::Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(internal)?;
    Ok(stream_batches(batch.schema(), vec![batch]))
}

impl FlightSql {
    fn new(shared: Shared) -> Self {
        Self {
            shared,
            clients: Mutex::default(),
            tickets: Mutex::default(),
            prepared: Mutex::default(),
        }
    }

    /// The connection a request came on: its peer address.
    fn client_of<T>(request: &Request<T>) -> String {
        request
            .remote_addr()
            .map_or_else(|| "unknown".to_owned(), |a| a.to_string())
    }

    /// The session of the connection `client`, made on its first call.
    fn session(&self, client: &str) -> MatviewSession {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = clients.get_mut(client) {
            known.last_used = Instant::now();
            return known.session.clone();
        }
        clients.retain(|_, c| c.last_used.elapsed() < CLIENT_IDLE);
        // Past the cap, the connection idle the longest loses its session
        // (its settings; its handles stay until they expire).
        if clients.len() >= self.shared.options.max_handles
            && let Some(oldest) = clients
                .iter()
                .min_by_key(|(_, c)| c.last_used)
                .map(|(k, _)| k.clone())
        {
            clients.remove(&oldest);
        }
        let session = self.shared.client();
        clients.insert(
            client.to_owned(),
            Client {
                session: session.clone(),
                last_used: Instant::now(),
            },
        );
        session
    }

    /// Refuses one more handle (`kind`: "tickets", "prepared statements")
    /// for `owner` when it, or everyone, holds the most allowed.
    fn check_cap<'a>(
        &self,
        kind: &str,
        owners: impl Iterator<Item = &'a String>,
        owner: &str,
    ) -> std::result::Result<(), Status> {
        let (mut mine, mut all) = (0usize, 0usize);
        for o in owners {
            all += 1;
            mine += usize::from(o == owner);
        }
        let options = &self.shared.options;
        if mine >= options.max_handles_per_client {
            return Err(Status::resource_exhausted(format!(
                "this connection holds {mine} open {kind}, the most the server allows; \
                 fetch or close some first"
            )));
        }
        if all >= options.max_handles {
            return Err(Status::resource_exhausted(format!(
                "the server holds {all} open {kind}, the most it allows; try again later"
            )));
        }
        Ok(())
    }

    fn check(&self, metadata: &MetadataMap) -> std::result::Result<(), Status> {
        let header = metadata.get("authorization").and_then(|v| v.to_str().ok());
        if self.shared.authorized(header) {
            Ok(())
        } else {
            Err(Status::unauthenticated(
                "missing or wrong bearer token: send the header \"authorization: Bearer <token>\"",
            ))
        }
    }

    /// The answer to a metadata listing's `GetFlightInfo`: its schema, and
    /// a ticket that is the command itself (the listing runs on fetch).
    fn metadata_info(
        &self,
        request: Request<FlightDescriptor>,
        ticket: Ticket,
        schema: &Schema,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        Ok(Response::new(info(schema, ticket, request.into_inner())?))
    }

    /// Keeps `df` for one fetch by `owner`'s connection; answers its ticket.
    fn keep(&self, owner: &str, df: DataFrame) -> std::result::Result<Ticket, Status> {
        let handle = uuid::Uuid::new_v4().to_string();
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        tickets.retain(|_, t| t.created.elapsed() < TICKET_LIFETIME);
        self.check_cap("tickets", tickets.values().map(|t| &t.owner), owner)?;
        tickets.insert(
            handle.clone(),
            Planned {
                owner: owner.to_owned(),
                df,
                created: Instant::now(),
            },
        );
        Ok(ticket_for(handle))
    }

    /// Plans `sql` in `client`'s session, within the statement time limit.
    async fn plan(&self, client: &str, sql: &str) -> std::result::Result<DataFrame, Status> {
        let session = self.session(client);
        let (shared, sql) = (self.shared.clone(), sql.to_owned());
        let planning = async move { shared.statement(&session, &sql).await };
        self.shared
            .within_time_limit(self.shared.work.run(planning))
            .await
            .map_err(status)
    }

    /// Whether `sql` is one plain query (SELECT, VALUES, WITH ...), which
    /// a prepared statement plans rather than runs.
    fn is_query(&self, sql: &str) -> bool {
        let (dialect, limit) =
            datafusion_matview::sql::parser_settings(self.shared.session.context());
        match datafusion_matview::sql::parse_sql(sql, &dialect, limit) {
            Ok(statements) => matches!(
                statements.as_slice(),
                [Statement::DataFusion(s)] if matches!(
                    s.as_ref(),
                    datafusion::sql::parser::Statement::Statement(inner)
                        if matches!(inner.as_ref(), datafusion::sql::sqlparser::ast::Statement::Query(_))
                )
            ),
            Err(_) => false,
        }
    }
}

/// The number of rows a statement changed, from its result: DataFusion's
/// `count` column, or the `rows_written` of CREATE / REFRESH.
fn affected_rows(batches: &[RecordBatch]) -> i64 {
    let mut total = 0i64;
    for batch in batches {
        for name in ["count", "rows_written"] {
            if let Some(column) = batch.column_by_name(name) {
                if let Some(a) = column.as_any().downcast_ref::<UInt64Array>() {
                    total += a.iter().flatten().sum::<u64>() as i64;
                } else if let Some(a) = column.as_any().downcast_ref::<Int64Array>() {
                    total += a.iter().flatten().sum::<i64>();
                }
                break;
            }
        }
    }
    total
}

/// Stops a statement's producer when its answer is dropped.
struct Producer(tokio::task::AbortHandle);

impl Drop for Producer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Parameter values from the first row of `batch`, `$1` the first column.
fn param_values(batch: &RecordBatch) -> std::result::Result<ParamValues, Status> {
    if batch.num_rows() != 1 {
        return Err(Status::invalid_argument(format!(
            "expected one row of parameters, got {}",
            batch.num_rows()
        )));
    }
    let values = batch
        .columns()
        .iter()
        .map(|c| ScalarValue::try_from_array(c, 0))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(internal)?;
    Ok(ParamValues::from(values))
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<
        Response<
            Pin<Box<dyn Stream<Item = std::result::Result<HandshakeResponse, Status>> + Send>>,
        >,
        Status,
    > {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bearer = match &self.shared.options.token {
            None => None,
            Some(token) => {
                let basic_password = header
                    .strip_prefix("Basic ")
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                    .and_then(|b| String::from_utf8(b).ok())
                    .and_then(|s| s.split_once(':').map(|(_, p)| p.to_owned()));
                let presented = match basic_password {
                    Some(password) => format!("Bearer {password}"),
                    None => header.clone(),
                };
                if !self.shared.authorized(Some(&presented)) {
                    return Err(Status::unauthenticated("wrong token"));
                }
                Some(format!("Bearer {token}"))
            }
        };
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        let stream: Pin<Box<dyn Stream<Item = _> + Send>> =
            Box::pin(futures::stream::iter(vec![Ok(answer)]));
        let mut response = Response::new(stream);
        if let Some(bearer) = bearer {
            response
                .metadata_mut()
                .insert("authorization", bearer.parse().map_err(internal)?);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let client = Self::client_of(&request);
        let df = self.plan(&client, &query.query).await?;
        let schema = df.schema().as_arrow().clone();
        let ticket = self.keep(&client, df)?;
        Ok(Response::new(info(&schema, ticket, request.into_inner())?))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        self.check(request.metadata())?;
        let handle = String::from_utf8_lossy(&ticket.statement_handle).into_owned();
        let df = self
            .tickets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&handle)
            .ok_or_else(|| {
                Status::not_found("unknown or already fetched ticket: run the statement again")
            })?;
        let (df, session) = (df.df, self.session(&df.owner));
        let schema = Arc::new(df.schema().as_arrow().clone());
        let plan = df.logical_plan().clone();
        let limit = self.shared.options.statement_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        // The statement runs on the work runtime, handing its batches over
        // one at a time; it stops when this answer is dropped.
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
        let producer = self.shared.work.handle().spawn(async move {
            let mut stream = match df.execute_stream().await {
                Ok(stream) => stream,
                Err(e) => {
                    let _ = sender.send(Err(e.into())).await;
                    return;
                }
            };
            while let Some(batch) = stream.next().await {
                let failed = batch.is_err();
                let batch = match batch {
                    Ok(batch) => Ok(batch),
                    // With the source file and column named, if a file
                    // explains it.
                    Err(e) => Err(session.explain_cast_error(&plan, e.into()).await),
                };
                if sender.send(batch).await.is_err() || failed {
                    return;
                }
            }
        });
        let producer = Producer(producer.abort_handle());
        // The rows, until the statement's time is up: then an error, not a
        // silently short answer.
        let stream = futures::stream::unfold(Some((receiver, producer)), move |state| async move {
            let (mut receiver, producer) = state?;
            match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(Ok(batch))) => Some((Ok(batch), Some((receiver, producer)))),
                Ok(Some(Err(e))) => {
                    let e = super::access::Refusal::find(&e).unwrap_or(e);
                    Some((Err(FlightError::Tonic(Box::new(status(e)))), None))
                }
                Ok(None) => None,
                Err(_) => Some((
                    Err(FlightError::Tonic(Box::new(status(
                        Error::StatementTimeout { limit },
                    )))),
                    None,
                )),
            }
        });
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(stream)
            .map_err(Status::from);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> std::result::Result<i64, Status> {
        self.check(request.metadata())?;
        let session = self.session(&Self::client_of(&request));
        let (_, batches) = self
            .shared
            .run_sql(&session, &command.query)
            .await
            .map_err(status)?;
        Ok(affected_rows(&batches))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<ActionCreatePreparedStatementResult, Status> {
        self.check(request.metadata())?;
        let client = Self::client_of(&request);
        let (dataset, parameters) = if self.is_query(&query.query) {
            let df = self.plan(&client, &query.query).await?;
            let mut types: Vec<(String, Option<DataType>)> = df
                .logical_plan()
                .get_parameter_types()
                .map_err(|e| status(Error::from(e)))?
                .into_iter()
                .collect();
            // `$1`, `$2`, ... in order.
            types.sort_by_key(|(name, _)| {
                name.trim_start_matches('$')
                    .parse::<usize>()
                    .unwrap_or(usize::MAX)
            });
            let parameters = Schema::new(
                types
                    .into_iter()
                    .map(|(name, t)| Field::new(name, t.unwrap_or(DataType::Null), true))
                    .collect::<Vec<_>>(),
            );
            (Some(Arc::new(df.schema().as_arrow().clone())), parameters)
        } else {
            (None, Schema::empty())
        };
        let encode = |schema: &Schema| -> std::result::Result<_, Status> {
            let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
                .try_into()
                .map_err(internal)?;
            Ok(bytes)
        };
        let handle = uuid::Uuid::new_v4().to_string();
        let result = ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.clone().into_bytes().into(),
            dataset_schema: encode(dataset.as_deref().unwrap_or(&Schema::empty()))?,
            parameter_schema: encode(&parameters)?,
        };
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        // Statements a client forgot to close go after a day.
        prepared.retain(|_, p| p.created.elapsed() < PREPARED_LIFETIME);
        self.check_cap(
            "prepared statements",
            prepared.values().map(|p| &p.owner),
            &client,
        )?;
        prepared.insert(
            handle,
            Prepared {
                owner: client,
                sql: query.query,
                dataset,
                params: None,
                created: Instant::now(),
            },
        );
        Ok(result)
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> std::result::Result<DoPutPreparedStatementResult, Status> {
        self.check(request.metadata())?;
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle).into_owned();
        let mut batches = FlightRecordBatchStream::new_from_flight_data(
            request.into_inner().map_err(FlightError::from),
        );
        let mut params = None;
        while let Some(batch) = batches.next().await {
            let batch = batch.map_err(Status::from)?;
            if batch.num_rows() > 0 {
                params = Some(param_values(&batch)?);
            }
        }
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        let statement = prepared
            .get_mut(&handle)
            .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
        statement.params = params;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle.into_bytes().into()),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.check(request.metadata())?;
        let client = Self::client_of(&request);
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle).into_owned();
        let (sql, dataset, params) = {
            let prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
            let statement = prepared
                .get(&handle)
                .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
            (
                statement.sql.clone(),
                statement.dataset.clone(),
                statement.params.clone(),
            )
        };
        // Planned now, against what the names mean now: a plan kept from
        // the prepare would read relations as they were then.
        let mut df = self.plan(&client, &sql).await?;
        if let Some(announced) = dataset {
            let now = df.schema().as_arrow();
            // The same names and types; a column announced nullable may
            // now have no nulls, not the other way round.
            let same = announced.fields().len() == now.fields().len()
                && announced
                    .fields()
                    .iter()
                    .zip(now.fields())
                    .all(|(was, is)| {
                        was.name() == is.name()
                            && was.data_type() == is.data_type()
                            && (was.is_nullable() || !is.is_nullable())
                    });
            if !same {
                return Err(Status::failed_precondition(format!(
                    "the relations this prepared statement reads have changed since it was \
                     prepared: it announced columns ({}), it would now answer ({}); prepare it \
                     again",
                    datafusion_matview::error::describe_columns(&announced),
                    datafusion_matview::error::describe_columns(now)
                )));
            }
            if let Some(params) = params {
                // Bound, then answered from views as a query without
                // parameters is.
                let session = self.session(&client);
                let binding = async move { session.with_param_values(df, params).await };
                df = self
                    .shared
                    .within_time_limit(self.shared.work.run(binding))
                    .await
                    .map_err(status)?;
            }
        }
        let schema = df.schema().as_arrow().clone();
        let ticket = self.keep(&client, df)?;
        Ok(Response::new(info(&schema, ticket, request.into_inner())?))
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<(), Status> {
        self.check(request.metadata())?;
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle).into_owned();
        self.prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&handle);
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        self.metadata_info(request, ticket, &query.into_builder().schema())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        self.check(request.metadata())?;
        let mut builder = query.into_builder();
        for catalog in self.shared.session.context().catalog_names() {
            builder.append(catalog);
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        self.metadata_info(request, ticket, &query.into_builder().schema())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        self.check(request.metadata())?;
        let ctx = self.shared.session.context();
        let mut builder = query.into_builder();
        for catalog_name in ctx.catalog_names() {
            if let Some(catalog) = ctx.catalog(&catalog_name) {
                for schema in catalog.schema_names() {
                    builder.append(&catalog_name, schema);
                }
            }
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        self.metadata_info(request, ticket, &query.into_builder().schema())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        self.check(request.metadata())?;
        let session = &self.shared.session;
        let index = session.catalog().reload().await.map_err(status)?;
        let ctx = session.context();
        let include_schema = query.include_schema;
        let mut builder = query.into_builder();
        for catalog_name in ctx.catalog_names() {
            let Some(catalog) = ctx.catalog(&catalog_name) else {
                continue;
            };
            for schema_name in catalog.schema_names() {
                let Some(schema) = catalog.schema(&schema_name) else {
                    continue;
                };
                let mut tables = schema.table_names();
                tables.sort();
                for table in tables {
                    let name = datafusion_matview::spec::QualifiedName::new(
                        &catalog_name,
                        &schema_name,
                        &table,
                    );
                    let materialized = index.view(&name).is_some();
                    let provider = if include_schema || !materialized {
                        schema
                            .table(&table)
                            .await
                            .map_err(|e| status(Error::from(e)))?
                    } else {
                        None
                    };
                    let table_type = match (&provider, materialized) {
                        (_, true) => "MATERIALIZED VIEW",
                        (Some(p), false) => match p.table_type() {
                            TableType::Base => "TABLE",
                            TableType::View => "VIEW",
                            TableType::Temporary => "LOCAL TEMPORARY",
                        },
                        (None, false) => continue,
                    };
                    let table_schema = provider
                        .map(|p| p.schema())
                        .unwrap_or_else(|| Arc::new(Schema::empty()));
                    builder
                        .append(
                            &catalog_name,
                            &schema_name,
                            &table,
                            table_type,
                            &table_schema,
                        )
                        .map_err(Status::from)?;
                }
            }
        }
        one_batch(builder.build())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        self.metadata_info(request, ticket, &table_types_schema())
    }

    async fn do_get_table_types(
        &self,
        _query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        self.check(request.metadata())?;
        let column: ArrayRef = Arc::new(StringArray::from_iter_values(TABLE_TYPES));
        one_batch(RecordBatch::try_new(
            Arc::new(table_types_schema()),
            vec![column],
        ))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        self.metadata_info(request, ticket, &query.into_builder(&SQL_INFO).schema())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<DoGetStream>, Status> {
        self.check(request.metadata())?;
        one_batch(query.into_builder(&SQL_INFO).build())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

fn table_types_schema() -> Schema {
    Schema::new(vec![Field::new("table_type", DataType::Utf8, false)])
}
