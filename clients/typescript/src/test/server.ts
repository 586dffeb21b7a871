// A real `dfmv serve` for a test: the binary (DFMV_BIN, default the
// repository's target/debug/dfmv) on an ephemeral loopback port over a
// temporary catalog holding `orders`, a CSV table under `src/`.

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

export const TOKEN = "s3cr3t";
export const ROOT = resolve(import.meta.dirname, "..", "..", "..", "..");

export class TestServer {
  private constructor(
    readonly url: string,
    readonly folder: string,
    private readonly child: ChildProcess,
    private readonly stderr: string[],
  ) {}

  static async start(): Promise<TestServer> {
    const bin = process.env.DFMV_BIN || join(ROOT, "target", "debug", "dfmv");
    if (!existsSync(bin)) throw new Error(`no dfmv binary at ${bin}: run \`cargo build --bin dfmv\` or set DFMV_BIN`);
    const folder = mkdtempSync(join(tmpdir(), "dfmv-ts-"));
    mkdirSync(join(folder, "src"));
    writeFileSync(join(folder, "src", "jan.csv"), "region,amount\nnorth,10\nsouth,5\nnorth,2\n");
    const env = { ...process.env, HOME: folder, DFMV_TOKEN: TOKEN };
    const catalog = join(folder, "catalog");
    execFileSync(bin, ["--catalog", catalog, "-q", "-c",
      `CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION '${join(folder, "src")}/'`], { cwd: folder, env });
    const child = spawn(bin, ["--catalog", catalog, "serve", "--http", "127.0.0.1:0", "--flight-sql", "none"], {
      cwd: folder,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const stderr: string[] = [];
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => stderr.push(chunk));
    const lines = createInterface({ input: child.stdout! });
    for await (const line of lines) {
      if (line.startsWith("REST on ")) {
        return new TestServer(line.slice("REST on ".length).trim(), folder, child, stderr);
      }
    }
    throw new Error(`dfmv serve did not start: ${stderr.join("")}`);
  }

  /** A new file in the folder of `orders`. */
  append(name: string, csv: string): void {
    writeFileSync(join(this.folder, "src", name), csv);
  }

  /** SIGTERM; it must stop cleanly. */
  async stop(): Promise<void> {
    const code = await new Promise<number | null>((done) => {
      this.child.on("exit", (c) => done(c));
      this.child.kill("SIGTERM");
    });
    rmSync(this.folder, { recursive: true, force: true });
    if (code !== 0) throw new Error(`dfmv serve exited ${code}: ${this.stderr.join("")}`);
  }
}
