"""What the blocking and the asyncio clients share: the requests they make
and the meaning of the answers, apart from how bytes travel."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.ipc

from ._errors import JobFailed, JobFailure, MatviewError

#: Delimiters tried, in order, for a name whose parts hold the previous ones.
_DELIMITERS = ("$", "|", "~", "!", ":")

#: The polling backoff of ``Job.wait``: 200 ms, growing, at most 5 s.
FIRST_POLL_S = 0.2
MAX_POLL_S = 5.0

ARROW_STREAM = "application/vnd.apache.arrow.stream"

Namespace = str | Sequence[str] | None


@dataclass(frozen=True)
class Call:
    """One HTTP request: method, path, query parameters, JSON body."""

    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None
    accept: str = "application/json"


def _parts(name: str, namespace: Namespace) -> list[str]:
    if namespace is None:
        return [name]
    if isinstance(namespace, str):
        return [namespace, name]
    return [*namespace, name]


def _identifier(parts: list[str]) -> tuple[str, dict[str, str]]:
    """``parts`` as a path segment joined by a delimiter none of them holds."""
    for delimiter in _DELIMITERS:
        if not any(delimiter in part for part in parts):
            params = {} if delimiter == "$" else {"delimiter": delimiter}
            return quote(delimiter.join(parts), safe="$|~!:"), params
    raise ValueError(f"no delimiter fits the name {parts!r}")


def view_call(name: str, namespace: Namespace, action: str, body: Any = None) -> Call:
    """``POST /v1/materialized_view/{id}/{action}``."""
    ident, params = _identifier(_parts(name, namespace))
    return Call("POST", f"/v1/materialized_view/{ident}/{action}", params, body)


def list_call(namespace: Namespace, page_token: str | None, limit: int | None) -> Call:
    """``GET /v1/namespace/{id}/materialized_view/list``."""
    parts = ["public"] if namespace is None else _parts("x", namespace)[:-1]
    ident, params = _identifier(parts)
    if page_token is not None:
        params["page_token"] = page_token
    if limit is not None:
        params["limit"] = str(limit)
    return Call("GET", f"/v1/namespace/{ident}/materialized_view/list", params)


def refreshes_call(
    name: str, namespace: Namespace, page_token: str | None, limit: int | None
) -> Call:
    """``GET /v1/materialized_view/{id}/refreshes``."""
    ident, params = _identifier(_parts(name, namespace))
    if page_token is not None:
        params["page_token"] = page_token
    if limit is not None:
        params["limit"] = str(limit)
    return Call("GET", f"/v1/materialized_view/{ident}/refreshes", params)


def create_body(query: str, with_no_data: bool, or_replace: bool) -> dict[str, Any]:
    """The Lance Namespace spec's ``CreateMaterializedViewRequest`` (plus
    the server's ``or_replace``). ``with_no_data`` is always sent: the
    server's default is the spec's, true (created unpopulated)."""
    return {
        "kind": "query",
        "source_query": query,
        "with_no_data": with_no_data,
        "or_replace": or_replace,
    }


def created_job_id(answer: Any) -> str | None:
    """The population job of a create answer ``{version, job_id, id,
    action}`` (201): its id, or None when there is nothing to populate
    (``with_no_data``, or an ``if_not_exists`` that skipped)."""
    if not isinstance(answer, dict) or "job_id" not in answer:
        raise MatviewError(f"the server did not answer a create: {answer!r}")
    job_id = answer["job_id"]
    return None if job_id is None else str(job_id)


def refresh_body(
    full: bool, cascade: bool, source_version: Mapping[str, int] | None, incremental: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {"full": full, "cascade": cascade}
    if incremental:
        # Sent only when asked for: a server that predates it refuses
        # fields it does not know.
        body["incremental"] = True
    if source_version is not None:
        body["source_version"] = dict(source_version)
    return body


def sql_call(text: str) -> Call:
    return Call("POST", "/v1/sql", body={"sql": text}, accept=ARROW_STREAM)


def finished_status() -> dict[str, Any]:
    """What ``Job.status`` says of a job the server did at once (it has no id)."""
    return {"job_id": None, "job_state": "DONE", "state": "DONE", "result": None, "failure": None}


def job_call(action: str, job_id: str) -> Call:
    return Call("POST", f"/v1/jobs/{action}", body={"job_id": job_id})


def quote_ident(part: str) -> str:
    return '"' + part.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def select_sql(
    name: str,
    namespace: list[str],
    columns: Sequence[str] | None,
    filter: str | None,
    limit: int | None,
    version: int | None = None,
) -> str:
    """``SELECT`` of a view's columns, with an optional filter and limit;
    at a retained version of the view when ``version`` is given."""
    select = "*" if columns is None else ", ".join(quote_ident(c) for c in columns)
    table = ".".join(quote_ident(p) for p in [*namespace, name])
    if version is not None:
        table = f"materialized_view_at({quote_literal(table)}, {int(version)})"
    text = f"SELECT {select} FROM {table}"
    if filter is not None:
        text += f" WHERE {filter}"
    if limit is not None:
        text += f" LIMIT {int(limit)}"
    return text


def changes_sql(name: str, namespace: list[str], from_version: int, to_version: int | None) -> str:
    """The rows versions after ``from_version`` up to ``to_version`` (the
    latest when ``None``) inserted and deleted."""
    table = ".".join(quote_ident(p) for p in [*namespace, name])
    versions = f"{int(from_version)}" + ("" if to_version is None else f", {int(to_version)}")
    return f"SELECT * FROM materialized_view_changes({quote_literal(table)}, {versions})"


def arrow_table(body: bytes) -> pa.Table:
    """An Arrow IPC stream as a table."""
    return pyarrow.ipc.open_stream(body).read_all()


def backoff() -> Iterator[float]:
    """Seconds to wait between polls: 0.2, 0.3, 0.45, ... up to 5."""
    delay = FIRST_POLL_S
    while True:
        yield delay
        delay = min(delay * 1.5, MAX_POLL_S)


@dataclass(frozen=True)
class Column:
    """A view's column."""

    name: str
    type: str
    nullable: bool


@dataclass(frozen=True)
class RefreshResult:
    """What a refresh did: ``mode`` is ``no_op``, ``incremental`` or ``full``.

    ``upstream`` holds the results of the views CASCADE refreshed first.
    ``source_versions`` maps each materialized view the refresh read (by
    id, e.g. ``datafusion$public$base``) to the version of its log it read;
    ``refresh(source_version={"base": 1})`` pins one.
    """

    view: str
    mode: str
    rows_written: int
    rows_deleted: int
    detail: str
    source_version: int
    version: int
    upstream: list[RefreshResult] = field(default_factory=list)
    source_versions: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def from_json(value: dict[str, Any]) -> RefreshResult:
        return RefreshResult(
            view=value["view"],
            mode=value["mode"],
            rows_written=value["rows_written"],
            rows_deleted=value["rows_deleted"],
            detail=value["detail"],
            source_version=value["source_version"],
            version=value["version"],
            upstream=[RefreshResult.from_json(u) for u in value.get("upstream", [])],
            source_versions=dict(value.get("source_versions", {})),
        )


@dataclass
class RefreshAttempt:
    """One refresh attempt from a view's history."""

    attempt_id: str
    view: str
    version: int | None
    state: str
    trigger: str
    mode: str | None
    reason: str | None
    started_at: _dt.datetime
    ended_at: _dt.datetime
    duration_ms: int
    rows_written: int | None
    rows_deleted: int | None
    files_read: int | None
    bytes_read: int | None
    sources: str | None
    error: str | None
    ran_by: str
    job_id: str | None

    @staticmethod
    def from_json(value: dict[str, Any]) -> RefreshAttempt:
        return RefreshAttempt(
            attempt_id=value["attempt_id"],
            view=value["view"],
            version=value.get("version"),
            state=value["state"],
            trigger=value["trigger"],
            mode=value.get("mode"),
            reason=value.get("reason"),
            started_at=_parse_time(value["started_at"]),
            ended_at=_parse_time(value["ended_at"]),
            duration_ms=value["duration_ms"],
            rows_written=value.get("rows_written"),
            rows_deleted=value.get("rows_deleted"),
            files_read=value.get("files_read"),
            bytes_read=value.get("bytes_read"),
            sources=value.get("sources"),
            error=value.get("error"),
            ran_by=value["ran_by"],
            job_id=value.get("job_id"),
        )


@dataclass
class RetainedVersion:
    """A version of a view that can still be read (``to_arrow(version=...)``)."""

    version: int
    committed_at: _dt.datetime
    refreshed_at: _dt.datetime
    row_count: int

    @staticmethod
    def from_json(value: dict[str, Any]) -> RetainedVersion:
        return RetainedVersion(
            version=value["version"],
            committed_at=_parse_time(value["committed_at"]),
            refreshed_at=_parse_time(value["refreshed_at"]),
            row_count=value["row_count"],
        )


@dataclass
class ViewState:
    """A view's definition and state as the server last described it."""

    name: str
    namespace: list[str]
    query: str
    columns: list[Column]
    populated: bool
    freshness: str
    changed_sources: list[str]
    row_count: int | None
    size_bytes: int | None
    last_refreshed: _dt.datetime | None
    version: int
    versions: list[RetainedVersion]

    @staticmethod
    def from_json(value: dict[str, Any]) -> ViewState:
        refreshed = value.get("last_refreshed")
        return ViewState(
            name=value["name"],
            namespace=list(value["namespace"]),
            query=value["query"],
            columns=[Column(c["name"], c["type"], c["nullable"]) for c in value["columns"]],
            populated=value["populated"],
            freshness=value["freshness"],
            changed_sources=list(value.get("changed_sources") or []),
            row_count=value.get("row_count"),
            size_bytes=value.get("size_bytes"),
            last_refreshed=_parse_time(refreshed) if refreshed else None,
            version=value["version"],
            versions=[RetainedVersion.from_json(v) for v in value.get("versions") or []],
        )


def _parse_time(text: str) -> _dt.datetime:
    # The server writes RFC 3339 with up to nanoseconds; Python keeps micro.
    head, _, rest = text.partition(".")
    if rest:
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6]}{zone}"
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def job_outcome(state: dict[str, Any]) -> dict[str, Any] | None:
    """The result of a finished job; raises :class:`JobFailed` when it did not succeed."""
    job_state = state["job_state"]
    if job_state == "DONE":
        return state.get("result")
    failure = state.get("failure")
    raise JobFailed(
        state["job_id"],
        job_state,
        JobFailure(failure["phase"], failure["message"], bool(failure["retryable"]))
        if failure
        else None,
    )


def expect_job_id(answer: Any) -> str:
    if not isinstance(answer, dict) or "job_id" not in answer:
        raise MatviewError(f"the server did not answer a job: {answer!r}")
    return str(answer["job_id"])


class ViewAttributes:
    """The attributes of a view handle, read from its last description."""

    _state: ViewState

    @property
    def name(self) -> str:
        return self._state.name

    @property
    def namespace(self) -> list[str]:
        """Catalog and schema."""
        return self._state.namespace

    @property
    def query(self) -> str:
        return self._state.query

    @property
    def columns(self) -> list[Column]:
        return self._state.columns

    @property
    def populated(self) -> bool:
        return self._state.populated

    @property
    def freshness(self) -> str:
        """``fresh``, ``stale`` or ``unknown``, when last described."""
        return self._state.freshness

    @property
    def changed_sources(self) -> list[str]:
        return self._state.changed_sources

    @property
    def row_count(self) -> int | None:
        return self._state.row_count

    @property
    def size_bytes(self) -> int | None:
        return self._state.size_bytes

    @property
    def last_refreshed(self) -> _dt.datetime | None:
        return self._state.last_refreshed

    @property
    def version(self) -> int:
        return self._state.version

    @property
    def versions(self) -> list[RetainedVersion]:
        """The versions that can still be read, oldest first."""
        return self._state.versions

    def __repr__(self) -> str:
        return f"{type(self).__name__}({'.'.join([*self.namespace, self.name])!r})"
