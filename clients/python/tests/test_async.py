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
            "incremental", 3, 2, 2)
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
        assert (await jobs[0].status())["job_state"] == "DONE"
        assert await db.list_materialized_views(limit=2) == ["totals", "v0", "v1", "v2", "v3"]
        job = await view.refresh_async(full=True)
        assert (await job.wait()).mode == "full"

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
        with pytest.raises(dfmv.ViewExists):
            await db.create_materialized_view("slow", "SELECT 1")
        with pytest.raises(dfmv.InvalidQuery):
            await db.create_materialized_view("bad", "SELEC 1")
        with pytest.raises(dfmv.ViewNotFound):
            await db.open_materialized_view("nope")
    async with dfmv.connect_async(server.url, token="wrong") as db:
        with pytest.raises(dfmv.Unauthorized):
            await db.sql("SELECT 1")
