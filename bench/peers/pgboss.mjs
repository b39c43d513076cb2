#!/usr/bin/env node
// pg-boss as a peer in relaybus's benchmark (bench/peers/README.md): the runner protocol
// (info, reset, preload, drain, publish, mixed) through pg-boss's own Node.js API, writing
// the same record files as `relaybus bench` (src/client/cli/bench_processes.cpp) so that
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
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import fs from "node:fs";
import path from "node:path";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const require = createRequire(path.join(HERE, "node", "package.json"));
const HARNESS = "/*relaybus-bench-harness*/";
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
// Shared plumbing: options, connection strings, clocks, record files, child processes.

function parseArgs(argv) {
  const out = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith("--")) {
      const eq = a.indexOf("=");
      if (eq > 0) out[a.slice(2, eq)] = a.slice(eq + 1);
      else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) out[a.slice(2)] = argv[++i];
      else out[a.slice(2)] = "true";
    } else {
      out._.push(a);
    }
  }
  return out;
}

function num(args, name, fallback) {
  if (args[name] === undefined) return fallback;
  const v = Number(args[name]);
  if (!Number.isFinite(v)) throw new Error(`--${name}: not a number: ${args[name]}`);
  return v;
}

function required(args, name) {
  if (args[name] === undefined) throw new Error(`--${name} is required`);
  return args[name];
}

// A libpq keyword/value connection string ("host=... port=... user=... dbname=...") as the
// fields `pg` takes; a postgres:// URL is passed through.
function parseConninfo(conn) {
  if (/^postgres(ql)?:\/\//.test(conn)) return { url: conn };
  const fields = {};
  let i = 0;
  while (i < conn.length) {
    while (i < conn.length && /\s/.test(conn[i])) i++;
    if (i >= conn.length) break;
    const eq = conn.indexOf("=", i);
    if (eq < 0) throw new Error(`bad connection string near: ${conn.slice(i)}`);
    const key = conn.slice(i, eq).trim();
    i = eq + 1;
    while (i < conn.length && /\s/.test(conn[i])) i++;
    let value = "";
    if (conn[i] === "'") {
      i++;
      while (i < conn.length && conn[i] !== "'") {
        if (conn[i] === "\\" && i + 1 < conn.length) i++;
        value += conn[i++];
      }
      i++;
    } else {
      while (i < conn.length && !/\s/.test(conn[i])) {
        if (conn[i] === "\\" && i + 1 < conn.length) i++;
        value += conn[i++];
      }
    }
    fields[key] = value;
  }
  return fields;
}

function pgConfig(conn) {
  const f = parseConninfo(conn);
  if (f.url) return { connectionString: f.url };
  return {
    host: f.host, port: f.port ? Number(f.port) : undefined, user: f.user,
    password: f.password, database: f.dbname,
  };
}

// Wall-clock microseconds since the epoch (the files of different processes join).
function nowUs() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

class RecordFile {
  constructor(p) {
    this.fd = fs.openSync(p, "w");
    this.buf = [];
    this.size = 0;
  }
  add(line) {
    this.buf.push(line);
    this.size += line.length;
    if (this.size > 1 << 20) this.flush();
  }
  flush() {
    if (this.buf.length) fs.writeSync(this.fd, this.buf.join(""));
    this.buf = [];
    this.size = 0;
  }
  close() {
    this.flush();
    fs.closeSync(this.fd);
  }
}

async function bookkeeping(conn) {
  const pg = require("pg");
  const client = new pg.Client(pgConfig(conn));
  await client.connect();
  return client;
}

async function walMark(db) {
  return (await db.query(`SELECT ${HARNESS} pg_current_wal_insert_lsn()::text AS lsn`)).rows[0].lsn;
}

async function walSince(db, lsn) {
  const r = await db.query(`SELECT ${HARNESS} pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint AS b`, [lsn]);
  return Number(r.rows[0].b);
}

// Children: forked copies of this file that say "ready" once set up, start on "go" and
// stop on "stop" (or SIGTERM). A child that exits non-zero counts as failed.
class Child {
  constructor(role, spec) {
    this.proc = fork(SELF, ["__child", role, JSON.stringify(spec)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    this.ready = new Promise((resolve) => {
      this.proc.on("message", (m) => { if (m && m.t === "ready") resolve(true); });
      this.proc.on("exit", () => resolve(false));
    });
    this.exited = new Promise((resolve) => {
      this.proc.on("exit", (code, signal) => resolve(code === 0 && !signal ? 0 : 1));
    });
    // A publisher says "done" once its last call returned, before it closes its client.
    this.done = new Promise((resolve) => {
      this.proc.on("message", (m) => { if (m && m.t === "done") resolve(); });
      this.proc.on("exit", () => resolve());
    });
  }
  send(t) {
    try { if (this.proc.connected) this.proc.send({ t }); } catch { /* exited */ }
  }
}

async function startAll(children) {
  await Promise.all(children.map((c) => c.ready));
}

async function stopAll(children) {
  for (const c of children) c.send("stop");
  const codes = await Promise.all(children.map((c) => c.exited));
  return codes.reduce((a, b) => a + b, 0);
}

function childMessages(handlers) {
  process.on("message", (m) => { if (m && handlers[m.t]) handlers[m.t](); });
  for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => handlers.stop && handlers.stop());
}

function writeSummary(out, summary) {
  fs.writeFileSync(out + ".summary.json", JSON.stringify(summary) + "\n");
}

function progress(text) {
  process.stderr.write(text + "\n");
}

// The publisher loop of `relaybus bench publish|mixed` (run_publisher_process): ids
// p<index>-<seq>, every other event keyed p<index>-k<(seq/2) mod keys> with n its per-key
// counter, else n = seq; an open loop at `rate` (the next call is due at seq / rate, a late
// call goes at once, nothing is skipped); E and C lines once each call returned.
async function publisherLoop(spec, publishOne, publishMany, shouldStop) {
  const out = new RecordFile(spec.out);
  const keys = Math.max(1, spec.keys);
  const counter = new Array(keys).fill(0);
  const batch = Math.max(1, spec.batch);
  const start = performance.now();
  let seq = 0;
  for (;;) {
    if (shouldStop()) break;
    if (spec.events > 0 && seq >= spec.events) break;
    const elapsed = (performance.now() - start) / 1000;
    if (spec.duration_s > 0 && elapsed >= spec.duration_s) break;
    if (spec.rate > 0) {
      const due = seq / spec.rate;
      if (due > elapsed) await sleep((due - elapsed) * 1000);
    }
    const nThis = spec.events > 0 ? Math.min(batch, spec.events - seq) : batch;
    const evs = [];
    for (let i = 0; i < nThis; i++, seq++) {
      const e = { id: `p${spec.index}-${seq}`, key: null, n: seq };
      if (seq % 2 === 0) {
        const k = Math.floor(seq / 2) % keys;
        e.key = `p${spec.index}-k${k}`;
        e.n = ++counter[k];
      }
      evs.push(e);
    }
    const sent = nowUs();
    if (nThis === 1) await publishOne(evs[0], spec.index);
    else await publishMany(evs, spec.index);
    const committed = nowUs();
    out.add(`C\t${committed - sent}\t${nThis}\n`);
    for (const e of evs) out.add(`E\t${e.id}\t${e.key ?? "-"}\t${e.n}\t${committed}\n`);
  }
  out.close();
  process.send({ t: "done" });
}

function publisherSpecs(args, out, { rate = 0, duration = 0, batch = 1, events = 0 }) {
  const publishers = Math.max(1, num(args, "publishers", 1));
  const specs = [];
  for (let i = 0; i < publishers; i++) {
    specs.push({
      conn: args.conn, index: i, out: `${out}.publisher-${i}.tsv`,
      events: events > 0 ? Math.floor(events / publishers) + (i < events % publishers ? 1 : 0) : 0,
      batch, rate: rate > 0 ? rate / publishers : 0, duration_s: duration,
      keys: num(args, "keys", 100),
    });
  }
  return specs;
}

function consumerSpecs(args, out) {
  const consumers = Math.max(1, num(args, "consumers", 1));
  const preset = args.preset || "defaults";
  presetOptions(preset, 0); // validates the name
  const specs = [];
  for (let i = 0; i < consumers; i++) {
    specs.push({ conn: args.conn, index: i, out: `${out}.dispatcher-${i}.tsv`, preset, batch: num(args, "batch", 0) });
  }
  return specs;
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
  const keys = Math.max(1, Math.floor(n / 4));
  const boss = await startBoss(conn, { supervise: false, schedule: false });
  for (let c = 0; c * PRELOAD_CHUNK < n; c++) {
    const jobs = [];
    for (let i = c * PRELOAD_CHUNK + 1; i <= Math.min((c + 1) * PRELOAD_CHUNK, n); i++) {
      jobs.push({ name: QUEUE, data: dataOf({ id: `e-${i}`, key: i % 2 === 0 ? `k${i % keys}` : null, n: i }) });
    }
    await boss.insert(jobs);
  }
  await boss.stop({ graceful: false, wait: true });
  const db = await bookkeeping(conn);
  await vacuumAnalyze(db);
  await db.end();
}

async function drain(args) {
  const out = required(args, "out");
  const limit = num(args, "duration-s", 600);
  const db = await bookkeeping(required(args, "conn"));
  const total = await unfinished(db);
  const consumers = consumerSpecs(args, out).map((s) => new Child("consumer", s));
  await startAll(consumers);
  const lsn = await walMark(db);
  const t0 = performance.now();
  const startUs = nowUs();  // the records' clock: the harness measures to the last record
  for (const c of consumers) c.send("go");
  let left = total;
  let drained = false;
  let nextReport = t0;
  for (;;) {
    left = await unfinished(db);
    if (left === 0) { drained = true; break; }
    const t = (performance.now() - t0) / 1000;
    if (t > limit) break;
    if (performance.now() >= nextReport) {
      progress(`drain: ${t.toFixed(1)} s  ${total - left} of ${total} done  (${((total - left) / Math.max(t, 1e-3)).toFixed(0)}/s)`);
      nextReport += 1000;
    }
    await sleep(100);
  }
  const elapsed = (performance.now() - t0) / 1000;
  const wal = await walSince(db, lsn);
  const failed = await stopAll(consumers);
  await db.end();
  progress(`drain: ${drained ? "drained" : "TIMED OUT"} after ${elapsed.toFixed(2)} s, ${left} left`);
  writeSummary(out, { scenario: "drain", deliveries: total, elapsed_s: elapsed, wal_bytes: wal, drained, left, processes_failed: failed, start_us: startUs });
  return failed === 0 ? 0 : 1;
}

async function publish(args) {
  const out = required(args, "out");
  const events = num(args, "events", 10000);
  const db = await bookkeeping(required(args, "conn"));
  const pubs = publisherSpecs(args, out, { events, batch: num(args, "batch", 1) }).map((s) => new Child("publisher", s));
  await startAll(pubs);
  const lsn = await walMark(db);
  const t0 = performance.now();
  for (const p of pubs) p.send("go");
  await Promise.all(pubs.map((p) => p.done));
  const elapsed = (performance.now() - t0) / 1000;
  const wal = await walSince(db, lsn);
  const failed = (await Promise.all(pubs.map((p) => p.exited))).reduce((a, b) => a + b, 0);
  await db.end();
  progress(`publish: ${events} events in ${elapsed.toFixed(2)} s (${(events / elapsed).toFixed(0)}/s)`);
  writeSummary(out, { scenario: "publish", events, elapsed_s: elapsed, wal_bytes: wal, processes_failed: failed });
  return failed === 0 ? 0 : 1;
}

async function mixed(args) {
  const out = required(args, "out");
  const rate = num(args, "rate", 1000);
  const duration = num(args, "duration-s", 20);
  const drainLimit = num(args, "drain-timeout-s", 120);
  if (args.publishers === undefined) args.publishers = "2";
  const db = await bookkeeping(required(args, "conn"));
  const consumers = consumerSpecs(args, out).map((s) => new Child("consumer", s));
  const pubs = publisherSpecs(args, out, { rate, duration, batch: 1 }).map((s) => new Child("publisher", s));
  await startAll([...consumers, ...pubs]);
  const lsn = await walMark(db);
  const t0 = performance.now();
  for (const c of [...consumers, ...pubs]) c.send("go");
  let backlogMax = 0;
  let nextReport = t0 + 1000;
  while ((performance.now() - t0) / 1000 < duration) {
    const backlog = await unfinished(db);
    backlogMax = Math.max(backlogMax, backlog);
    if (performance.now() >= nextReport) {
      progress(`mixed: ${((performance.now() - t0) / 1000).toFixed(1)} s  backlog ${backlog}`);
      nextReport += 1000;
    }
    await sleep(250);
  }
  await Promise.all(pubs.map((p) => p.done));
  const publishElapsed = (performance.now() - t0) / 1000;
  const d0 = performance.now();
  let drained = false;
  let left = 0;
  while ((performance.now() - d0) / 1000 < drainLimit) {
    left = await unfinished(db);
    backlogMax = Math.max(backlogMax, left);
    if (left === 0) { drained = true; break; }
    await sleep(50);
  }
  const elapsed = (performance.now() - t0) / 1000;
  const wal = await walSince(db, lsn);
  const failed = (await Promise.all(pubs.map((p) => p.exited))).reduce((a, b) => a + b, 0) + (await stopAll(consumers));
  await db.end();
  progress(`mixed: published for ${publishElapsed.toFixed(2)} s, ${drained ? "drained" : "NOT DRAINED"} after ${elapsed.toFixed(2)} s, backlog max ${backlogMax}`);
  writeSummary(out, {
    scenario: "mixed", offered_rate: rate, publish_elapsed_s: publishElapsed, elapsed_s: elapsed, wal_bytes: wal,
    backlog_max: backlogMax, drained, left, processes_failed: failed,
  });
  return failed === 0 ? 0 : 1;
}

// `stored` and `left` (README.md): what the harness checks a run against.
async function stored(args) {
  const db = await bookkeeping(required(args, "conn"));
  const r = await db.query(`SELECT ${HARNESS} data->>'id' AS id FROM ${SCHEMA}.job WHERE name = $1`, [QUEUE]);
  // Written before the process exits: main() ends with process.exit, which drops what a
  // pipe has not taken yet (a 20,000-line answer came back cut at 15,798).
  await new Promise((done) => process.stdout.write(r.rows.map((row) => row.id + "\n").join(""), done));
  await db.end();
}

async function left(args) {
  const db = await bookkeeping(required(args, "conn"));
  const r = await db.query(`SELECT ${HARNESS} count(*) FILTER (WHERE state < 'completed')::bigint AS left, count(*) FILTER (WHERE state = 'failed')::bigint AS dead FROM ${SCHEMA}.job WHERE name = $1`, [QUEUE]);
  await new Promise((done) => process.stdout.write(`${Number(r.rows[0].left)} ${Number(r.rows[0].dead)}\n`, done));
  await db.end();
}

async function main(argv) {
  if (argv[0] === "__child") {
    const spec = JSON.parse(argv[2]);
    if (argv[1] === "consumer") return runConsumer(spec);
    return runPublisher(spec);
  }
  const args = parseArgs(argv.slice(1));
  switch (argv[0]) {
    case "info": info(); return 0;
    case "reset": await reset(args); return 0;
    case "preload": await preload(args); return 0;
    case "drain": return drain(args);
    case "publish": return publish(args);
    case "mixed": return mixed(args);
    case "stored": await stored(args); return 0;
    case "left": await left(args); return 0;
    default:
      process.stderr.write("usage: pgboss.mjs info|reset|preload|drain|publish|mixed --conn C ... (bench/peers/README.md)\n");
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => { if (process.argv[2] !== "__child") process.exit(code ?? 0); },
  (e) => { process.stderr.write(`pgboss.mjs: ${e.stack || e}\n`); process.exit(1); });
