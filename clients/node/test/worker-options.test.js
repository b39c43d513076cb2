// Bad Worker options and handler registrations are refused at once, with the option's
// name in the message; nothing connects until start().
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Worker } from '../index.js';
import { errorText } from '../lib/errors.js';

const ok = { name: 'w', connectionString: 'postgresql://nobody@127.0.0.1:1/none' };

test('options are checked in the constructor', () => {
  assert.throws(() => new Worker(), /options with at least a name are required/);
  assert.throws(() => new Worker({}), { name: 'TypeError', message: /new Worker: name must be a string \(got undefined\)/ });
  assert.throws(() => new Worker({ name: '' }), { name: 'RangeError', message: /name must not be empty/ });
  assert.throws(() => new Worker({ name: 'x'.repeat(1001) }), /name must be at most 1000 bytes/);
  assert.throws(() => new Worker({ name: 'relaybus-sql-0' }), /reserved for relaybus's in-database handler workers/);
  assert.throws(() => new Worker({ ...ok, concurency: 5 }), /unknown option "concurency"/);
  assert.throws(() => new Worker({ ...ok, concurrency: 0 }), { name: 'RangeError', message: /concurrency must be between 1 and 10000/ });
  assert.throws(() => new Worker({ ...ok, concurrency: 2.5 }), { name: 'TypeError', message: /concurrency must be an integer/ });
  assert.throws(() => new Worker({ ...ok, lease: 50 }), /lease must be at least 100 ms/);
  assert.throws(() => new Worker({ ...ok, lease: 86400001 }), /lease must be at most 86400000 ms/);
  assert.throws(() => new Worker({ ...ok, lease: '30s' }), /lease must be a number of milliseconds/);
  assert.throws(() => new Worker({ ...ok, pollInterval: 0 }), /pollInterval must be at least 10 ms/);
  assert.throws(() => new Worker({ ...ok, wakeupInterval: -1 }), /wakeupInterval must be at least 0 ms/);
  assert.throws(() => new Worker({ ...ok, wakeupInterval: 60001 }), /wakeupInterval must be at most 60000 ms/);
  assert.throws(() => new Worker({ ...ok, batchSize: 10001 }), /batchSize must be between 1 and 10000/);
  assert.throws(() => new Worker({ ...ok, listen: 'yes' }), /listen must be true or false/);
  assert.throws(() => new Worker({ ...ok, isPermanent: true }), /isPermanent must be a function/);
  assert.throws(() => new Worker({ name: 'w', pool: {} }), /pool must be a pg\.Pool/);
  assert.throws(() => new Worker({ ...ok, pool: { connect() {}, query() {} } }), /either pool, or connectionString\/poolConfig/);
  assert.throws(() => new Worker({ ...ok, logger: 'console' }), /logger must be an object/);
});

test('handlers are checked when registered', () => {
  const worker = new Worker(ok);
  assert.throws(() => worker.handle('', async () => {}), /handler must not be empty/);
  assert.throws(() => worker.handle('mailer'), /fn must be a function \(got undefined\)/);
  assert.throws(() => worker.handle('mailer', async () => {}, { transactonal: true }), /unknown option "transactonal"/);
  assert.equal(worker.handle('mailer', async () => {}), worker, 'handle() chains');
  assert.throws(() => worker.handle('mailer', async () => {}), /"mailer" already has a handler/);
});

test('a worker generates a distinct holder per instance', () => {
  const a = new Worker(ok);
  const b = new Worker(ok);
  assert.notEqual(a.holder, b.holder);
  assert.ok(a.holder.includes(String(process.pid)));
  assert.equal(a.name, 'w');
  assert.equal(a.state, 'new');
});

test('the stored error text names the error, keeps SQLSTATEs and is bounded', () => {
  assert.equal(errorText(new Error('plain')), 'plain');
  assert.equal(errorText(new RangeError('out')), 'RangeError: out');
  assert.equal(errorText(Object.assign(new Error('dup key'), { name: 'error', code: '23505' })), 'dup key (SQLSTATE 23505)');
  assert.equal(errorText('a string'), 'a string');
  assert.equal(errorText({ reason: 1 }), 'non-Error thrown: {"reason":1}');
  assert.equal(errorText(undefined), 'non-Error thrown: undefined');
  assert.ok(errorText(new Error('x'.repeat(20000))).length <= 8003);
});
