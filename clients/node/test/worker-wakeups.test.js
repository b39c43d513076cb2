// Wake-ups from strangers: every role may NOTIFY any channel, so a role with no relaybus
// right can send the notifications a listening worker acts on. A flood of them costs the
// worker at most one claim per wakeupInterval, and a real publish right after it is still
// handled at once, not at the poll interval.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';

import { Worker, publish, subscribe } from '../index.js';
import { connectionString, createDatabase, createRole } from './helpers/database.js';
import { delay, waitFor } from './helpers/wait.js';

const POLL = 10000; // any handling within a fraction of this came from a notification
const INTERVAL = 50; // the worker's wakeupInterval, in ms

let db;
let stranger;
let worker;
const handled = new Map(); // event id -> time handled

before(async () => {
  db = await createDatabase('wakeups');
  stranger = await createRole('stranger');
  await subscribe(db.admin, 'flooded', ['flooded.event']);
  worker = new Worker({ connectionString: db.url, name: 'flooded-worker', pollInterval: POLL, wakeupInterval: INTERVAL });
  worker.handle('flooded', async (event) => {
    handled.set(event.id, Date.now());
  });
  await worker.start();
  await waitFor(() => worker.listening && worker.stats.claims >= 1, { what: 'the worker to listen and claim once' });
});

after(async () => {
  await worker?.stop();
  await db?.drop();
  await stranger?.drop();
});

test("a stranger's flood of notifications costs at most one claim per wakeupInterval", async (t) => {
  const { rows: [rights] } = await db.admin.query(
    "SELECT has_schema_privilege($1, 'relaybus', 'USAGE') AS usage", [stranger.name]);
  assert.equal(rights.usage, false, 'the stranger has no relaybus right');
  const client = new pg.Client({ connectionString: connectionString(db.name, stranger.name) });
  await client.connect();
  let made;
  let elapsed;
  try {
    await delay(50); // the worker is back in its poll wait
    const claims = worker.stats.claims;
    const started = Date.now();
    for (let i = 0; i < 200; i++) {
      // Each in its own transaction, so none is folded into another; half of them name the
      // worker's handler, which is what this runtime listens for.
      await client.query("SELECT pg_notify('relaybus', $1)", [i % 2 === 0 ? 'flooded' : `noise ${i}`]);
      await delay(1);
    }
    elapsed = Date.now() - started;
    await delay(3 * INTERVAL); // the last notifications are answered after the spacing
    made = worker.stats.claims - claims;
  } finally {
    await client.end();
  }
  t.diagnostic(`200 notifications in ${elapsed} ms cost ${made} claims`);
  assert.ok(made >= 1 && made <= elapsed / INTERVAL + 3, `${made} claims for 200 notifications in ${elapsed} ms`);

  const published = Date.now();
  const id = await publish(db.admin, 'flooded.event', {});
  await waitFor(() => handled.has(id), { timeout: POLL / 2, every: 2, what: 'the handler' });
  assert.ok(handled.get(id) - published < POLL / 20, `handled ${handled.get(id) - published} ms after the publish`);
});
