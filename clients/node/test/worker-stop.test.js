// Graceful shutdown: stop() stops claiming, lets running handlers finish within the
// timeout, releases the rest uncharged, sends the queued completions, relinquishes the
// lanes (so another worker can take them at once, not after the lease) and ends the pool.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Worker, publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { deliveriesOf, deliveriesOfEvent } from './helpers/deliveries.js';
import { delay, recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('stop');
});

after(async () => {
  await db?.drop();
});

async function lanesHeldBy(worker) {
  const { rows } = await db.admin.query('SELECT count(*)::int AS n FROM relaybus.lanes WHERE lease_owner = $1', [worker]);
  return rows[0].n;
}

async function connectionsOf(name) {
  const { rows } = await db.admin.query(
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE $1', [`%:${name}`]);
  return rows[0].n;
}

test('stop() finishes quick handlers, releases stuck ones, relinquishes the lanes and ends the pool', async () => {
  await subscribe(db.admin, 'mixed', ['mixed.event']);
  const quick = [];
  const stuck = [];
  for (let i = 0; i < 3; i++) quick.push(await publish(db.admin, 'mixed.event', { stuck: false }, { key: `q${i}` }));
  for (let i = 0; i < 2; i++) stuck.push(await publish(db.admin, 'mixed.event', { stuck: true }, { key: `s${i}` }));
  const aborted = [];
  const started = new Set();
  const { logger, lines } = recordingLogger();
  // A long lease: if stop() did not hand the lanes back, nobody else could claim for 60 s.
  const worker = new Worker({ connectionString: db.url, name: 'stopping-worker', lease: 60000, shutdownTimeout: 300, logger });
  worker.handle('mixed', async (event, { signal }) => {
    started.add(event.id);
    if (!event.payload.stuck) {
      await delay(100); // still running when stop() is called, done within the timeout
      return;
    }
    await new Promise((resolve) => signal.addEventListener('abort', resolve)); // never done on its own
    aborted.push(event.id);
  });
  await worker.start();
  await waitFor(() => started.size === 5, { what: 'all five handlers to start' });
  assert.ok(await lanesHeldBy('stopping-worker') > 0);

  const stopping = Date.now();
  await worker.stop();
  const took = Date.now() - stopping;
  assert.ok(took >= 300 && took < 2000, `stop() took ${took} ms with a 300 ms timeout`);
  assert.equal(worker.state, 'stopped');
  assert.deepEqual(aborted.sort(), [...stuck].sort(), "the stuck handlers' signal was aborted");

  const rows = (await deliveriesOf(db.admin, 'mixed')).map(({ event_id, status, attempts }) => ({ event_id, status, attempts }));
  assert.deepEqual(rows, [...stuck].sort().map((id) => ({ event_id: id, status: 'pending', attempts: 0 })),
    'the quick ones completed, the stuck ones released without charging an attempt');
  assert.equal(worker.stats.released, 2);
  assert.equal(await lanesHeldBy('stopping-worker'), 0, 'lanes still held after stop()');
  assert.equal(await connectionsOf('stopping-worker'), 0, 'connections left open after stop()');
  assert.ok(lines.some((l) => l.level === 'warn' && /2 handlers were still running after 300 ms; their deliveries were released/.test(l.text)));

  // Another worker takes the released deliveries at once.
  const { rows: claimed } = await db.admin.query(
    "SELECT event_id, attempts FROM relaybus.claim('successor', 10, '30 seconds', ARRAY['mixed']) ORDER BY event_id");
  assert.deepEqual(claimed, [...stuck].sort().map((id) => ({ event_id: id, attempts: 0 })));
});

test('stop() is idempotent, and stopping a worker that never started is a no-op', async () => {
  await subscribe(db.admin, 'twice', ['twice.event']);
  const worker = new Worker({ connectionString: db.url, name: 'twice-worker' });
  worker.handle('twice', async () => {});
  await worker.start();
  const first = worker.stop();
  assert.equal(worker.stop(), first);
  await first;
  await assert.rejects(worker.start(), /already stopped/);
  const unused = new Worker({ connectionString: db.url, name: 'unused-worker' });
  await unused.stop();
  assert.equal(unused.state, 'stopped');
});

test('a transactional handler abandoned at stop() is rolled back and released', async () => {
  await subscribe(db.admin, 'tx-stuck', ['tx-stuck.event']);
  await db.admin.query('CREATE TABLE stuck_writes (event_id text)');
  const id = await publish(db.admin, 'tx-stuck.event', {});
  let started = false;
  const worker = new Worker({ connectionString: db.url, name: 'tx-stuck-worker', shutdownTimeout: 200, logger: recordingLogger().logger });
  worker.handle('tx-stuck', async (event, { client }) => {
    await client.query('INSERT INTO stuck_writes VALUES ($1)', [event.id]);
    started = true;
    await client.query('SELECT pg_sleep(30)'); // interrupted when stop() closes the connection
  }, { transactional: true });
  await worker.start();
  await waitFor(() => started, { what: 'the handler to write' });
  await worker.stop();
  await waitFor(async () => (await connectionsOf('tx-stuck-worker')) === 0, { what: 'the abandoned connection to close' });
  assert.deepEqual((await db.admin.query('SELECT * FROM stuck_writes')).rows, []);
  const rows = (await deliveriesOfEvent(db.admin, id)).map(({ status, attempts }) => ({ status, attempts }));
  assert.deepEqual(rows, [{ status: 'pending', attempts: 0 }]);
  assert.equal(await lanesHeldBy('tx-stuck-worker'), 0);
});
