"""The asyncio client: :func:`connect_async`, :class:`AsyncConnection`,
:class:`AsyncMaterializedView`, :class:`AsyncJob`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import httpx
import pyarrow as pa

from . import _core
from ._core import Call, Namespace, RefreshAttempt, RefreshResult, ViewState
from ._errors import error_from_response

T = TypeVar("T")


class AsyncConnection:
    """A connection to ``dfmv serve`` (its REST address), for asyncio."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 300.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _send(self, call: Call) -> httpx.Response:
        response = await self._http.request(
            call.method,
            call.path,
            params=call.params,
            json=call.body,
            headers={"Accept": call.accept},
        )
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response

    async def _json(self, call: Call) -> Any:
        return (await self._send(call)).json()

    async def create_materialized_view_async(
        self,
        name: str,
        query: str,
        *,
        with_no_data: bool = False,
        or_replace: bool = False,
        namespace: Namespace = None,
    ) -> AsyncJob[None]:
        """Submits CREATE MATERIALIZED VIEW; the job ends when the view is populated.

        The server commits the view's definition at once (unpopulated,
        version 1) and populates it in a job (a refresh: version 2). With
        ``with_no_data`` there is no job: the returned one is done already.
        """
        body = _core.create_body(query, with_no_data, or_replace)
        answer = await self._json(_core.view_call(name, namespace, "create", body))
        job_id = _core.created_job_id(answer)
        if job_id is None:  # nothing to compute: done already
            return AsyncJob.finished(self, None)
        return AsyncJob(self, job_id, lambda _: None)

    async def create_materialized_view(
        self,
        name: str,
        query: str,
        *,
        with_no_data: bool = False,
        or_replace: bool = False,
        namespace: Namespace = None,
    ) -> AsyncMaterializedView:
        """CREATE MATERIALIZED VIEW, waiting for its population.

        When the population fails (:class:`JobFailed`), the view stays
        created without data, as the server committed it.
        """
        job = await self.create_materialized_view_async(
            name, query, with_no_data=with_no_data, or_replace=or_replace, namespace=namespace
        )
        await job.wait()
        return await self.open_materialized_view(name, namespace=namespace)

    async def open_materialized_view(
        self, name: str, *, namespace: Namespace = None
    ) -> AsyncMaterializedView:
        """The view, as the server describes it now; :class:`ViewNotFound` if none."""
        answer = await self._json(_core.view_call(name, namespace, "describe"))
        return AsyncMaterializedView(self, ViewState.from_json(answer))

    async def list_materialized_views(
        self,
        *,
        namespace: Namespace = None,
        page_token: str | None = None,
        limit: int | None = None,
    ) -> list[str]:
        """The names of the views in ``namespace`` (``public`` when None),
        sorted; every page from ``page_token`` on, ``limit`` per request."""
        names: list[str] = []
        while True:
            page = await self._json(_core.list_call(namespace, page_token, limit))
            names.extend(page["views"])
            page_token = page.get("page_token")
            if page_token is None:
                return names

    async def drop_materialized_view_async(
        self, name: str, *, cascade: bool = False, namespace: Namespace = None
    ) -> AsyncJob[None]:
        """Submits DROP MATERIALIZED VIEW (the server drops at once: the job is done)."""
        response = await self._send(_core.view_call(name, namespace, "drop", {"cascade": cascade}))
        if response.status_code == 202:
            return AsyncJob(self, _core.expect_job_id(response.json()), lambda _: None)
        return AsyncJob.finished(self, None)

    async def drop_materialized_view(
        self, name: str, *, cascade: bool = False, namespace: Namespace = None
    ) -> None:
        """DROP MATERIALIZED VIEW (with its dependents when ``cascade``)."""
        job = await self.drop_materialized_view_async(name, cascade=cascade, namespace=namespace)
        await job.wait()

    async def sql(self, text: str) -> pa.Table:
        """Runs any statement the server's session runs; its result as Arrow."""
        return _core.arrow_table((await self._send(_core.sql_call(text))).content)


class AsyncMaterializedView(_core.ViewAttributes):
    """A materialized view on the server; attributes as last described."""

    def __init__(self, connection: AsyncConnection, state: ViewState) -> None:
        self._connection = connection
        self._state = state

    def _call(self, action: str, body: Any = None) -> Call:
        return _core.view_call(self._state.name, self._state.namespace, action, body)

    async def reload(self) -> AsyncMaterializedView:
        """Reads the definition and state again."""
        self._state = ViewState.from_json(await self._connection._json(self._call("describe")))
        return self

    async def refresh_async(
        self,
        *,
        full: bool = False,
        cascade: bool = False,
        source_version: Mapping[str, int] | None = None,
        incremental: bool = False,
    ) -> AsyncJob[RefreshResult]:
        """Submits REFRESH MATERIALIZED VIEW.

        ``source_version`` reads each named source view (by id) at that
        version of its own log instead of its latest. ``incremental``
        computes only what changed, or the job fails with the reason.
        """
        body = _core.refresh_body(full, cascade, source_version, incremental)
        answer = await self._connection._json(self._call("refresh", body))
        return AsyncJob(
            self._connection,
            _core.expect_job_id(answer),
            lambda r: RefreshResult.from_json(r or {}),
        )

    async def refresh(
        self,
        *,
        full: bool = False,
        cascade: bool = False,
        source_version: Mapping[str, int] | None = None,
        incremental: bool = False,
    ) -> RefreshResult:
        """REFRESH MATERIALIZED VIEW, waiting for it; then reloads this handle."""
        job = await self.refresh_async(
            full=full, cascade=cascade, source_version=source_version, incremental=incremental
        )
        result = await job.wait()
        await self.reload()
        return result

    async def refreshes(self, *, limit: int | None = None) -> list[RefreshAttempt]:
        """The view's refresh history, newest first: every page, ``limit``
        per request."""
        attempts: list[RefreshAttempt] = []
        page_token: str | None = None
        while True:
            page = await self._connection._json(
                _core.refreshes_call(self._state.name, self._state.namespace, page_token, limit)
            )
            attempts.extend(RefreshAttempt.from_json(a) for a in page["refreshes"])
            page_token = page.get("page_token")
            if page_token is None:
                return attempts

    async def to_arrow(
        self,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        limit: int | None = None,
        version: int | None = None,
    ) -> pa.Table:
        """The view's rows (``filter`` is a SQL condition); at a retained
        ``version`` of the view when given (see ``versions``)."""
        text = _core.select_sql(
            self._state.name, self._state.namespace, columns, filter, limit, version
        )
        return await self._connection.sql(text)

    async def changes(self, from_version: int, to_version: int | None = None) -> pa.Table:
        """The rows versions after ``from_version`` up to ``to_version``
        (default: the latest) inserted and deleted: the view's columns,
        then ``_change_type`` (``insert`` or ``delete``) and ``_version``."""
        text = _core.changes_sql(
            self._state.name, self._state.namespace, from_version, to_version
        )
        return await self._connection.sql(text)

    async def to_pandas(self) -> Any:
        """The view's rows as a pandas DataFrame (pandas must be installed)."""
        return (await self.to_arrow()).to_pandas()


class AsyncJob(Generic[T]):
    """A job on the server, awaited."""

    def __init__(
        self,
        connection: AsyncConnection,
        job_id: str | None,
        convert: Callable[[dict[str, Any] | None], T],
        *,
        result: T | None = None,
    ) -> None:
        self._connection = connection
        self.job_id = job_id
        self._convert = convert
        self._result = result

    @staticmethod
    def finished(connection: AsyncConnection, result: T) -> AsyncJob[T]:
        return AsyncJob(connection, None, lambda _: result, result=result)

    async def status(self) -> dict[str, Any]:
        if self.job_id is None:
            return _core.finished_status()
        state: dict[str, Any] = await self._connection._json(_core.job_call("describe", self.job_id))
        return state

    async def done(self) -> bool:
        return bool((await self.status())["job_state"] != "IN_PROGRESS")

    async def cancel(self) -> dict[str, Any]:
        if self.job_id is None:
            return await self.status()
        state: dict[str, Any] = await self._connection._json(_core.job_call("cancel", self.job_id))
        return state

    async def wait(self, timeout: float | None = None) -> T:
        """Waits for the job; its result, or :class:`JobFailed`; ``TimeoutError`` after ``timeout`` s."""
        if self.job_id is None:
            return self._result  # type: ignore[return-value]
        deadline = None if timeout is None else time.monotonic() + timeout
        for delay in _core.backoff():
            state = await self.status()
            if state["job_state"] != "IN_PROGRESS":
                return self._convert(_core.job_outcome(state))
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {self.job_id} still runs after {timeout} s")
                delay = min(delay, left)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")


def connect_async(url: str, *, token: str | None = None) -> AsyncConnection:
    """An asyncio connection to the REST API of ``dfmv serve`` at ``url``."""
    return AsyncConnection(url, token=token)
