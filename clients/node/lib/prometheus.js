// A worker's statistics as Prometheus metrics, the way Node.js programs export theirs:
// prom-client metrics, read from the worker at each scrape. prom-client is the
// application's dependency, passed in: relaybus does not depend on it.
//
//   import client from 'prom-client';
//   import { registerWorkerMetrics } from 'relaybus';
//   registerWorkerMetrics(client, worker);   // into client.register, or { registry }
//   // serve await client.register.metrics() at /metrics
//
// Each field of worker.stats is a counter, relaybus_worker_<field>_total (snake case), and
// the deliveries claimed and not yet ended a gauge, relaybus_worker_in_flight; all labelled
// with the worker's name. Several workers share a registry, one name each.

// What each field of worker.stats counts (index.d.ts, WorkerStats).
const HELP = {
  claims: 'claim statements sent',
  claimed: 'deliveries received from claims',
  succeeded: 'handlers that returned',
  failed: 'handlers that threw (failed or buried)',
  completed: 'deliveries completed in the database',
  completeStatements: 'complete_many statements sent',
  dead: 'deliveries dead-lettered (attempts exhausted, or buried)',
  lost: 'attempts whose lease was gone when they ended',
  released: 'deliveries given back at shutdown',
  renewals: 'extend_lease statements sent',
  wakeups: 'notifications for the worker\'s handlers',
  listenConnects: 'connections opened to LISTEN',
};

// registry -> Map(worker name -> worker): the metrics of a registry are made once, and
// read every worker registered in it.
const registries = new WeakMap();

function snake(name) {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function metricsFor(client, registry) {
  let workers = registries.get(registry);
  if (workers) return workers;
  workers = new Map();
  for (const [field, help] of Object.entries(HELP)) {
    new client.Counter({
      name: `relaybus_worker_${snake(field)}_total`,
      help: `relaybus worker: ${help}`,
      labelNames: ['worker'],
      registers: [registry],
      collect() {
        this.reset();
        for (const [name, worker] of workers) this.inc({ worker: name }, worker.stats[field] ?? 0);
      },
    });
  }
  new client.Gauge({
    name: 'relaybus_worker_in_flight',
    help: 'relaybus worker: deliveries claimed and not yet ended',
    labelNames: ['worker'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [name, worker] of workers) this.set({ worker: name }, worker.inFlight);
    },
  });
  registries.set(registry, workers);
  return workers;
}

/**
 * Adds `worker`'s metrics to `registry` (prom-client's default registry unless given).
 * Throws a TypeError without prom-client's Counter and Gauge, and an Error for a second
 * worker of the same name in one registry.
 */
export function registerWorkerMetrics(client, worker, { registry = client?.register } = {}) {
  if (typeof client?.Counter !== 'function' || typeof client?.Gauge !== 'function' || !registry) {
    throw new TypeError('registerWorkerMetrics: pass the prom-client module (import client from \'prom-client\')');
  }
  const workers = metricsFor(client, registry);
  if (workers.has(worker.name)) {
    throw new Error(`registerWorkerMetrics: a worker named "${worker.name}" is registered already`);
  }
  workers.set(worker.name, worker);
}

/** Takes `worker`'s metrics out of `registry` (one never registered there: nothing). */
export function unregisterWorkerMetrics(client, worker, { registry = client?.register } = {}) {
  const workers = registries.get(registry);
  if (workers?.get(worker.name) === worker) workers.delete(worker.name);
}
