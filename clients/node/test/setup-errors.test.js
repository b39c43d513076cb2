// When relaybus is missing, outdated, or the role lacks its relaybus role, the worker's
// start() and publish() fail with a message that says what to run, and start() leaves
// no connection behind. A role with just the right grants works.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';

import { Worker, publish, subscribe } from '../index.js';
import { connectionString, createDatabase, createRole } from './helpers/database.js';
import { recordingLogger, waitFor } from './helpers/wait.js';

let bare; // no extension
let old; // relaybus 0.1.0
let db; // relaybus 0.2.0
let nobody; // a role without any relaybus role
let worker; // a role with relaybus_worker only
let publisher; // a role with relaybus_publisher only

before(async () => {
  bare = await createDatabase('bare', { extension: false });
  old = await createDatabase('old', { extension: false });
  await old.admin.query("CREATE EXTENSION relaybus VERSION '0.1.0'");
  db = await createDatabase('setup');
  await subscribe(db.admin, 'mailer', ['order.placed']);
  nobody = await createRole('nobody');
  worker = await createRole('worker', ['relaybus_worker']);
  publisher = await createRole('publisher', ['relaybus_publisher']);
});

after(async () => {
  for (const d of [bare, old, db]) await d?.drop();
  for (const r of [nobody, worker, publisher]) await r?.drop();
});

async function connections(database) {
  const { rows } = await db.admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [database]);
  return rows[0].n;
}

function newWorker(url, handler = 'mailer') {
  const w = new Worker({ connectionString: url, name: 'setup-worker', logger: recordingLogger().logger });
  w.handle(handler, async () => {});
  return w;
}

test('start() in a database without relaybus says to CREATE EXTENSION, and closes its connections', async () => {
  const w = newWorker(bare.url);
  await assert.rejects(w.start(), {
    name: 'RelaybusError',
    code: 'RELAYBUS_NOT_INSTALLED',
    message: new RegExp(`relaybus is not installed in database "${bare.name}": a superuser must run CREATE EXTENSION relaybus`),
  });
  assert.equal(w.state, 'stopped');
  await w.stop(); // harmless after a failed start
  await waitFor(async () => (await connections(bare.name)) === 1, { what: "the worker's connections to close" }); // 1: the test's own
});

test('start() on relaybus 0.1.0 says to update the extension', async () => {
  await assert.rejects(newWorker(old.url).start(), {
    code: 'RELAYBUS_OUTDATED',
    message: /relaybus 0\.1\.0 is installed .* needs 0\.2\.0 or later: a superuser must run ALTER EXTENSION relaybus UPDATE/,
  });
});

test('start() as a role without relaybus_worker says what to GRANT', async () => {
  for (const role of [nobody.name, publisher.name]) {
    await assert.rejects(newWorker(connectionString(db.name, role)).start(), {
      code: 'RELAYBUS_PERMISSION',
      message: new RegExp(`role "${role}" lacks the privileges of relaybus_worker: an admin must run GRANT relaybus_worker TO "${role}"`),
    });
  }
});

test('start() with a handler nobody subscribed says to subscribe it', async () => {
  await assert.rejects(newWorker(db.url, 'nosuch').start(), {
    code: 'RELAYBUS_NOT_SUBSCRIBED',
    sqlState: '42704',
    message: /handler "nosuch" is not subscribed in database .*: an admin must run SELECT relaybus\.subscribe\('nosuch'/,
  });
});

test('start() without any handler is refused', async () => {
  await assert.rejects(new Worker({ connectionString: db.url, name: 'empty' }).start(), /no handlers; call worker\.handle/);
});

test('publish() without relaybus, or without relaybus_publisher, says what to do', async () => {
  const onBare = new pg.Client({ connectionString: bare.url });
  await onBare.connect();
  try {
    await assert.rejects(publish(onBare, 'order.placed', {}), {
      code: 'RELAYBUS_NOT_INSTALLED',
      sqlState: '3F000',
      message: /CREATE EXTENSION relaybus/,
    });
  } finally {
    await onBare.end();
  }
  for (const role of [nobody.name, worker.name]) {
    const client = new pg.Client({ connectionString: connectionString(db.name, role) });
    await client.connect();
    try {
      await assert.rejects(publish(client, 'order.placed', {}), {
        code: 'RELAYBUS_PERMISSION',
        sqlState: '42501',
        message: new RegExp(`GRANT relaybus_publisher TO "${role}"`),
      });
    } finally {
      await client.end();
    }
  }
});

test('a role with only relaybus_publisher publishes, and one with only relaybus_worker handles', async () => {
  const client = new pg.Client({ connectionString: connectionString(db.name, publisher.name) });
  await client.connect();
  let id;
  try {
    id = await publish(client, 'order.placed', { n: 1 });
  } finally {
    await client.end();
  }
  const handled = [];
  const w = new Worker({ connectionString: connectionString(db.name, worker.name), name: 'granted-worker' });
  w.handle('mailer', async (event) => {
    handled.push(event.id);
  });
  await w.start();
  try {
    await waitFor(() => handled.length === 1, { what: 'the delivery' });
  } finally {
    await w.stop();
  }
  assert.deepEqual(handled, [id]);
});
