// A transactional handler's writes and the completion of its delivery commit together or
// not at all: a throwing handler leaves neither; a lost lease rolls the writes back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Worker, publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { deliveryOf } from './helpers/deliveries.js';
import { delay, recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('transactional');
  await db.admin.query('CREATE TABLE sent (event_id text PRIMARY KEY, attempt int NOT NULL)');
});

after(async () => {
  await db?.drop();
});

async function sentRows(id) {
  return (await db.admin.query('SELECT attempt FROM sent WHERE event_id = $1', [id])).rows;
}

// { status, attempts, last_error }, or undefined once completed (list_deliveries).
function delivery(id, handler) {
  return deliveryOf(db.admin, id, handler);
}

function insertSent(client, event) {
  return client.query('INSERT INTO sent VALUES ($1, $2)', [event.id, event.attempts]);
}

test('the handler\'s writes and the completion commit together', async () => {
  await subscribe(db.admin, 'tx-ok', ['tx-ok.event']);
  const id = await publish(db.admin, 'tx-ok.event', {});
  let seenFromOutside;
  const worker = new Worker({ connectionString: db.url, name: 'tx-ok-worker', logger: recordingLogger().logger });
  worker.handle('tx-ok', async (event, { client }) => {
    await insertSent(client, event);
    // Still inside the delivery's transaction: nobody else sees the row yet.
    seenFromOutside = (await sentRows(event.id)).length;
  }, { transactional: true });
  await worker.start();
  try {
    await waitFor(async () => (await delivery(id, 'tx-ok')) === undefined, { what: 'the completion' });
  } finally {
    await worker.stop();
  }
  assert.equal(seenFromOutside, 0);
  assert.deepEqual(await sentRows(id), [{ attempt: 0 }]);
  assert.equal(worker.stats.completed, 1);
});

test('a throwing handler leaves neither its writes nor the completion', async () => {
  await subscribe(db.admin, 'tx-throw', ['tx-throw.event'], { maxAttempts: 2, backoffBase: 0, backoffMax: 0 });
  const id = await publish(db.admin, 'tx-throw.event', {});
  let calls = 0;
  const worker = new Worker({ connectionString: db.url, name: 'tx-throw-worker', pollInterval: 50, logger: recordingLogger().logger });
  worker.handle('tx-throw', async (event, { client }) => {
    calls += 1;
    await insertSent(client, event);
    throw new Error(`refused on attempt ${event.attempts}`);
  }, { transactional: true });
  const dead = [];
  worker.on('dead', (event) => dead.push(event.id));
  await worker.start();
  try {
    await waitFor(() => dead.length === 1, { what: 'the dead letter' });
  } finally {
    await worker.stop();
  }
  assert.equal(calls, 2);
  assert.deepEqual(await sentRows(id), [], 'no write of a failed attempt stayed');
  assert.deepEqual(await delivery(id, 'tx-throw'), { status: 'dead', attempts: 2, last_error: 'refused on attempt 1' });
});

test('a lost lease rolls the handler\'s writes back, and the next attempt commits', async () => {
  await subscribe(db.admin, 'tx-lost', ['tx-lost.event']);
  const id = await publish(db.admin, 'tx-lost.event', {});
  const attempts = [];
  const { logger, lines } = recordingLogger();
  const worker = new Worker({ connectionString: db.url, name: 'tx-lost-worker', pollInterval: 50, logger });
  worker.handle('tx-lost', async (event, { client }) => {
    attempts.push(event.leaseToken);
    await insertSent(client, event);
    // Somebody else ends this attempt while the handler runs (as a takeover would): the
    // token is spent, so complete() returns false.
    if (attempts.length === 1) await db.admin.query('SELECT relaybus.release($1)', [event.leaseToken]);
  }, { transactional: true });
  await worker.start();
  try {
    await waitFor(async () => (await delivery(id, 'tx-lost')) === undefined, { what: 'the second attempt' });
  } finally {
    await worker.stop();
  }
  assert.equal(attempts.length, 2);
  assert.notEqual(attempts[0], attempts[1]);
  assert.deepEqual(await sentRows(id), [{ attempt: 0 }], 'exactly one committed write (release charges no attempt)');
  assert.equal(worker.stats.lost, 1);
  assert.ok(lines.some((l) => l.level === 'warn' && /lease lost; its transaction was rolled back/.test(l.text)));
});

test('a handler that swallowed an SQL error cannot complete in the aborted transaction', async () => {
  await subscribe(db.admin, 'tx-aborted', ['tx-aborted.event'], { maxAttempts: 1 });
  const id = await publish(db.admin, 'tx-aborted.event', {});
  const worker = new Worker({ connectionString: db.url, name: 'tx-aborted-worker', logger: recordingLogger().logger });
  worker.handle('tx-aborted', async (event, { client }) => {
    await insertSent(client, event);
    await client.query('SELECT 1/0').catch(() => {});
  }, { transactional: true });
  const dead = [];
  worker.on('dead', (event) => dead.push(event.id));
  await worker.start();
  try {
    await waitFor(() => dead.length === 1, { what: 'the dead letter' });
    await delay(20);
  } finally {
    await worker.stop();
  }
  assert.deepEqual(await sentRows(id), []);
  assert.match((await delivery(id, 'tx-aborted')).last_error, /current transaction is aborted.*\(SQLSTATE 25P02\)/);
});
