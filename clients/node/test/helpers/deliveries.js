// What relaybus says about deliveries, asked through its SQL API (list_deliveries,
// statistics) rather than read from its tables: the tables are storage, and storage differs
// by version (on 0.3.0 a delivery row is written once and never updated or deleted; its
// status, attempts and last error live in lane cursors and exception rows), while the API
// answers the same on every version.
//
// A delivery that is not listed is finished: completed (or cancelled), or never published.
// Listed statuses: 'pending' (waiting, not in flight), 'processing' (in a held lane's
// in-flight list), 'dead'.

// More rows than any test publishes: list_deliveries returns at most max_rows.
const ALL = 1000000;

// The unfinished deliveries of `handler`: [{ event_id, status, attempts, last_error }],
// ordered by event id.
export async function deliveriesOf(client, handler) {
  const { rows } = await client.query(
    'SELECT event_id, status, attempts, last_error FROM relaybus.list_deliveries(NULL, $1, $2) ORDER BY event_id',
    [handler, ALL]);
  return rows;
}

// The delivery of event `id` to `handler` as { status, attempts, last_error }, or undefined
// when it is finished.
export async function deliveryOf(client, id, handler) {
  const { rows } = await client.query(
    'SELECT status, attempts, last_error FROM relaybus.list_deliveries(NULL, $2, $3) WHERE event_id = $1',
    [id, handler, ALL]);
  if (rows.length > 1) throw new Error(`list_deliveries listed ${rows.length} deliveries of ${id} to ${handler}`);
  return rows[0];
}

// The unfinished deliveries of event `id`, to any handler: [{ handler, status, attempts, last_error }].
export async function deliveriesOfEvent(client, id) {
  const { rows } = await client.query(
    'SELECT handler, status, attempts, last_error FROM relaybus.list_deliveries(NULL, NULL, $2) ' +
    'WHERE event_id = $1 ORDER BY handler',
    [id, ALL]);
  return rows;
}

// How many deliveries of `handler` are unfinished (pending, in flight or dead), from
// statistics(), which lists every subscribed handler (a handler it does not list is an
// error here, not a 0 that would end a wait at once).
export async function remaining(client, handler) {
  const { rows } = await client.query(
    'SELECT (pending + processing + dead)::int AS n FROM relaybus.statistics() WHERE handler = $1', [handler]);
  if (rows.length !== 1) throw new Error(`statistics() does not list handler ${handler}`);
  return rows[0].n;
}
