-- Guarantee: at-least-once (test/pgtap/05_at_least_once.sql on 0.3.0). Every published
-- (event, handler) delivery is handled at least once, even when a worker crashes holding
-- part of the backlog: its lanes expire, are taken over, and everything it had in flight
-- runs again. Completion is the only thing that finishes a delivery: release, fail,
-- takeover, bury and a fenced complete leave it unfinished. The handled set is compared
-- with the published set, and the unfinished count is checked after each non-completing
-- step, so a lost or wrongly finished delivery fails a test.
--
-- How 0.3.0 stores it: no delivery row is ever deleted by the delivery path (a completion
-- moves its lane's cursor); "a row is left" of 0.2 is "list_deliveries lists it", and the
-- delivery rows themselves are checked to stay (16 of them) as well.
SELECT rb_reset();
SELECT plan(25);

SELECT relaybus.subscribe('h1', ARRAY['ping']);
SELECT relaybus.subscribe('h2', ARRAY['ping']);

-- Every delivery not finished yet.
CREATE FUNCTION pg_temp.unfinished()
  RETURNS TABLE(event_id text, handler text, status text, attempts int) LANGUAGE sql AS $$
  SELECT event_id, handler, status, attempts FROM relaybus.list_deliveries(NULL, NULL, 1000000)
$$;

-- 8 events x 2 handlers = 16 deliveries: two ordered keys and three unkeyed events.
SELECT relaybus.publish('ping', jsonb_build_object('n', n), key, 'p' || n)
  FROM (VALUES (1, 'k1'), (2, 'k1'), (3, 'k1'), (4, 'k2'), (5, 'k2'),
               (6, NULL), (7, NULL), (8, NULL)) AS p(n, key);
CREATE TEMP TABLE published AS SELECT event_id, handler FROM relaybus.deliveries;
SELECT is((SELECT count(*)::int FROM published), 16, '16 deliveries published');

CREATE TEMP TABLE handled (event_id text, handler text, attempts int);
CREATE FUNCTION pg_temp.drain(worker text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  c record;
  n int := 0;
  got int;
BEGIN
  FOR round IN 1 .. 50 LOOP
    got := 0;
    FOR c IN SELECT * FROM relaybus.claim(worker, 3, '30 seconds', ARRAY['h1', 'h2']) LOOP
      got := got + 1;
      IF relaybus.complete(c.lease_token) THEN
        INSERT INTO handled VALUES (c.event_id, c.handler, c.attempts);
        n := n + 1;
      END IF;
    END LOOP;
    EXIT WHEN got = 0;
  END LOOP;
  RETURN n;
END
$$;

-- A worker crashes holding 5 deliveries (short lease, never completes).
CREATE TEMP TABLE crashed AS
  SELECT * FROM relaybus.claim('crashy', 5, '250 ms', ARRAY['h1', 'h2']);
SELECT is((SELECT count(*)::int FROM crashed), 5, 'the crashing worker took 5 deliveries');

-- A healthy worker drains everything it can reach meanwhile.
SELECT pg_temp.drain('good') AS drained_first \gset
SELECT ok(:drained_first > 0, 'the healthy worker handled the deliveries it could reach');
SELECT is((SELECT count(*)::int FROM handled h JOIN crashed c USING (event_id, handler)), 0,
          'none of the crashed worker''s in-flight deliveries ran while its lease was live');
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished()), 16 - :drained_first,
          'only completions finished deliveries: 16 minus the completed ones are left');
SELECT set_eq(
  'SELECT event_id, handler FROM pg_temp.unfinished() UNION ALL SELECT event_id, handler FROM handled',
  'SELECT event_id, handler FROM published',
  'every delivery is either handled or still unfinished');
SELECT ok((SELECT bool_and(status IN ('pending', 'processing')) FROM pg_temp.unfinished()),
          'what is left is pending or in flight, not dead');

SELECT pg_sleep(0.45);  -- past the lease: a claim leases for up to 1.5 x lease

-- After the lease expired the healthy worker takes the lanes over and finishes the rest.
SELECT pg_temp.drain('good') AS drained_second \gset
SELECT is(:drained_first + :drained_second, 16, 'in total every delivery was completed once');
SELECT set_eq('SELECT event_id, handler FROM handled', 'SELECT event_id, handler FROM published',
              'the handled set equals the published set');
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished()), 0, 'no delivery is left');
SELECT set_eq($$SELECT h.event_id, h.handler, h.attempts FROM handled h JOIN crashed c USING (event_id, handler)$$,
              $$SELECT event_id, handler, 1 FROM crashed$$,
              'the crashed deliveries ran again, each charged the one lost attempt');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM crashed)), 0,
          'the crashed worker''s tokens complete nothing');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 16,
          '0.3.0: every delivery row is still there; the lanes'' cursors say they finished');

-- Completion is the only thing that finishes a delivery.
SELECT relaybus.publish('ping', '{}', NULL, 'solo', ARRAY['h1']);
SELECT ok(relaybus.release((SELECT lease_token FROM relaybus.claim('w', 1, '30 seconds', ARRAY['h1']))),
          'release');
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished() WHERE event_id = 'solo'), 1,
          'release keeps the delivery');
SELECT is(relaybus.fail((SELECT lease_token FROM relaybus.claim('w', 1, '30 seconds', ARRAY['h1'])),
                        'err', now()), 'retry', 'fail');
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished() WHERE event_id = 'solo'), 1,
          'fail keeps the delivery');
SELECT relaybus.relinquish('w');
CREATE TEMP TABLE lost AS SELECT * FROM relaybus.claim('w-lost', 1, '150 ms', ARRAY['h1']);
SELECT results_eq('SELECT event_id FROM lost', $$VALUES ('solo')$$, 'a worker that will vanish claims it');
SELECT pg_sleep(0.3);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT relaybus.take_over_expired();
SELECT results_eq($$SELECT status, attempts FROM pg_temp.unfinished() WHERE event_id = 'solo'$$,
                  $$VALUES ('pending', 2)$$, 'a takeover keeps the delivery (charged, still pending)');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM lost)), 'the fenced token cannot complete');
SELECT ok(relaybus.bury((SELECT lease_token FROM relaybus.claim('w', 1, '30 seconds', ARRAY['h1']))),
          'bury');
SELECT results_eq($$SELECT status FROM pg_temp.unfinished() WHERE event_id = 'solo'$$,
                  $$VALUES ('dead')$$, 'bury keeps the delivery, as a dead letter');
SELECT ok(relaybus.requeue('solo', 'h1'), 'requeue');
SELECT ok(relaybus.complete((SELECT lease_token FROM relaybus.claim('w', 1, '30 seconds', ARRAY['h1']))),
          'complete');
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished() WHERE event_id = 'solo'), 0,
          'completion finished the delivery');

SELECT * FROM finish();
