// The pool trap: claims made without a holder bind lanes to the connection that made them,
// and a pool that closes that connection turns them into orphans which the worker's next
// claim takes over, charging an attempt and running the deliveries twice. The Worker
// passes its holder to every call, so a pool that keeps closing and opening connections
// never makes it take over its own lanes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';

import { Worker, publishBatch, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { remaining } from './helpers/deliveries.js';
import { delay, recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('pool');
});

after(async () => {
  await db?.drop();
});

test('a worker on a churning pg.Pool of several connections never takes over its own lanes', async () => {
  await subscribe(db.admin, 'pooled', ['pooled.event']);
  const N = 300;
  await db.admin.query('BEGIN');
  const ids = await publishBatch(db.admin, Array.from({ length: N }, (_, i) => ({
    type: 'pooled.event',
    key: `customer-${i % 40}`,
    payload: { i },
  })));
  await db.admin.query('COMMIT');

  // Connections close 5 ms after they go idle, so claims, renewals and completions keep
  // landing on connections other than the one that acquired a lane.
  const pool = new pg.Pool({ connectionString: db.url, max: 6, idleTimeoutMillis: 5 });
  let opened = 0;
  pool.on('connect', () => {
    opened += 1;
  });
  const calls = new Map();
  const charged = [];
  const { logger, lines } = recordingLogger();
  const worker = new Worker({ pool, name: 'pooled-worker', concurrency: 16, lease: 2000, logger });
  worker.handle('pooled', async (event) => {
    calls.set(event.id, (calls.get(event.id) ?? 0) + 1);
    if (event.attempts !== 0) charged.push(event);
    await delay(1 + Math.random() * 8);
  });
  await worker.start();
  try {
    await waitFor(async () => (await remaining(db.admin, 'pooled')) === 0,
      { timeout: 20000, what: 'every delivery completed' });
  } finally {
    await worker.stop();
  }
  assert.equal(pool.ended, false, "stop() must not end a pool the caller passed in");
  await pool.end();

  assert.ok(opened >= 10, `only ${opened} connections opened: the pool did not churn`);
  assert.deepEqual(charged.map((e) => e.id), [], 'deliveries came back charged: lanes were taken over');
  assert.equal(calls.size, N);
  assert.deepEqual([...calls.values()].filter((n) => n !== 1), [], 'deliveries ran more than once');
  assert.deepEqual([...calls.keys()].sort(), [...ids].sort());
  assert.equal(worker.stats.lost, 0);
  assert.equal(worker.stats.completed, N);
  assert.deepEqual(lines.filter((l) => l.level === 'warn' || l.level === 'error'), []);
});
