#!/usr/bin/env node
// graphile-worker as a peer in relaybus's benchmark (bench/peers/README.md): the runner
// protocol (info, reset, preload, drain, publish, mixed) through graphile-worker's own
// Node.js API, writing the same record files as `relaybus bench`
// (src/client/cli/bench_processes.cpp) so that the harness validates every run the same way.
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
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import fs from "node:fs";
import path from "node:path";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const require = createRequire(path.join(HERE, "node", "package.json"));
const HARNESS = "/*relaybus-bench-harness*/";
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
  const keys = Math.max(1, Math.floor(n / 4));
  const utils = await workerUtils(conn);
  for (let c = 0; c * PRELOAD_CHUNK < n; c++) {
    const specs = [];
    for (let i = c * PRELOAD_CHUNK + 1; i <= Math.min((c + 1) * PRELOAD_CHUNK, n); i++) {
      specs.push(jobSpec({ id: `e-${i}`, key: i % 2 === 0 ? `k${i % keys}` : null, n: i }));
    }
    await utils.addJobs(specs);
  }
  await utils.release();
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
  const r = await db.query(`SELECT ${HARNESS} payload->>'id' AS id FROM ${SCHEMA}._private_jobs`);
  // Written before the process exits: main() ends with process.exit, which drops what a
  // pipe has not taken yet (a 20,000-line answer came back cut at 15,798).
  await new Promise((done) => process.stdout.write(r.rows.map((row) => row.id + "\n").join(""), done));
  await db.end();
}

async function left(args) {
  const db = await bookkeeping(required(args, "conn"));
  const r = await db.query(`SELECT ${HARNESS} count(*) FILTER (WHERE attempts < max_attempts OR locked_at IS NOT NULL)::bigint AS left, count(*) FILTER (WHERE attempts >= max_attempts AND locked_at IS NULL)::bigint AS dead FROM ${SCHEMA}._private_jobs`);
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
      process.stderr.write("usage: graphile.mjs info|reset|preload|drain|publish|mixed --conn C ... (bench/peers/README.md)\n");
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => { if (process.argv[2] !== "__child") process.exit(code ?? 0); },
  (e) => { process.stderr.write(`graphile.mjs: ${e.stack || e}\n`); process.exit(1); });
