-- Port of test/pgtap/25_publish_batch_equivalence.sql to relaybus 0.3.0. Guarantee:
-- publish_batch is publish for each element, in order. A batch whose ids are all new is
-- written set-based; a batch that repeats an id, or names one already stored, goes event by
-- event through publish's own path. Either way the rows must be exactly those that publish,
-- called once per element in input order, writes: the same handlers, lanes, positions
-- (consecutive in input order within each (handler, lane), none taken by an event without
-- handlers), due times, headers and handler lists. If the set-based path staged a lane's
-- deliveries in another order, skipped or double-counted a position, or mixed up an
-- element's fields, the snapshots compared below would differ.
-- What changes by design in 0.3.0 (docs/upgrading.md, "From 0.2.1 to 0.3.0"):
--  - 0.2 numbered a key's events with a per-key counter (one sequence per key, shared by
--    its handlers: key_counters); 0.3.0 has no per-key state and numbers each (handler,
--    lane)'s deliveries by position, a key's order being its lane's order. The snapshots
--    compare positions where they compared sequences and counters.
--  - 0.2's batch locked the key counters in the order the keys first appear, and a batch
--    waited for an open transaction that had published one of its keys. 0.3.0's publishers
--    never wait for each other's transactions (only for each other's commits, at the lane
--    locks of commit_order), so the last part checks that the batch does not wait at all,
--    and that positions follow commit order (not the order the publishes ran in).
-- A due time years ahead (2030) is part of what is checked here: allow it.
SET relaybus.max_delay = '2147483647s';
SELECT rb_reset();
SELECT plan(14);

CREATE FUNCTION pg_temp.setup() RETURNS void LANGUAGE sql AS $$
  SELECT rb_reset();
  SELECT relaybus.subscribe('audit', ARRAY['order.created']);
  SELECT relaybus.subscribe('mailer', ARRAY['order.created', 'order.paid']);
  -- k1's lanes hold one delivery each before the batch.
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
  EXECUTE format('CREATE TEMP TABLE %I_deliveries AS SELECT event_id, handler, lane, key, position,
                    available_at > now() + interval ''1 year'' AS later
                    FROM relaybus.deliveries', tag);
  EXECUTE format('CREATE TEMP TABLE %I_exceptions AS SELECT * FROM relaybus.exceptions', tag);
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
              'the deliveries are those of one publish per element (handler, lane, key, position, due time)');
-- 0.2: "the key counters moved as one publish per element moves them". 0.3.0 keeps no
-- counter; what a publish leaves besides its rows is nothing: no exception row either way.
SELECT ok((SELECT count(*) FROM a_exceptions) = 0 AND (SELECT count(*) FROM b_exceptions) = 0,
          'neither path writes anything but events and deliveries: no exception row (and 0.3.0 has no key counters)');
-- 0.2: sequences per key, shared by its handlers ((b6, audit) was 4, after b2 to mailer).
-- 0.3.0: positions per (handler, lane): audit's lane of k1 never had b2, so b6 is its 3.
SELECT results_eq($$SELECT event_id, handler, position FROM a_deliveries WHERE key = 'k1' ORDER BY handler, position$$,
                  $$VALUES ('pre', 'audit', 1::bigint), ('b1', 'audit', 2), ('b6', 'audit', 3),
                           ('pre', 'mailer', 1), ('b1', 'mailer', 2), ('b2', 'mailer', 3), ('b6', 'mailer', 4)$$,
                  'k1: positions follow input order after the stored delivery, one per event and handler');
SELECT results_eq($$SELECT event_id, handler, position FROM a_deliveries WHERE key = 'k2' ORDER BY handler, position$$,
                  $$VALUES ('b4', 'audit', 1::bigint), ('b8', 'audit', 2), ('b8', 'mailer', 1)$$,
                  'an event without handlers (b3) took no position in its key''s lanes');
SELECT is((SELECT count(*)::int FROM (SELECT handler, lane FROM a_deliveries GROUP BY 1, 2
                                       HAVING min(position) <> 1 OR max(position) <> count(*)) s), 0,
          'every (handler, lane) holds positions 1..n, no hole');

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
-- 0.2: the key counters as in A. 0.3.0: the positions as in A (b5's audit delivery, stored
-- first, and b1's, unchanged by the repeat, included).
SELECT pg_temp.snapshot('c');
SELECT set_eq('SELECT * FROM c_deliveries', 'SELECT * FROM a_deliveries',
              'the event-by-event path numbers the lanes the same way');

-- No waiting, no deadlock: session pa has published kb in an open transaction; pb's batch
-- [kb, ka] goes through without waiting for it (0.2: it waited for pa's commit, and only the
-- lock order kept pa's publish of ka from deadlocking with it); pa then publishes ka and
-- commits. Positions follow commit order: pb's, committed first, come first in both lanes,
-- though pa published kb before pb did. (statement_timeout: a wait would fail the test
-- instead of hanging it.)
SELECT pg_temp.setup();
SELECT rb_connect('pa');
SELECT rb_connect('pb');
SELECT dblink_exec('pa', 'BEGIN');
SELECT dblink_exec('pa', $$SET statement_timeout = '5s'$$);
SELECT dblink_exec('pb', $$SET statement_timeout = '5s'$$);
SELECT * FROM dblink('pa', $$SELECT relaybus.publish('order.created', '{}', 'kb', 'pa-1')$$) AS t(id text);
SELECT is((SELECT n FROM dblink('pb', $$SELECT count(*) FROM relaybus.publish_batch(
  '[{"type": "order.created", "id": "pb-1", "key": "kb"}, {"type": "order.created", "id": "pb-2", "key": "ka"}]')$$)
  AS t(n bigint)), 2::bigint,
          'a batch [kb, ka] commits while another transaction that published kb is open: it does not wait');
SELECT lives_ok($$SELECT * FROM dblink('pa', 'SELECT relaybus.publish(''order.created'', ''{}'', ''ka'', ''pa-2'')') AS t(id text)$$,
                'the publisher holding kb then publishes ka');
SELECT lives_ok($$SELECT dblink_exec('pa', 'COMMIT')$$, 'and commits');
SELECT results_eq($$SELECT event_id, position FROM relaybus.deliveries WHERE handler = 'audit' AND key IN ('ka', 'kb') ORDER BY key, position$$,
                  $$VALUES ('pb-2', 1::bigint), ('pa-2', 2), ('pb-1', 1), ('pa-1', 2)$$,
                  'each key''s lane numbered in commit order (pb first), not in the order the publishes ran');
SELECT dblink_disconnect('pa');
SELECT dblink_disconnect('pb');

SELECT * FROM finish();
