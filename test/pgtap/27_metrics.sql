-- Guarantees: metrics() reports per handler what the tables hold (pending vs due vs in
-- flight vs dead, the oldest waiting delivery's age, live lanes and their workers, paused);
-- statistics() and metrics() agree (one helper computes both); the cumulative counters move
-- by exactly what committed work did (publish, publish_batch, claim, complete, fail, bury,
-- release, takeovers by claim and by take_over_expired) and not at all for a rolled-back
-- transaction, savepoint or PL/pgSQL exception block; reset_counters zeroes them; only
-- the admin right can call the three functions.
-- A count moved to the wrong place (or left out), a delta flushed at abort or kept from a
-- rolled-back subtransaction, or a grant to the worker or publisher fails here.
-- The counters are per database, so background workers serving another database cannot
-- move them; a takeover is asserted from before the claim, so it counts whoever does it.
SELECT rb_reset();
SELECT plan(45);

SET client_min_messages = warning;
DROP ROLE IF EXISTS rbtest_p27_worker;
DROP ROLE IF EXISTS rbtest_p27_publisher;
DROP ROLE IF EXISTS rbtest_p27_admin;
RESET client_min_messages;
CREATE ROLE rbtest_p27_worker;
SELECT FROM relaybus.grant_rights('rbtest_p27_worker', 'worker');
CREATE ROLE rbtest_p27_publisher;
SELECT FROM relaybus.grant_rights('rbtest_p27_publisher', 'publisher');
CREATE ROLE rbtest_p27_admin;
SELECT FROM relaybus.grant_rights('rbtest_p27_admin', 'admin');

--------------------------------------------------------------------------------
-- metrics(): a constructed state
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('m1', ARRAY['m.t']);
SELECT relaybus.subscribe('m2', ARRAY['m.other']);
SELECT relaybus.subscribe('m3', ARRAY['m.gone']);
SELECT ok(relaybus.lane_of('ka') <> relaybus.lane_of('kb'), 'keys ka and kb live in different lanes');

-- e1 in flight for w1, e2 in flight for w2, e5 dead (buried by w3, whose lane then goes
-- back), e3 due, e4 not due for an hour.
SELECT relaybus.publish('m.t', '{}', key => 'ka', event_id => 'e1');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w1', 1, '5 minutes', ARRAY['m1'])), 1, 'w1 claims e1');
SELECT relaybus.publish('m.t', '{}', key => 'kb', event_id => 'e2');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2', 1, '5 minutes', ARRAY['m1'])), 1, 'w2 claims e2');
SELECT relaybus.publish('m.t', '{}', key => 'kd', event_id => 'e5');
SELECT ok((SELECT relaybus.bury(lease_token, 'poison') FROM relaybus.claim('w3', 1, '5 minutes', ARRAY['m1'])),
          'w3 claims and buries e5');
SELECT relaybus.relinquish('w3');
SELECT relaybus.publish('m.t', '{}', key => 'kc', event_id => 'e3');
SELECT relaybus.publish('m.t', '{}', key => 'ke', event_id => 'e4', available_at => now() + interval '1 hour');
-- m3 is unsubscribed with a delivery left; m2 is paused (pause() sets paused_at).
SELECT relaybus.publish('m.gone', '{}', event_id => 'g1');
SELECT relaybus.unsubscribe('m3');
UPDATE relaybus.subscriptions SET paused_at = now() WHERE handler = 'm2';
-- The oldest delivery is e1 (in flight), then e5 (dead): neither counts; e4 (not due) does.
UPDATE relaybus.deliveries SET created_at = '1999-01-01' WHERE event_id = 'e1';
UPDATE relaybus.deliveries SET created_at = '1999-06-01' WHERE event_id = 'e5';
UPDATE relaybus.deliveries SET created_at = '2000-01-01' WHERE event_id = 'e4';

SELECT results_eq(
  $$SELECT handler, paused, pending, due, in_flight, dead, lanes_held, workers FROM relaybus.metrics()$$,
  $$VALUES ('m1'::text, false, 2::bigint, 1::bigint, 2::bigint, 1::bigint, 2::bigint, 2::bigint),
           ('m2', true, 0, 0, 0, 0, 0, 0),
           ('m3', false, 1, 1, 0, 0, 0, 0)$$,
  'metrics: pending, due, in flight, dead, lanes held and workers per handler (paused m2, unsubscribed m3)');
SELECT is((SELECT oldest_pending_age = now() - timestamptz '2000-01-01' FROM relaybus.metrics() WHERE handler = 'm1'),
          true, 'metrics: oldest_pending_age is the age of the oldest waiting delivery (not the in-flight or dead ones)');
SELECT is((SELECT oldest_pending_age FROM relaybus.metrics() WHERE handler = 'm2'), NULL,
          'metrics: oldest_pending_age is NULL when nothing waits');
SELECT results_eq(
  $$SELECT handler, pending, processing, dead, oldest_pending FROM relaybus.statistics()$$,
  $$SELECT handler, pending, in_flight, dead, now() - oldest_pending_age FROM relaybus.metrics()$$,
  'statistics and metrics agree on pending, in flight, dead and the oldest waiting delivery');

-- A lease that ran out: its lane no longer counts as held, its delivery still counts as
-- in flight until a takeover.
UPDATE relaybus.lanes SET lease_expires_at = now() - interval '1 second' WHERE lease_owner = 'w2';
SELECT results_eq(
  $$SELECT pending, due, in_flight, lanes_held, workers FROM relaybus.metrics() WHERE handler = 'm1'$$,
  $$VALUES (2::bigint, 1::bigint, 2::bigint, 1::bigint, 1::bigint)$$,
  'metrics: an expired lease is not a held lane, but its delivery is still in flight');

--------------------------------------------------------------------------------
-- counters(): deltas of committed work
--------------------------------------------------------------------------------
SELECT rb_reset();
CREATE TEMP TABLE rb_mark (name text PRIMARY KEY, value bigint);
CREATE FUNCTION pg_temp.mark() RETURNS void LANGUAGE sql AS $$
  DELETE FROM rb_mark;
  INSERT INTO rb_mark SELECT c.name, c.value FROM relaybus.counters() c;
$$;
-- The counters that moved since mark(), as 'name+delta ...' in name order ('' if none).
CREATE FUNCTION pg_temp.moved() RETURNS text LANGUAGE sql AS $$
  SELECT coalesce(string_agg(c.name || '+' || (c.value - m.value), ' ' ORDER BY c.name), '')
    FROM relaybus.counters() c JOIN rb_mark m USING (name) WHERE c.value <> m.value
$$;

SELECT is((SELECT array_agg(name ORDER BY name) FROM relaybus.counters()),
          ARRAY['attempts_charged', 'claimed', 'completed', 'dead_lettered', 'deliveries_published',
                'failed', 'handler_worker_errors', 'published', 'taken_over', 'unrouted'],
          'counters: one row per counter');
SELECT is((SELECT count(DISTINCT since)::int FROM relaybus.counters()), 1, 'counters: one since for all');

SELECT relaybus.subscribe('c1', ARRAY['c.t'], max_attempts => 2, backoff_base => '0', backoff_max => '0');
SELECT relaybus.subscribe('c2', ARRAY['c.t']);

SELECT pg_temp.mark();
SELECT relaybus.publish('c.t', '{}', event_id => 'p1');
SELECT is(pg_temp.moved(), 'deliveries_published+2 published+1', 'publish: one event, two deliveries');

SELECT pg_temp.mark();
SELECT relaybus.publish('c.t', '{}', event_id => 'p1');
SELECT is(pg_temp.moved(), '', 'a repeated publish adds nothing');

SELECT pg_temp.mark();
SELECT count(*) FROM relaybus.publish_batch(
  '[{"type": "c.t", "id": "p2", "handlers": ["c1"]}, {"type": "c.t", "id": "p3", "handlers": ["c1"]}]');
SELECT is(pg_temp.moved(), 'deliveries_published+2 published+2', 'publish_batch: two events, two deliveries');

SELECT pg_temp.mark();
BEGIN;
SELECT relaybus.publish('c.t', '{}', event_id => 'rolled-back');
ROLLBACK;
SELECT is(pg_temp.moved(), '', 'a rolled-back publish counts nothing');

SELECT pg_temp.mark();
BEGIN;
SELECT relaybus.publish('c.t', '{}', handlers => ARRAY['c1'], event_id => 'p4');
SAVEPOINT s1;
SELECT relaybus.publish('c.t', '{}', handlers => ARRAY['c1'], event_id => 'gone-1');
ROLLBACK TO s1;
SAVEPOINT s2;
SELECT relaybus.publish('c.t', '{}', handlers => ARRAY['c1'], event_id => 'p5');
RELEASE s2;
SAVEPOINT outer_sp;
SAVEPOINT inner_sp;
SELECT relaybus.publish('c.t', '{}', handlers => ARRAY['c1'], event_id => 'gone-2');
RELEASE inner_sp;
ROLLBACK TO outer_sp;
COMMIT;
SELECT is(pg_temp.moved(), 'deliveries_published+2 published+2',
          'savepoints: a rolled-back one counts nothing (nor one released into it), a released one counts');

-- Counted only inside a savepoint that was released, then a later savepoint at the same
-- depth rolled back: the released count belongs to the transaction by then.
SELECT pg_temp.mark();
BEGIN;
SAVEPOINT a;
SELECT relaybus.publish('c.t', '{}', handlers => ARRAY['c2'], event_id => 'p6');
RELEASE a;
SAVEPOINT b;
ROLLBACK TO b;
COMMIT;
SELECT is(pg_temp.moved(), 'deliveries_published+1 published+1',
          'a released savepoint''s count survives the rollback of a later savepoint');
DELETE FROM relaybus.deliveries WHERE event_id = 'p6';

SELECT pg_temp.mark();
DO $$
BEGIN
  BEGIN
    PERFORM relaybus.publish('c.t', '{}', event_id => 'gone-3');
    RAISE EXCEPTION 'undo';
  EXCEPTION WHEN raise_exception THEN NULL;
  END;
END
$$;
SELECT is(pg_temp.moved(), '', 'a publish undone by a PL/pgSQL exception block counts nothing');

-- c1 now has p1, p2, p3, p4, p5 pending.
SELECT pg_temp.mark();
BEGIN;
SELECT count(*) FROM relaybus.claim('cw', 10, '5 minutes', ARRAY['c1']);
ROLLBACK;
SELECT is(pg_temp.moved(), '', 'a rolled-back claim counts nothing');

SELECT pg_temp.mark();
CREATE TEMP TABLE got AS SELECT event_id, lease_token FROM relaybus.claim('cw', 10, '5 minutes', ARRAY['c1']);
SELECT is((SELECT count(*)::int FROM got), 5, 'the claim got the five deliveries of c1');
SELECT is(pg_temp.moved(), 'claimed+5', 'claim: claimed moves by the deliveries handed out');

SELECT pg_temp.mark();
SELECT ok(relaybus.complete((SELECT lease_token FROM got WHERE event_id = 'p1')), 'complete p1');
SELECT is(pg_temp.moved(), 'completed+1', 'complete: completed+1');
SELECT pg_temp.mark();
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM got WHERE event_id IN ('p1', 'p2'))), 1,
          'complete_many: p2 completes, p1 is gone already');
SELECT is(pg_temp.moved(), 'completed+1', 'complete_many: completed moves by the deliveries completed only');

SELECT pg_temp.mark();
SELECT is(relaybus.fail((SELECT lease_token FROM got WHERE event_id = 'p3'), 'boom'), 'retry', 'fail p3: retry');
SELECT is(relaybus.fail((SELECT lease_token FROM got WHERE event_id = 'p3'), 'boom'), 'lost', 'fail p3 again: lost');
SELECT ok(relaybus.bury((SELECT lease_token FROM got WHERE event_id = 'p4'), 'poison'), 'bury p4');
SELECT ok(relaybus.release((SELECT lease_token FROM got WHERE event_id = 'p5')), 'release p5');
SELECT is(pg_temp.moved(), 'attempts_charged+2 dead_lettered+1 failed+1',
          'fail (retry) and bury charge an attempt each, bury dead-letters; a lost fail and release count nothing');

SELECT pg_temp.mark();
BEGIN;
SAVEPOINT s;
SELECT relaybus.fail(lease_token, 'undone') FROM relaybus.claim('cw', 1, '5 minutes', ARRAY['c1']);
ROLLBACK TO s;
COMMIT;
SELECT is(pg_temp.moved(), '', 'a claim and fail rolled back to a savepoint count nothing');

-- p3 (one attempt, backoff 0) and p5 are due again; max_attempts 2: p3's next fail is its last.
SELECT pg_temp.mark();
SELECT is((SELECT array_agg(relaybus.fail(lease_token, 'boom again') ORDER BY event_id)
             FROM relaybus.claim('cw', 10, '5 minutes', ARRAY['c1'])),
          ARRAY['dead', 'retry'], 'claim p3 and p5 again and fail both: p3 dead, p5 retry');
SELECT is(pg_temp.moved(), 'attempts_charged+2 claimed+2 dead_lettered+1 failed+2',
          'fail to the end of the budget dead-letters');

-- Takeovers, counted from before the claim: whoever takes the lanes over (this call or a
-- background worker) counts. c2 has p1 pending; c3 dies at its first lost attempt.
SELECT relaybus.subscribe('c3', ARRAY['c.three'], max_attempts => 1);
SELECT relaybus.publish('c.three', '{}', key => 'ka', event_id => 't1');
SELECT relaybus.publish('c.three', '{}', key => 'kb', event_id => 't2');
SELECT pg_temp.mark();
SELECT is((SELECT count(*)::int FROM relaybus.claim('tw', 10, '10 milliseconds', ARRAY['c3'])), 2,
          'a short lease on t1 and t2 (two lanes)');
SELECT pg_sleep(0.05);
SELECT relaybus.take_over_expired();
SELECT is(pg_temp.moved(), 'attempts_charged+2 claimed+2 dead_lettered+2 taken_over+2',
          'take_over_expired: two lanes taken over, two attempts charged, both dead at max_attempts 1');

SELECT pg_temp.mark();
SELECT is((SELECT count(*)::int FROM relaybus.claim('tw1', 10, '10 milliseconds', ARRAY['c2'])), 1,
          'a short lease on c2''s p1');
SELECT pg_sleep(0.05);
SELECT is((SELECT count(*)::int FROM relaybus.claim('tw2', 10, '5 minutes', ARRAY['c2'])), 1,
          'another worker claims p1 again');
SELECT is(pg_temp.moved(), 'attempts_charged+1 claimed+2 taken_over+1',
          'claim: the expired lane it takes over and the attempt it charges count');

--------------------------------------------------------------------------------
-- reset_counters()
--------------------------------------------------------------------------------
CREATE TEMP TABLE rb_reset_at AS SELECT relaybus.reset_counters() AS at;
SELECT is((SELECT array_agg(DISTINCT value) FROM relaybus.counters()), ARRAY[0::bigint],
          'reset_counters: every counter is 0');
SELECT is((SELECT array_agg(DISTINCT since) FROM relaybus.counters()), (SELECT array_agg(at) FROM rb_reset_at),
          'reset_counters: since is the time it returned');
SELECT relaybus.publish('c.t', '{}', event_id => 'after-reset');
SELECT is((SELECT value FROM relaybus.counters() WHERE name = 'published'), 1::bigint,
          'after a reset the counters count again from 0');

--------------------------------------------------------------------------------
-- Privileges: admin only
--------------------------------------------------------------------------------
SET ROLE rbtest_p27_worker;
SELECT throws_ok('SELECT * FROM relaybus.counters()', '42501', NULL, 'worker role: counters() is refused');
SELECT throws_ok('SELECT * FROM relaybus.metrics()', '42501', NULL, 'worker role: metrics() is refused');
RESET ROLE;
SET ROLE rbtest_p27_publisher;
SELECT throws_ok('SELECT relaybus.reset_counters()', '42501', NULL, 'publisher role: reset_counters() is refused');
RESET ROLE;
SET ROLE rbtest_p27_admin;
SELECT lives_ok('SELECT * FROM relaybus.metrics(); SELECT * FROM relaybus.counters()',
                'admin role: metrics() and counters() work');
RESET ROLE;

SELECT * FROM finish();
SELECT rb_reset();
DROP OWNED BY rbtest_p27_worker;
DROP ROLE rbtest_p27_worker;
DROP OWNED BY rbtest_p27_publisher;
DROP ROLE rbtest_p27_publisher;
DROP OWNED BY rbtest_p27_admin;
DROP ROLE rbtest_p27_admin;
