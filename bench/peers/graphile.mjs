#!/usr/bin/env node
// graphile-worker as a peer in relaybus's benchmark (bench/peers/README.md): the runner
// protocol (info, reset, preload, drain, publish, mixed) through graphile-worker's own
// Node.js API, writing the same record files as `relaybus-bench`
// (src/client/bench/bench_processes.cpp) so that the harness validates every run the same way.
//
// Publishing: makeWorkerUtils().addJob (add_job, one job per transaction) for --batch 1,
// addJobs (add_jobs, one statement for the whole batch) above. Consuming: run() with the
// task list {bench: handler}; every consumer and every publisher is a process of its own
// (child_process.fork of this file), started and made ready before the measurement window
// opens. A keyed event goes into the named queue of its key (queue_name = key): the queues
// graphile-worker runs one job at a time, in (priority, run_at) order, which is how it keeps
// per-key order. The runner's own bookkeeping queries (work left, WAL position, reset)
// go through `pg` directly and carry /*relaybus-bench-harness*/.
//
// The npm packages come from bench/peers/node (pinned in its package-lock.json; install.sh).
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import fs from "node:fs";
import path from "node:path";
import {
  HARNESS, bookkeeping, childMessages, main, nowUs, num, parseConninfo, publisherLoop, required, sleep,
} from "./node_runner.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const require = createRequire(path.join(HERE, "node", "package.json"));
const SCHEMA = "graphile_worker";
const TASK = "bench";
const PRELOAD_CHUNK = 1000;

// The presets. `defaults`: graphile-worker as installed (the library's own defaults:
// concurrentJobs 1, pollInterval 2000 ms, maxPoolSize 10, no local queue, no batched
// completion, useNodeTime false). `tuned`: the configuration of its documentation's
// Performance page ("Quick stats ... achieved with this configuration"), with the local
// queue's size taken from --batch when given.
const DEFAULT_TUNED_BATCH = 500;
function presetOptions(preset, batch) {
  if (preset === "defaults") return {};
  if (preset !== "tuned") throw new Error(`unknown preset ${preset}`);
  return {
    concurrentJobs: 24,
    maxPoolSize: 25,
    localQueue: { size: batch || DEFAULT_TUNED_BATCH },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  };
}

// The connection string graphile-worker gets (so that it makes its own pool, with its own
// maxPoolSize): a URL with the socket directory or host as a query parameter.
function connectionUrl(conn) {
  const f = parseConninfo(conn);
  if (f.url) return f.url;
  const user = encodeURIComponent(f.user || process.env.PGUSER || "postgres");
  const pass = f.password ? ":" + encodeURIComponent(f.password) : "";
  const db = encodeURIComponent(f.dbname || f.user || "postgres");
  const q = [];
  if (f.host) q.push("host=" + encodeURIComponent(f.host));
  if (f.port) q.push("port=" + encodeURIComponent(f.port));
  return `postgresql://${user}${pass}@/${db}${q.length ? "?" + q.join("&") : ""}`;
}

// ---------------------------------------------------------------------------------------
// graphile-worker.

function gw() {
  return require("graphile-worker");
}

function quietLogger() {
  const { Logger } = gw();
  return new Logger(() => (level, message) => {
    if (level === "error" || level === "warning") process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  });
}

async function workerUtils(conn) {
  return gw().makeWorkerUtils({ connectionString: connectionUrl(conn), schema: SCHEMA, logger: quietLogger() });
}

function payloadOf(e, publisher) {
  const p = { id: e.id, key: e.key, n: e.n };
  if (publisher !== undefined) p.p = publisher;
  return p;
}

function jobSpec(e, publisher) {
  const spec = { identifier: TASK, payload: payloadOf(e, publisher) };
  if (e.key) spec.queueName = e.key;
  return spec;
}

// Jobs not finished: everything in the jobs table but the permanently failed (completed
// jobs are deleted).
async function unfinished(db) {
  const r = await db.query(`SELECT ${HARNESS} count(*)::bigint AS n FROM ${SCHEMA}._private_jobs
                             WHERE attempts < max_attempts OR locked_at IS NOT NULL`);
  return Number(r.rows[0].n);
}

async function runConsumer(spec) {
  const handled = [];
  let runner = null;
  let stopping = false;
  let started = false;
  const options = presetOptions(spec.preset, spec.batch);
  const finish = async () => {
    if (stopping) return;
    stopping = true;
    let code = 0;
    try {
      if (runner) await runner.stop();
    } catch (e) {
      process.stderr.write(`graphile consumer ${spec.index}: ${e.stack || e}\n`);
      code = 1;
    }
    fs.writeFileSync(spec.out, handled.join(""));
    process.stderr.write(`graphile consumer ${spec.index} (${spec.preset}): handled ${handled.length}\n`);
    process.exit(code);
  };
  gw(); // load the library before saying ready
  childMessages({
    go: async () => {
      if (started) return;
      started = true;
      try {
        runner = await gw().run({
          connectionString: connectionUrl(spec.conn),
          noHandleSignals: true,
          logger: quietLogger(),
          parsedCronItems: [],
          taskList: {
            [TASK]: (payload, helpers) => {
              // The no-op handler: only note what ran, and when.
              handled.push(`${payload.id}\t${TASK}\t${payload.key ?? "-"}\t${payload.n}\t${nowUs()}\t${helpers.job.attempts}\n`);
            },
          },
          preset: { worker: { schema: SCHEMA, ...options } },
        });
        if (stopping) await runner.stop();
      } catch (e) {
        process.stderr.write(`graphile consumer ${spec.index}: ${e.stack || e}\n`);
        process.exit(1);
      }
    },
    stop: finish,
  });
  process.send({ t: "ready" });
}

async function runPublisher(spec) {
  const utils = await workerUtils(spec.conn);
  // Connected before the window opens, as relaybus's publisher is.
  await utils.withPgClient((c) => c.query(`SELECT ${HARNESS} 1`));
  let stop = false;
  let go;
  const goPromise = new Promise((r) => { go = r; });
  childMessages({ go: () => go(), stop: () => { stop = true; go(); } });
  process.send({ t: "ready" });
  await goPromise;
  await publisherLoop(spec,
    (e, p) => utils.addJob(TASK, payloadOf(e, p), e.key ? { queueName: e.key } : {}),
    (evs, p) => utils.addJobs(evs.map((e) => jobSpec(e, p))),
    () => stop);
  await utils.release();
  process.exit(0);
}

// ---------------------------------------------------------------------------------------
// Subcommands.

function version() {
  try {
    return require("graphile-worker/package.json").version;
  } catch {
    return JSON.parse(fs.readFileSync(path.join(HERE, "node", "package.json"), "utf8")).dependencies["graphile-worker"];
  }
}

function info() {
  console.log(JSON.stringify({
    name: "graphile-worker",
    version: version(),
    ordered_keys: true,
    acknowledges: "jobs",
    notes:
      "Node.js API of graphile-worker " + version() + ". Publish: makeWorkerUtils().addJob (SQL add_job, one job per " +
      "transaction) for --batch 1; addJobs (SQL add_jobs over json_populate_recordset, the whole batch in one statement, " +
      "the fastest documented way from the JS API) above, and for preload in chunks of 1,000. Consume: run() with the " +
      "task list {bench: handler}, one run() per consumer process. Event id, key and n travel in the job payload " +
      "({id, key, n, p}). Per-key order: a keyed event is added with queue_name = its key; graphile-worker runs the jobs " +
      "of one named queue one at a time, in (priority, run_at) order; unkeyed events have no queue and run in parallel. " +
      "Named queues are rows of _private_job_queues that are never removed, one per key (the library warns against " +
      "high-cardinality queue names), and every job fetch locks all available queue rows (FOR UPDATE SKIP LOCKED), so " +
      "a fetch costs time and WAL in proportion to the keys used so far: with 2,500 keys a one-job fetch (defaults) " +
      "wrote about 70 KB of WAL. Preset defaults: the library's defaults (concurrentJobs 1, pollInterval 2000 ms, " +
      "maxPoolSize 10, no local queue, completeJobBatchDelay/failJobBatchDelay -1 = off, useNodeTime false; new jobs are " +
      "announced by LISTEN/NOTIFY); --batch does not apply (each worker fetches one job). Preset tuned: the " +
      "configuration of the docs' Performance page: concurrentJobs 24, maxPoolSize 25, localQueue.size = --batch " +
      `(default ${DEFAULT_TUNED_BATCH}), completeJobBatchDelay 0, failJobBatchDelay 0. Caveat: in 0.17.3 a local queue can ` +
      "fetch two jobs of one named queue in one batch and run them at once (graphile/worker issue 621, fixed after " +
      "0.17.3; 0.18.0 needs Node >= 22.18), so the tuned preset can break per-key order when the same key has several " +
      "jobs ready at once. Delivery: at-least-once; a failed job is retried with exponential backoff up to max_attempts " +
      "(25) and then kept as permanently failed; a job locked by a crashed worker is unlocked after 4 hours. The " +
      "measurement window opens once the consumer and publisher processes have loaded the library (publishers also " +
      "connected). reset and preload end with VACUUM ANALYZE of graphile-worker's tables.",
  }));
}

async function emptyTables(db, tables) {
  // Under graphile-worker's own maintenance (workers unlocking stale jobs, cron) a
  // TRUNCATE can meet a lock cycle: take the tables in one LOCK with a lock timeout and
  // try again on a deadlock or a timeout.
  for (let attempt = 1; ; attempt++) {
    try {
      await db.query("BEGIN");
      await db.query(`SET LOCAL lock_timeout = '5s'`);
      await db.query(`LOCK TABLE ${tables.join(", ")} IN ACCESS EXCLUSIVE MODE`);
      await db.query(`TRUNCATE ${tables.join(", ")} RESTART IDENTITY CASCADE`);
      await db.query("COMMIT");
      return;
    } catch (e) {
      await db.query("ROLLBACK").catch(() => {});
      if (attempt >= 10 || !["40P01", "55P03"].includes(e.code)) throw e;
      await sleep(200 * attempt);
    }
  }
}

async function vacuumAnalyze(db) {
  const tables = await jobTables(db, true);
  for (const t of tables) await db.query(`${HARNESS} VACUUM ANALYZE ${t}`);
}

async function jobTables(db, all = false) {
  const r = await db.query(`SELECT ${HARNESS} format('%I.%I', schemaname, tablename) AS t FROM pg_tables
                             WHERE schemaname = $1 ${all ? "" : "AND tablename NOT IN ('migrations', '_private_tasks')"}
                             ORDER BY tablename`, [SCHEMA]);
  return r.rows.map((x) => x.t);
}

async function reset(args) {
  const conn = required(args, "conn");
  const utils = await workerUtils(conn);
  await utils.migrate();
  await utils.release();
  const db = await bookkeeping(conn);
  // Jobs, named queues, known crontabs; the task identifiers and migrations stay.
  await emptyTables(db, await jobTables(db));
  await vacuumAnalyze(db);
  await db.end();
}

async function preload(args) {
  const conn = required(args, "conn");
  const n = num(args, "events", 0);
  // --first: the first event's number (the held-snapshot rounds preload again and again
  // into a queue they never empty, bench/held_bench.py); ids e-<first> .. e-<first + n - 1>.
  const first = num(args, "first", 1);
  const keys = Math.max(1, Math.floor(n / 4));
  const utils = await workerUtils(conn);
  for (let c = 0; c * PRELOAD_CHUNK < n; c++) {
    const specs = [];
    for (let i = first + c * PRELOAD_CHUNK; i < first + Math.min((c + 1) * PRELOAD_CHUNK, n); i++) {
      specs.push(jobSpec({ id: `e-${i}`, key: i % 2 === 0 ? `k${i % keys}` : null, n: i }));
    }
    await utils.addJobs(specs);
  }
  await utils.release();
  const db = await bookkeeping(conn);
  if (args["no-vacuum"] === undefined) await vacuumAnalyze(db);  // --no-vacuum: autovacuum only (held rounds)
  await db.end();
}

// `stored` and `left` (README.md): what the harness checks a run against.
async function stored(db) {
  return (await db.query(`SELECT ${HARNESS} payload->>'id' AS id FROM ${SCHEMA}._private_jobs`)).rows;
}

async function left(db) {
  return (await db.query(`SELECT ${HARNESS} count(*) FILTER (WHERE attempts < max_attempts OR locked_at IS NOT NULL)::bigint AS left, count(*) FILTER (WHERE attempts >= max_attempts AND locked_at IS NULL)::bigint AS dead FROM ${SCHEMA}._private_jobs`)).rows[0];
}

main({
  name: "graphile.mjs", self: SELF, presetOptions, info, reset, preload, unfinished, runConsumer, runPublisher, stored, left,
}, process.argv.slice(2)).then(
  (code) => { if (process.argv[2] !== "__child") process.exit(code ?? 0); },
  (e) => { process.stderr.write(`graphile.mjs: ${e.stack || e}\n`); process.exit(1); });
