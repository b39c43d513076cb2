// The Worker's options: their defaults and checks, in one place so that the constructor's
// errors and the README's option table describe the same thing.

import { makeLogger } from './logger.js';
import {
  checkBoolean,
  checkFunction,
  checkInteger,
  checkKnownOptions,
  checkMillis,
  checkName,
  isPlainObject,
} from './validate.js';

const DAY = 24 * 3600 * 1000;

export const WORKER_OPTIONS = [
  'name',
  'connectionString',
  'poolConfig',
  'pool',
  'concurrency',
  'batchSize',
  'lease',
  'pollInterval',
  'wakeupInterval',
  'completionBatchSize',
  'completionDelay',
  'shutdownTimeout',
  'listen',
  'listenCheckInterval',
  'handleSignals',
  'logger',
  'isPermanent',
];

export function workerOptions(options) {
  if (options === undefined) throw new TypeError('new Worker(options): options with at least a name are required');
  const o = checkKnownOptions(options, WORKER_OPTIONS, 'new Worker');
  const name = checkName(o.name, 'new Worker: name');
  if (name.startsWith('relaybus-sql-')) {
    throw new RangeError('new Worker: names starting with "relaybus-sql-" are reserved for relaybus\'s in-database handler workers');
  }
  if (o.pool !== undefined && (o.connectionString !== undefined || o.poolConfig !== undefined)) {
    throw new TypeError('new Worker: give either pool, or connectionString/poolConfig, not both');
  }
  if (o.pool !== undefined && (o.pool === null || typeof o.pool.connect !== 'function' || typeof o.pool.query !== 'function')) {
    throw new TypeError('new Worker: pool must be a pg.Pool');
  }
  if (o.connectionString !== undefined && typeof o.connectionString !== 'string') {
    throw new TypeError('new Worker: connectionString must be a string');
  }
  if (o.poolConfig !== undefined && !isPlainObject(o.poolConfig)) {
    throw new TypeError('new Worker: poolConfig must be an object of pg.Pool settings');
  }
  const concurrency = o.concurrency === undefined ? 10 : checkInteger(o.concurrency, 'new Worker: concurrency', 1, 10000);
  const lease = o.lease === undefined ? 30000 : checkMillis(o.lease, 'new Worker: lease', { min: 100, max: DAY });
  const pollInterval = o.pollInterval === undefined ? 1000 : checkMillis(o.pollInterval, 'new Worker: pollInterval', { min: 10 });
  return {
    name,
    connectionString: o.connectionString,
    poolConfig: o.poolConfig ?? {},
    pool: o.pool ?? null,
    concurrency,
    batchSize: o.batchSize === undefined ? Math.min(concurrency, 10000) : checkInteger(o.batchSize, 'new Worker: batchSize', 1, 10000),
    lease,
    pollInterval,
    wakeupInterval:
      o.wakeupInterval === undefined ? 1 : checkMillis(o.wakeupInterval, 'new Worker: wakeupInterval', { max: 60000 }),
    completionBatchSize:
      o.completionBatchSize === undefined ? 100 : checkInteger(o.completionBatchSize, 'new Worker: completionBatchSize', 1, 10000),
    completionDelay: o.completionDelay === undefined ? 2 : checkMillis(o.completionDelay, 'new Worker: completionDelay', { max: 60000 }),
    shutdownTimeout:
      o.shutdownTimeout === undefined ? 10000 : checkMillis(o.shutdownTimeout, 'new Worker: shutdownTimeout'),
    listen: o.listen === undefined ? true : checkBoolean(o.listen, 'new Worker: listen'),
    listenCheckInterval:
      o.listenCheckInterval === undefined
        ? 15000
        : checkMillis(o.listenCheckInterval, 'new Worker: listenCheckInterval', { min: 50 }),
    handleSignals: o.handleSignals === undefined ? false : checkBoolean(o.handleSignals, 'new Worker: handleSignals'),
    logger: makeLogger(o.logger),
    isPermanent: o.isPermanent === undefined ? null : checkFunction(o.isPermanent, 'new Worker: isPermanent'),
  };
}
