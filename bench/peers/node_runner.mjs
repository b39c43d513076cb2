// The shared part of the benchmark's Node.js peers (graphile.mjs, pgboss.mjs): the runner
// protocol of bench/peers/README.md (argument parsing, record files, child processes, the
// publisher loop and the drain, publish, mixed, stored and left orchestration), written once
// so that the two peers measure and record in exactly the same way. A peer file keeps only
// what is its own (presets, the library calls, its SQL) and calls main(peer, argv) with an
// object of those: see main() at the end.
//
// The npm packages come from bench/peers/node (pinned in its package-lock.json; install.sh).
import { createRequire } from "node:module";
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import fs from "node:fs";
import path from "node:path";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(HERE, "node", "package.json"));
export const HARNESS = "/*relaybus-bench-harness*/";

// ---------------------------------------------------------------------------------------
// Shared plumbing: options, connection strings, clocks, record files, child processes.

export function parseArgs(argv) {
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

export function num(args, name, fallback) {
  if (args[name] === undefined) return fallback;
  const v = Number(args[name]);
  if (!Number.isFinite(v)) throw new Error(`--${name}: not a number: ${args[name]}`);
  return v;
}

export function required(args, name) {
  if (args[name] === undefined) throw new Error(`--${name} is required`);
  return args[name];
}

// A libpq keyword/value connection string ("host=... port=... user=... dbname=...") as the
// fields `pg` takes; a postgres:// URL is passed through.
export function parseConninfo(conn) {
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

export function pgConfig(conn) {
  const f = parseConninfo(conn);
  if (f.url) return { connectionString: f.url };
  return {
    host: f.host, port: f.port ? Number(f.port) : undefined, user: f.user,
    password: f.password, database: f.dbname,
  };
}

// Wall-clock microseconds since the epoch (the files of different processes join).
export function nowUs() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

export class RecordFile {
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

export async function bookkeeping(conn) {
  const pg = require("pg");
  const client = new pg.Client(pgConfig(conn));
  await client.connect();
  return client;
}

export async function walMark(db) {
  return (await db.query(`SELECT ${HARNESS} pg_current_wal_insert_lsn()::text AS lsn`)).rows[0].lsn;
}

export async function walSince(db, lsn) {
  const r = await db.query(`SELECT ${HARNESS} pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint AS b`, [lsn]);
  return Number(r.rows[0].b);
}

// Children: forked copies of the peer's file (peer.self) that say "ready" once set up, start on "go" and
// stop on "stop" (or SIGTERM). A child that exits non-zero counts as failed.
export class Child {
  constructor(self, role, spec) {
    this.proc = fork(self, ["__child", role, JSON.stringify(spec)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
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

export async function startAll(children) {
  await Promise.all(children.map((c) => c.ready));
}

export async function stopAll(children) {
  for (const c of children) c.send("stop");
  const codes = await Promise.all(children.map((c) => c.exited));
  return codes.reduce((a, b) => a + b, 0);
}

export function childMessages(handlers) {
  process.on("message", (m) => { if (m && handlers[m.t]) handlers[m.t](); });
  for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => handlers.stop && handlers.stop());
}

export function writeSummary(out, summary) {
  fs.writeFileSync(out + ".summary.json", JSON.stringify(summary) + "\n");
}

export function progress(text) {
  process.stderr.write(text + "\n");
}

// The publisher loop of `relaybus-bench publish|mixed` (run_publisher_process): ids
// p<index>-<seq>, every other event keyed p<index>-k<(seq/2) mod keys> with n its per-key
// counter, else n = seq; an open loop at `rate` (the next call is due at seq / rate, a late
// call goes at once, nothing is skipped); E and C lines once each call returned.
export async function publisherLoop(spec, publishOne, publishMany, shouldStop) {
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

export function publisherSpecs(args, out, { rate = 0, duration = 0, batch = 1, events = 0 }) {
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

export function consumerSpecs(args, out, presetOptions) {
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
// Subcommands.

export async function drain(peer, args) {
  const out = required(args, "out");
  const limit = num(args, "duration-s", 600);
  const db = await bookkeeping(required(args, "conn"));
  const total = await peer.unfinished(db);
  const consumers = consumerSpecs(args, out, peer.presetOptions).map((s) => new Child(peer.self, "consumer", s));
  await startAll(consumers);
  const lsn = await walMark(db);
  const t0 = performance.now();
  const startUs = nowUs();  // the records' clock: the harness measures to the last record
  for (const c of consumers) c.send("go");
  let left = total;
  let drained = false;
  let nextReport = t0;
  for (;;) {
    const asked = performance.now();
    left = await peer.unfinished(db);
    if (left === 0) { drained = true; break; }
    const t = (performance.now() - t0) / 1000;
    if (t > limit) break;
    if (performance.now() >= nextReport) {
      progress(`drain: ${t.toFixed(1)} s  ${total - left} of ${total} done  (${((total - left) / Math.max(t, 1e-3)).toFixed(0)}/s)`);
      nextReport += 1000;
    }
    // As runner.py: the check takes at most a tenth of a core; the rate is taken to the last
    // delivery handled.
    await sleep(Math.max(100, 10 * (performance.now() - asked)));
  }
  const elapsed = (performance.now() - t0) / 1000;
  const wal = await walSince(db, lsn);
  const failed = await stopAll(consumers);
  await db.end();
  progress(`drain: ${drained ? "drained" : "TIMED OUT"} after ${elapsed.toFixed(2)} s, ${left} left`);
  writeSummary(out, { scenario: "drain", deliveries: total, elapsed_s: elapsed, wal_bytes: wal, drained, left, processes_failed: failed, start_us: startUs });
  return failed === 0 ? 0 : 1;
}

export async function publish(peer, args) {
  const out = required(args, "out");
  const events = num(args, "events", 10000);
  const db = await bookkeeping(required(args, "conn"));
  const pubs = publisherSpecs(args, out, { events, batch: num(args, "batch", 1) }).map((s) => new Child(peer.self, "publisher", s));
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

export async function mixed(peer, args) {
  const out = required(args, "out");
  const rate = num(args, "rate", 1000);
  const duration = num(args, "duration-s", 20);
  const drainLimit = num(args, "drain-timeout-s", 120);
  if (args.publishers === undefined) args.publishers = "2";
  const db = await bookkeeping(required(args, "conn"));
  const consumers = consumerSpecs(args, out, peer.presetOptions).map((s) => new Child(peer.self, "consumer", s));
  const pubs = publisherSpecs(args, out, { rate, duration, batch: 1 }).map((s) => new Child(peer.self, "publisher", s));
  await startAll([...consumers, ...pubs]);
  const lsn = await walMark(db);
  const t0 = performance.now();
  for (const c of [...consumers, ...pubs]) c.send("go");
  let backlogMax = 0;
  let nextReport = t0 + 1000;
  while ((performance.now() - t0) / 1000 < duration) {
    const backlog = await peer.unfinished(db);
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
    left = await peer.unfinished(db);
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

// `stored` and `left` (README.md): what the harness checks a run against; peer.stored(db)
// gives the rows ({id}) of the events still stored, peer.left(db) the row {left, dead}.
export async function stored(peer, args) {
  const db = await bookkeeping(required(args, "conn"));
  const rows = await peer.stored(db);
  // Written before the process exits: main() ends with process.exit, which drops what a
  // pipe has not taken yet (a 20,000-line answer came back cut at 15,798).
  await new Promise((done) => process.stdout.write(rows.map((row) => row.id + "\n").join(""), done));
  await db.end();
}

export async function left(peer, args) {
  const db = await bookkeeping(required(args, "conn"));
  const row = await peer.left(db);
  await new Promise((done) => process.stdout.write(`${Number(row.left)} ${Number(row.dead)}\n`, done));
  await db.end();
}

// peer: { name (its file name, for the usage line), self (its path, forked for children),
// presetOptions(preset, batch) (throws on an unknown preset), info(), reset(args),
// preload(args), unfinished(db), runConsumer(spec), runPublisher(spec), stored(db), left(db) }.
export async function main(peer, argv) {
  if (argv[0] === "__child") {
    const spec = JSON.parse(argv[2]);
    if (argv[1] === "consumer") return peer.runConsumer(spec);
    return peer.runPublisher(spec);
  }
  const args = parseArgs(argv.slice(1));
  switch (argv[0]) {
    case "info": peer.info(); return 0;
    case "reset": await peer.reset(args); return 0;
    case "preload": await peer.preload(args); return 0;
    case "drain": return drain(peer, args);
    case "publish": return publish(peer, args);
    case "mixed": return mixed(peer, args);
    case "stored": await stored(peer, args); return 0;
    case "left": await left(peer, args); return 0;
    default:
      process.stderr.write(`usage: ${peer.name} info|reset|preload|drain|publish|mixed --conn C ... (bench/peers/README.md)\n`);
      return 2;
  }
}
