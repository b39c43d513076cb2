#!/usr/bin/env node
// pg-boss as a peer in relaybus's benchmark (bench/peers/README.md): the runner protocol
// (info, reset, preload, drain, publish, mixed) through pg-boss's own Node.js API, writing
// the same record files as `relaybus-bench` (src/client/bench/bench_processes.cpp) so that
// the harness validates every run the same way.
//
// Publishing: send() (one job per call and transaction) for --batch 1, insert() (one
// statement for the whole batch) above and for the preload. Consuming: start() and work()
// on the queue "bench", with a batch handler; every consumer and every publisher is a
// process of its own (child_process.fork of this file), made ready before the measurement
// window opens. pg-boss has no per-key order, so keys only travel in the payload and the
// harness checks no order. The runner's own bookkeeping queries (work left, WAL position,
// reset) go through `pg` directly and carry /*relaybus-bench-harness*/.
//
// The npm packages come from bench/peers/node (pinned in its package-lock.json; install.sh).
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import fs from "node:fs";
import path from "node:path";
import {
  HARNESS, bookkeeping, childMessages, main, nowUs, num, pgConfig, publisherLoop, required, sleep,
} from "./node_runner.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const require = createRequire(path.join(HERE, "node", "package.json"));
const SCHEMA = "pgboss";
const QUEUE = "bench";
const PRELOAD_CHUNK = 1000;

// The presets. `defaults`: pg-boss as installed: new PgBoss(conn) with its defaults (pool of
// 10 connections, maintenance every 120 s, cron on) and one work() per consumer process with
// work()'s defaults: batchSize 1, pollingIntervalSeconds 2 ("1 job every 2 seconds"); --batch
// does not apply. `tuned`: pg-boss 10 documents no performance preset, so this is what its
// work() options allow: batchSize = --batch (default 500), pollingIntervalSeconds 0.5 (the
// minimum it accepts), TUNED_WORKERS work() calls per process ("each call to work() adds a
// new worker"; teamSize is gone since pg-boss 10) with a pool of TUNED_WORKERS + 2, and
// notifyWorker(id) after a full batch: a pg-boss 10 worker waits out its polling interval
// after every fetch, full or not, and notifyWorker is its documented way to skip that wait.
// 4 workers: on this machine 1 drains 20k at ~17k/s, 4 at 22-26k/s, 8 and 16 no faster.
const DEFAULT_TUNED_BATCH = 500;
const TUNED_WORKERS = 4;
function presetOptions(preset, batch) {
  if (preset === "defaults") return { boss: {}, work: {}, workers: 1, refetchWhenFull: false };
  if (preset !== "tuned") throw new Error(`unknown preset ${preset}`);
  return {
    boss: { max: TUNED_WORKERS + 2 },
    work: { batchSize: batch || DEFAULT_TUNED_BATCH, pollingIntervalSeconds: 0.5 },
    workers: TUNED_WORKERS,
    refetchWhenFull: true,
  };
}

// ---------------------------------------------------------------------------------------
// pg-boss.

function PgBoss() {
  return require("pg-boss");
}

async function startBoss(conn, options = {}) {
  const Boss = PgBoss();
  const boss = new Boss({ ...pgConfig(conn), schema: SCHEMA, ...options });
  boss.on("error", (e) => process.stderr.write(`pg-boss error: ${e.message}\n`));
  await boss.start();
  return boss;
}

function dataOf(e, publisher) {
  const d = { id: e.id, key: e.key, n: e.n };
  if (publisher !== undefined) d.p = publisher;
  return d;
}

// Jobs not finished: created, retry or active (completed, cancelled and failed are done).
async function unfinished(db) {
  const r = await db.query(`SELECT ${HARNESS} count(*)::bigint AS n FROM ${SCHEMA}.job
                             WHERE name = $1 AND state < 'completed'`, [QUEUE]);
  return Number(r.rows[0].n);
}

async function runConsumer(spec) {
  const handled = [];
  let boss = null;
  let stopping = false;
  let started = false;
  const { boss: bossOptions, work, workers, refetchWhenFull } = presetOptions(spec.preset, spec.batch);
  const workerIds = [];
  const makeHandler = (w) => async (jobs) => {
    // The no-op handler: only note what ran, and when; returning completes the batch.
    for (const job of jobs) {
      const d = job.data;
      handled.push(`${d.id}\t${QUEUE}\t${d.key ?? "-"}\t${d.n}\t${nowUs()}\t${job.retryCount + 1}\n`);
    }
    // A full batch: more is probably waiting, so skip this worker's polling wait.
    if (refetchWhenFull && jobs.length >= work.batchSize && workerIds[w]) boss.notifyWorker(workerIds[w]);
  };
  const finish = async () => {
    if (stopping) return;
    stopping = true;
    let code = 0;
    try {
      if (boss) await boss.stop({ graceful: true, wait: true });
    } catch (e) {
      process.stderr.write(`pg-boss consumer ${spec.index}: ${e.stack || e}\n`);
      code = 1;
    }
    fs.writeFileSync(spec.out, handled.join(""));
    process.stderr.write(`pg-boss consumer ${spec.index} (${spec.preset}): handled ${handled.length}\n`);
    process.exit(code);
  };
  PgBoss(); // load the library before saying ready
  childMessages({
    go: async () => {
      if (started) return;
      started = true;
      try {
        boss = await startBoss(spec.conn, bossOptions);
        // includeMetadata for retryCount (the attempts column of the records).
        for (let w = 0; w < workers && !stopping; w++) {
          workerIds[w] = await boss.work(QUEUE, { ...work, includeMetadata: true }, makeHandler(w));
        }
      } catch (e) {
        process.stderr.write(`pg-boss consumer ${spec.index}: ${e.stack || e}\n`);
        process.exit(1);
      }
    },
    stop: finish,
  });
  process.send({ t: "ready" });
}

async function runPublisher(spec) {
  // Started (connected, schema checked) before the window opens, as relaybus's publisher
  // is connected before its loop.
  const boss = await startBoss(spec.conn);
  let stop = false;
  let go;
  const goPromise = new Promise((r) => { go = r; });
  childMessages({ go: () => go(), stop: () => { stop = true; go(); } });
  process.send({ t: "ready" });
  await goPromise;
  await publisherLoop(spec,
    (e, p) => boss.send(QUEUE, dataOf(e, p)),
    (evs, p) => boss.insert(evs.map((e) => ({ name: QUEUE, data: dataOf(e, p) }))),
    () => stop);
  await boss.stop({ graceful: true, wait: true });
  process.exit(0);
}

// ---------------------------------------------------------------------------------------
// Subcommands.

function version() {
  try {
    return require("pg-boss/package.json").version;
  } catch {
    return JSON.parse(fs.readFileSync(path.join(HERE, "node", "package.json"), "utf8")).dependencies["pg-boss"];
  }
}

function info() {
  console.log(JSON.stringify({
    name: "pg-boss",
    version: version(),
    ordered_keys: false,
    acknowledges: "batches",
    notes:
      "Node.js API of pg-boss " + version() + " (the newest major that runs on Node 20). Publish: send() (one job per " +
      "call, one transaction) for --batch 1; insert() (the whole batch in one INSERT ... json_to_recordset statement) " +
      "above, and for preload in chunks of 1,000. Consume: start() and work('bench', options, handler) with a batch " +
      "handler; includeMetadata is on to record the attempt (retryCount + 1). Event id, key and n travel in the job " +
      "data ({id, key, n, p}). No per-key order: jobs are fetched by (priority, created_on, id) with SKIP LOCKED by " +
      "any worker, so the harness checks no order. Delivery: pg-boss calls it exactly-once delivery (SKIP LOCKED gives " +
      "a job to one worker at a time), but a handler's effects are at-least-once: a job whose handler throws, or that " +
      "stays active past expireIn (default 15 min, e.g. a crashed worker), is retried up to retryLimit (default 2, " +
      "retryDelay 0) and then failed, and copied to a dead letter queue only if one is configured (none here); a batch " +
      "is completed or failed as a whole when its handler returns or throws. singletonKey deduplicates only under the " +
      "singleton/stately/short queue policies or with singletonSeconds; this queue is standard and ids are not " +
      "deduplicated. Completed jobs stay in the job table until the archive step of maintenance (12 h). Preset " +
      "defaults: new PgBoss(conn) with its defaults and one work() per consumer process with its defaults (batchSize " +
      "1, pollingIntervalSeconds 2: one job every 2 s per worker; --batch does not apply). Preset tuned (pg-boss " +
      "documents no performance preset): batchSize = --batch (default " + DEFAULT_TUNED_BATCH + "), " +
      "pollingIntervalSeconds 0.5 (the minimum), " + TUNED_WORKERS + " work() calls per process, pool max " +
      (TUNED_WORKERS + 2) + ", and the handler calls notifyWorker(its worker id) after a full batch: a pg-boss 10 " +
      "worker waits out its polling interval after every fetch, full or not (at most batchSize jobs per interval), " +
      "and notifyWorker is the documented way to skip that wait; a batch that is not full still waits up to 0.5 s, " +
      "and new jobs are not announced (no LISTEN/NOTIFY). The measurement window opens once the processes have loaded " +
      "the library (publishers also started pg-boss); consumers start pg-boss inside it. reset and preload end with " +
      "VACUUM ANALYZE of pg-boss's tables.",
  }));
}

// The key of pg-boss's own advisory lock (plans.advisoryLock), which its maintenance
// (expire, archive, drop) and migrations take before they touch the tables.
const BOSS_LOCK = `('x' || encode(sha224((current_database() || '.pgboss.${SCHEMA}')::bytea), 'hex'))::bit(64)::bigint`;

async function emptyTables(db) {
  // Safe while pg-boss's maintenance runs in another instance: take its advisory lock
  // first, as it does, then the tables; try again on a deadlock or a lock timeout.
  for (let attempt = 1; ; attempt++) {
    try {
      await db.query("BEGIN");
      await db.query(`SET LOCAL lock_timeout = '30s'`);
      await db.query(`SELECT ${HARNESS} pg_advisory_xact_lock(${BOSS_LOCK})`);
      await db.query(`TRUNCATE ${SCHEMA}.job, ${SCHEMA}.archive`);
      await db.query(`DELETE FROM ${SCHEMA}.schedule`);
      await db.query(`DELETE FROM ${SCHEMA}.subscription`);
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
  const r = await db.query(`SELECT ${HARNESS} format('%I.%I', schemaname, tablename) AS t FROM pg_tables
                             WHERE schemaname = $1 ORDER BY tablename`, [SCHEMA]);
  for (const { t } of r.rows) await db.query(`${HARNESS} VACUUM ANALYZE ${t}`);
}

async function reset(args) {
  const conn = required(args, "conn");
  // Installs or migrates pg-boss's schema; no maintenance in this instance, but cron on as
  // in the consumers, so that pg-boss creates its own cron queue here and not in a window.
  const boss = await startBoss(conn, { supervise: false });
  // Queues of earlier runs go, but not pg-boss's own (__pgboss__send-it, which every
  // instance with cron on creates at start: CREATE TABLE for its partition, and deadlocks
  // between instances starting at once, were it missing).
  for (const q of await boss.getQueues()) {
    if (q.name !== QUEUE && !q.name.startsWith("__pgboss__")) await boss.deleteQueue(q.name);
  }
  if (!(await boss.getQueue(QUEUE))) await boss.createQueue(QUEUE);
  await boss.stop({ graceful: false, wait: true });
  const db = await bookkeeping(conn);
  await emptyTables(db);
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
  const boss = await startBoss(conn, { supervise: false, schedule: false });
  for (let c = 0; c * PRELOAD_CHUNK < n; c++) {
    const jobs = [];
    for (let i = first + c * PRELOAD_CHUNK; i < first + Math.min((c + 1) * PRELOAD_CHUNK, n); i++) {
      jobs.push({ name: QUEUE, data: dataOf({ id: `e-${i}`, key: i % 2 === 0 ? `k${i % keys}` : null, n: i }) });
    }
    await boss.insert(jobs);
  }
  await boss.stop({ graceful: false, wait: true });
  const db = await bookkeeping(conn);
  if (args["no-vacuum"] === undefined) await vacuumAnalyze(db);  // --no-vacuum: autovacuum only (held rounds)
  await db.end();
}

// `stored` and `left` (README.md): what the harness checks a run against.
async function stored(db) {
  return (await db.query(`SELECT ${HARNESS} data->>'id' AS id FROM ${SCHEMA}.job WHERE name = $1`, [QUEUE])).rows;
}

async function left(db) {
  return (await db.query(`SELECT ${HARNESS} count(*) FILTER (WHERE state < 'completed')::bigint AS left, count(*) FILTER (WHERE state = 'failed')::bigint AS dead FROM ${SCHEMA}.job WHERE name = $1`, [QUEUE])).rows[0];
}

main({
  name: "pgboss.mjs", self: SELF, presetOptions, info, reset, preload, unfinished, runConsumer, runPublisher, stored, left,
}, process.argv.slice(2)).then(
  (code) => { if (process.argv[2] !== "__child") process.exit(code ?? 0); },
  (e) => { process.stderr.write(`pgboss.mjs: ${e.stack || e}\n`); process.exit(1); });
