"""The asyncio client against a real server."""

from __future__ import annotations

import asyncio

import pytest

import datafusion_matview as dfmv

QUERY = "SELECT region, sum(amount) AS total FROM orders GROUP BY region"


async def test_async_create_refresh_list_read_drop(server):
    async with dfmv.connect_async(server.url, token=server.token) as db:
        view = await db.create_materialized_view("totals", QUERY)
        assert isinstance(view, dfmv.AsyncMaterializedView)
        assert (view.populated, view.row_count, view.freshness) == (True, 2, "fresh")
        server.append("feb.csv", "region,amount\neast,7\nnorth,1\n")
        result = await view.refresh()
        assert (result.mode, result.rows_written, result.rows_deleted, result.version) == (
            "incremental", 3, 2, 3)
        assert view.row_count == 3
        rows = (await view.to_arrow(filter="region <> 'south'")).sort_by("region").to_pylist()
        assert rows == [{"region": "east", "total": 7}, {"region": "north", "total": 13}]

        # Jobs, several at once.
        jobs = await asyncio.gather(*(
            db.create_materialized_view_async(f"v{i}", f"SELECT {i} AS i") for i in range(4)
        ))
        assert all(isinstance(job, dfmv.AsyncJob) for job in jobs)
        assert await asyncio.gather(*(job.wait(timeout=60) for job in jobs)) == [None] * 4
        assert await jobs[0].done()
        status = await jobs[0].status()
        assert (status["job_state"], status["state"], status["table"]) == ("DONE", "DONE", "v0")
        assert status["result"]["version"] == 2
        assert await db.list_materialized_views(limit=2) == ["totals", "v0", "v1", "v2", "v3"]
        job = await view.refresh_async(full=True)
        assert (await job.wait()).mode == "full"
        history = await view.refreshes()
        assert [(a.version, a.mode, a.job_id) for a in history] == [
            (4, "full", job.job_id), (3, "incremental", history[1].job_id), (2, "full", history[2].job_id)
        ]
        changes = (await view.changes(3, 4)).to_pylist()
        assert changes == [], "a full refresh over the same rows changes none"

        assert (await db.sql("SELECT count(*) AS n FROM v3")).to_pylist() == [{"n": 1}]
        opened = await db.open_materialized_view("v2")
        assert (await opened.to_arrow()).to_pylist() == [{"i": 2}]
        await db.drop_materialized_view("v2")
        assert (await db.drop_materialized_view_async("v3")).job_id is None
        assert await db.list_materialized_views() == ["totals", "v0", "v1"]
        with pytest.raises(dfmv.ViewNotFound):
            await opened.reload()


async def test_async_cancel_and_errors(server):
    async with dfmv.connect_async(server.url, token=server.token) as db:
        await db.sql("CREATE TABLE big AS SELECT * FROM generate_series(1, 10) AS t(x)")
        view = await db.create_materialized_view(
            "slow", "SELECT sum(a.x * b.x + c.x) AS n FROM big a, big b, big c")
        await db.sql("INSERT INTO big SELECT * FROM generate_series(11, 3000)")
        job = await view.refresh_async()
        assert (await job.cancel())["job_state"] == "CANCELLED"
        with pytest.raises(dfmv.JobFailed):
            await job.wait()
        assert (await view.to_arrow()).to_pylist() == [{"n": 35750}]
        with pytest.raises(dfmv.ViewExists) as exists:
            await db.create_materialized_view("slow", "SELECT 1")
        assert (exists.value.code, exists.value.lance_code) == ("duplicate_table", 5)
        with pytest.raises(dfmv.InvalidQuery) as invalid:
            await db.create_materialized_view("bad", "SELEC 1")
        assert invalid.value.lance_code == 13
        with pytest.raises(dfmv.ViewNotFound) as missing:
            await db.open_materialized_view("nope")
        assert (missing.value.code, missing.value.lance_code) == ("undefined_table", 4)
        # WITH NO DATA: no job, the view's version 1.
        empty = await db.create_materialized_view_async("empty", "SELECT 1 AS one", with_no_data=True)
        assert empty.job_id is None and await empty.done() and await empty.wait() is None
        opened = await db.open_materialized_view("empty")
        assert (opened.populated, opened.version) == (False, 1)
    async with dfmv.connect_async(server.url, token="wrong") as db:
        with pytest.raises(dfmv.Unauthorized) as e:
            await db.sql("SELECT 1")
        assert e.value.lance_code == 16
