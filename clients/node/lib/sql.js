// Every statement this package sends, in one place. Each is a single call of relaybus's
// SQL API (docs/sql-api.md), schema-qualified so the caller's search_path does not matter.
// They are sent unnamed (not as named prepared statements) so that they also work through
// PgBouncer in transaction mode, which relaybus supports when a holder is passed.

export const PUBLISH =
  'SELECT relaybus.publish($1, $2::jsonb, $3, $4, $5::text[], $6::timestamptz, $7::jsonb) AS id';

export const PUBLISH_BATCH =
  'SELECT t.id FROM relaybus.publish_batch($1::jsonb) WITH ORDINALITY AS t(id, n) ORDER BY t.n';

export const SUBSCRIBE =
  'SELECT relaybus.subscribe($1, $2::text[], $3, $4::interval, $5::interval)';

export const CLAIM =
  'SELECT lease_token, event_id, handler, type, key, payload, headers, attempts, published_at ' +
  'FROM relaybus.claim($1, $2, $3::interval, $4::text[], $5)';

export const COMPLETE = 'SELECT relaybus.complete($1) AS ok';

export const COMPLETE_MANY = 'SELECT relaybus.complete_many($1::text[]) AS n';

export const FAIL = 'SELECT relaybus.fail($1, $2) AS outcome';

export const BURY = 'SELECT relaybus.bury($1, $2) AS ok';

// One statement for all the tokens a shutdown gives back; counts those still held.
export const RELEASE_MANY =
  'SELECT count(*) FILTER (WHERE relaybus.release(t))::int AS n FROM unnest($1::text[]) AS t';

export const EXTEND_LEASE = 'SELECT relaybus.extend_lease($1, $2::interval, $3) AS n';

// Cancels the statements of the given backends (a role may cancel its own backends').
export const CANCEL_BACKENDS = 'SELECT pg_catalog.pg_cancel_backend(pid) FROM unnest($1::int[]) AS pid';

export const RELINQUISH = 'SELECT relaybus.relinquish($1, $2) AS n';

// What the worker checks before it claims: is relaybus there, in which version, and may
// this role use it. $1: the functions a worker calls; `missing` lists those the current
// role may not execute (or 'schema relaybus'), which is what relaybus's functions check,
// however the role got them (a right, membership in a role holding one, superuser).
// to_regprocedure keeps an older relaybus, without some of them, from failing the query:
// they count as missing, and the version check comes first.
export const SETUP = `
  SELECT current_user AS "user", current_database() AS database, v.version,
         CASE WHEN v.version IS NULL THEN NULL
              WHEN NOT pg_catalog.has_schema_privilege('relaybus', 'USAGE') THEN ARRAY['schema relaybus']
              ELSE ARRAY(SELECT f FROM pg_catalog.unnest($1::text[]) AS f
                          WHERE NOT coalesce(pg_catalog.has_function_privilege(
                                               pg_catalog.to_regprocedure(f), 'EXECUTE'), false))
         END AS missing
    FROM (SELECT (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'relaybus') AS version) v`;

export const LISTEN = 'LISTEN relaybus';
export const CHANNEL = 'relaybus';
