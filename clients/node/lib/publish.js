// The publishing side: relaybus.publish and relaybus.publish_batch on a client the caller
// owns, inside whatever transaction the caller has open. Nothing here begins, commits or
// rolls back: the events exist exactly when the caller's transaction commits, which is the
// point of an outbox.

import { explainDatabaseError } from './errors.js';
import {
  checkJsonObject,
  checkKnownOptions,
  checkName,
  checkOptionalName,
  checkTime,
  checkInteger,
  checkMillis,
  interval,
  isPlainObject,
} from './validate.js';
import { PUBLISH, PUBLISH_BATCH, SUBSCRIBE } from './sql.js';

const PUBLISH_OPTIONS = ['key', 'id', 'handlers', 'availableAt', 'headers'];
const EVENT_FIELDS = ['type', 'payload', ...PUBLISH_OPTIONS];

// A pg.Pool would run the statement on whichever connection is free, outside the caller's
// transaction: the business write and the event could then commit separately. Refuse it.
// Duck-typed, because the caller's pg may be another copy than ours.
function checkClient(client, fn) {
  if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
    throw new TypeError(`${fn}: the first argument must be a pg Client or PoolClient`);
  }
  if (typeof client.totalCount === 'number' && typeof client.idleCount === 'number') {
    throw new TypeError(
      `${fn}: got a pg.Pool; pass the client of your transaction instead ` +
        `(const client = await pool.connect(); await client.query('BEGIN'); ...)`,
    );
  }
}

function checkHandlers(value, what) {
  if (value === undefined || value === null) return null;
  if (!Array.isArray(value)) throw new TypeError(`${what} must be an array of handler names`);
  return value.map((h, i) => checkName(h, `${what}[${i}]`));
}

function checkHeaders(value, what) {
  return value === undefined || value === null ? null : checkJsonObject(value, what);
}

async function run(client, text, values, right) {
  try {
    return await client.query(text, values);
  } catch (err) {
    throw explainDatabaseError(err, { right, user: client.user, database: client.database });
  }
}

// Publishes one event in the caller's transaction and returns its id (the given `id`, or a
// generated UUID). Repeating an id is idempotent: see relaybus.publish.
export async function publish(client, type, payload = {}, options = {}) {
  checkClient(client, 'publish');
  checkName(type, 'publish: type');
  checkJsonObject(payload, 'publish: payload');
  const o = checkKnownOptions(options, PUBLISH_OPTIONS, 'publish');
  const values = [
    type,
    JSON.stringify(payload),
    checkOptionalName(o.key, 'publish: key'),
    checkOptionalName(o.id, 'publish: id'),
    checkHandlers(o.handlers, 'publish: handlers'),
    o.availableAt === undefined || o.availableAt === null ? null : checkTime(o.availableAt, 'publish: availableAt'),
    o.headers === undefined || o.headers === null ? null : JSON.stringify(checkHeaders(o.headers, 'publish: headers')),
  ];
  const { rows } = await run(client, PUBLISH, values, 'publisher');
  return rows[0].id;
}

// Publishes several events with one statement, in the caller's transaction, and returns
// their ids in input order. Each event is {type, payload, key, id, handlers, availableAt,
// headers}, as publish() takes them.
export async function publishBatch(client, events) {
  checkClient(client, 'publishBatch');
  if (!Array.isArray(events)) throw new TypeError('publishBatch: events must be an array');
  if (events.length === 0) return [];
  const elements = events.map((event, i) => {
    const at = `publishBatch: events[${i}]`;
    if (!isPlainObject(event)) throw new TypeError(`${at} must be an object`);
    checkKnownOptions(event, EVENT_FIELDS, at);
    const element = { type: checkName(event.type, `${at}.type`) };
    element.payload = event.payload === undefined ? {} : checkJsonObject(event.payload, `${at}.payload`);
    const key = checkOptionalName(event.key, `${at}.key`);
    if (key !== null) element.key = key;
    const id = checkOptionalName(event.id, `${at}.id`);
    if (id !== null) element.id = id;
    const handlers = checkHandlers(event.handlers, `${at}.handlers`);
    if (handlers !== null) element.handlers = handlers;
    if (event.availableAt !== undefined && event.availableAt !== null) {
      element.available_at = checkTime(event.availableAt, `${at}.availableAt`);
    }
    const headers = checkHeaders(event.headers, `${at}.headers`);
    if (headers !== null) element.headers = headers;
    return element;
  });
  const { rows } = await run(client, PUBLISH_BATCH, [JSON.stringify(elements)], 'publisher');
  return rows.map((r) => r.id);
}

const SUBSCRIBE_OPTIONS = ['maxAttempts', 'backoffBase', 'backoffMax'];

// Registers or updates an (external) handler: relaybus.subscribe, which needs the admin
// right. For setup scripts and tests; backoffs are in milliseconds.
export async function subscribe(client, handler, eventTypes, options = {}) {
  checkClient(client, 'subscribe');
  checkName(handler, 'subscribe: handler');
  if (!Array.isArray(eventTypes) || eventTypes.length === 0) {
    throw new TypeError('subscribe: eventTypes must be a non-empty array of event types (or ["*"])');
  }
  eventTypes.forEach((t, i) => checkName(t, `subscribe: eventTypes[${i}]`));
  const o = checkKnownOptions(options, SUBSCRIBE_OPTIONS, 'subscribe');
  const maxAttempts = o.maxAttempts === undefined ? 25 : checkInteger(o.maxAttempts, 'subscribe: maxAttempts', 1, 2 ** 31 - 1);
  const base = o.backoffBase === undefined ? 1000 : checkMillis(o.backoffBase, 'subscribe: backoffBase');
  const max = o.backoffMax === undefined ? Math.max(3600000, base) : checkMillis(o.backoffMax, 'subscribe: backoffMax');
  await run(client, SUBSCRIBE, [handler, eventTypes, maxAttempts, interval(base), interval(max)], 'admin');
}
