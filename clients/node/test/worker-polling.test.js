// Polling is the fallback, and it must not spin: an idle worker claims about once per poll
// interval, a claim that keeps failing waits the poll interval between tries, and
// deliveries not due yet are found by polling without any notification.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Worker, publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { delay, recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('polling');
});

after(async () => {
  await db?.drop();
});

test('an idle worker claims once per poll interval, not in a loop', async () => {
  await subscribe(db.admin, 'quiet', ['quiet.event']);
  const worker = new Worker({ connectionString: db.url, name: 'quiet-worker', pollInterval: 200, logger: recordingLogger().logger });
  worker.handle('quiet', async () => {});
  await worker.start();
  try {
    await delay(100);
    const claims = worker.stats.claims;
    await delay(1000);
    const during = worker.stats.claims - claims;
    assert.ok(during >= 3 && during <= 7, `${during} claims in 1 s with a 200 ms poll interval`);
  } finally {
    await worker.stop();
  }
});

test('without LISTEN, polling finds work that was published, and work that became due', async () => {
  await subscribe(db.admin, 'polled', ['polled.event']);
  const handled = [];
  const worker = new Worker({ connectionString: db.url, name: 'polled-worker', pollInterval: 100, listen: false });
  worker.handle('polled', async (event) => {
    handled.push(event.id);
  });
  await worker.start();
  try {
    const now = await publish(db.admin, 'polled.event', {});
    const later = await publish(db.admin, 'polled.event', {}, { availableAt: new Date(Date.now() + 400) });
    await waitFor(() => handled.length === 2, { what: 'both deliveries' });
    assert.deepEqual(handled, [now, later]);
    assert.equal(worker.listening, false);
  } finally {
    await worker.stop();
  }
});

test('a failing claim is reported and retried once per poll interval until it works again', async () => {
  await subscribe(db.admin, 'gone', ['gone.event']);
  const errors = [];
  const handled = [];
  const worker = new Worker({ connectionString: db.url, name: 'gone-worker', pollInterval: 100 });
  worker.handle('gone', async (event) => {
    handled.push(event.id);
  });
  worker.on('error', (err, context) => errors.push({ err, context }));
  await worker.start();
  try {
    await db.admin.query("SELECT relaybus.unsubscribe('gone')"); // every claim now raises 42704
    await waitFor(() => errors.length > 0, { what: 'the first claim error' });
    const claims = worker.stats.claims;
    await delay(1000);
    const during = worker.stats.claims - claims;
    assert.ok(during >= 5 && during <= 12, `${during} failing claims in 1 s with a 100 ms poll interval`);
    assert.equal(errors[0].context.operation, 'claim');
    assert.equal(errors[0].err.code, 'RELAYBUS_NOT_SUBSCRIBED');
    assert.match(errors[0].err.message, /handler "gone" is not subscribed .*relaybus\.subscribe\('gone'/);

    await subscribe(db.admin, 'gone', ['gone.event']);
    const id = await publish(db.admin, 'gone.event', {});
    await waitFor(() => handled.includes(id), { what: 'the worker to recover' });
  } finally {
    await worker.stop();
  }
});

test("without an 'error' listener, a claim failing the same way is logged as an error once", async () => {
  await subscribe(db.admin, 'logged', ['logged.event']);
  const { logger, lines } = recordingLogger();
  const handled = [];
  const worker = new Worker({ connectionString: db.url, name: 'logged-worker', pollInterval: 50, logger });
  worker.handle('logged', async (event) => {
    handled.push(event.id);
  });
  await worker.start();
  try {
    await db.admin.query("SELECT relaybus.unsubscribe('logged')");
    await waitFor(() => lines.filter((l) => /claim failed/.test(l.text)).length >= 5, { what: 'several failed claims' });
    const failed = lines.filter((l) => /claim failed/.test(l.text));
    assert.equal(failed[0].level, 'error');
    assert.match(failed[0].text, /claim failed: handler "logged" is not subscribed/);
    assert.deepEqual([...new Set(failed.slice(1).map((l) => l.level))], ['debug']);

    await subscribe(db.admin, 'logged', ['logged.event']);
    const id = await publish(db.admin, 'logged.event', {});
    await waitFor(() => handled.includes(id), { what: 'the worker to recover' });
    assert.ok(lines.some((l) => l.level === 'info' && l.text === 'claim works again'));
  } finally {
    await worker.stop();
  }
});
