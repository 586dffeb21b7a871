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
    // Committed unpopulated (version 1), then populated by a refresh job (version 2).
    assert.deepEqual([view.populated, view.freshness, view.rowCount, view.version], [true, "fresh", 2, 2]);
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
      version: 3,
      upstream: [],
    });
    assert.deepEqual([view.freshness, view.rowCount, view.version], ["fresh", 3, 3]);
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
    assert.deepEqual([state.state, state.table], ["DONE", "jobs_v"]);
    assert.ok(state.created_at_millis !== undefined && state.created_at_millis === state.creation_ms);
    // The population is a refresh: its result a refresh result, the view's version 2.
    const created = state.result as Record<string, unknown>;
    assert.deepEqual([created.view, created.mode, created.rows_written, created.version], ["jobs_v", "full", 1, 2]);
    const view = await db.openMaterializedView("jobs_v");
    const refresh = await view.refreshAsync({ full: true });
    assert.equal((await refresh.wait()).mode, "full");

    // WITH NO DATA: no job, the view's version 1.
    const empty = await db.createMaterializedViewAsync("jobs_empty", "SELECT 1 AS one", { withNoData: true });
    assert.equal(empty.jobId, null);
    assert.ok(await empty.done());
    assert.equal((await empty.status()).state, "DONE");
    const opened = await db.openMaterializedView("jobs_empty");
    assert.deepEqual([opened.populated, opened.version, opened.rowCount], [false, 1, null]);
    // INCREMENTAL cannot populate it: the job fails with the reason.
    await assert.rejects(opened.refresh({ incremental: true }), (e: unknown) =>
      e instanceof JobFailed && e.state === "FAILED" &&
      (e.failure?.message ?? "").includes("cannot be refreshed incrementally: first refresh"));
    // Without withNoData the client asks for data (the server's default is
    // none): the replaced view starts again at version 1, its population makes 2.
    const replaced = await db.createMaterializedView("jobs_empty", "SELECT 2 AS two", { orReplace: true });
    assert.deepEqual([replaced.populated, replaced.version], [true, 2]);
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
    assert.equal((await view.reload()).version, 2);
    assert.deepEqual(rows(await view.toArrow()), [{ n: 35750 }]);
  });

  test("every error class", async () => {
    await assert.rejects(db.openMaterializedView("nope"), (e: unknown) =>
      e instanceof ViewNotFound && e.code === "undefined_table" && e.lanceCode === 4 && !e.retryable &&
      e.status === 404 && e.instance === "/v1/materialized_view/nope/describe");
    await db.createMaterializedView("errs", QUERY);
    await assert.rejects(db.createMaterializedView("errs", QUERY), (e: unknown) =>
      e instanceof ViewExists && e.message === 'relation "errs" already exists' &&
      e.code === "duplicate_table" && e.lanceCode === 5 && e.status === 409);
    await assert.rejects(db.createMaterializedView("bad", "SELECT nope FROM orders"), (e: unknown) =>
      e instanceof InvalidQuery && e.message.includes("No field named nope") && e.lanceCode === 13);
    assert.ok(!(await db.listMaterializedViews()).includes("bad"));
    const view = await db.openMaterializedView("errs");
    await assert.rejects(view.refresh({ sourceVersion: { orders: 1 } }), (e: unknown) =>
      e instanceof NotSupported && e.message.includes("only materialized views have versions") &&
      e.code === "feature_not_supported" && e.lanceCode === 0);
    // A query that plans but fails while it runs: the population job fails,
    // and the view stays as the server committed it: no data.
    await assert.rejects(db.createMaterializedView("broken", "SELECT CAST(region AS INT) AS r FROM orders"), (e: unknown) =>
      e instanceof JobFailed && e.state === "FAILED" && e.failure?.phase === "execute" &&
      /Cannot cast string '[a-z]+' to value of Int32 type/.test(e.failure.message));
    const broken = await db.openMaterializedView("broken");
    assert.deepEqual([broken.populated, broken.version], [false, 1]);
    await db.dropMaterializedView("broken");
    await assert.rejects(connect(server.url, { token: "wrong" }).listMaterializedViews(), (e: unknown) =>
      e instanceof Unauthorized && e.message.includes("missing or wrong token") &&
      e.code === "unauthorized" && e.lanceCode === 16);
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
    // Version 1 is each view's definition, 2 its first data.
    assert.deepEqual([base.version, top.version], [2, 2]);
    assert.equal((await base.refresh()).version, 3);
    assert.deepEqual((await top.refresh()).sourceVersions, { "datafusion$public$pin_base": 3 });
    assert.deepEqual(rows(await top.toArrow()), [{ s: before + 100 }]);

    const pinned = await top.refresh({ sourceVersion: { pin_base: 2 } });
    assert.deepEqual(pinned.sourceVersions, { "datafusion$public$pin_base": 2 });
    assert.ok(pinned.detail.endsWith("; read pin_base at version 2"), pinned.detail);
    assert.deepEqual(rows(await top.toArrow()), [{ s: before }]);
    assert.deepEqual([top.freshness, top.version], ["stale", 4]);
    await assert.rejects(top.refresh({ sourceVersion: { pin_base: 4 } }), (e: unknown) =>
      e instanceof InvalidQuery && e.code === "invalid_parameter_value" && e.lanceCode === 13 &&
      e.message.includes("its versions are 1 to 3"));
    await db.dropMaterializedView("pin_top");
    await db.dropMaterializedView("pin_base");
  });

  test("versions and changes", async () => {
    const view = await db.createMaterializedView("ver_rows", "SELECT region, amount FROM orders");
    const first = view.rowCount as number;
    server.append("ver.csv", "region,amount\nfar,9\n");
    assert.equal((await view.refresh()).version, 3);
    // Version 1 is the definition (no data): not readable, not listed.
    assert.deepEqual(view.versions.map((v) => [v.version, v.rowCount]), [[2, first], [3, first + 1]]);
    assert.ok(view.versions.every((v) => v.committedAt instanceof Date && !Number.isNaN(v.committedAt.getTime())));
    assert.equal((await view.toArrow({ version: 2, filter: "region = 'far'" })).numRows, 0);
    assert.deepEqual(rows(await view.toArrow({ version: 3, filter: "region = 'far'" })), [{ region: "far", amount: 9 }]);
    assert.deepEqual(rows(await view.changes(2)), [{ region: "far", amount: 9, _change_type: "insert", _version: 3 }]);
    assert.equal((await view.changes(2, 2)).numRows, 0);
    await assert.rejects(view.toArrow({ version: 1 }), (e: unknown) =>
      e instanceof InvalidQuery && e.code === "invalid_parameter_value" &&
      e.message.includes("at version 1: it had not been populated then"));
    // The history, newest first, a page at a time.
    const history = await view.refreshes({ limit: 1 });
    assert.deepEqual(history.map((a) => [a.version, a.state, a.trigger, a.mode]), [
      [3, "succeeded", "server job", "incremental"],
      [2, "succeeded", "server job", "full"],
    ]);
    assert.ok(history.every((a) => a.jobId !== null && a.endedAt >= a.startedAt && a.ranBy.includes(" pid ")));
    assert.equal(history[0].filesRead, 1);
    await db.dropMaterializedView("ver_rows");
  });
});

test("a lost commit race is a retryable CommitConflict", () => {
  // The server answers 409 serialization_failure when another writer
  // committed first (tests/it/server.rs provokes it with two servers).
  const e = errorFromResponse(409, JSON.stringify({
    error: 'could not commit to materialized view "v"', code: 14, condition: "serialization_failure",
    detail: "HINT: Retry.", instance: "/v1/materialized_view/v/refresh", retryable: true,
  }));
  assert.ok(e instanceof CommitConflict && e.retryable);
  assert.equal(e.message, 'could not commit to materialized view "v"\nHINT: Retry.');
  assert.deepEqual([e.code, e.lanceCode, e.instance], ["serialization_failure", 14, "/v1/materialized_view/v/refresh"]);
});

test("error classes from Lance codes alone, and from older answers", () => {
  // A Lance code without a condition (another Lance Namespace server)...
  const exists = errorFromResponse(409, JSON.stringify({ error: "exists", code: 5 }));
  assert.ok(exists instanceof ViewExists);
  assert.deepEqual([exists.code, exists.lanceCode], [undefined, 5]);
  assert.ok(errorFromResponse(409, JSON.stringify({ error: "lost", code: 14 })) instanceof CommitConflict);
  assert.ok(errorFromResponse(400, JSON.stringify({ error: "no", code: 0 })) instanceof NotSupported);
  // ...and the condition as `code` (servers before the Lance error codes).
  const old = errorFromResponse(409, JSON.stringify({ error: "exists", code: "duplicate_table" }));
  assert.ok(old instanceof ViewExists);
  assert.deepEqual([old.code, old.lanceCode], ["duplicate_table", undefined]);
  assert.equal(errorFromResponse(502, "Bad Gateway").message, "Bad Gateway");
});
