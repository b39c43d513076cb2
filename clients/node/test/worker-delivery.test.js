// A Worker runs each delivery's handler exactly once (when nothing fails), groups the
// completions into complete_many, keeps per-key order, and respects its concurrency limit.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Worker, publishBatch, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { remaining as unfinished } from './helpers/deliveries.js';
import { delay, recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('delivery');
});

after(async () => {
  await db?.drop();
});

async function publishMany(events) {
  await db.admin.query('BEGIN');
  const ids = await publishBatch(db.admin, events);
  await db.admin.query('COMMIT');
  return ids;
}

// Deliveries of handler not yet completed (statistics(): on 0.3.0 relaybus.deliveries
// keeps the completed ones).
function remaining(handler) {
  return unfinished(db.admin, handler);
}

test('handles N events exactly once, completing them in batches', async () => {
  await subscribe(db.admin, 'once', ['once.event']);
  const N = 600;
  const ids = await publishMany(Array.from({ length: N }, (_, i) => ({ type: 'once.event', payload: { i } })));
  const seen = new Map();
  const { logger, lines } = recordingLogger();
  const worker = new Worker({ connectionString: db.url, name: 'once-worker', concurrency: 50, logger });
  worker.handle('once', async (event) => {
    seen.set(event.id, (seen.get(event.id) ?? 0) + 1);
    assert.equal(event.attempts, 0);
    assert.equal(event.type, 'once.event');
    await delay(Math.random() * 3);
  });
  await worker.start();
  try {
    await waitFor(async () => (await remaining('once')) === 0, { what: 'every delivery completed' });
    // Give a duplicate the time to show up, then compare.
    await delay(100);
  } finally {
    await worker.stop();
  }
  assert.equal(seen.size, N);
  assert.deepEqual([...seen.values()].filter((n) => n !== 1), [], 'no event ran twice');
  assert.deepEqual([...seen.keys()].sort(), [...ids].sort());
  const stats = worker.stats;
  assert.equal(stats.completed, N);
  assert.equal(stats.lost, 0);
  assert.ok(stats.completeStatements <= N / 5,
    `${stats.completeStatements} complete_many statements for ${N} completions: they are not batched`);
  assert.deepEqual(lines.filter((l) => l.level === 'warn' || l.level === 'error'), []);
});

test('runs the deliveries of one key in publish order, other keys in parallel', async () => {
  await subscribe(db.admin, 'ordered', ['ordered.event']);
  const keys = ['a', 'b', 'c', 'd', 'e'];
  const per = 30;
  const events = [];
  for (let i = 0; i < per; i++) for (const key of keys) events.push({ type: 'ordered.event', key, payload: { i } });
  await publishMany(events);
  const order = new Map(keys.map((k) => [k, []]));
  let running = 0;
  let overlap = 0;
  const worker = new Worker({ connectionString: db.url, name: 'order-worker', concurrency: 10, logger: recordingLogger().logger });
  worker.handle('ordered', async (event) => {
    running += 1;
    overlap = Math.max(overlap, running);
    order.get(event.key).push(event.payload.i);
    await delay(Math.random() * 4);
    running -= 1;
  });
  await worker.start();
  try {
    await waitFor(async () => (await remaining('ordered')) === 0, { what: 'every keyed delivery completed' });
  } finally {
    await worker.stop();
  }
  for (const key of keys) {
    assert.deepEqual(order.get(key), Array.from({ length: per }, (_, i) => i), `key ${key} ran out of order`);
  }
  assert.ok(overlap > 1, 'different keys ran concurrently');
});

test('never runs more handlers at once than its concurrency', async () => {
  await subscribe(db.admin, 'limited', ['limited.event']);
  await publishMany(Array.from({ length: 60 }, (_, i) => ({ type: 'limited.event', payload: { i } })));
  let running = 0;
  let most = 0;
  const worker = new Worker({ connectionString: db.url, name: 'limited-worker', concurrency: 4, batchSize: 10 });
  worker.handle('limited', async () => {
    running += 1;
    most = Math.max(most, running);
    await delay(5);
    running -= 1;
  });
  await worker.start();
  try {
    await waitFor(async () => (await remaining('limited')) === 0, { what: 'every delivery completed' });
  } finally {
    await worker.stop();
  }
  assert.equal(most, 4);
});
