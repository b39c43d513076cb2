-- Guarantee: never lose an event (test/pgtap/02_never_lose.sql on 0.3.0). A delivery stays
-- unfinished from publish until its handler's completion commits; a claim writes only the
-- lane. A worker that vanishes mid-batch (short lease, never completes) leaves its
-- deliveries unfinished, and once its lane lease expires another worker's claim, or
-- take_over_expired(), gets them again. If a claim finished or hid deliveries, or an
-- expired lane were never taken over, the sets compared below would be missing events.
--
-- How 0.3.0 stores it: a delivery row is never deleted by the delivery path; its lane's
-- cursor (acked_upto, done) says whether it finished, and a takeover's charge moves an
-- in-flight position to an exception row (relaybus.exceptions). "Still a pending row" of
-- 0.2 is therefore "listed by list_deliveries as pending or processing", and "nothing is
-- left" is "list_deliveries lists nothing".
SELECT rb_reset();
SELECT plan(21);

SELECT relaybus.subscribe('billing', ARRAY['invoice.issued']);

-- Every delivery not finished yet: event, handler, status (pending, processing, dead), attempts.
CREATE FUNCTION pg_temp.unfinished()
  RETURNS TABLE(event_id text, handler text, status text, attempts int) LANGUAGE sql AS $$
  SELECT event_id, handler, status, attempts FROM relaybus.list_deliveries(NULL, NULL, 1000000)
$$;

-- Six events: three on one key (ordered, one at a time), three without a key.
SELECT relaybus.publish('invoice.issued', jsonb_build_object('n', n), key, 'inv-' || n)
  FROM (VALUES (1, 'acct-1'), (2, 'acct-1'), (3, 'acct-1'), (4, NULL), (5, NULL), (6, NULL))
       AS p(n, key);
CREATE TEMP TABLE published AS SELECT event_id FROM relaybus.deliveries;

-- The worker that vanishes: claims with a short lease and never completes.
CREATE TEMP TABLE doomed AS
  SELECT * FROM relaybus.claim('doomed', 10, '250 ms', ARRAY['billing']);
SELECT bag_eq('SELECT event_id FROM doomed',
              $$VALUES ('inv-1'), ('inv-4'), ('inv-5'), ('inv-6')$$,
              'the doomed worker got the head of the key and every unkeyed event');
-- 0.2: "all six rows are still pending". 0.3.0: all six are unfinished, none dead, no
-- exception row written by the claim.
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished() WHERE status IN ('pending', 'processing'))
          + (SELECT count(*)::int FROM relaybus.exceptions), 6,
          'claiming finished and dead-lettered nothing: all six deliveries are unfinished, no exception row');
SELECT is((SELECT count(*)::int FROM relaybus.claim('rescuer', 10, '30 seconds', ARRAY['billing'])),
          0, 'while the lease is live nobody else gets the doomed worker''s lanes');

SELECT pg_sleep(0.45);  -- past the lease: a claim leases for up to 1.5 x lease

-- Another worker's claim takes the expired lanes over and gets every delivery back.
CREATE TEMP TABLE rescued AS
  SELECT * FROM relaybus.claim('rescuer', 10, '30 seconds', ARRAY['billing']);
SELECT set_eq('SELECT event_id FROM rescued', 'SELECT event_id FROM doomed',
              'after the lease expired the rescuer gets exactly the doomed batch again');
SELECT ok((SELECT bool_and(attempts = 1) FROM rescued),
          'each redelivered delivery reports the one attempt the crash cost');
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE lease_owner = 'doomed'), 0,
          'the doomed worker holds no lane any more');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM doomed)), 0,
          'the vanished worker''s tokens complete nothing');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM rescued)), 4,
          'the rescuer completes the whole batch');

-- The rest of the key follows in order; drain and compare with what was published.
CREATE TEMP TABLE handled (event_id text, n serial);
INSERT INTO handled (event_id) SELECT event_id FROM rescued ORDER BY event_id;
DO $$
DECLARE
  c record;
  rounds int := 0;
BEGIN
  LOOP
    rounds := rounds + 1;
    EXIT WHEN rounds > 20;
    FOR c IN SELECT * FROM relaybus.claim('rescuer', 10, '30 seconds', ARRAY['billing']) LOOP
      INSERT INTO handled (event_id) VALUES (c.event_id);
      IF NOT relaybus.complete(c.lease_token) THEN
        RAISE EXCEPTION 'complete of % failed', c.event_id;
      END IF;
    END LOOP;
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_temp.unfinished());
  END LOOP;
END
$$;
SELECT set_eq('SELECT event_id FROM handled', 'SELECT event_id FROM published',
              'every published event was handled: nothing is missing');
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished()), 0, 'nothing is left pending or dead');
SELECT results_eq(
  $$SELECT event_id FROM handled WHERE event_id IN ('inv-1', 'inv-2', 'inv-3') ORDER BY n$$,
  $$VALUES ('inv-1'), ('inv-2'), ('inv-3')$$,
  'the keyed events were handled in order across the crash');

-- The same through take_over_expired() (what the background worker runs): the expired
-- lane is freed with its epoch bumped and its delivery charged, then anybody can claim it.
SELECT relaybus.publish('invoice.issued', '{}', NULL, 'inv-7');
CREATE TEMP TABLE doomed2 AS
  SELECT * FROM relaybus.claim('doomed-2', 10, '150 ms', ARRAY['billing']);
SELECT is((SELECT count(*)::int FROM doomed2), 1, 'a second doomed worker claims inv-7');
SELECT relaybus.lane_of('inv-7') AS lane7 \gset
SELECT epoch AS epoch_before FROM relaybus.lanes WHERE handler = 'billing' AND lane = :lane7 \gset
SELECT pg_sleep(0.3);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT relaybus.take_over_expired();
-- 0.3.0: the lane also runs retries (retrying); both lists are emptied.
SELECT row_eq(
  format('SELECT lease_owner, in_flight, retrying, epoch FROM relaybus.lane_state WHERE handler = %L AND lane = %s',
         'billing', :lane7),
  ROW(NULL::text, '{}'::bigint[], '{}'::bigint[], :epoch_before::bigint + 1),
  'take_over_expired freed the lane, cleared its in-flight lists and bumped its epoch');
-- 0.2: the delivery row, pending with attempts 1. 0.3.0: its exception row carries the charge.
SELECT row_eq($$SELECT status, attempts FROM relaybus.exceptions WHERE event_id = 'inv-7'$$,
              ROW('pending'::text, 1),
              'the delivery is still pending (an exception row), charged one attempt');
CREATE TEMP TABLE rescued2 AS
  SELECT * FROM relaybus.claim('rescuer-2', 10, '30 seconds', ARRAY['billing']);
SELECT results_eq('SELECT event_id, attempts FROM rescued2', $$VALUES ('inv-7', 1)$$,
                  'another worker claims it again at once');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM doomed2)),
          'the vanished worker''s token is fenced off');
SELECT ok(relaybus.complete((SELECT lease_token FROM rescued2)), 'the new holder completes it');
SELECT is((SELECT count(*)::int FROM pg_temp.unfinished()), 0, 'nothing left');

-- A delivery whose event row is gone (deleted behind relaybus's back) must not sit pending
-- where no claim ever returns it: the claim that picks it fails loudly, and nothing moves.
SELECT relaybus.subscribe('orphans', ARRAY['orphan.t']);
SELECT relaybus.publish('orphan.t', '{}', NULL, 'orphan-1');
DELETE FROM relaybus.events WHERE id = 'orphan-1';
-- A lane is its lease row and its progress (lane_state, with the newest progress seq).
CREATE TEMP TABLE orphan_lanes AS SELECT * FROM relaybus.lane_state WHERE handler = 'orphans';
SELECT throws_ok($$SELECT * FROM relaybus.claim('w-orphan', 10, '30 seconds', ARRAY['orphans'])$$,
                 'XX000', 'relaybus: a claimed delivery has no event',
                 'claiming a delivery whose event is gone raises XX000');
SELECT results_eq($$SELECT status, attempts FROM pg_temp.unfinished() WHERE event_id = 'orphan-1'$$,
                  $$VALUES ('pending'::text, 0)$$, 'the delivery is still there, untouched');
-- 0.3.0: "untouched" is also its lane (no lease, no position in flight) and no exception row.
SELECT ok((SELECT count(*) = 0 FROM relaybus.exceptions WHERE event_id = 'orphan-1')
          AND (SELECT count(*) = 0 FROM (SELECT * FROM relaybus.lane_state WHERE handler = 'orphans'
                                         EXCEPT SELECT * FROM orphan_lanes) s),
          'its lane is as it was and no exception row was written');

SELECT * FROM finish();
