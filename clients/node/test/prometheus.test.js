// registerWorkerMetrics: a worker's statistics in prom-client's exposition, read at each
// scrape, one series per worker name.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import client from 'prom-client';

import { Worker, publishBatch, registerWorkerMetrics, subscribe, unregisterWorkerMetrics } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('prometheus');
});

after(async () => {
  await db?.drop();
});

// { 'metric{worker="name"}': value } of one scrape of the registry.
async function scrape(registry) {
  const out = {};
  for (const m of await registry.getMetricsAsJSON()) {
    for (const v of m.values) out[`${m.name}{worker="${v.labels.worker}"}`] = v.value;
  }
  return out;
}

function snake(name) {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

test('a worker\'s stats are its counters at each scrape, and its in-flight deliveries a gauge', async () => {
  await subscribe(db.admin, 'prom', ['prom.event']);
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const worker = new Worker({ connectionString: db.url, name: 'prom-a', concurrency: 4, pollInterval: 200 });
  worker.handle('prom', async () => { await gate; });
  const registry = new client.Registry();
  registerWorkerMetrics(client, worker, { registry });
  assert.equal((await scrape(registry))['relaybus_worker_claimed_total{worker="prom-a"}'], 0);

  await publishBatch(db.admin, Array.from({ length: 6 }, (_, i) => ({ type: 'prom.event', payload: { i } })));
  await worker.start();
  try {
    await waitFor(async () => (await scrape(registry))['relaybus_worker_in_flight{worker="prom-a"}'] >= 4,
      { what: 'the in-flight gauge to show the running deliveries' });
    release();
    await waitFor(() => worker.stats.completed === 6, { what: 'every completion' });
    const scraped = await scrape(registry);
    const stats = worker.stats;
    for (const [field, value] of Object.entries(stats)) {
      assert.equal(scraped[`relaybus_worker_${snake(field)}_total{worker="prom-a"}`], value, field);
    }
    assert.equal(scraped['relaybus_worker_in_flight{worker="prom-a"}'], 0);
    // The text exposition Prometheus reads: one family, typed as a counter.
    const text = await registry.metrics();
    assert.match(text, /^# TYPE relaybus_worker_completed_total counter$/m);
    assert.match(text, /^relaybus_worker_completed_total\{worker="prom-a"\} 6$/m);
  } finally {
    await worker.stop();
  }
});

test('workers share a registry, one name each', async () => {
  const registry = new client.Registry();
  const first = new Worker({ connectionString: db.url, name: 'prom-b1' });
  const second = new Worker({ connectionString: db.url, name: 'prom-b2' });
  registerWorkerMetrics(client, first, { registry });
  registerWorkerMetrics(client, second, { registry });
  const text = await registry.metrics();
  assert.equal(text.match(/^# TYPE relaybus_worker_claimed_total counter$/gm).length, 1);
  assert.match(text, /relaybus_worker_claimed_total\{worker="prom-b1"\} 0/);
  assert.match(text, /relaybus_worker_claimed_total\{worker="prom-b2"\} 0/);
  assert.throws(() => registerWorkerMetrics(client, new Worker({ connectionString: db.url, name: 'prom-b1' }), { registry }),
    /"prom-b1" is registered already/);
  assert.throws(() => registerWorkerMetrics({}, first, { registry }), TypeError);
  unregisterWorkerMetrics(client, first, { registry });
  const after = await registry.metrics();
  assert.doesNotMatch(after, /worker="prom-b1"/);
  assert.match(after, /worker="prom-b2"/);
});
