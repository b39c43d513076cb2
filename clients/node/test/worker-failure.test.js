// A handler that throws fails the attempt with its error text (relaybus.fail); after
// max_attempts the delivery is a dead letter carrying the last error. A BuryError, or an
// error isPermanent() accepts, dead-letters at once (relaybus.bury).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { BuryError, Worker, publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('failure');
});

after(async () => {
  await db?.drop();
});

async function delivery(id, handler) {
  const { rows } = await db.admin.query(
    'SELECT status, attempts, last_error FROM relaybus.deliveries WHERE event_id = $1 AND handler = $2', [id, handler]);
  return rows[0];
}

function deadEvents(worker) {
  const dead = [];
  worker.on('dead', (event, err) => dead.push({ event, err }));
  return dead;
}

test('a throwing handler is retried, then dead-lettered with its last error', async () => {
  await subscribe(db.admin, 'flaky', ['flaky.event'], { maxAttempts: 3, backoffBase: 0, backoffMax: 0 });
  const id = await publish(db.admin, 'flaky.event', { card: '4242' });
  const attempts = [];
  const outcomes = [];
  const worker = new Worker({ connectionString: db.url, name: 'flaky-worker', pollInterval: 50, logger: recordingLogger().logger });
  worker.handle('flaky', async (event) => {
    attempts.push(event.attempts);
    throw new TypeError(`card ${event.payload.card} declined on try ${event.attempts + 1}`);
  });
  worker.on('failed', (event, err, outcome) => outcomes.push(outcome));
  const dead = deadEvents(worker);
  await worker.start();
  try {
    await waitFor(() => dead.length === 1, { what: "the 'dead' event" });
  } finally {
    await worker.stop();
  }
  assert.deepEqual(attempts, [0, 1, 2]);
  assert.deepEqual(outcomes, ['retry', 'retry', 'dead']);
  assert.equal(dead[0].event.id, id);
  assert.deepEqual(await delivery(id, 'flaky'), {
    status: 'dead',
    attempts: 3,
    last_error: 'TypeError: card 4242 declined on try 3',
  });
  assert.equal(worker.stats.dead, 1);
  assert.equal(worker.stats.failed, 3);
});

test('a database error keeps its SQLSTATE in the stored error text', async () => {
  await subscribe(db.admin, 'sqlerr', ['sqlerr.event'], { maxAttempts: 1 });
  const id = await publish(db.admin, 'sqlerr.event', {});
  const worker = new Worker({ connectionString: db.url, name: 'sqlerr-worker', logger: recordingLogger().logger });
  worker.handle('sqlerr', async () => {
    await worker.pool.query('SELECT 1/0');
  });
  const dead = deadEvents(worker);
  await worker.start();
  try {
    await waitFor(() => dead.length === 1, { what: "the 'dead' event" });
  } finally {
    await worker.stop();
  }
  assert.equal((await delivery(id, 'sqlerr')).last_error, 'division by zero (SQLSTATE 22012)');
});

test('a BuryError dead-letters at once, whatever attempts are left', async () => {
  await subscribe(db.admin, 'strict', ['strict.event'], { maxAttempts: 25 });
  const id = await publish(db.admin, 'strict.event', { email: 'not an address' });
  let calls = 0;
  const worker = new Worker({ connectionString: db.url, name: 'strict-worker', logger: recordingLogger().logger });
  worker.handle('strict', async (event) => {
    calls += 1;
    throw new BuryError(`invalid email ${event.payload.email}`);
  });
  const dead = deadEvents(worker);
  await worker.start();
  try {
    await waitFor(() => dead.length === 1, { what: "the 'dead' event" });
  } finally {
    await worker.stop();
  }
  assert.equal(calls, 1);
  assert.deepEqual(await delivery(id, 'strict'), { status: 'dead', attempts: 1, last_error: 'invalid email not an address' });
});

test('isPermanent classifies other errors as do-not-retry', async () => {
  await subscribe(db.admin, 'classified', ['classified.event'], { maxAttempts: 25, backoffBase: 0, backoffMax: 0 });
  const permanent = await publish(db.admin, 'classified.event', { kind: 'validation' });
  const transient = await publish(db.admin, 'classified.event', { kind: 'timeout' });
  class ValidationError extends Error {}
  const worker = new Worker({
    connectionString: db.url,
    name: 'classified-worker',
    pollInterval: 50,
    isPermanent: (err) => err instanceof ValidationError,
    logger: recordingLogger().logger,
  });
  let transientCalls = 0;
  worker.handle('classified', async (event) => {
    if (event.payload.kind === 'validation') throw new ValidationError('bad input');
    transientCalls += 1;
    if (transientCalls < 3) throw new Error('timed out');
  });
  const dead = deadEvents(worker);
  await worker.start();
  try {
    await waitFor(async () => dead.length === 1 && (await delivery(transient, 'classified')) === undefined, {
      what: 'the permanent failure buried and the transient one completed',
    });
  } finally {
    await worker.stop();
  }
  assert.equal(dead[0].event.id, permanent);
  assert.equal((await delivery(permanent, 'classified')).attempts, 1);
  assert.equal(transientCalls, 3);
});
