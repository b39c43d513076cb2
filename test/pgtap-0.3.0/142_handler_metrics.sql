-- Per-handler monitoring (issue 34): handler_counters(), completion_latency(),
-- unrouted_counters(), metrics().oldest_in_flight_age and relaybus.unrouted_publish.
--
-- Guarantees: each handler's counters move by exactly what committed work did for that
-- handler, and only that handler's (two handlers of one event each count their own); a
-- rolled-back savepoint or transaction counts nothing per handler either, a released one
-- does; the database counters still move as before; a completion lands in the latency
-- bucket of its publish-to-completion time, taken from the publish time its token carries
-- (a token without one counts as completed but not in the histogram); an event stored for
-- no handler counts per type, and relaybus.unrouted_publish = error refuses it (42704) and
-- stores nothing; metrics() shows the age of the oldest delivery in flight; reset_counters
-- zeroes all of it; only the admin right reads any of it.
-- A count given to the wrong handler, kept from a rolled-back subtransaction, a latency
-- taken from the wrong time, or an unrouted event stored under error fails here.
SELECT rb_reset();
SELECT plan(40);

SET client_min_messages = warning;
DROP ROLE IF EXISTS rbtest_p142_worker;
DROP ROLE IF EXISTS rbtest_p142_admin;
RESET client_min_messages;
CREATE ROLE rbtest_p142_worker;
SELECT FROM relaybus.grant_rights('rbtest_p142_worker', 'worker');
CREATE ROLE rbtest_p142_admin;
SELECT FROM relaybus.grant_rights('rbtest_p142_admin', 'admin');

-- The handler counters as they are now, and those that moved since, as
-- 'handler:name+delta ...' in handler and name order ('' if none).
CREATE TEMP TABLE hm_mark (handler text, name text, value bigint);
CREATE FUNCTION pg_temp.mark() RETURNS void LANGUAGE sql AS $$
  DELETE FROM hm_mark;
  INSERT INTO hm_mark SELECT c.handler, c.name, c.value FROM relaybus.handler_counters() c
                       WHERE c.handler LIKE 'hm\_%';
$$;
CREATE FUNCTION pg_temp.moved() RETURNS text LANGUAGE sql AS $$
  SELECT coalesce(string_agg(c.handler || ':' || c.name || '+' || (c.value - coalesce(m.value, 0)),
                             ' ' ORDER BY c.handler, c.name), '')
    FROM relaybus.handler_counters() c LEFT JOIN hm_mark m USING (handler, name)
   WHERE c.handler LIKE 'hm\_%' AND c.value <> coalesce(m.value, 0)
$$;
-- A handler's cumulative completions at the bucket bounded by le seconds.
CREATE FUNCTION pg_temp.at_most(h text, bound double precision) RETURNS bigint LANGUAGE sql AS $$
  SELECT l.completions[array_position(l.le, bound)] FROM relaybus.completion_latency() l
   WHERE l.handler = h
$$;

SELECT relaybus.subscribe('hm_a', ARRAY['hm.t'], max_attempts => 2, backoff_base => '0', backoff_max => '0');
SELECT relaybus.subscribe('hm_b', ARRAY['hm.t', 'hm.only_b']);
SELECT relaybus.subscribe('hm_c', ARRAY['hm.only_c']);

--------------------------------------------------------------------------------
-- 1. Per-handler counters
--------------------------------------------------------------------------------
SELECT pg_temp.mark();
SELECT relaybus.publish('hm.t', '{}', event_id => 'e1');
SELECT relaybus.publish('hm.only_b', '{}', event_id => 'e2');
SELECT is(pg_temp.moved(), 'hm_a:published+1 hm_b:published+2',
          'publish: each handler counts the deliveries it was given');
SELECT is((SELECT array_agg(DISTINCT c.name ORDER BY c.name) FROM relaybus.handler_counters() c
            WHERE c.handler = 'hm_a'),
          ARRAY['attempts_charged', 'claimed', 'completed', 'dead_lettered', 'failed',
                'handler_worker_errors', 'published', 'taken_over'],
          'handler_counters: the eight counters of a handler');

SELECT pg_temp.mark();
BEGIN;
SELECT relaybus.publish('hm.t', '{}', event_id => 'kept');
SAVEPOINT s;
SELECT relaybus.publish('hm.t', '{}', event_id => 'gone');
ROLLBACK TO s;
SAVEPOINT s2;
SELECT relaybus.publish('hm.only_b', '{}', event_id => 'released');
RELEASE s2;
COMMIT;
SELECT is(pg_temp.moved(), 'hm_a:published+1 hm_b:published+2',
          'savepoints: a rolled-back one counts nothing for any handler, a released one counts');

SELECT pg_temp.mark();
BEGIN;
SELECT relaybus.publish('hm.t', '{}', event_id => 'rolled-back');
ROLLBACK;
SELECT is(pg_temp.moved(), '', 'a rolled-back publish counts nothing');

-- A released savepoint that counted for a handler its parent had not counted for.
SELECT pg_temp.mark();
BEGIN;
SELECT relaybus.publish('hm.only_b', '{}', event_id => 'c-parent');
SAVEPOINT s;
SELECT relaybus.publish('hm.only_c', '{}', event_id => 'c-child');
RELEASE s;
COMMIT;
SELECT is(pg_temp.moved(), 'hm_b:published+1 hm_c:published+1',
          'a released savepoint brings its parent a handler the parent had not counted for');

-- Deeper than the 16 levels of deltas kept: a count there is dropped, never kept for a
-- rollback to undo in vain.
SELECT pg_temp.mark();
BEGIN;
SAVEPOINT l1; SAVEPOINT l2; SAVEPOINT l3; SAVEPOINT l4; SAVEPOINT l5; SAVEPOINT l6;
SAVEPOINT l7; SAVEPOINT l8; SAVEPOINT l9; SAVEPOINT l10; SAVEPOINT l11; SAVEPOINT l12;
SAVEPOINT l13; SAVEPOINT l14; SAVEPOINT l15; SAVEPOINT l16; SAVEPOINT l17; SAVEPOINT l18;
SELECT relaybus.publish('hm.only_c', '{}', event_id => 'deep-' || i) FROM generate_series(1, 5) i;
ROLLBACK TO l18;
COMMIT;
SELECT is(pg_temp.moved(), '', 'a publish 18 savepoints deep, rolled back, counts nothing');
SELECT relaybus.cancel('c-child', 'hm_c');

-- hm_a has e1 and kept; hm_b has e1, e2, kept, released (and c-parent).
SELECT relaybus.cancel('c-parent', 'hm_b');
SELECT pg_sleep(0.05);
SELECT pg_temp.mark();
CREATE TEMP TABLE got_a AS SELECT event_id, lease_token FROM relaybus.claim('hw', 10, '5 minutes', ARRAY['hm_a']);
SELECT is((SELECT count(*)::int FROM got_a), 2, 'hm_a: two deliveries claimed');
SELECT is(pg_temp.moved(), 'hm_a:claimed+2', 'claim: only the claimed handler counts');

SELECT pg_temp.mark();
SELECT is(relaybus.fail((SELECT lease_token FROM got_a WHERE event_id = 'e1'), 'boom'), 'retry', 'fail e1');
SELECT ok(relaybus.bury((SELECT lease_token FROM got_a WHERE event_id = 'kept'), 'poison'), 'bury kept');
SELECT is(pg_temp.moved(), 'hm_a:attempts_charged+2 hm_a:dead_lettered+1 hm_a:failed+1',
          'fail and bury: hm_a counts its failure, charges and dead letter');

--------------------------------------------------------------------------------
-- 2. The completion latency histogram
--------------------------------------------------------------------------------
-- hm_b's four deliveries wait 250 ms more before they are claimed, and are completed at
-- once: each took between 0.2 s and a few seconds from its publish (and some milliseconds
-- from its claim, which a histogram of claim to completion would count at 0.2 s or less).
SELECT pg_sleep(0.25);
CREATE TEMP TABLE got_b AS SELECT event_id, lease_token FROM relaybus.claim('hw', 10, '5 minutes', ARRAY['hm_b']);
SELECT is((SELECT count(*)::int FROM got_b), 4, 'hm_b: four deliveries claimed');
SELECT ok((SELECT bool_and(lease_token ~ '\.[1-9][0-9]{15}$') FROM got_b),
          'each token carries its event''s publish time (microseconds since 1970)');
SELECT ok((SELECT bool_and(abs(substring(g.lease_token FROM '\.([0-9]+)$')::bigint
                               - (extract(epoch FROM e.published_at) * 1000000)::bigint) <= 1)
             FROM got_b g JOIN relaybus.events e ON e.id = g.event_id),
          'the publish time is the event''s published_at');
CREATE TEMP TABLE latency_before AS SELECT * FROM relaybus.completion_latency() WHERE handler = 'hm_b';
SELECT pg_temp.mark();
BEGIN;
SELECT relaybus.complete((SELECT lease_token FROM got_b WHERE event_id = 'e1'));
ROLLBACK;
SELECT is(pg_temp.moved(), '', 'a rolled-back completion counts nothing');
SELECT is((SELECT coalesce(total, 0) FROM relaybus.completion_latency() WHERE handler = 'hm_b'),
          (SELECT coalesce(total, 0) FROM latency_before), 'nor in the histogram');

SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM got_b WHERE event_id IN ('e1', 'e2', 'kept'))),
          3, 'complete_many: three of hm_b');
SELECT is(pg_temp.moved(), 'hm_b:completed+3', 'completed moves for hm_b only');
SELECT is((SELECT total FROM relaybus.completion_latency() WHERE handler = 'hm_b'), 3::bigint,
          'the histogram counts the three completions');
SELECT is(pg_temp.at_most('hm_b', 0.2), 0::bigint, 'none took 0.2 s or less: timed from the publish');
SELECT is(pg_temp.at_most('hm_b', 10), 3::bigint, 'all three took at most 10 s');
SELECT ok((SELECT total_seconds >= 3 * 0.25 AND total_seconds < 3 * 60
             FROM relaybus.completion_latency() WHERE handler = 'hm_b'),
          'their sum is at least 3 x 0.25 s');
SELECT ok((SELECT bool_and(c1 <= c2) FROM relaybus.completion_latency() l,
             unnest(l.completions[1:cardinality(l.completions) - 1], l.completions[2:]) AS u(c1, c2)
            WHERE l.handler = 'hm_b'),
          'the buckets are cumulative');

-- A token rebuilt without its publish time still completes, outside the histogram.
SELECT is(relaybus.complete(regexp_replace((SELECT lease_token FROM got_b WHERE event_id = 'released'),
                                           '\.[0-9]+$', '')),
          true, 'a token without a publish time completes');
SELECT is((SELECT total FROM relaybus.completion_latency() WHERE handler = 'hm_b'), 3::bigint,
          'and is not in the histogram');
SELECT is(pg_temp.moved(), 'hm_b:completed+4', 'but counts as completed');

--------------------------------------------------------------------------------
-- 3. metrics(): the oldest delivery in flight
--------------------------------------------------------------------------------
SELECT is((SELECT oldest_in_flight_age FROM relaybus.metrics() WHERE handler = 'hm_b'), NULL,
          'nothing in flight: oldest_in_flight_age is NULL');
SELECT relaybus.publish('hm.only_b', '{}', event_id => 'slow');
SELECT pg_sleep(0.1);
SELECT is((SELECT count(*)::int FROM relaybus.claim('hw', 10, '5 minutes', ARRAY['hm_b'])), 1, 'claim slow');
SELECT ok((SELECT oldest_in_flight_age >= interval '0.1 s' AND oldest_in_flight_age < interval '1 minute'
             FROM relaybus.metrics() WHERE handler = 'hm_b'),
          'in flight: its age since its publish');

--------------------------------------------------------------------------------
-- 4. Unrouted events
--------------------------------------------------------------------------------
CREATE TEMP TABLE unrouted_before AS
  SELECT (SELECT value FROM relaybus.counters() WHERE name = 'unrouted') AS total,
         coalesce((SELECT events FROM relaybus.unrouted_counters() WHERE type = 'hm.typo'), 0) AS typo;
SET relaybus.unrouted_publish = ignore;
SELECT relaybus.publish('hm.typo', '{}', event_id => 'u1');
SELECT count(*) FROM relaybus.publish_batch('[{"type": "hm.typo", "id": "u2"}, {"type": "hm.t", "id": "u3"}]');
SELECT is((SELECT events FROM relaybus.unrouted_counters() WHERE type = 'hm.typo') - (SELECT typo FROM unrouted_before),
          2::bigint, 'unrouted_counters: the type counts its two events');
SELECT is((SELECT value FROM relaybus.counters() WHERE name = 'unrouted') - (SELECT total FROM unrouted_before),
          2::bigint, 'counters(): unrouted counts them (the routed one not)');
SET relaybus.unrouted_publish = error;
SELECT throws_ok($$SELECT relaybus.publish('hm.typo', '{}', event_id => 'u4')$$, '42704',
                 'no handler is subscribed to event type "hm.typo"',
                 'unrouted_publish = error: 42704');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'u4'), 0, 'and the event is not stored');
SET relaybus.unrouted_publish = ignore;
BEGIN;
SELECT relaybus.publish('hm.rolled.back', '{}');
ROLLBACK;
SELECT is((SELECT count(*)::int FROM relaybus.unrouted_counters() WHERE type = 'hm.rolled.back'), 0,
          'a rolled-back unrouted publish takes no row (nor a slot of the database''s share)');
-- Types alike in their first 128 bytes are one row, not two rows of the same name.
SELECT relaybus.publish(repeat('x', 128) || 'A', '{}'), relaybus.publish(repeat('x', 128) || 'B', '{}');
SELECT is((SELECT array_agg(events) FROM relaybus.unrouted_counters() WHERE type LIKE 'xxx%'), ARRAY[2::bigint],
          'two long types alike in their first 128 bytes: one row, both counted');
SET relaybus.unrouted_publish = error;
SELECT lives_ok($$SELECT relaybus.publish('hm.typo', '{}', event_id => 'u5', handlers => '{}')$$,
                'an explicit empty handlers list is a choice, not a mistake: stored even under error');
SELECT is((SELECT events FROM relaybus.unrouted_counters() WHERE type = 'hm.typo') - (SELECT typo FROM unrouted_before),
          2::bigint, 'and not counted as unrouted');
RESET relaybus.unrouted_publish;

--------------------------------------------------------------------------------
-- 5. Reset and rights
--------------------------------------------------------------------------------
SELECT relaybus.reset_counters();
SELECT ok((SELECT bool_and(value = 0) FROM relaybus.handler_counters())
          AND (SELECT bool_and(total = 0 AND total_seconds = 0) FROM relaybus.completion_latency())
          AND (SELECT bool_and(events = 0) FROM relaybus.unrouted_counters()),
          'reset_counters zeroes the handler counters, the histograms and the unrouted types');

SET ROLE rbtest_p142_worker;
SELECT throws_ok('SELECT * FROM relaybus.handler_counters()', '42501', NULL, 'worker role: handler_counters() is refused');
RESET ROLE;
SET ROLE rbtest_p142_admin;
SELECT lives_ok('SELECT * FROM relaybus.handler_counters(); SELECT * FROM relaybus.completion_latency();
                 SELECT * FROM relaybus.unrouted_counters()',
                'admin role: the three work');
RESET ROLE;

SELECT * FROM finish();
SELECT rb_reset();
DROP OWNED BY rbtest_p142_worker;
DROP ROLE rbtest_p142_worker;
DROP OWNED BY rbtest_p142_admin;
DROP ROLE rbtest_p142_admin;
