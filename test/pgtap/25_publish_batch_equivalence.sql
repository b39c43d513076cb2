-- Guarantee: publish_batch is publish for each element, in order. A batch whose ids are all
-- new is written set-based (one statement per table); a batch that repeats an id, or names
-- one already stored, goes event by event through publish's own path. Either way the rows
-- must be exactly those that publish, called once per element in input order, writes:
-- the same handlers, lanes, per-key sequences (consecutive in input order, no counter moved
-- for an event without handlers), due times, headers and handler lists. If the set-based
-- path numbered a key's events in another order, skipped or double-counted a counter, or
-- mixed up an element's fields, the snapshots compared below would differ.
-- A due time years ahead (2030) is part of what is checked here: allow it.
SET relaybus.max_delay = '2147483647s';
SELECT rb_reset();
SELECT plan(12);

CREATE FUNCTION pg_temp.setup() RETURNS void LANGUAGE sql AS $$
  SELECT rb_reset();
  SELECT relaybus.subscribe('audit', ARRAY['order.created']);
  SELECT relaybus.subscribe('mailer', ARRAY['order.created', 'order.paid']);
  -- k1's counter is already at 1 before the batch.
  SELECT relaybus.publish('order.created', '{"n": 0}', 'k1', 'pre');
$$;

CREATE TEMP TABLE batch AS SELECT $j$[
  {"type": "order.created", "id": "b1", "key": "k1", "payload": {"n": 1}},
  {"type": "order.paid", "id": "b2", "key": "k1", "payload": {"n": 2}, "headers": {"trace": "t2"}},
  {"type": "nothing.here", "id": "b3", "key": "k2", "payload": {"n": 3}},
  {"type": "order.created", "id": "b4", "key": "k2", "handlers": ["audit"],
   "available_at": "2030-01-01T00:00:00Z"},
  {"type": "order.created", "id": "b5", "payload": {"n": 5}, "headers": null},
  {"type": "order.created", "id": "b6", "key": "k1", "handlers": ["mailer", "audit", "audit"]},
  {"type": "order.paid", "id": "b7", "key": "k3", "available_at": null},
  {"type": "order.created", "id": "b8", "key": "k2", "payload": {"n": 8}}
]$j$::jsonb AS events;

-- What a snapshot compares: every row publish writes, but not the clock.
CREATE FUNCTION pg_temp.snapshot(tag text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('CREATE TEMP TABLE %I_events AS SELECT id, type, key, payload, headers, handlers
                    FROM relaybus.events', tag);
  EXECUTE format('CREATE TEMP TABLE %I_deliveries AS SELECT event_id, handler, lane, key, sequence,
                    status, attempts, available_at > now() + interval ''1 year'' AS later
                    FROM relaybus.deliveries', tag);
  EXECUTE format('CREATE TEMP TABLE %I_counters AS SELECT key, last_sequence FROM relaybus.key_counters', tag);
END
$$;

-- A: the batch in one call (every id new: the set-based path).
SELECT pg_temp.setup();
CREATE TEMP TABLE a_ids AS SELECT * FROM relaybus.publish_batch((SELECT events FROM batch)) WITH ORDINALITY AS r(id, n);
SELECT pg_temp.snapshot('a');

-- B: publish once per element, in order.
SELECT pg_temp.setup();
SELECT relaybus.publish(e->>'type', coalesce(e->'payload', '{}'), e->>'key', e->>'id',
                        CASE WHEN e ? 'handlers' THEN ARRAY(SELECT jsonb_array_elements_text(e->'handlers')) END,
                        (e->>'available_at')::timestamptz,
                        CASE WHEN jsonb_typeof(e->'headers') = 'object' THEN e->'headers' END)
  FROM batch, jsonb_array_elements(events) WITH ORDINALITY AS x(e, n) ORDER BY n;
SELECT pg_temp.snapshot('b');

SELECT results_eq('SELECT id FROM a_ids ORDER BY n', $$VALUES ('b1'), ('b2'), ('b3'), ('b4'), ('b5'), ('b6'), ('b7'), ('b8')$$,
                  'publish_batch returns the ids in input order');
SELECT set_eq('SELECT * FROM a_events', 'SELECT * FROM b_events',
              'the events are those of one publish per element (type, key, payload, headers, handlers)');
SELECT set_eq('SELECT * FROM a_deliveries', 'SELECT * FROM b_deliveries',
              'the deliveries are those of one publish per element (handler, lane, key, sequence, due time)');
SELECT set_eq('SELECT * FROM a_counters', 'SELECT * FROM b_counters',
              'the key counters moved as one publish per element moves them');
SELECT results_eq($$SELECT event_id, handler, sequence FROM a_deliveries WHERE key = 'k1' ORDER BY sequence, handler$$,
                  $$VALUES ('pre', 'audit', 1::bigint), ('pre', 'mailer', 1), ('b1', 'audit', 2), ('b1', 'mailer', 2),
                           ('b2', 'mailer', 3), ('b6', 'audit', 4), ('b6', 'mailer', 4)$$,
                  'k1: sequences follow input order after the stored counter, one per event');
SELECT results_eq($$SELECT key, last_sequence FROM a_counters ORDER BY key$$,
                  $$VALUES ('k1', 4::bigint), ('k2', 2), ('k3', 1)$$,
                  'an event without handlers (b3) moved no counter');

-- C: the same batch with b1 repeated at the end and b5 stored already: publish's path,
-- event by event. b1 again adds no delivery; b5, stored earlier with audit only, gains mailer.
SELECT pg_temp.setup();
SELECT relaybus.publish('order.created', '{"n": 5}', NULL, 'b5', ARRAY['audit']);
SELECT is((SELECT count(*)::int FROM relaybus.publish_batch(
             (SELECT events || '[{"type": "order.created", "id": "b1", "key": "k1"}]'::jsonb FROM batch))),
          9, 'a batch repeating an id returns one id per element');
SELECT bag_eq($$SELECT handler FROM relaybus.deliveries WHERE event_id IN ('b1', 'b5')$$,
              $$VALUES ('audit'), ('mailer'), ('audit'), ('mailer')$$,
              'a repeated id adds no delivery; a stored one gains only the handlers it lacked');
SELECT results_eq($$SELECT key, last_sequence FROM relaybus.key_counters ORDER BY key$$,
                  $$VALUES ('k1', 4::bigint), ('k2', 2), ('k3', 1)$$,
                  'the event-by-event path numbers the keys the same way');

-- Lock order: the set-based path locks the key counters in the order the keys first
-- appear, as publish does element by element. Session pa holds kb's counter; pb's batch
-- [kb, ka] waits for it without having locked ka, so pa's publish of ka goes through.
-- Locked in key order instead (ka first), pb would hold ka while waiting for kb, and pa's
-- publish of ka would deadlock with it.
SELECT pg_temp.setup();
SELECT rb_connect('pa');
SELECT rb_connect('pb');
SELECT dblink_exec('pa', 'BEGIN');
SELECT dblink_exec('pa', $$SET statement_timeout = '5s'$$);
SELECT * FROM dblink('pa', $$SELECT relaybus.publish('order.created', '{}', 'kb', 'pa-1')$$) AS t(id text);
SELECT dblink_send_query('pb', $$SELECT count(*) FROM relaybus.publish_batch(
  '[{"type": "order.created", "id": "pb-1", "key": "kb"}, {"type": "order.created", "id": "pb-2", "key": "ka"}]')$$);
SELECT pg_sleep(0.3);
SELECT lives_ok($$SELECT * FROM dblink('pa', 'SELECT relaybus.publish(''order.created'', ''{}'', ''ka'', ''pa-2'')') AS t(id text)$$,
                'a publisher holding kb can still publish ka while a batch [kb, ka] waits');
SELECT dblink_exec('pa', 'COMMIT');
SELECT is((SELECT n FROM dblink_get_result('pb') AS t(n bigint)), 2::bigint,
          'the batch goes through once the first publisher commits');
SELECT results_eq($$SELECT event_id, sequence FROM relaybus.deliveries WHERE handler = 'audit' AND key IN ('ka', 'kb') ORDER BY key, sequence$$,
                  $$VALUES ('pa-2', 1::bigint), ('pb-2', 2), ('pa-1', 1), ('pb-1', 2)$$,
                  'each key numbered in commit order');
SELECT dblink_disconnect('pa');
SELECT dblink_disconnect('pb');

SELECT * FROM finish();
