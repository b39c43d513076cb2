-- Guarantee: 0.3.0's publish. A delivery is written once, when its publishing transaction
-- commits, at the next position of its (handler, lane): a lane's positions run 1, 2, 3, ...
-- in the order the publishing transactions commit, with no hole, whatever rolled back
-- (a transaction, a savepoint, a statement whose error the caller caught). The rest is
-- 0.2.1's publish: one delivery per subscribed handler, in the lane of the key (or of the
-- event id), idempotent by event id, due at available_at (else now()), counted and
-- announced only when it commits, the same rows from publish_batch as from publish one by
-- one, bad input refused with its SQLSTATE and nothing written. The transaction does not
-- see its own deliveries before it commits (they are staged until then), and a publisher
-- waits for nobody's open transaction.
--
-- Every statement outside BEGIN ... COMMIT commits on its own (pg_prove runs psql in
-- autocommit): that is what writes the deliveries.
SET relaybus.max_delay = '2147483647s';  -- the batch below has a due time in 2030
SELECT plan(77);

-- Every section starts from an empty bus with the same three handlers.
CREATE FUNCTION pg_temp.setup() RETURNS void LANGUAGE sql AS $$
  SELECT rb_reset();
  SELECT relaybus.subscribe('audit', ARRAY['order.created']);
  SELECT relaybus.subscribe('mailer', ARRAY['order.created', 'order.paid']);
  SELECT relaybus.subscribe('solo', ARRAY['other.type']);
$$;

-- A lane's positions must be exactly 1..n: the (handler, lane)s where they are not.
CREATE FUNCTION pg_temp.lanes_with_holes() RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM (SELECT handler, lane FROM relaybus.deliveries GROUP BY 1, 2
                         HAVING min(position) <> 1 OR max(position) <> count(*)) s;
$$;

-- relaybus's counter `name` (relaybus.counters(), kept by the preloaded library).
CREATE FUNCTION pg_temp.counter(want text) RETURNS bigint LANGUAGE sql AS $$
  SELECT value FROM relaybus.counters() WHERE name = want;
$$;

--------------------------------------------------------------------------------
-- Positions, lanes and fan-out.
SELECT pg_temp.setup();
SELECT relaybus.publish('order.created', '{"n": 1}', 'k1', 'p-1');
BEGIN;
SELECT relaybus.publish('order.created', '{"n": 2}', 'k1', 'p-2');
SELECT relaybus.publish('order.paid', '{"n": 3}', 'k1', 'p-3');
SELECT relaybus.publish('order.created', '{"n": 4}', 'k2', 'p-4');
COMMIT;
SELECT relaybus.publish('order.created', '{"n": 5}', 'k1', 'p-5');
SELECT relaybus.publish('order.created', '{"n": 6}', NULL, 'b5');

SELECT results_eq(
  $$SELECT handler, position, event_id FROM relaybus.deliveries
     WHERE lane = relaybus.lane_of('k1') ORDER BY handler, position$$,
  $$VALUES ('audit', 1::bigint, 'p-1'), ('audit', 2, 'p-2'), ('audit', 3, 'p-5'),
           ('mailer', 1, 'p-1'), ('mailer', 2, 'p-2'), ('mailer', 3, 'p-3'), ('mailer', 4, 'p-5')$$,
  'each (handler, lane) numbers its deliveries 1, 2, 3, ... in publish order, within and across transactions');
SELECT results_eq(
  $$SELECT handler, position, event_id FROM relaybus.deliveries
     WHERE lane = relaybus.lane_of('k2') ORDER BY handler, position$$,
  $$VALUES ('audit', 1::bigint, 'p-4'), ('mailer', 1, 'p-4')$$,
  'another key''s lane starts at 1 of its own');
SELECT bag_eq(
  $$SELECT event_id, handler FROM relaybus.deliveries$$,
  $$VALUES ('p-1', 'audit'), ('p-1', 'mailer'), ('p-2', 'audit'), ('p-2', 'mailer'), ('p-3', 'mailer'),
           ('p-4', 'audit'), ('p-4', 'mailer'), ('p-5', 'audit'), ('p-5', 'mailer'), ('b5', 'audit'), ('b5', 'mailer')$$,
  'fan-out: one delivery per subscribed handler of the type, none for a handler of another type');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE lane <> relaybus.lane_of(coalesce(key, event_id))),
          0, 'every delivery is in the lane of its key, or of its event id without one');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries d JOIN relaybus.events e ON e.id = d.event_id
            WHERE d.key IS DISTINCT FROM e.key), 0, 'each delivery carries its event''s key');
SELECT results_eq($$SELECT handlers FROM relaybus.events ORDER BY published_at, id$$,
                  $$VALUES ('{audit,mailer}'::text[]), ('{audit,mailer}'), ('{mailer}'), ('{audit,mailer}'),
                           ('{audit,mailer}'), ('{audit,mailer}')$$,
                  'each event lists the handlers it has deliveries for');
SELECT relaybus.publish('other.type', '{}', 'k1', 'h-1', ARRAY['solo', 'audit', 'solo']);
SELECT results_eq(
  $$SELECT handler, position FROM relaybus.deliveries WHERE event_id = 'h-1' ORDER BY handler$$,
  $$VALUES ('audit', 4::bigint), ('solo', 1)$$,
  'handlers given: one delivery each (duplicates once), whatever the type, at each handler''s next position');
SELECT is(pg_temp.lanes_with_holes(), 0::bigint, 'no (handler, lane) has a hole');

--------------------------------------------------------------------------------
-- The transaction does not see its own deliveries before it commits; it sees its event.
SELECT pg_temp.setup();
BEGIN;
SELECT relaybus.publish('order.created', '{}', 'kv', 'vis-1');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'vis-1'), 0,
          'before commit the publishing transaction sees none of its deliveries');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'vis-1'), 1,
          'before commit the publishing transaction sees its event');
COMMIT;
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'vis-1'), 2,
          'after commit both deliveries are there');

--------------------------------------------------------------------------------
-- Commit order: two transactions interleaving their publishes in one lane. The one that
-- commits first gets the lower positions, though it began and published later, and
-- neither waits for the other's open transaction. The earlier one reads in REPEATABLE
-- READ, its snapshot taken before the other's commit: its positions still come after.
SELECT pg_temp.setup();
SELECT relaybus.publish('order.created', '{}', 'kx', 'x-0');
SELECT rb_connect('pa');
SELECT rb_connect('pb');
-- A wait for the other's open transaction becomes an error (55P03) that the assertions catch.
SELECT dblink_exec('pa', $$SET lock_timeout = '3s'$$);
SELECT dblink_exec('pb', $$SET lock_timeout = '3s'$$);
SELECT dblink_exec('pa', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT * FROM dblink('pa', $$SELECT relaybus.publish('order.created', '{}', 'kx', 'x-a1')$$) AS t(id text);
SELECT dblink_exec('pb', 'BEGIN');
SELECT lives_ok($$SELECT * FROM dblink('pb', 'SELECT relaybus.publish(''order.created'', ''{}'', ''kx'', ''x-b1''),
                                                 relaybus.publish(''order.created'', ''{}'', ''kx'', ''x-b2'')') AS t(b1 text, b2 text)$$,
                'a publisher of the same key publishes while another transaction that published it is open');
SELECT * FROM dblink('pa', $$SELECT relaybus.publish('order.created', '{}', 'kx', 'x-a2')$$) AS t(id text);
SELECT lives_ok($$SELECT dblink_exec('pb', 'COMMIT')$$,
                'and commits without waiting for the open one');
SELECT results_eq(
  $$SELECT handler, position, event_id FROM relaybus.deliveries ORDER BY handler, position$$,
  $$VALUES ('audit', 1::bigint, 'x-0'), ('audit', 2, 'x-b1'), ('audit', 3, 'x-b2'),
           ('mailer', 1, 'x-0'), ('mailer', 2, 'x-b1'), ('mailer', 3, 'x-b2')$$,
  'the transaction that committed first has the positions after what was there, the open one none yet');
SELECT lives_ok($$SELECT dblink_exec('pa', 'COMMIT')$$, 'the transaction still open commits after it');
SELECT results_eq(
  $$SELECT handler, position, event_id FROM relaybus.deliveries ORDER BY handler, position$$,
  $$VALUES ('audit', 1::bigint, 'x-0'), ('audit', 2, 'x-b1'), ('audit', 3, 'x-b2'), ('audit', 4, 'x-a1'), ('audit', 5, 'x-a2'),
           ('mailer', 1, 'x-0'), ('mailer', 2, 'x-b1'), ('mailer', 3, 'x-b2'), ('mailer', 4, 'x-a1'), ('mailer', 5, 'x-a2')$$,
  'the transaction that committed second (its snapshot older) follows, in its own publish order: commit order, no hole');

-- PREPARE TRANSACTION would hold the lanes until COMMIT PREPARED: refused.
SELECT dblink_exec('pa', 'BEGIN');
SELECT * FROM dblink('pa', $$SELECT relaybus.publish('order.created', '{}', 'kx', 'x-prepared')$$) AS t(id text);
SELECT throws_ok($$SELECT dblink_exec('pa', 'PREPARE TRANSACTION ''rb_p030_publish''')$$, '0A000', NULL,
                 'a publishing transaction cannot be prepared (0A000)');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'x-prepared')
          + (SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'x-prepared'), 0,
          'and the refused transaction left nothing');
SELECT dblink_disconnect('pa');
SELECT dblink_disconnect('pb');

--------------------------------------------------------------------------------
-- Rollbacks leave nothing, and no hole.
SELECT pg_temp.setup();
SELECT pg_temp.counter('published') AS published0, pg_temp.counter('deliveries_published') AS deliveries0 \gset
BEGIN;
SELECT relaybus.publish('order.created', '{}', 'kr', 'rb-1');
SELECT relaybus.publish_batch('[{"type": "order.created", "key": "kr", "id": "rb-2"}]');
ROLLBACK;
SELECT is((SELECT count(*)::int FROM relaybus.events) + (SELECT count(*)::int FROM relaybus.deliveries), 0,
          'a rolled-back publish and publish_batch leave no event and no delivery');
SELECT is(pg_temp.counter('published') - :published0 + pg_temp.counter('deliveries_published') - :deliveries0,
          0::bigint, 'and count nothing');

-- A publish rolled back with its subtransaction while the transaction commits: the caller
-- caught the error of a later publish (throws_ok runs the block in a subtransaction).
SELECT throws_ok(
  $q$DO $do$ BEGIN
      PERFORM relaybus.publish('order.created', '{}', 'kr', 'rb-partial');
      PERFORM relaybus.publish('order.created', '{}', 'kr', 'rb-bad', ARRAY['nobody']);
    END $do$$q$,
  '42704', NULL, 'a publish to an unknown handler raises 42704');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id IN ('rb-partial', 'rb-bad')), 0,
          'the deliveries of a publish rolled back with its subtransaction are not written when the transaction commits');

-- Savepoints: one rolled back takes its deliveries with it, one released keeps them; the
-- positions close up.
BEGIN;
SELECT relaybus.publish('order.created', '{}', 'kr', 'sp-1');
SAVEPOINT s1;
SELECT relaybus.publish('order.created', '{}', 'kr', 'sp-2');
SELECT relaybus.publish('order.created', '{}', 'kr', 'sp-2b');
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s2;
SELECT relaybus.publish('order.created', '{}', 'kr', 'sp-3');
RELEASE SAVEPOINT s2;
SELECT relaybus.publish('order.created', '{}', 'kr', 'sp-4');
COMMIT;
SELECT results_eq(
  $$SELECT position, event_id FROM relaybus.deliveries WHERE handler = 'audit' ORDER BY position$$,
  $$VALUES (1::bigint, 'sp-1'), (2, 'sp-3'), (3, 'sp-4')$$,
  'a savepoint rolled back leaves no hole: the deliveries after it take the next positions');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id IN ('sp-2', 'sp-2b')), 0,
          'the events published under the rolled-back savepoint are gone');
SELECT is(pg_temp.counter('published') - :published0, 3::bigint, 'published counts the three committed events');
SELECT is(pg_temp.counter('deliveries_published') - :deliveries0, 6::bigint,
          'deliveries_published counts their six deliveries, nothing rolled back');
SELECT relaybus.publish('order.created', '{}', 'kr', 'rb-1');
SELECT results_eq(
  $$SELECT handler, position FROM relaybus.deliveries WHERE event_id = 'rb-1' ORDER BY handler$$,
  $$VALUES ('audit', 4::bigint), ('mailer', 4)$$,
  'a rolled-back event id is free: published again, it takes the lane''s next position');
SELECT is(pg_temp.lanes_with_holes(), 0::bigint, 'after the rollbacks no (handler, lane) has a hole');

--------------------------------------------------------------------------------
-- Idempotent by event id: a repeat adds deliveries only for handlers the event never had,
-- in the stored event's lane, and does not need to see the deliveries (they may still be
-- staged in the same transaction).
SELECT pg_temp.setup();
SELECT relaybus.publish('order.created', '{"v": 1}', 'kd', 'dup-1');
SELECT pg_temp.counter('published') AS published1, pg_temp.counter('deliveries_published') AS deliveries1 \gset
SELECT is(relaybus.publish('order.created', '{"v": 2}', 'kd', 'dup-1'), 'dup-1', 'a repeat returns the event id');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'dup-1'), 2,
          'a repeat with the same handlers adds no delivery');
SELECT relaybus.publish('order.created', '{}', 'other-key', 'dup-1', ARRAY['audit', 'solo']);
SELECT results_eq(
  $$SELECT handler, lane, position FROM relaybus.deliveries WHERE event_id = 'dup-1' ORDER BY handler$$,
  format($$VALUES ('audit', %1$s::int2, 1::bigint), ('mailer', %1$s::int2, 1), ('solo', %1$s::int2, 1)$$,
         relaybus.lane_of('kd')),
  'a repeat naming a new handler adds its delivery only, in the stored key''s lane');
SELECT is((SELECT handlers FROM relaybus.events WHERE id = 'dup-1'), '{audit,mailer,solo}'::text[],
          'the event lists the added handler');
SELECT is((SELECT payload FROM relaybus.events WHERE id = 'dup-1'), '{"v": 1}'::jsonb,
          'the stored event is kept as first published');
SELECT is(pg_temp.counter('published') - :published1, 0::bigint, 'a repeat publishes no event');
SELECT is(pg_temp.counter('deliveries_published') - :deliveries1, 1::bigint,
          'a repeat counts only the delivery it added');
BEGIN;
SELECT relaybus.publish('order.created', '{}', 'kd', 'dup-2', ARRAY['audit']);
SELECT relaybus.publish('order.created', '{}', 'kd', 'dup-2');
SELECT relaybus.publish('order.created', '{}', 'kd', 'dup-2');
COMMIT;
SELECT results_eq(
  $$SELECT handler, position FROM relaybus.deliveries WHERE event_id = 'dup-2' ORDER BY handler$$,
  $$VALUES ('audit', 2::bigint), ('mailer', 2)$$,
  'repeats within one transaction, before anything is written: one delivery per handler');

--------------------------------------------------------------------------------
-- Due times: available_at as given (a past one counts as now), else the transaction's
-- now(); created_at is the transaction's now() (its start), not the time of the statement
-- or of the commit.
SELECT pg_temp.setup();
BEGIN;
SELECT now() AS t0 \gset
SELECT pg_sleep(0.05);
SELECT relaybus.publish('order.created', '{}', NULL, 'due-now', ARRAY['audit']);
SELECT relaybus.publish('order.created', '{}', NULL, 'due-later', ARRAY['audit'], available_at => now() + interval '1 hour');
SELECT relaybus.publish('order.created', '{}', NULL, 'due-past', ARRAY['audit'], available_at => now() - interval '1 day');
SELECT pg_sleep(0.05);
COMMIT;
SELECT results_eq(
  format($$SELECT event_id, available_at - %1$L::timestamptz, created_at - %1$L::timestamptz
             FROM relaybus.deliveries ORDER BY event_id$$, :'t0'),
  $$VALUES ('due-later', interval '1 hour', interval '0'), ('due-now', interval '0', interval '0'),
           ('due-past', interval '0', interval '0')$$,
  'available_at: as given, or the transaction''s now() (none given, or one in the past); created_at: the transaction''s now()');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries d JOIN relaybus.events e ON e.id = d.event_id
            WHERE d.created_at <> e.published_at), 0, 'created_at equals the event''s published_at');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', NULL, 'due-bad', available_at => 'infinity')$$,
                 '22023', NULL, 'available_at infinity -> 22023');
SET relaybus.max_delay = '1h';
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', NULL, 'due-far', available_at => now() + interval '2 hours')$$,
                 '22023', NULL, 'available_at beyond relaybus.max_delay -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch(format('[{"type": "order.created", "id": "due-far-b", "available_at": %s}]',
                                                       to_json(now() + interval '2 hours'))::jsonb)$$,
                 '22023', NULL, 'publish_batch: available_at beyond relaybus.max_delay -> 22023');
SET relaybus.max_delay = '2147483647s';
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id LIKE 'due-%'), 3, 'the refused due times wrote nothing');

--------------------------------------------------------------------------------
-- publish_batch is publish for each element, in order: new ids in one call (events in one
-- statement, deliveries staged per event), and a batch repeating an id (publish's path,
-- element by element). Compared: everything but the clock.
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

CREATE FUNCTION pg_temp.batch_setup() RETURNS void LANGUAGE sql AS $$
  SELECT pg_temp.setup();
  -- k1's lane has a position already.
  SELECT relaybus.publish('order.created', '{"n": 0}', 'k1', 'pre');
$$;

CREATE FUNCTION pg_temp.snapshot(tag text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('CREATE TEMP TABLE %I_events AS SELECT id, type, key, payload, headers, handlers
                    FROM relaybus.events', tag);
  EXECUTE format('CREATE TEMP TABLE %I_deliveries AS SELECT d.handler, d.lane, d.position, d.event_id, d.key,
                    d.available_at > now() + interval ''1 year'' AS later,
                    d.available_at = d.created_at AS due_at_publish, d.created_at = e.published_at AS created_at_publish
                    FROM relaybus.deliveries d JOIN relaybus.events e ON e.id = d.event_id', tag);
END
$$;

-- One publish per element, in order, in one statement.
CREATE FUNCTION pg_temp.publish_each(events jsonb) RETURNS void LANGUAGE sql AS $$
  SELECT count(relaybus.publish(e->>'type', coalesce(e->'payload', '{}'), e->>'key', e->>'id',
                          CASE WHEN e ? 'handlers' THEN ARRAY(SELECT jsonb_array_elements_text(e->'handlers')) END,
                          (e->>'available_at')::timestamptz,
                          CASE WHEN jsonb_typeof(e->'headers') = 'object' THEN e->'headers' END))
    FROM (SELECT e FROM jsonb_array_elements(events) WITH ORDINALITY AS x(e, n) ORDER BY n) s;
$$;

-- A: the batch in one call (every id new).
SELECT pg_temp.batch_setup();
SELECT pg_temp.counter('published') AS published2, pg_temp.counter('deliveries_published') AS deliveries2 \gset
CREATE TEMP TABLE a_ids AS SELECT * FROM relaybus.publish_batch((SELECT events FROM batch)) WITH ORDINALITY AS r(id, n);
SELECT pg_temp.counter('published') - :published2 AS a_published,
       pg_temp.counter('deliveries_published') - :deliveries2 AS a_deliveries \gset
SELECT pg_temp.snapshot('a');
-- B: publish once per element.
SELECT pg_temp.batch_setup();
SELECT pg_temp.counter('published') AS published3, pg_temp.counter('deliveries_published') AS deliveries3 \gset
SELECT pg_temp.publish_each((SELECT events FROM batch));
SELECT pg_temp.snapshot('b');

SELECT results_eq('SELECT id FROM a_ids ORDER BY n',
                  $$VALUES ('b1'), ('b2'), ('b3'), ('b4'), ('b5'), ('b6'), ('b7'), ('b8')$$,
                  'publish_batch returns the ids in input order');
SELECT set_eq('SELECT * FROM a_events', 'SELECT * FROM b_events',
              'publish_batch: the events of one publish per element (type, key, payload, headers, handlers)');
SELECT set_eq('SELECT * FROM a_deliveries', 'SELECT * FROM b_deliveries',
              'publish_batch: the deliveries of one publish per element (handler, lane, position, key, due time, created_at)');
SELECT results_eq(
  $$SELECT handler, position, event_id FROM a_deliveries WHERE lane = relaybus.lane_of('k1') ORDER BY handler, position$$,
  $$VALUES ('audit', 1::bigint, 'pre'), ('audit', 2, 'b1'), ('audit', 3, 'b6'),
           ('mailer', 1, 'pre'), ('mailer', 2, 'b1'), ('mailer', 3, 'b2'), ('mailer', 4, 'b6')$$,
  'publish_batch: a lane''s positions follow input order after the stored ones');
SELECT is(:a_published::bigint, pg_temp.counter('published') - :published3, 'publish_batch counts the events publish counts');
SELECT is(:a_deliveries::bigint, pg_temp.counter('deliveries_published') - :deliveries3,
          'publish_batch counts the deliveries publish counts');

-- C: with b1 repeated at the end and b5 stored already (with audit only): element by
-- element, as publish.
SELECT pg_temp.batch_setup();
SELECT relaybus.publish('order.created', '{"n": 5}', NULL, 'b5', ARRAY['audit']);
SELECT is((SELECT count(*)::int FROM relaybus.publish_batch(
             (SELECT events || '[{"type": "order.created", "id": "b1", "key": "k1"}]'::jsonb FROM batch))),
          9, 'a batch repeating an id returns one id per element');
SELECT pg_temp.snapshot('c');
SELECT pg_temp.batch_setup();
SELECT relaybus.publish('order.created', '{"n": 5}', NULL, 'b5', ARRAY['audit']);
SELECT pg_temp.publish_each((SELECT events || '[{"type": "order.created", "id": "b1", "key": "k1"}]'::jsonb FROM batch));
SELECT pg_temp.snapshot('d');
SELECT set_eq('SELECT * FROM c_deliveries', 'SELECT * FROM d_deliveries',
              'publish_batch with repeated and stored ids: the deliveries of one publish per element');
SELECT bag_eq($$SELECT handler FROM c_deliveries WHERE event_id IN ('b1', 'b5')$$,
              $$VALUES ('audit'), ('mailer'), ('audit'), ('mailer')$$,
              'a repeated id adds no delivery; a stored one gains only the handler it lacked');

-- E: a batch [dup, y] of one key for solo, while another transaction has published dup (for
-- audit and mailer) and not committed: the batch's check for stored ids misses dup, its
-- insert waits for that transaction and then skips dup, a republication. The elements keep
-- input order: solo gets dup, then y.
SELECT pg_temp.setup();
SELECT rb_connect('pa');
SELECT rb_connect('pb');
SELECT dblink_exec('pa', 'BEGIN');
SELECT * FROM dblink('pa', $$SELECT relaybus.publish('order.created', '{}', 'kr', 'r-dup')$$) AS t(id text);
SELECT pid AS batcher FROM dblink('pb', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT dblink_send_query('pb', $$SELECT array_agg(id) FROM relaybus.publish_batch('[
  {"type": "order.created", "key": "kr", "id": "r-dup", "handlers": ["solo"]},
  {"type": "other.type", "key": "kr", "id": "r-y"}]') AS id$$);
SELECT is(rb_waits_for_lock(:batcher), true, 'the batch waits for the open transaction that published one of its ids');
SELECT dblink_exec('pa', 'COMMIT');
SELECT is((SELECT ids FROM dblink_get_result('pb') AS t(ids text[])), ARRAY['r-dup', 'r-y'],
          'then returns its ids in input order');
SELECT results_eq(
  $$SELECT handler, position, event_id FROM relaybus.deliveries ORDER BY handler, position$$,
  $$VALUES ('audit', 1::bigint, 'r-dup'), ('mailer', 1, 'r-dup'), ('solo', 1, 'r-dup'), ('solo', 2, 'r-y')$$,
  'the raced element adds only the handler it lacked, and the elements keep input order in the lane');
SELECT dblink_disconnect('pa');
SELECT dblink_disconnect('pb');

--------------------------------------------------------------------------------
-- Wake-ups: a committed publish notifies channel relaybus once per handler; a rolled-back
-- one never does.
SELECT pg_temp.setup();
SELECT rb_connect('ls');
SELECT dblink_exec('ls', 'LISTEN relaybus');
BEGIN;
SELECT relaybus.publish('other.type', '{}', NULL, 'wake-rolled');
ROLLBACK;
SELECT relaybus.publish('order.created', '{}', NULL, 'wake-1');
SELECT relaybus.publish('order.created', '{}', NULL, 'wake-2');
-- The notifications the listener received: polled until `expected` came (up to about 2 s),
-- then once more a moment later for any beyond them.
CREATE FUNCTION pg_temp.heard(conn text, expected int) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
  got text[] := '{}';
BEGIN
  FOR i IN 1..100 LOOP
    got := got || ARRAY(SELECT extra FROM dblink_get_notify(conn) WHERE notify_name = 'relaybus');
    EXIT WHEN cardinality(got) >= expected;
    PERFORM pg_sleep(0.02);
  END LOOP;
  PERFORM pg_sleep(0.1);
  got := got || ARRAY(SELECT extra FROM dblink_get_notify(conn) WHERE notify_name = 'relaybus');
  RETURN ARRAY(SELECT x FROM unnest(got) x ORDER BY x);
END
$$;
SELECT is(pg_temp.heard('ls', 4), ARRAY['audit', 'audit', 'mailer', 'mailer'],
          'each committed publish notified each of its handlers once; the rolled-back one nobody');
SELECT dblink_disconnect('ls');

--------------------------------------------------------------------------------
-- A publisher with the publisher right only: the deliveries are written at commit with
-- publish's rights (SECURITY DEFINER), not the caller's.
SELECT pg_temp.setup();
DROP ROLE IF EXISTS rbtest_p030_publisher;
CREATE ROLE rbtest_p030_publisher LOGIN;
SELECT FROM relaybus.grant_rights('rbtest_p030_publisher', 'publisher');
SELECT dblink_connect('sec', format('dbname=%s host=%s port=%s user=rbtest_p030_publisher',
  current_database(), current_setting('unix_socket_directories'), current_setting('port')));
SELECT throws_ok($$SELECT dblink_exec('sec', 'INSERT INTO relaybus.deliveries VALUES (''audit'', 0, 1, ''x'', NULL, now(), now())')$$,
                 '42501', NULL, 'the publisher role may not write deliveries itself');
SELECT lives_ok($$SELECT * FROM dblink('sec', 'SELECT relaybus.publish(''order.created'', ''{}'', ''ksec'', ''sec-1'')') AS t(id text)$$,
                'its publish commits');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'sec-1'), 2,
          'and its deliveries are written at commit');
SELECT dblink_disconnect('sec');
DROP OWNED BY rbtest_p030_publisher;
DROP ROLE rbtest_p030_publisher;

--------------------------------------------------------------------------------
-- The statement that writes the deliveries at commit finds a lane's last position through
-- the primary key, even when its plan is made after ANALYZE saw a small table (where a
-- sequential scan looks cheaper, and would stay the plan as the table grows).
SELECT pg_temp.setup();
SELECT relaybus.publish('order.created', '{}', NULL, 'plan-' || i) FROM generate_series(1, 5) i;
ANALYZE relaybus.deliveries;
SELECT rb_connect('plan');
CREATE FUNCTION pg_temp.scans_of_remote_publish() RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  seq0 bigint; idx0 bigint; seq1 bigint; idx1 bigint;
BEGIN
  PERFORM pg_stat_clear_snapshot();
  SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) INTO seq0, idx0
    FROM pg_stat_user_tables WHERE relid = 'relaybus.deliveries'::regclass;
  PERFORM * FROM dblink('plan', $q$SELECT relaybus.publish('order.created', '{}', 'kp', 'plan-remote')$q$) AS t(id text);
  PERFORM * FROM dblink('plan', 'SELECT pg_stat_force_next_flush()') AS t(x text);
  PERFORM pg_stat_clear_snapshot();
  SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) INTO seq1, idx1
    FROM pg_stat_user_tables WHERE relid = 'relaybus.deliveries'::regclass;
  RETURN ARRAY[seq1 - seq0, idx1 - idx0];
END
$$;
SELECT is((SELECT ARRAY[s[1], least(s[2], 1)] FROM pg_temp.scans_of_remote_publish() s), ARRAY[0, 1]::bigint[],
          'the commit of a publish scans deliveries by index, never sequentially');
SELECT dblink_disconnect('plan');

--------------------------------------------------------------------------------
-- Bad input: an error with its SQLSTATE, and nothing written.
SELECT pg_temp.setup();
SELECT relaybus.publish('order.created', '{}', 'kb', 'bi-1');
CREATE TEMP TABLE state0 AS
  SELECT (SELECT count(*) FROM relaybus.events) AS events, (SELECT count(*) FROM relaybus.deliveries) AS deliveries;
SELECT throws_ok($$SELECT relaybus.publish(NULL, '{}')$$, '22004', NULL, 'publish: NULL type -> 22004');
SELECT throws_ok($$SELECT relaybus.publish('order.created', NULL)$$, '22004', NULL, 'publish: NULL payload -> 22004');
SELECT throws_ok($$SELECT relaybus.publish('', '{}')$$, '22023', NULL, 'publish: empty type -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', key => '')$$, '22023', NULL, 'publish: empty key -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', event_id => '')$$, '22023', NULL,
                 'publish: empty event_id -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '[1]', event_id => 'bi-x')$$, '22023', NULL,
                 'publish: a payload that is not an object -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', event_id => 'bi-x', headers => '"h"')$$, '22023', NULL,
                 'publish: headers that are not an object -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', event_id => 'bi-x', handlers => ARRAY['nobody'])$$,
                 '42704', NULL, 'publish: an unknown handler -> 42704');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', event_id => 'bi-x', handlers => ARRAY[''])$$,
                 '22023', NULL, 'publish: an empty handler name -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', event_id => 'bi-x', handlers => ARRAY['audit', NULL])$$,
                 '22004', NULL, 'publish: NULL in handlers -> 22004');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', event_id => 'bi-1', handlers => ARRAY['nobody'])$$,
                 '42704', NULL, 'publish: a repeat of a stored event with an unknown handler -> 42704');
SELECT throws_ok($$SELECT relaybus.publish_batch(NULL)$$, '22004', NULL, 'publish_batch(NULL) -> 22004');
SELECT throws_ok($$SELECT relaybus.publish_batch('{"type": "order.created"}')$$, '22023', NULL,
                 'publish_batch: not an array -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "order.created", "id": "bi-b1"}, 5]')$$, '22023', NULL,
                 'publish_batch: an element that is not an object -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "order.created", "id": "bi-b2"}, {"type": 5}]')$$, '22023', NULL,
                 'publish_batch: a type that is not a string -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "order.created", "id": "bi-b3", "key": "kb"},
                                                   {"type": "order.created", "id": "bi-b4", "handlers": ["nobody"]}]')$$,
                 '42704', NULL, 'publish_batch: a later element with an unknown handler -> 42704');
SELECT is((SELECT count(*) FROM relaybus.events), (SELECT events FROM state0), 'the refused publishes wrote no event');
SELECT is((SELECT count(*) FROM relaybus.deliveries), (SELECT deliveries FROM state0),
          'the refused publishes wrote no delivery, at their commit either');
SELECT * FROM finish();
