// The TypeScript quickstart of docs/clients.md: the code between the
// markers below is what that page shows (with the import from the package,
// the address http://127.0.0.1:2333 instead of the test server's, and a
// comment where the test adds a file), so the documentation cannot drift
// from what compiles and runs.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { connect } from "../index.js";
import { ROOT, TOKEN, TestServer } from "./server.js";

test("the documented quickstart runs and prints what it says", async () => {
  const server = await TestServer.start();
  const printed: string[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => void printed.push(args.map(String).join(" "));
  try {
    // quickstart:begin
    const db = connect(server.url, { token: TOKEN });
    const view = await db.createMaterializedView(
      "totals", "SELECT region, sum(amount) AS total FROM orders GROUP BY region");
    console.log(view.rowCount, view.freshness);                         // 2 fresh
    server.append("feb.csv", "region,amount\neast,7\nnorth,1\n");
    const result = await view.refresh();
    console.log(result.mode, result.rowsWritten);                       // incremental 3
    console.log((await view.toArrow({ filter: "total > 6" })).numRows); // 2
    const job = await view.refreshAsync({ full: true });                // a Job: status(), done(), cancel(), wait()
    console.log((await job.wait()).mode);                               // full
    // quickstart:end
  } finally {
    console.log = log;
    await server.stop();
  }
  const source = readFileSync(join(ROOT, "clients", "typescript", "src", "test", "quickstart.test.ts"), "utf8");
  const body = source.split("// quickstart:begin\n")[1]!.split("    // quickstart:end")[0]!;
  const expected = body.match(/\/\/ (?!a Job)(\S.*)$/gm)!.map((c) => c.slice(3));
  assert.deepEqual(printed, expected);
  const shown = 'import { connect } from "@datafusion-matview/client";\n\n' + body
    .split("\n")
    .map((line) => line.slice(4))
    .join("\n")
    .replace("connect(server.url, { token: TOKEN })", 'connect("http://127.0.0.1:2333")')
    .replace(/server\.append\(.*\);/, "// ... a new file lands in the folder of orders ...");
  const page = readFileSync(join(ROOT, "docs", "clients.md"), "utf8");
  assert.ok(page.includes("```ts\n" + shown + "```"), `docs/clients.md lacks the quickstart:\n${shown}`);
});
