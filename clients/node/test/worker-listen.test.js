// LISTEN wake-ups: a committed publish reaches an idle worker in milliseconds, far below
// its poll interval; a LISTEN connection that dies (closed by the server, or silently hung)
// is noticed and made again, and wake-ups work again afterwards.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Worker, publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { delay, recordingLogger, waitFor } from './helpers/wait.js';

const POLL = 10000; // any handling within a fraction of this came from a notification

let db;
let worker;
let handled; // event id -> time handled
let lines;

before(async () => {
  db = await createDatabase('listen');
  await subscribe(db.admin, 'woken', ['woken.event']);
  await subscribe(db.admin, 'elsewhere', ['elsewhere.event']);
  handled = new Map();
  const recording = recordingLogger();
  lines = recording.lines;
  worker = new Worker({
    connectionString: db.url,
    name: 'listen-worker',
    pollInterval: POLL,
    listenCheckInterval: 200,
    logger: recording.logger,
  });
  worker.handle('woken', async (event) => {
    handled.set(event.id, Date.now());
  });
  await worker.start();
  await waitFor(() => worker.listening && worker.stats.claims >= 1, { what: 'the worker to listen and claim once' });
});

after(async () => {
  await worker?.stop();
  await db?.drop();
});

// Publishes one event and returns how long it took to be handled, in ms.
async function latency() {
  const started = Date.now();
  const id = await publish(db.admin, 'woken.event', {});
  await waitFor(() => handled.has(id), { timeout: POLL / 2, every: 2, what: 'the woken handler' });
  return handled.get(id) - started;
}

test('a publish wakes the idle worker far sooner than the poll interval', async (t) => {
  const wakeups = worker.stats.wakeups;
  const latencies = [];
  for (let i = 0; i < 5; i++) {
    await delay(50); // let the worker go back to waiting
    latencies.push(await latency());
  }
  t.diagnostic(`publish-to-handler latencies: ${latencies.join(', ')} ms`);
  assert.ok(Math.max(...latencies) < POLL / 20, `latencies ${latencies} ms with a ${POLL} ms poll interval`);
  assert.ok(worker.stats.wakeups - wakeups >= 5);
});

test("another handler's notifications do not make it claim", async () => {
  await delay(50);
  const claims = worker.stats.claims;
  for (let i = 0; i < 5; i++) await publish(db.admin, 'elsewhere.event', {});
  await delay(200);
  assert.equal(worker.stats.claims, claims);
});

test('a LISTEN connection closed by the server is made again', async () => {
  const before = worker.listenerPid;
  const connects = worker.stats.listenConnects;
  const { rows } = await db.admin.query('SELECT pg_terminate_backend($1) AS ok', [before]);
  assert.equal(rows[0].ok, true);
  await waitFor(() => worker.listening && worker.stats.listenConnects > connects, { what: 'a new LISTEN connection' });
  assert.notEqual(worker.listenerPid, before);
  assert.ok(lines.some((l) => l.level === 'warn' && /LISTEN connection was lost/.test(l.text)));
  assert.ok(await latency() < POLL / 20, 'wake-ups work on the new connection');
});

test('a LISTEN connection that stops answering is noticed by its health check', async (t) => {
  const hung = worker.listenerPid;
  try {
    process.kill(hung, 0); // may we signal the server's processes (root, or the server's user)?
  } catch (err) {
    if (err.code === 'EPERM' || err.code === 'ESRCH') return t.skip(`cannot SIGSTOP the LISTEN backend (${err.code})`);
    throw err;
  }
  const connects = worker.stats.listenConnects;
  process.kill(hung, 'SIGSTOP'); // the socket stays open, nothing answers: a silent failure
  try {
    await waitFor(() => worker.listening && worker.stats.listenConnects > connects, {
      timeout: 8000,
      what: 'the health check to replace the hung connection',
    });
  } finally {
    process.kill(hung, 'SIGCONT');
  }
  assert.notEqual(worker.listenerPid, hung);
  assert.ok(await latency() < POLL / 20, 'wake-ups work on the new connection');
});
