// Lease renewal: a handler that runs several leases long keeps its lane. Neither a
// takeover (take_over_expired, as the background worker runs it) nor another worker's
// claim can take the delivery while it runs, and it is completed once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Worker, publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { deliveryOf } from './helpers/deliveries.js';
import { delay, recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('lease');
});

after(async () => {
  await db?.drop();
});

test('a handler slower than the lease keeps its lanes: no takeover, no second run', async () => {
  await subscribe(db.admin, 'slow', ['slow.event']);
  const id = await publish(db.admin, 'slow.event', {}, { key: 'k' });
  const LEASE = 600;
  let calls = 0;
  let finished = false;
  const { logger, lines } = recordingLogger();
  const worker = new Worker({ connectionString: db.url, name: 'slow-worker', lease: LEASE, logger });
  worker.handle('slow', async () => {
    calls += 1;
    await delay(LEASE * 3.5);
    finished = true;
  });
  await worker.start();
  let takenOver = 0;
  let stolen = 0;
  let expiredSeen = 0;
  try {
    await waitFor(() => calls === 1, { what: 'the handler to start' });
    while (!finished) {
      takenOver += (await db.admin.query('SELECT relaybus.take_over_expired() AS n')).rows[0].n;
      stolen += (await db.admin.query(
        "SELECT count(*)::int AS n FROM relaybus.claim('intruder', 10, '30 seconds', ARRAY['slow'])")).rows[0].n;
      expiredSeen += (await db.admin.query(
        "SELECT count(*)::int AS n FROM relaybus.lanes WHERE handler = 'slow' AND lease_owner = 'slow-worker' " +
        'AND lease_expires_at < now()')).rows[0].n;
      await delay(50);
    }
    assert.equal(takenOver, 0, 'take_over_expired took the lane over');
    assert.equal(stolen, 0, 'another worker claimed the running delivery');
    assert.equal(expiredSeen, 0, 'the lane was seen with an expired lease');
    await waitFor(async () => (await deliveryOf(db.admin, id, 'slow')) === undefined, { what: 'the completion' });
  } finally {
    await worker.stop();
  }
  assert.equal(calls, 1);
  assert.equal(worker.stats.completed, 1);
  assert.equal(worker.stats.lost, 0);
  assert.ok(worker.stats.renewals >= 4, `only ${worker.stats.renewals} renewals over 3.5 leases`);
  assert.deepEqual(lines.filter((l) => l.level === 'warn' || l.level === 'error'), []);
});

test('an idle worker does not renew: its lanes lapse and free up', async () => {
  await subscribe(db.admin, 'idle', ['idle.event']);
  await publish(db.admin, 'idle.event', {});
  const worker = new Worker({ connectionString: db.url, name: 'idle-worker', lease: 300, logger: recordingLogger().logger });
  worker.handle('idle', async () => {});
  await worker.start();
  try {
    await waitFor(() => worker.stats.completed === 1, { what: 'the completion' });
    const renewals = worker.stats.renewals;
    await delay(700);
    assert.equal(worker.stats.renewals, renewals, 'renewed while nothing was in flight');
  } finally {
    await worker.stop();
  }
});

test('claims that renew the lanes spare the renewals (0.3.0)', async () => {
  // On 0.3.0 every claim renews the lanes the worker holds. A worker with free places keeps
  // claiming (every poll interval here) while a slow handler runs past two leases: its lane
  // stays leased by those claims alone, and the renewer sends no extend_lease, each of which
  // would rewrite every lease row once more.
  await subscribe(db.admin, 'spared', ['spared.event']);
  const id = await publish(db.admin, 'spared.event', {}, { key: 'k' });
  const LEASE = 600;
  let calls = 0;
  let finished = false;
  const worker = new Worker({
    connectionString: db.url, name: 'spared-worker', lease: LEASE, concurrency: 4, pollInterval: 50,
    logger: recordingLogger().logger,
  });
  worker.handle('spared', async () => {
    calls += 1;
    await delay(LEASE * 2.5);
    finished = true;
  });
  await worker.start();
  let stolen = 0;
  try {
    await waitFor(() => calls === 1, { what: 'the handler to start' });
    while (!finished) {
      stolen += (await db.admin.query(
        "SELECT count(*)::int AS n FROM relaybus.claim('intruder2', 10, '30 seconds', ARRAY['spared'])")).rows[0].n;
      await delay(50);
    }
    await waitFor(async () => (await deliveryOf(db.admin, id, 'spared')) === undefined, { what: 'the completion' });
  } finally {
    await worker.stop();
  }
  assert.equal(stolen, 0, 'another worker claimed the running delivery');
  assert.equal(calls, 1);
  assert.equal(worker.stats.completed, 1);
  assert.ok(worker.stats.claims > 10, `only ${worker.stats.claims} claims while the handler ran`);
  assert.equal(worker.stats.renewals, 0);
});
