// relaybus for Node.js: publish events inside your transaction, and run handlers for them
// with a Worker. See README.md.
export { publish, publishBatch, subscribe } from './lib/publish.js';
export { Worker } from './lib/worker.js';
export { BuryError, RelaybusError } from './lib/errors.js';
export { registerWorkerMetrics, unregisterWorkerMetrics } from './lib/prometheus.js';
