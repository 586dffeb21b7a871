/**
 * Client for `dfmv serve`: materialized views for Apache DataFusion over
 * the server's REST API, with query results as Apache Arrow tables.
 *
 * ```ts
 * import { connect } from "@datafusion-matview/client";
 * const db = connect("http://127.0.0.1:2333");
 * const view = await db.createMaterializedView("totals", "SELECT ...");
 * const result = await view.refresh(); // { mode: "incremental", ... }
 * ```
 */

import { type Table, tableFromIPC } from "apache-arrow";

const ARROW_STREAM = "application/vnd.apache.arrow.stream";
/** Delimiters tried in order, for names whose parts hold the previous ones. */
const DELIMITERS = ["$", "|", "~", "!", ":"];
/** Job polling: from 200 ms, growing by half, up to 5 s (as LanceDB's). */
const FIRST_POLL_MS = 200;
const MAX_POLL_MS = 5000;

/** A namespace: a schema, or catalog and schema. */
export type Namespace = string | string[];

// ---- errors ---------------------------------------------------------------

/** What the server says about an error. */
export interface ErrorInfo {
  /** PostgreSQL's condition name, e.g. `undefined_table` (the answer's `condition`). */
  code?: string;
  /**
   * The Lance Namespace error code (the answer's integer `code`): 0
   * Unsupported, 1 NamespaceNotFound, 4 TableNotFound, 5 TableAlreadyExists,
   * 13 InvalidInput, 14 ConcurrentModification, 15 PermissionDenied,
   * 16 Unauthenticated, 17 ServiceUnavailable, 18 Internal,
   * 19 InvalidTableState, 20 TableSchemaValidationError.
   */
  lanceCode?: number;
  /** The `DETAIL:` / `HINT:` lines. */
  detail?: string | null;
  /** The route that answered. */
  instance?: string;
  /** The HTTP status. */
  status?: number;
  retryable?: boolean;
}

/** Every error this client throws for the server's answers. */
export class MatviewError extends Error {
  /** PostgreSQL's condition name, e.g. `undefined_table`. */
  readonly code?: string;
  /** The Lance Namespace error code, e.g. 4 (TableNotFound). */
  readonly lanceCode?: number;
  readonly detail?: string | null;
  /** The route that answered. */
  readonly instance?: string;
  readonly status?: number;
  readonly retryable: boolean;

  constructor(message: string, info: ErrorInfo = {}) {
    super(info.detail ? `${message}\n${info.detail}` : message);
    this.name = new.target.name;
    this.code = info.code;
    this.lanceCode = info.lanceCode;
    this.detail = info.detail;
    this.instance = info.instance;
    this.status = info.status;
    this.retryable = info.retryable ?? false;
  }
}
/** The view (or its namespace) does not exist. */
export class ViewNotFound extends MatviewError {}
/** A view or table of that name exists. */
export class ViewExists extends MatviewError {}
/** Another writer committed first; `retryable`. */
export class CommitConflict extends MatviewError {}
/** The request or its query is not valid. */
export class InvalidQuery extends MatviewError {}
/** The server does not support what was asked. */
export class NotSupported extends MatviewError {}
/** The bearer token is missing or wrong. */
export class Unauthorized extends MatviewError {}

/** Why a job failed. */
export interface JobFailure {
  phase: string;
  message: string;
  retryable: boolean;
}

/** A job ended FAILED (`failure` says why) or CANCELLED (`failure` is null). */
export class JobFailed extends MatviewError {
  constructor(
    readonly jobId: string,
    readonly state: string,
    readonly failure: JobFailure | null,
  ) {
    super(failure ? failure.message : `job ${jobId} was cancelled`, {
      retryable: failure?.retryable ?? false,
    });
  }
}

/** The condition a Lance error code stands for, in an answer without `condition`. */
const CONDITION_OF_LANCE_CODE: Record<number, string> = {
  0: "feature_not_supported",
  5: "duplicate_table",
  14: "serialization_failure",
};

/**
 * The error for an HTTP error answer `{error, code, condition, detail,
 * instance, retryable}` (`code` the Lance error code, `condition`
 * PostgreSQL's condition name).
 */
export function errorFromResponse(status: number, body: string): MatviewError {
  let answer: unknown;
  try {
    answer = JSON.parse(body);
  } catch {
    answer = undefined;
  }
  if (typeof answer !== "object" || answer === null) {
    return new MatviewError(body.trim() || `HTTP ${status}`, { status });
  }
  const a = answer as {
    error?: string;
    code?: number | string;
    condition?: string | null;
    detail?: string | null;
    instance?: string | null;
    retryable?: boolean;
  };
  const message = a.error ?? `HTTP ${status}`;
  // A server from before the Lance error codes sent the condition as `code`.
  const condition = a.condition ?? (typeof a.code === "string" ? a.code : undefined);
  const lanceCode = typeof a.code === "number" ? a.code : undefined;
  const info: ErrorInfo = {
    code: condition,
    lanceCode,
    detail: a.detail,
    instance: a.instance ?? undefined,
    status,
    retryable: a.retryable ?? false,
  };
  // By PostgreSQL's condition name; by the Lance code when there is none.
  const kind = condition ?? (lanceCode === undefined ? undefined : CONDITION_OF_LANCE_CODE[lanceCode]);
  if (status === 401) return new Unauthorized(message, info);
  if (status === 404) return new ViewNotFound(message, info);
  if (status === 409 && kind === "duplicate_table") return new ViewExists(message, info);
  if (status === 409 && kind === "serialization_failure") return new CommitConflict(message, info);
  if (status === 400 && kind === "feature_not_supported") return new NotSupported(message, info);
  if (status === 400) return new InvalidQuery(message, info);
  return new MatviewError(message, info);
}

// ---- results --------------------------------------------------------------

/** A view's column. */
export interface Column {
  name: string;
  type: string;
  nullable: boolean;
}

/** What a refresh did; `upstream` holds what CASCADE refreshed first. */
export interface RefreshResult {
  view: string;
  mode: "no_op" | "incremental" | "full";
  rowsWritten: number;
  rowsDeleted: number;
  detail: string;
  sourceVersion: number;
  /** Each materialized view read (by id), with the version of its log read. */
  sourceVersions: Record<string, number>;
  version: number;
  upstream: RefreshResult[];
}

/** A job as the server describes it. */
export interface JobStatus {
  job_id: string | null;
  job_type?: string;
  job_state: "IN_PROGRESS" | "DONE" | "FAILED" | "CANCELLED";
  /** The same as `job_state`. */
  state?: "IN_PROGRESS" | "DONE" | "FAILED" | "CANCELLED";
  creation_ms?: number;
  /** The same as `creation_ms`. */
  created_at_millis?: number;
  /** The view's id, as the request's route gave it. */
  table?: string | null;
  spec?: unknown;
  result: unknown;
  failure: JobFailure | null;
}

interface Description {
  name: string;
  namespace: string[];
  query: string;
  columns: Column[];
  populated: boolean;
  freshness: string;
  changed_sources: string[] | null;
  row_count: number | null;
  size_bytes: number | null;
  last_refreshed: string | null;
  version: number;
  versions?: RetainedVersionJson[];
}

interface RetainedVersionJson {
  version: number;
  committed_at: string;
  refreshed_at: string;
  row_count: number;
}

/** One refresh attempt from a view's history. */
export interface RefreshAttempt {
  attemptId: string;
  /** The view's id. */
  view: string;
  version: number | null;
  state: "succeeded" | "failed" | "cancelled" | "no_op";
  trigger: "statement" | "cascade" | "auto" | "create" | "server job";
  mode: string | null;
  reason: string | null;
  startedAt: Date;
  endedAt: Date;
  durationMs: number;
  rowsWritten: number | null;
  rowsDeleted: number | null;
  filesRead: number | null;
  bytesRead: number | null;
  sources: string | null;
  error: string | null;
  ranBy: string;
  jobId: string | null;
}

function refreshAttempt(v: Record<string, unknown>): RefreshAttempt {
  return {
    attemptId: v.attempt_id as string,
    view: v.view as string,
    version: (v.version as number | null) ?? null,
    state: v.state as RefreshAttempt["state"],
    trigger: v.trigger as RefreshAttempt["trigger"],
    mode: (v.mode as string | null) ?? null,
    reason: (v.reason as string | null) ?? null,
    startedAt: new Date(v.started_at as string),
    endedAt: new Date(v.ended_at as string),
    durationMs: v.duration_ms as number,
    rowsWritten: (v.rows_written as number | null) ?? null,
    rowsDeleted: (v.rows_deleted as number | null) ?? null,
    filesRead: (v.files_read as number | null) ?? null,
    bytesRead: (v.bytes_read as number | null) ?? null,
    sources: (v.sources as string | null) ?? null,
    error: (v.error as string | null) ?? null,
    ranBy: v.ran_by as string,
    jobId: (v.job_id as string | null) ?? null,
  };
}

/** A version of a view that can still be read (`toArrow({ version })`). */
export interface RetainedVersion {
  version: number;
  committedAt: Date;
  refreshedAt: Date;
  rowCount: number;
}

function refreshResult(value: Record<string, unknown>): RefreshResult {
  return {
    view: value.view as string,
    mode: value.mode as RefreshResult["mode"],
    rowsWritten: value.rows_written as number,
    rowsDeleted: value.rows_deleted as number,
    detail: value.detail as string,
    sourceVersion: value.source_version as number,
    sourceVersions: (value.source_versions as Record<string, number> | undefined) ?? {},
    version: value.version as number,
    upstream: ((value.upstream as Record<string, unknown>[] | undefined) ?? []).map(refreshResult),
  };
}

// ---- requests -------------------------------------------------------------

function parts(name: string, namespace?: Namespace): string[] {
  if (namespace === undefined) return [name];
  return typeof namespace === "string" ? [namespace, name] : [...namespace, name];
}

/** `parts` as one path segment, joined by a delimiter none of them holds. */
function identifier(ps: string[]): { id: string; params: URLSearchParams } {
  for (const delimiter of DELIMITERS) {
    if (!ps.some((p) => p.includes(delimiter))) {
      const params = new URLSearchParams();
      if (delimiter !== "$") params.set("delimiter", delimiter);
      return { id: ps.map(encodeURIComponent).join(encodeURIComponent(delimiter)), params };
    }
  }
  throw new Error(`no delimiter fits the name ${JSON.stringify(ps)}`);
}

function quoteIdent(part: string): string {
  return `"${part.replaceAll('"', '""')}"`;
}

function quoteLiteral(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- connection -----------------------------------------------------------

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** The server's bearer token (`dfmv serve --token`). */
  token?: string;
}

/** Options of CREATE MATERIALIZED VIEW. */
export interface CreateOptions {
  withNoData?: boolean;
  orReplace?: boolean;
  namespace?: Namespace;
}

/** Options of REFRESH MATERIALIZED VIEW. */
export interface RefreshOptions {
  full?: boolean;
  /** Only what changed, or the job fails with the reason. */
  incremental?: boolean;
  cascade?: boolean;
  /** Source views (by id) to read at that version of their own log. */
  sourceVersion?: Record<string, number>;
}

/** A connection to `dfmv serve` (its REST address). */
export class Connection {
  readonly url: string;
  readonly #token?: string;

  constructor(url: string, options: ConnectOptions = {}) {
    this.url = url.replace(/\/+$/, "");
    this.#token = options.token;
  }

  /** @internal One request; throws the server's error. */
  async send(
    method: string,
    path: string,
    options: { params?: URLSearchParams; body?: unknown; accept?: string } = {},
  ): Promise<Response> {
    const query = options.params?.toString();
    const headers: Record<string, string> = { accept: options.accept ?? "application/json" };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    if (options.body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(`${this.url}${path}${query ? `?${query}` : ""}`, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
    if (response.status >= 400) {
      throw errorFromResponse(response.status, await response.text());
    }
    return response;
  }

  /** @internal */
  async json<T>(method: string, path: string, options: { params?: URLSearchParams; body?: unknown } = {}): Promise<T> {
    return (await (await this.send(method, path, options)).json()) as T;
  }

  /** @internal `POST /v1/materialized_view/{id}/{action}`. */
  viewRequest(name: string, namespace: Namespace | undefined, action: string, body?: unknown): Promise<Response> {
    const { id, params } = identifier(parts(name, namespace));
    return this.send("POST", `/v1/materialized_view/${id}/${action}`, { params, body });
  }

  /**
   * Submits CREATE MATERIALIZED VIEW; the job ends when the view is populated.
   *
   * The server commits the view's definition at once (unpopulated, version
   * 1) and populates it in a job (a refresh: version 2). With `withNoData`
   * there is no job: the returned one is done already.
   */
  async createMaterializedViewAsync(name: string, query: string, options: CreateOptions = {}): Promise<Job<void>> {
    // The Lance Namespace spec's CreateMaterializedViewRequest (plus the
    // server's or_replace). with_no_data is always sent: the server's
    // default is the spec's, true (created unpopulated).
    const body = {
      kind: "query",
      source_query: query,
      with_no_data: options.withNoData ?? false,
      or_replace: options.orReplace ?? false,
    };
    const response = await this.viewRequest(name, options.namespace, "create", body);
    const answer = (await response.json()) as { job_id?: string | null };
    if (typeof answer !== "object" || answer === null || !("job_id" in answer)) {
      throw new MatviewError(`the server did not answer a create: ${JSON.stringify(answer)}`);
    }
    if (answer.job_id === null || answer.job_id === undefined) return Job.finished(this, undefined);
    return new Job(this, answer.job_id, () => undefined);
  }

  /**
   * CREATE MATERIALIZED VIEW, waiting for its population. When the
   * population fails ({@link JobFailed}), the view stays created without
   * data, as the server committed it.
   */
  async createMaterializedView(name: string, query: string, options: CreateOptions = {}): Promise<MaterializedView> {
    await (await this.createMaterializedViewAsync(name, query, options)).wait();
    return this.openMaterializedView(name, { namespace: options.namespace });
  }

  /** The view as the server describes it now; {@link ViewNotFound} if none. */
  async openMaterializedView(name: string, options: { namespace?: Namespace } = {}): Promise<MaterializedView> {
    const response = await this.viewRequest(name, options.namespace, "describe");
    return new MaterializedView(this, (await response.json()) as Description);
  }

  /**
   * The names of the views in `namespace` (DataFusion's `public` schema
   * when absent), sorted: every page from `pageToken` on, `limit` per request.
   */
  async listMaterializedViews(
    options: { namespace?: Namespace; pageToken?: string; limit?: number } = {},
  ): Promise<string[]> {
    const ns = options.namespace === undefined ? ["public"] : parts("", options.namespace).slice(0, -1);
    const { id, params } = identifier(ns);
    if (options.limit !== undefined) params.set("limit", String(options.limit));
    let token = options.pageToken;
    const names: string[] = [];
    for (;;) {
      if (token !== undefined) params.set("page_token", token);
      const page = await this.json<{ views: string[]; page_token: string | null }>(
        "GET",
        `/v1/namespace/${id}/materialized_view/list`,
        { params },
      );
      names.push(...page.views);
      if (page.page_token === null || page.page_token === undefined) return names;
      token = page.page_token;
    }
  }

  /** Submits DROP MATERIALIZED VIEW (the server drops at once: the job is done). */
  async dropMaterializedViewAsync(
    name: string,
    options: { cascade?: boolean; namespace?: Namespace } = {},
  ): Promise<Job<void>> {
    const response = await this.viewRequest(name, options.namespace, "drop", { cascade: options.cascade ?? false });
    if (response.status === 202) {
      const { job_id } = (await response.json()) as { job_id: string };
      return new Job(this, job_id, () => undefined);
    }
    await response.body?.cancel();
    return Job.finished(this, undefined);
  }

  /** DROP MATERIALIZED VIEW (with its dependents when `cascade`). */
  async dropMaterializedView(name: string, options: { cascade?: boolean; namespace?: Namespace } = {}): Promise<void> {
    await (await this.dropMaterializedViewAsync(name, options)).wait();
  }

  /** Runs any statement the server's session runs; its result as an Arrow table. */
  async sql(text: string): Promise<Table> {
    const response = await this.send("POST", "/v1/sql", { body: { sql: text }, accept: ARROW_STREAM });
    return tableFromIPC(new Uint8Array(await response.arrayBuffer()));
  }
}

/** A connection to the REST API of `dfmv serve` at `url`. */
export function connect(url: string, options: ConnectOptions = {}): Connection {
  return new Connection(url, options);
}

// ---- views ----------------------------------------------------------------

/** A materialized view on the server; its fields as last described. */
export class MaterializedView {
  readonly #connection: Connection;
  #state: Description;

  /** @internal */
  constructor(connection: Connection, state: Description) {
    this.#connection = connection;
    this.#state = state;
  }

  get name(): string { return this.#state.name; }
  /** Catalog and schema. */
  get namespace(): string[] { return this.#state.namespace; }
  get query(): string { return this.#state.query; }
  get columns(): Column[] { return this.#state.columns; }
  get populated(): boolean { return this.#state.populated; }
  /** `fresh`, `stale` or `unknown`, when last described. */
  get freshness(): string { return this.#state.freshness; }
  get changedSources(): string[] { return this.#state.changed_sources ?? []; }
  get rowCount(): number | null { return this.#state.row_count; }
  get sizeBytes(): number | null { return this.#state.size_bytes; }
  get lastRefreshed(): Date | null {
    return this.#state.last_refreshed ? new Date(this.#state.last_refreshed) : null;
  }
  get version(): number { return this.#state.version; }
  /** The versions that can still be read, oldest first. */
  get versions(): RetainedVersion[] {
    return (this.#state.versions ?? []).map((v) => ({
      version: v.version,
      committedAt: new Date(v.committed_at),
      refreshedAt: new Date(v.refreshed_at),
      rowCount: v.row_count,
    }));
  }

  /** Reads the definition and state again. */
  async reload(): Promise<this> {
    const response = await this.#connection.viewRequest(this.name, this.namespace, "describe");
    this.#state = (await response.json()) as Description;
    return this;
  }

  /** Submits REFRESH MATERIALIZED VIEW. */
  async refreshAsync(options: RefreshOptions = {}): Promise<Job<RefreshResult>> {
    const body: Record<string, unknown> = { full: options.full ?? false, cascade: options.cascade ?? false };
    if (options.sourceVersion !== undefined) body.source_version = options.sourceVersion;
    // Sent only when asked for: a server that predates it refuses fields it does not know.
    if (options.incremental) body.incremental = true;
    const response = await this.#connection.viewRequest(this.name, this.namespace, "refresh", body);
    const { job_id } = (await response.json()) as { job_id: string };
    return new Job(this.#connection, job_id, (r) => refreshResult(r as Record<string, unknown>));
  }

  /** REFRESH MATERIALIZED VIEW, waiting for it; then reloads this handle. */
  async refresh(options: RefreshOptions = {}): Promise<RefreshResult> {
    const result = await (await this.refreshAsync(options)).wait();
    await this.reload();
    return result;
  }

  /**
   * The view's rows (`filter` is a SQL condition); at a retained `version`
   * of the view when given (see `versions`).
   */
  async toArrow(options: { columns?: string[]; filter?: string; limit?: number; version?: number } = {}): Promise<Table> {
    const select = options.columns ? options.columns.map(quoteIdent).join(", ") : "*";
    let table = this.#qualified();
    if (options.version !== undefined) table = `materialized_view_at(${quoteLiteral(table)}, ${Math.trunc(options.version)})`;
    let text = `SELECT ${select} FROM ${table}`;
    if (options.filter !== undefined) text += ` WHERE ${options.filter}`;
    if (options.limit !== undefined) text += ` LIMIT ${Math.trunc(options.limit)}`;
    return this.#connection.sql(text);
  }

  /** The view's refresh history, newest first: every page, `limit` per request. */
  async refreshes(options: { limit?: number } = {}): Promise<RefreshAttempt[]> {
    const { id, params } = identifier(parts(this.name, this.namespace));
    if (options.limit !== undefined) params.set("limit", String(options.limit));
    const attempts: RefreshAttempt[] = [];
    for (;;) {
      const page = await this.#connection.json<{ refreshes: Record<string, unknown>[]; page_token: string | null }>(
        "GET",
        `/v1/materialized_view/${id}/refreshes`,
        { params },
      );
      attempts.push(...page.refreshes.map(refreshAttempt));
      if (page.page_token === null || page.page_token === undefined) return attempts;
      params.set("page_token", page.page_token);
    }
  }

  /**
   * The rows versions after `fromVersion` up to `toVersion` (default: the
   * latest) inserted and deleted: the view's columns, then `_change_type`
   * (`insert` or `delete`) and `_version`.
   */
  async changes(fromVersion: number, toVersion?: number): Promise<Table> {
    let versions = `${Math.trunc(fromVersion)}`;
    if (toVersion !== undefined) versions += `, ${Math.trunc(toVersion)}`;
    return this.#connection.sql(`SELECT * FROM materialized_view_changes(${quoteLiteral(this.#qualified())}, ${versions})`);
  }

  #qualified(): string {
    return [...this.namespace, this.name].map(quoteIdent).join(".");
  }
}

// ---- jobs -----------------------------------------------------------------

/** A job on the server: a CREATE population or a REFRESH. */
export class Job<T> {
  readonly #connection: Connection;
  readonly #convert: (result: unknown) => T;
  #result?: T;

  /** @internal */
  constructor(connection: Connection, readonly jobId: string | null, convert: (result: unknown) => T) {
    this.#connection = connection;
    this.#convert = convert;
  }

  /** @internal A job the server did at once (no id). */
  static finished<T>(connection: Connection, result: T): Job<T> {
    const job = new Job<T>(connection, null, () => result);
    job.#result = result;
    return job;
  }

  /** The job's description. */
  async status(): Promise<JobStatus> {
    if (this.jobId === null) return { job_id: null, job_state: "DONE", state: "DONE", result: null, failure: null };
    return this.#connection.json<JobStatus>("POST", "/v1/jobs/describe", { body: { job_id: this.jobId } });
  }

  async done(): Promise<boolean> {
    return (await this.status()).job_state !== "IN_PROGRESS";
  }

  /** Cancels the job if it still runs; the view keeps its previous data. */
  async cancel(): Promise<JobStatus> {
    if (this.jobId === null) return this.status();
    return this.#connection.json<JobStatus>("POST", "/v1/jobs/cancel", { body: { job_id: this.jobId } });
  }

  /** Waits for the job: its result, or {@link JobFailed}; an Error after `timeoutMs`. */
  async wait(timeoutMs?: number): Promise<T> {
    if (this.jobId === null) return this.#result as T;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (let delay = FIRST_POLL_MS; ; delay = Math.min(delay * 1.5, MAX_POLL_MS)) {
      const state = await this.status();
      if (state.job_state === "DONE") return this.#convert(state.result);
      if (state.job_state !== "IN_PROGRESS") throw new JobFailed(this.jobId, state.job_state, state.failure);
      let wait = delay;
      if (deadline !== undefined) {
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`job ${this.jobId} still runs after ${timeoutMs} ms`);
        wait = Math.min(wait, left);
      }
      await sleep(wait);
    }
  }
}
