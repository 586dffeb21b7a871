// The TypeScript client against a real `dfmv serve`: every method, jobs,
// paging, cancel, every error class, an incremental refresh.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  CommitConflict,
  Connection,
  InvalidQuery,
  Job,
  JobFailed,
  MatviewError,
  MaterializedView,
  NotSupported,
  Unauthorized,
  ViewExists,
  ViewNotFound,
  connect,
  errorFromResponse,
} from "../index.js";
import { TOKEN, TestServer } from "./server.js";

const QUERY = "SELECT region, count(*) AS n, sum(amount) AS total FROM orders GROUP BY region";

/** Rows as plain objects, bigint counts as numbers. */
function rows(table: { toArray(): Array<{ toJSON(): Record<string, unknown> }> }): Record<string, unknown>[] {
  return table.toArray().map((row) =>
    Object.fromEntries(Object.entries(row.toJSON()).map(([k, v]) => [k, typeof v === "bigint" ? Number(v) : v])),
  );
}

describe("a dfmv server", () => {
  let server: TestServer;
  let db: Connection;
  before(async () => {
    server = await TestServer.start();
    db = connect(server.url, { token: TOKEN });
  });
  after(async () => server.stop());

  test("create, open, refresh incrementally, read and drop", async () => {
    const view = await db.createMaterializedView("totals", QUERY);
    assert.ok(view instanceof MaterializedView);
    assert.deepEqual([view.name, view.namespace, view.query], ["totals", ["datafusion", "public"], QUERY]);
    assert.deepEqual(view.columns, [
      { name: "region", type: "Utf8", nullable: true },
      { name: "n", type: "Int64", nullable: false },
      { name: "total", type: "Int64", nullable: true },
    ]);
    assert.deepEqual([view.populated, view.freshness, view.rowCount, view.version], [true, "fresh", 2, 1]);
    assert.ok(view.lastRefreshed instanceof Date && !Number.isNaN(view.lastRefreshed.getTime()));
    assert.deepEqual(rows(await view.toArrow({ filter: "region = 'north'" })), [{ region: "north", n: 2, total: 12 }]);

    server.append("feb.csv", "region,amount\neast,7\nnorth,1\n");
    assert.equal((await db.openMaterializedView("totals")).freshness, "stale");
    assert.deepEqual((await db.openMaterializedView("totals")).changedSources, ["orders"]);
    const result = await view.refresh();
    assert.deepEqual(result, {
      view: "totals",
      mode: "incremental",
      rowsWritten: 3,
      rowsDeleted: 2,
      detail: "orders: 1 file(s) appended; merged into the existing groups",
      sourceVersion: result.sourceVersion,
      sourceVersions: {},
      version: 2,
      upstream: [],
    });
    assert.deepEqual([view.freshness, view.rowCount, view.version], ["fresh", 3, 2]);
    assert.equal((await view.refresh()).mode, "no_op");
    assert.equal((await view.refresh({ full: true })).mode, "full");
    const table = await view.toArrow({ columns: ["region", "total"], filter: "total > 6", limit: 10 });
    assert.deepEqual(table.schema.fields.map((f) => f.name), ["region", "total"]);
    assert.deepEqual(
      rows(table).sort((a, b) => String(a.region).localeCompare(String(b.region))),
      [{ region: "east", total: 7 }, { region: "north", total: 13 }],
    );
    assert.deepEqual(rows(await db.sql("SELECT sum(total) AS s FROM totals")), [{ s: 25 }]);

    await db.dropMaterializedView("totals");
    assert.deepEqual(await db.listMaterializedViews(), []);
    await assert.rejects(view.reload(), (e: unknown) =>
      e instanceof ViewNotFound && e.message === 'materialized view "totals" does not exist' && e.status === 404);
  });

  test("jobs: wait, status, done, finished at once", async () => {
    const job = await db.createMaterializedViewAsync("jobs_v", "SELECT 1 AS one");
    assert.ok(job instanceof Job && typeof job.jobId === "string");
    assert.equal(await job.wait(60_000), undefined);
    assert.ok(await job.done());
    const state = await job.status();
    assert.deepEqual([state.job_state, state.job_type], ["DONE", "CREATE_MATERIALIZED_VIEW"]);
    const view = await db.openMaterializedView("jobs_v");
    const refresh = await view.refreshAsync({ full: true });
    assert.equal((await refresh.wait()).mode, "full");

    const empty = await db.createMaterializedViewAsync("jobs_empty", "SELECT 1 AS one", { withNoData: true });
    assert.equal(empty.jobId, null);
    assert.ok(await empty.done());
    assert.equal((await db.openMaterializedView("jobs_empty")).populated, false);
    const replaced = await db.createMaterializedView("jobs_empty", "SELECT 2 AS two", { orReplace: true });
    assert.deepEqual(rows(await replaced.toArrow()), [{ two: 2 }]);
    assert.equal((await db.dropMaterializedViewAsync("jobs_empty")).jobId, null);
    await db.dropMaterializedView("jobs_v");
  });

  test("namespaces and paging over more views than a page", async () => {
    await db.sql("CREATE SCHEMA analytics");
    const names = Array.from({ length: 12 }, (_, i) => `v${String(i).padStart(2, "0")}`);
    for (const name of [...names].reverse()) {
      await db.createMaterializedView(name, "SELECT 1 AS one", { withNoData: true, namespace: "analytics" });
    }
    assert.deepEqual(await db.listMaterializedViews({ namespace: "analytics", limit: 5 }), names);
    assert.deepEqual(await db.listMaterializedViews({ namespace: ["datafusion", "analytics"] }), names);
    const view = await db.openMaterializedView("v03", { namespace: "analytics" });
    assert.deepEqual(view.namespace, ["datafusion", "analytics"]);
    const odd = await db.createMaterializedView('Odd$"Name"', "SELECT 5 AS five", { namespace: "analytics" });
    assert.equal(odd.name, 'Odd$"Name"');
    assert.deepEqual(rows(await odd.toArrow()), [{ five: 5 }]);
    await db.dropMaterializedView('Odd$"Name"', { namespace: "analytics" });
    await assert.rejects(db.listMaterializedViews({ namespace: "nowhere" }), ViewNotFound);
  });

  test("cancel keeps the previous data", async () => {
    await db.sql("CREATE TABLE big AS SELECT * FROM generate_series(1, 10) AS t(x)");
    const view = await db.createMaterializedView("slow", "SELECT sum(a.x * b.x + c.x) AS n FROM big a, big b, big c");
    await db.sql("INSERT INTO big SELECT * FROM generate_series(11, 3000)");
    const job = await view.refreshAsync();
    assert.equal((await job.cancel()).job_state, "CANCELLED");
    await assert.rejects(job.wait(), (e: unknown) => e instanceof JobFailed && e.state === "CANCELLED" && e.failure === null);
    assert.equal((await view.reload()).version, 1);
    assert.deepEqual(rows(await view.toArrow()), [{ n: 35750 }]);
  });

  test("every error class", async () => {
    await assert.rejects(db.openMaterializedView("nope"), (e: unknown) =>
      e instanceof ViewNotFound && e.code === "undefined_table" && !e.retryable);
    await db.createMaterializedView("errs", QUERY);
    await assert.rejects(db.createMaterializedView("errs", QUERY), (e: unknown) =>
      e instanceof ViewExists && e.message === 'relation "errs" already exists');
    await assert.rejects(db.createMaterializedView("bad", "SELECT nope FROM orders"), (e: unknown) =>
      e instanceof InvalidQuery && e.message.includes("No field named nope"));
    const view = await db.openMaterializedView("errs");
    await assert.rejects(view.refresh({ sourceVersion: { orders: 1 } }), (e: unknown) =>
      e instanceof NotSupported && e.message.includes("only materialized views have versions"));
    await assert.rejects(db.createMaterializedView("broken", "SELECT CAST(region AS INT) AS r FROM orders"), (e: unknown) =>
      e instanceof JobFailed && e.state === "FAILED" && e.failure?.phase === "execute" &&
      /Cannot cast string '[a-z]+' to value of Int32 type/.test(e.failure.message));
    assert.ok(!(await db.listMaterializedViews()).includes("broken"));
    await assert.rejects(connect(server.url, { token: "wrong" }).listMaterializedViews(), (e: unknown) =>
      e instanceof Unauthorized && e.message.includes("bearer token"));
    await assert.rejects(connect(server.url).sql("SELECT 1"), Unauthorized);
    for (const cls of [ViewNotFound, ViewExists, CommitConflict, InvalidQuery, Unauthorized, JobFailed, NotSupported]) {
      assert.ok(cls.prototype instanceof MatviewError);
    }
    await db.dropMaterializedView("errs");
  });

  test("refresh reads a source view at a pinned version", async () => {
    const base = await db.createMaterializedView("pin_base", "SELECT region, amount FROM orders");
    const top = await db.createMaterializedView("pin_top", "SELECT sum(amount) AS s FROM pin_base");
    const before = rows(await top.toArrow())[0].s as number;
    server.append("pin.csv", "region,amount\nwest,100\n");
    assert.equal((await base.refresh()).version, 2);
    assert.deepEqual((await top.refresh()).sourceVersions, { "datafusion$public$pin_base": 2 });
    assert.deepEqual(rows(await top.toArrow()), [{ s: before + 100 }]);

    const pinned = await top.refresh({ sourceVersion: { pin_base: 1 } });
    assert.deepEqual(pinned.sourceVersions, { "datafusion$public$pin_base": 1 });
    assert.ok(pinned.detail.endsWith("; read pin_base at version 1"), pinned.detail);
    assert.deepEqual(rows(await top.toArrow()), [{ s: before }]);
    assert.deepEqual([top.freshness, top.version], ["stale", 3]);
    await assert.rejects(top.refresh({ sourceVersion: { pin_base: 3 } }), (e: unknown) =>
      e instanceof InvalidQuery && e.code === "invalid_parameter_value" && e.message.includes("its versions are 1 to 2"));
    await db.dropMaterializedView("pin_top");
    await db.dropMaterializedView("pin_base");
  });
});

test("a lost commit race is a retryable CommitConflict", () => {
  // The server answers 409 serialization_failure when another writer
  // committed first (tests/server.rs provokes it with two servers).
  const e = errorFromResponse(409, JSON.stringify({
    error: 'could not commit to materialized view "v"', code: "serialization_failure",
    detail: "HINT: Retry.", retryable: true,
  }));
  assert.ok(e instanceof CommitConflict && e.retryable);
  assert.equal(e.message, 'could not commit to materialized view "v"\nHINT: Retry.');
});
