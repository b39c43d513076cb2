// A handler that throws fails the attempt with its error text (relaybus.fail); after
// max_attempts the delivery is a dead letter carrying the last error. A BuryError, or an
// error isPermanent() accepts, dead-letters at once (relaybus.bury).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { BuryError, Worker, publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { deliveryOf } from './helpers/deliveries.js';
import { recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('failure');
});

after(async () => {
  await db?.drop();
});

// { status, attempts, last_error }, or undefined once completed (list_deliveries).
function delivery(id, handler) {
  return deliveryOf(db.admin, id, handler);
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
  const log = recordingLogger();
  const worker = new Worker({ connectionString: db.url, name: 'flaky-worker', pollInterval: 50, logger: log.logger });
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
  // Logged as the Python and C++ workers log it, attempts numbered as the API numbers them;
  // this worker listens to 'failed' and 'dead', so the lines go to debug.
  const failures = log.lines.filter((l) => l.text.includes(`failed on event ${id}`));
  assert.deepEqual(failures.map((l) => `${l.level}: ${l.text}`), [
    `debug: handler flaky failed on event ${id}, attempts=0, will retry: TypeError: card 4242 declined on try 1`,
    `debug: handler flaky failed on event ${id}, attempts=1, will retry: TypeError: card 4242 declined on try 2`,
    `debug: handler flaky failed on event ${id}, attempts=2, and it is dead (max_attempts reached): TypeError: card 4242 declined on try 3`,
  ]);
});

test('with nobody listening, a retry is logged as a warning and a dead letter as an error', async () => {
  await subscribe(db.admin, 'unheard', ['unheard.event'], { maxAttempts: 2, backoffBase: 0, backoffMax: 0 });
  const id = await publish(db.admin, 'unheard.event', {});
  const log = recordingLogger();
  const worker = new Worker({ connectionString: db.url, name: 'unheard-worker', pollInterval: 50, logger: log.logger });
  worker.handle('unheard', async () => {
    throw new Error('smtp down\nsecond line');
  });
  await worker.start();
  try {
    await waitFor(() => worker.stats.dead === 1, { what: 'the dead letter' });
  } finally {
    await worker.stop();
  }
  const failures = log.lines.filter((l) => l.text.includes(`failed on event ${id}`));
  assert.deepEqual(failures.map((l) => `${l.level}: ${l.text}`), [
    `warn: handler unheard failed on event ${id}, attempts=0, will retry: smtp down`,
    `error: handler unheard failed on event ${id}, attempts=1, and it is dead (max_attempts reached): smtp down`,
  ]);
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

// PostgreSQL refuses NUL in text (SQLSTATE 22021): an error message with one must still be
// stored, and must not leave its delivery in flight, its key blocked and stop() waiting.
test('an error message with a NUL is stored readable, and the key moves on', async () => {
  await subscribe(db.admin, 'garbage', ['garbage.event'], { maxAttempts: 1 });
  const first = await publish(db.admin, 'garbage.event', { bad: true }, { key: 'k' });
  const second = await publish(db.admin, 'garbage.event', { bad: false }, { key: 'k' });
  const done = [];
  const worker = new Worker({
    connectionString: db.url, name: 'garbage-worker', pollInterval: 50, shutdownTimeout: 5000, logger: recordingLogger().logger,
  });
  worker.handle('garbage', async (event) => {
    if (event.payload.bad) throw new Error('binary garbage \u0000 after a NUL');
    done.push(event.id);
  });
  await worker.start();
  let took;
  try {
    await waitFor(() => done.length === 1, { what: "the key's next event to run" });
  } finally {
    const stopping = Date.now();
    await worker.stop();
    took = Date.now() - stopping;
  }
  assert.deepEqual(done, [second]);
  assert.deepEqual(await delivery(first, 'garbage'), {
    status: 'dead',
    attempts: 1,
    last_error: 'binary garbage \\u0000 after a NUL',
  });
  assert.ok(took < 2000, `stop() took ${took} ms`);
});

// A statement that ends an attempt and fails for good (not a connection problem) is not
// retried forever: fail is sent again without the error text, then the delivery is released.
test('a permanent error ending an attempt: fail without the text, else release', async () => {
  await subscribe(db.admin, 'refused', ['refused.event'], { maxAttempts: 1 });
  // The fault is injected where fail writes: on 0.3.0 an attempt that ends without
  // completing writes the delivery's exception row (inserted for a delivery picked from its
  // lane, updated for a retry), and a delivery row is never updated. Refused: any write
  // carrying the handler's error text, and any write that charges key 'charge' an attempt
  // (a release, which charges none, passes).
  await db.admin.query(`
    CREATE FUNCTION public.refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.handler = 'refused' AND (NEW.last_error LIKE '%poison%' OR
          (NEW.key = 'charge' AND
           NEW.attempts > CASE WHEN TG_OP = 'UPDATE' THEN OLD.attempts ELSE 0 END)) THEN
        RAISE EXCEPTION 'refused by a trigger' USING ERRCODE = '22023';
      END IF;
      RETURN NEW;
    END $$`);
  await db.admin.query(`CREATE TRIGGER refuse_update BEFORE INSERT OR UPDATE ON relaybus.exceptions
                        FOR EACH ROW EXECUTE FUNCTION public.refuse_update()`);
  try {
    const textRefused = await publish(db.admin, 'refused.event', { kind: 'text' }, { key: 'text' });
    const chargeRefused = await publish(db.admin, 'refused.event', { kind: 'charge' }, { key: 'charge' });
    const calls = { text: 0, charge: 0 };
    const { logger, lines } = recordingLogger();
    const worker = new Worker({ connectionString: db.url, name: 'refused-worker', pollInterval: 50, shutdownTimeout: 5000, logger });
    worker.handle('refused', async (event) => {
      calls[event.payload.kind] += 1;
      throw new Error(`poison for ${event.payload.kind}`);
    });
    await worker.start();
    let took;
    try {
      await waitFor(async () => (await delivery(textRefused, 'refused'))?.status === 'dead' && calls.charge >= 2, {
        what: 'the text-refused delivery failed without its text, the charge-refused one released and run again',
      });
    } finally {
      const stopping = Date.now();
      await worker.stop();
      took = Date.now() - stopping;
    }
    assert.deepEqual(await delivery(textRefused, 'refused'), { status: 'dead', attempts: 1, last_error: null });
    assert.equal(calls.text, 1);
    const charged = await delivery(chargeRefused, 'refused');
    assert.equal(charged.status, 'pending');
    assert.equal(charged.attempts, 0);
    assert.ok(worker.stats.released >= 1);
    const errors = lines.filter((l) => l.level === 'error').map((l) => l.text);
    assert.ok(errors.some((t) => /without the error text/.test(t) && /refused by a trigger/.test(t)), errors.join('\n'));
    assert.ok(errors.filter((t) => /released/.test(t)).length >= 2, errors.join('\n'));
    assert.ok(took < 2000, `stop() took ${took} ms`);
  } finally {
    await db.admin.query('DROP TRIGGER refuse_update ON relaybus.exceptions');
    await db.admin.query('DROP FUNCTION public.refuse_update()');
  }
});
