// publish and publishBatch run in the caller's transaction: they commit and roll back with
// it, and refuse what would take them out of it (a pg.Pool) or what relaybus would refuse.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';

import { publish, publishBatch, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';

let db;
let client;

before(async () => {
  db = await createDatabase('publish');
  await subscribe(db.admin, 'mailer', ['order.placed']);
  await subscribe(db.admin, 'audit', ['*']);
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});

after(async () => {
  await client?.end();
  await db?.drop();
});

async function stored(id) {
  const events = await db.admin.query('SELECT type, key, payload, headers FROM relaybus.events WHERE id = $1', [id]);
  const deliveries = await db.admin.query(
    'SELECT handler, available_at FROM relaybus.deliveries WHERE event_id = $1 ORDER BY handler', [id]);
  return { event: events.rows[0], deliveries: deliveries.rows };
}

describe('publish', () => {
  test('in a transaction that rolls back leaves neither the event nor its deliveries', async () => {
    await client.query('BEGIN');
    const id = await publish(client, 'order.placed', { order: 1 }, { key: 'alice' });
    // The publish wrote inside the transaction: its event, naming a delivery for each
    // subscribed handler. (Since 0.3.0 the deliveries themselves are written when the
    // transaction commits, staged until then, so the transaction does not see them.)
    const inside = await client.query('SELECT handlers FROM relaybus.events WHERE id = $1', [id]);
    assert.deepEqual(inside.rows.map((r) => [...r.handlers].sort()), [['audit', 'mailer']],
      'visible inside the transaction, one delivery per subscribed handler');
    await client.query('ROLLBACK');
    const after = await stored(id);
    assert.equal(after.event, undefined);
    assert.deepEqual(after.deliveries, []);
  });

  test('commits with the caller and stores what was given', async () => {
    await client.query('BEGIN');
    const id = await publish(client, 'order.placed', { order: 2, items: [1, 2] }, {
      key: 'bob',
      id: 'order-2',
      headers: { trace: 'abc' },
    });
    assert.equal(id, 'order-2');
    assert.equal((await stored(id)).event, undefined, 'nothing visible before the commit');
    await client.query('COMMIT');
    const { event, deliveries } = await stored(id);
    assert.deepEqual(event, { type: 'order.placed', key: 'bob', payload: { order: 2, items: [1, 2] }, headers: { trace: 'abc' } });
    assert.deepEqual(deliveries.map((d) => d.handler), ['audit', 'mailer']);
  });

  test('generates a UUID id, honours handlers and availableAt', async () => {
    const later = new Date(Date.now() + 3600_000);
    const id = await publish(client, 'order.placed', {}, { handlers: ['audit'], availableAt: later });
    assert.match(id, /^[0-9a-f-]{36}$/);
    const { deliveries } = await stored(id);
    assert.deepEqual(deliveries.map((d) => d.handler), ['audit']);
    assert.equal(deliveries[0].available_at.getTime(), later.getTime());
  });

  test('refuses a pg.Pool, which would publish outside the transaction', async () => {
    const pool = new pg.Pool({ connectionString: db.url });
    try {
      await assert.rejects(publish(pool, 'order.placed', {}), { name: 'TypeError', message: /got a pg\.Pool/ });
    } finally {
      await pool.end();
    }
  });

  test('refuses bad arguments before sending anything', async () => {
    await assert.rejects(publish(client, '', {}), { name: 'RangeError', message: /type must not be empty/ });
    await assert.rejects(publish(client, 'x', [1]), { name: 'TypeError', message: /payload must be a plain object \(got an array\)/ });
    await assert.rejects(publish(client, 'x', null), { message: /payload must be a plain object \(got null\)/ });
    await assert.rejects(publish(client, 'x', {}, { key: 7 }), { message: /key must be a string \(got number\)/ });
    await assert.rejects(publish(client, 'x', {}, { eventId: 'a' }), { message: /unknown option "eventId"/ });
    await assert.rejects(publish(client, 'x', {}, { availableAt: new Date('nope') }), { message: /availableAt is an invalid Date/ });
    await assert.rejects(publish({}, 'x'), { message: /must be a pg Client or PoolClient/ });
  });

  test('passes server errors through with their SQLSTATE', async () => {
    await assert.rejects(publish(client, 'x', {}, { availableAt: 'not a time' }), { code: '22007' });
  });

  test('an unsubscribed handler says how to subscribe it', async () => {
    await assert.rejects(publish(client, 'x', {}, { handlers: ['nobody'] }), {
      code: 'RELAYBUS_NOT_SUBSCRIBED',
      sqlState: '42704',
      message: /handler "nobody" is not subscribed .*relaybus\.subscribe\('nobody'/,
    });
  });
});

describe('publishBatch', () => {
  test('returns the ids in input order and rolls back with the caller', async () => {
    await client.query('BEGIN');
    const ids = await publishBatch(client, [
      { type: 'order.placed', payload: { n: 1 }, key: 'k', id: 'b-1' },
      { type: 'order.placed', payload: { n: 2 }, key: 'k', id: 'b-2', headers: { h: 1 } },
      { type: 'other', id: 'b-3', availableAt: new Date(Date.now() + 1000) },
    ]);
    assert.deepEqual(ids, ['b-1', 'b-2', 'b-3']);
    await client.query('ROLLBACK');
    for (const id of ids) assert.deepEqual(await stored(id), { event: undefined, deliveries: [] });
  });

  test('commits every event with the caller', async () => {
    await client.query('BEGIN');
    const ids = await publishBatch(client, [{ type: 'order.placed', payload: { n: 1 } }, { type: 'order.placed' }]);
    await client.query('COMMIT');
    for (const id of ids) assert.equal((await stored(id)).deliveries.length, 2);
    assert.deepEqual((await stored(ids[1])).event.payload, {});
  });

  test('an empty batch sends nothing', async () => {
    assert.deepEqual(await publishBatch(client, []), []);
  });

  test('names the bad element', async () => {
    await assert.rejects(publishBatch(client, [{ type: 'a' }, { type: 'b', payload: 'x' }]), {
      message: /events\[1\]\.payload must be a plain object/,
    });
    await assert.rejects(publishBatch(client, [{ type: 'a', handler: ['x'] }]), { message: /events\[0\]: unknown option "handler"/ });
    await assert.rejects(publishBatch(client, 'x'), { message: /events must be an array/ });
  });
});
