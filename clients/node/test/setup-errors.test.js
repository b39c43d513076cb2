// When relaybus is missing, outdated, or the role lacks its relaybus right, the worker's
// start() and publish() fail with a message that says what to run, and start() leaves
// no connection behind. A role with just the right rights works, and running the printed
// statement is what gives them (on 0.2.0, the GRANT of the cluster's role).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';

import { Worker, publish, subscribe } from '../index.js';
import { connectionString, createDatabase, createRole } from './helpers/database.js';
import { recordingLogger, waitFor } from './helpers/wait.js';

let bare; // no extension
let old; // relaybus 0.1.0
let v020; // relaybus 0.2.0, whose rights are the cluster's roles
let db; // relaybus, the default version
let nobody; // a role without any relaybus right
let odd; // the same, with a name that needs quoting everywhere
let worker; // a role with the worker right only
let publisher; // a role with the publisher right only

before(async () => {
  bare = await createDatabase('bare', { extension: false });
  old = await createDatabase('old', { extension: false });
  await old.admin.query("CREATE EXTENSION relaybus VERSION '0.1.0'");
  v020 = await createDatabase('v020', { extension: false });
  await v020.admin.query("CREATE EXTENSION relaybus VERSION '0.2.0'");
  await subscribe(v020.admin, 'mailer', ['order.placed']);
  db = await createDatabase('setup');
  await subscribe(db.admin, 'mailer', ['order.placed']);
  nobody = await createRole('nobody');
  odd = await createRole('odd', { name: `relaybus_node_O'Neil "Ops" \\_${process.pid}` });
  worker = await createRole('worker');
  await db.admin.query("SELECT relaybus.grant_rights($1, 'worker')", [worker.name]);
  publisher = await createRole('publisher');
  await db.admin.query("SELECT relaybus.grant_rights($1, 'publisher')", [publisher.name]);
});

after(async () => {
  for (const d of [bare, old, v020, db]) await d?.drop();
  for (const r of [nobody, odd, worker, publisher]) await r?.drop();
});

// The statement a message tells an admin to run: from `prefix` to the end of the message.
function statementIn(message, prefix) {
  return message.slice(message.indexOf(prefix));
}

// grant_rights as the server quotes its role argument: an identifier inside a literal.
async function grantRights(role, right) {
  const { rows } = await db.admin.query(
    "SELECT format('SELECT relaybus.grant_rights(%L, %L)', quote_ident($1), $2::text) AS statement",
    [role, right],
  );
  return rows[0].statement;
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

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

test('start() as a role without the worker right says what to run', async () => {
  for (const role of [nobody.name, publisher.name]) {
    const grant = await grantRights(role, 'worker');
    await assert.rejects(newWorker(connectionString(db.name, role)).start(), {
      code: 'RELAYBUS_PERMISSION',
      message: new RegExp(
        `role "${escapeRegExp(role)}" lacks the privileges of the worker right in this database: ` +
          `an admin must run ${escapeRegExp(grant)}$`,
      ),
    });
  }
});

test('the statement printed for a role whose name needs quoting gives it the right', async () => {
  const url = connectionString(db.name, odd.name);
  const err = await newWorker(url).start().then(() => null, (e) => e);
  assert.equal(err?.code, 'RELAYBUS_PERMISSION');
  assert.ok(err.message.endsWith(`an admin must run ${await grantRights(odd.name, 'worker')}`), err.message);
  await db.admin.query(statementIn(err.message, 'SELECT relaybus.grant_rights('));
  const w = newWorker(url);
  await w.start();
  await w.stop();
});

test('on relaybus 0.2.0 the message names the GRANT of relaybus_worker, which works there only', async () => {
  const role = await createRole('v020');
  try {
    const err = await newWorker(connectionString(v020.name, role.name)).start().then(() => null, (e) => e);
    assert.equal(err?.code, 'RELAYBUS_PERMISSION');
    assert.match(err.message, new RegExp(`lacks the privileges of relaybus_worker: an admin must run GRANT relaybus_worker TO "${role.name}"$`));
    await v020.admin.query(statementIn(err.message, 'GRANT relaybus_worker TO '));
    const w = newWorker(connectionString(v020.name, role.name));
    await w.start();
    await w.stop();
    // The cluster's role gives nothing in a database with rights per database.
    await assert.rejects(newWorker(connectionString(db.name, role.name)).start(), {
      code: 'RELAYBUS_PERMISSION',
      message: /lacks the privileges of the worker right in this database/,
    });
  } finally {
    await role.drop();
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

test('publish() without relaybus, or without the publisher right, says what to do', async () => {
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
    const grant = await grantRights(role, 'publisher');
    try {
      await assert.rejects(publish(client, 'order.placed', {}), {
        code: 'RELAYBUS_PERMISSION',
        sqlState: '42501',
        // The version is not asked for after a failed call: both ways are named.
        message: new RegExp(
          `an admin must run ${escapeRegExp(grant)} ` +
            `\\(on relaybus 0\\.2\\.0: GRANT relaybus_publisher TO "${role}"\\)$`,
        ),
      });
    } finally {
      await client.end();
    }
  }
});

test('a role with only the publisher right publishes, and one with only the worker right handles', async () => {
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
