"""The blocking client against a real server: every method, jobs, paging,
cancel, every error class."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

import datafusion_matview as dfmv
from datafusion_matview._errors import error_from_response

QUERY = "SELECT region, count(*) AS n, sum(amount) AS total FROM orders GROUP BY region"


def test_create_open_refresh_read_and_drop(server):
    with dfmv.connect(server.url, token=server.token) as db:
        view = db.create_materialized_view("totals", QUERY)
        assert isinstance(view, dfmv.MaterializedView)
        assert (view.name, view.namespace, view.query) == ("totals", ["datafusion", "public"], QUERY)
        assert view.columns == [
            dfmv.Column("region", "Utf8", True),
            dfmv.Column("n", "Int64", False),
            dfmv.Column("total", "Int64", True),
        ]
        # Committed unpopulated (version 1), then populated by a refresh job (version 2).
        assert (view.populated, view.freshness, view.row_count, view.version) == (True, "fresh", 2, 2)
        assert isinstance(view.last_refreshed, dt.datetime) and view.last_refreshed.tzinfo
        assert view.to_arrow().sort_by("region").to_pylist() == [
            {"region": "north", "n": 2, "total": 12},
            {"region": "south", "n": 1, "total": 5},
        ]

        # A source change: the view is stale, and refreshes incrementally.
        server.append("feb.csv", "region,amount\neast,7\nnorth,1\n")
        assert db.open_materialized_view("totals").freshness == "stale"
        result = view.refresh()
        assert result == dfmv.RefreshResult(
            view="totals",
            mode="incremental",
            rows_written=3,
            rows_deleted=2,
            detail="orders: 1 file(s) appended; merged into the existing groups",
            source_version=result.source_version,
            version=3,
            upstream=[],
        )
        assert (view.freshness, view.row_count, view.version) == ("fresh", 3, 3)
        assert view.refresh().mode == "no_op"
        assert view.refresh(full=True).mode == "full"
        table = view.to_arrow(columns=["region", "total"], filter="total > 6", limit=10)
        assert table.schema.names == ["region", "total"]
        assert table.sort_by("region").to_pylist() == [
            {"region": "east", "total": 7},
            {"region": "north", "total": 13},
        ]

        # Arrow from any statement.
        sql = db.sql("SELECT sum(total) AS s FROM totals")
        assert isinstance(sql, pa.Table) and sql.to_pylist() == [{"s": 25}]

        db.drop_materialized_view("totals")
        assert db.list_materialized_views() == []
        with pytest.raises(dfmv.ViewNotFound, match='materialized view "totals" does not exist'):
            view.reload()


def test_refresh_reads_a_source_view_at_a_pinned_version(server):
    with dfmv.connect(server.url, token=server.token) as db:
        base = db.create_materialized_view("base", "SELECT region, amount FROM orders")
        top = db.create_materialized_view("top", "SELECT sum(amount) AS s FROM base")
        server.append("feb.csv", "region,amount\neast,7\n")
        # Version 1 is each view's definition, 2 its first data.
        assert (base.version, top.version) == (2, 2)
        assert base.refresh().version == 3
        assert top.refresh().source_versions == {"datafusion$public$base": 3}
        assert top.to_arrow().to_pylist() == [{"s": 24}]

        pinned = top.refresh(source_version={"base": 2})
        assert pinned.source_versions == {"datafusion$public$base": 2}
        assert pinned.detail.endswith("; read base at version 2")
        assert top.to_arrow().to_pylist() == [{"s": 17}]
        assert (top.freshness, top.version) == ("stale", 4)
        with pytest.raises(dfmv.InvalidQuery, match="its versions are 1 to 3") as e:
            top.refresh(source_version={"base": 4})
        assert (e.value.code, e.value.lance_code) == ("invalid_parameter_value", 13)


def test_versions_and_changes(server):
    with dfmv.connect(server.url, token=server.token) as db:
        view = db.create_materialized_view("regions", "SELECT region, amount FROM orders")
        server.append("feb.csv", "region,amount\neast,7\n")
        assert view.refresh().version == 3
        # Version 1 is the definition (no data): not readable, not listed.
        assert [(v.version, v.row_count) for v in view.versions] == [(2, 3), (3, 4)]
        assert all(v.committed_at.tzinfo for v in view.versions)
        assert view.to_arrow(version=2, filter="region = 'north'").num_rows == 2
        assert view.to_arrow(version=3, filter="region = 'east'").to_pylist() == [
            {"region": "east", "amount": 7}
        ]
        assert view.changes(2).to_pylist() == [
            {"region": "east", "amount": 7, "_change_type": "insert", "_version": 3}
        ]
        assert view.changes(2, 2).num_rows == 0
        with pytest.raises(dfmv.InvalidQuery, match="at version 1: it had not been populated then") as e:
            view.to_arrow(version=1)
        assert e.value.code == "invalid_parameter_value"

        # The history, newest first, a page at a time: the refresh above,
        # then the create's population, both server jobs.
        attempts = view.refreshes(limit=1)
        assert [(a.version, a.state, a.trigger, a.mode) for a in attempts] == [
            (3, "succeeded", "server job", "incremental"),
            (2, "succeeded", "server job", "full"),
        ]
        assert all(isinstance(a, dfmv.RefreshAttempt) and a.job_id for a in attempts)
        assert attempts[0].rows_written == 1 and attempts[0].files_read == 1
        assert attempts[0].started_at <= attempts[0].ended_at


def test_jobs_wait_status_and_done(server):
    with dfmv.connect(server.url, token=server.token) as db:
        job = db.create_materialized_view_async("totals", QUERY)
        assert isinstance(job, dfmv.Job) and job.job_id
        assert job.wait(timeout=60) is None
        assert job.done()
        state = job.status()
        assert (state["job_state"], state["job_type"]) == ("DONE", "CREATE_MATERIALIZED_VIEW")
        assert (state["state"], state["table"]) == ("DONE", "totals")
        assert state["created_at_millis"] == state["creation_ms"] > 0
        # The population is a refresh: the view's version 2.
        result = state["result"]
        assert (result["view"], result["mode"], result["rows_written"], result["version"]) == (
            "totals", "full", 2, 2)

        view = db.open_materialized_view("totals")
        server.append("feb.csv", "region,amount\neast,7\n")
        refresh = view.refresh_async()
        result = refresh.wait()
        assert (result.mode, result.rows_written) == ("incremental", 3)
        assert refresh.status()["job_type"] == "REFRESH_MATERIALIZED_VIEW"
        assert view.row_count == 2  # the handle is as last described...
        assert view.reload().row_count == 3  # ...until reloaded

        # WITH NO DATA has nothing to compute: no job, the view's version 1.
        empty = db.create_materialized_view_async("empty", "SELECT 1 AS one", with_no_data=True)
        assert empty.job_id is None and empty.done() and empty.wait() is None
        assert empty.status()["state"] == "DONE"
        opened = db.open_materialized_view("empty")
        assert (opened.populated, opened.version, opened.row_count) == (False, 1, None)
        # INCREMENTAL cannot populate it: the job fails with the reason.
        with pytest.raises(dfmv.JobFailed, match="cannot be refreshed incrementally: first refresh"):
            opened.refresh(incremental=True)
        # Without with_no_data the client asks for data (the server's
        # default is none): the replaced view starts again at version 1,
        # and its population job makes version 2.
        replaced = db.create_materialized_view("empty", "SELECT 2 AS two", or_replace=True)
        assert (replaced.populated, replaced.version) == (True, 2)
        assert replaced.to_arrow().to_pylist() == [{"two": 2}]

        dropped = db.drop_materialized_view_async("empty")
        assert dropped.wait() is None
        assert db.list_materialized_views() == ["totals"]


def test_namespaces_and_paging(server):
    with dfmv.connect(server.url, token=server.token) as db:
        db.sql("CREATE SCHEMA analytics")
        names = [f"v{i:02}" for i in range(12)]
        for name in reversed(names):
            db.create_materialized_view(name, "SELECT 1 AS one", with_no_data=True, namespace="analytics")
        # Three requests of five: every view once, sorted.
        assert db.list_materialized_views(namespace="analytics", limit=5) == names
        assert db.list_materialized_views(namespace=["datafusion", "analytics"], limit=100) == names
        assert db.list_materialized_views() == []
        view = db.open_materialized_view("v03", namespace="analytics")
        assert view.namespace == ["datafusion", "analytics"]
        # Names that hold the delimiter, quotes and case.
        odd = db.create_materialized_view('Odd$"Name"', "SELECT 5 AS five", namespace="analytics")
        assert odd.name == 'Odd$"Name"'
        assert odd.to_arrow().to_pylist() == [{"five": 5}]
        db.drop_materialized_view('Odd$"Name"', namespace="analytics")
        with pytest.raises(dfmv.ViewNotFound, match='schema "nowhere" does not exist'):
            db.list_materialized_views(namespace="nowhere")


def test_cancel_keeps_the_previous_data(server):
    with dfmv.connect(server.url, token=server.token) as db:
        db.sql("CREATE TABLE big AS SELECT * FROM generate_series(1, 10) AS t(x)")
        view = db.create_materialized_view("slow", "SELECT sum(a.x * b.x + c.x) AS n FROM big a, big b, big c")
        db.sql("INSERT INTO big SELECT * FROM generate_series(11, 3000)")
        job = view.refresh_async()
        state = job.cancel()
        assert state["job_state"] == "CANCELLED", state
        with pytest.raises(dfmv.JobFailed) as failed:
            job.wait()
        assert (failed.value.state, failed.value.failure) == ("CANCELLED", None)
        assert view.reload().version == 2
        assert view.to_arrow().to_pylist() == [{"n": 35750}]


def test_every_error_class(server):
    with dfmv.connect(server.url, token=server.token) as db:
        with pytest.raises(dfmv.ViewNotFound) as e:
            db.open_materialized_view("nope")
        assert (e.value.status, e.value.code, e.value.lance_code, e.value.retryable) == (
            404, "undefined_table", 4, False)
        assert e.value.instance == "/v1/materialized_view/nope/describe"
        db.create_materialized_view("totals", QUERY)
        with pytest.raises(dfmv.ViewExists, match='relation "totals" already exists') as exists:
            db.create_materialized_view("totals", QUERY)
        assert (exists.value.status, exists.value.code, exists.value.lance_code) == (
            409, "duplicate_table", 5)
        with pytest.raises(dfmv.InvalidQuery, match="No field named nope") as invalid:
            db.create_materialized_view("bad", "SELECT nope FROM orders")
        assert (invalid.value.status, invalid.value.lance_code) == (400, 13)
        assert "bad" not in db.list_materialized_views()
        with pytest.raises(dfmv.NotSupported, match="only materialized views have versions") as ns:
            db.open_materialized_view("totals").refresh(source_version={"orders": 1})
        assert (ns.value.code, ns.value.lance_code) == ("feature_not_supported", 0)
        # A query that plans but fails while it runs: the population job
        # fails, and the view stays as the server committed it: no data.
        with pytest.raises(dfmv.JobFailed) as failed:
            db.create_materialized_view("broken", "SELECT CAST(region AS INT) AS r FROM orders")
        assert failed.value.state == "FAILED"
        assert failed.value.failure.phase == "execute"
        assert "Cannot cast string 'north'" in failed.value.failure.message
        broken = db.open_materialized_view("broken")
        assert (broken.populated, broken.version) == (False, 1)
        db.drop_materialized_view("broken")
        # Every class is a MatviewError.
        for cls in (dfmv.ViewNotFound, dfmv.ViewExists, dfmv.CommitConflict, dfmv.InvalidQuery,
                    dfmv.Unauthorized, dfmv.JobFailed, dfmv.NotSupported):
            assert issubclass(cls, dfmv.MatviewError)
    with dfmv.connect(server.url, token="wrong") as db:
        with pytest.raises(dfmv.Unauthorized, match="missing or wrong token") as e:
            db.list_materialized_views()
        assert (e.value.status, e.value.code, e.value.lance_code) == (401, "unauthorized", 16)
    with dfmv.connect(server.url) as db:
        with pytest.raises(dfmv.Unauthorized):
            db.sql("SELECT 1")


def test_a_lost_commit_race_is_a_retryable_commit_conflict():
    # The server answers 409 serialization_failure when another writer
    # committed first (tests/it/server.rs provokes it with two servers); the
    # client's class for it:
    body = json.dumps({
        "error": 'could not commit to materialized view "v"',
        "code": 14,
        "condition": "serialization_failure",
        "detail": "HINT: Retry.",
        "instance": "/v1/materialized_view/v/refresh",
        "retryable": True,
    }).encode()
    error = error_from_response(409, body)
    assert isinstance(error, dfmv.CommitConflict) and error.retryable
    assert (error.message, error.detail) == ('could not commit to materialized view "v"', "HINT: Retry.")
    assert (error.code, error.lance_code, error.instance) == (
        "serialization_failure", 14, "/v1/materialized_view/v/refresh")


def test_error_classes_from_lance_codes_and_older_answers():
    # An answer with a Lance code but no condition (another Lance Namespace
    # server) is classed by its code...
    exists = error_from_response(409, json.dumps({"error": "exists", "code": 5}).encode())
    assert isinstance(exists, dfmv.ViewExists)
    assert (exists.code, exists.lance_code) == (None, 5)
    conflict = error_from_response(409, json.dumps({"error": "lost", "code": 14}).encode())
    assert isinstance(conflict, dfmv.CommitConflict)
    unsupported = error_from_response(400, json.dumps({"error": "no", "code": 0}).encode())
    assert isinstance(unsupported, dfmv.NotSupported)
    # ...and one whose code is the condition name (servers before the
    # Lance Namespace error codes) by its condition.
    old = error_from_response(409, json.dumps({"error": "exists", "code": "duplicate_table"}).encode())
    assert isinstance(old, dfmv.ViewExists)
    assert (old.code, old.lance_code) == ("duplicate_table", None)
    assert str(error_from_response(502, b"Bad Gateway")) == "Bad Gateway"
