-- Guarantee: atomic publish (test/pgtap/01_atomic_publish.sql on 0.3.0). relaybus.publish
-- writes the event in the caller's transaction and stages its deliveries until that
-- transaction commits, so a rollback leaves nothing behind: no event, no delivery, no
-- position taken in any lane, nothing claimable, and the event id stays free. If publish
-- wrote through another transaction (or committed early), the counts taken after ROLLBACK
-- would not be zero and the key's next delivery would not be at position 1 of its lane.
--
-- What 0.3.0 changes by design (docs/upgrading.md, "From 0.2.1 to 0.3.0"): a transaction
-- does not see its own deliveries (they are written at commit), and there are no key
-- counters: a key's order is its lane's positions. So "inside the transaction every
-- delivery exists" becomes "inside the transaction its events exist and none of its
-- deliveries is written yet", and "no key counter advanced" becomes "no lane position was
-- taken".
SELECT rb_reset();
SELECT plan(23);

SELECT relaybus.subscribe('audit', ARRAY['order.created']);
SELECT relaybus.subscribe('mailer', ARRAY['order.created']);

-- Every delivery not finished yet (pending, in flight or dead), as 0.2's delivery rows were.
CREATE FUNCTION pg_temp.unfinished() RETURNS int LANGUAGE sql AS $$
  SELECT count(*)::int FROM relaybus.list_deliveries(NULL, NULL, 1000000)
$$;

-- A rolled-back publish in this session: inside the transaction its events are there.
BEGIN;
SELECT relaybus.publish('order.created', '{"n": 1}', 'cust-1', 'ev-rolled') AS rolled_id \gset
SELECT relaybus.publish('order.created', '{"n": 2}', 'cust-1', 'ev-rolled-2');
SELECT (SELECT count(*) FROM relaybus.events) AS in_tx_events,
       (SELECT count(*) FROM relaybus.deliveries) AS in_tx_deliveries,
       (SELECT count(*) FROM relaybus.lane_state WHERE acked_upto <> 0 OR done <> '{}' OR in_flight <> '{}')
         AS in_tx_lanes_moved \gset
ROLLBACK;

SELECT is(:'rolled_id'::text, 'ev-rolled', 'publish returns the given event id');
SELECT is(:in_tx_events::int, 2, 'inside the transaction both events exist');
-- 0.3.0: the deliveries are staged until commit; 0.2 showed 4 rows here.
SELECT is(:in_tx_deliveries::int, 0,
          'inside the transaction no delivery is written yet (0.3.0: they are written at commit)');
-- 0.3.0: no key counter; the key's position is taken only at commit.
SELECT is(:in_tx_lanes_moved::int, 0, 'inside the transaction no lane moved (0.3.0 has no key counter)');

SELECT is((SELECT count(*)::int FROM relaybus.events), 0, 'after rollback: no event');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 0, 'after rollback: no delivery');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions), 0, 'after rollback: no exception row (0.2: no key counter)');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['audit', 'mailer'])),
          0, 'after rollback: nothing is claimable');
SELECT is((SELECT sum(pending + processing + dead)::int FROM relaybus.statistics()), 0,
          'after rollback: statistics count nothing');

-- A transaction that fails part-way (its second publish names an unknown handler) loses
-- its first publish too. throws_ok runs the block in a subtransaction that the error
-- rolls back, exactly like a failing application transaction.
SELECT throws_ok(
  $q$DO $do$ BEGIN
      PERFORM relaybus.publish('order.created', '{}', 'cust-2', 'ev-partial');
      PERFORM relaybus.publish('order.created', '{}', 'cust-2', 'ev-bad', ARRAY['nobody']);
    END $do$$q$,
  '42704', NULL, 'publishing to an unknown handler raises 42704');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id IN ('ev-partial', 'ev-bad')), 0,
          'failed transaction: neither the earlier nor the failing publish left an event');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries) + (SELECT count(*)::int FROM relaybus.exceptions),
          0, 'failed transaction: no delivery and no exception row (0.2: no key counter)');

-- A publish in another connection that rolls back: invisible while open, gone afterwards.
SELECT rb_connect('pub');
SELECT dblink_exec('pub', 'BEGIN');
SELECT * FROM dblink('pub', $$SELECT relaybus.publish('order.created', '{}', 'cust-3', 'ev-remote')$$)
  AS t(id text);
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'ev-remote'), 0,
          'an uncommitted publish of another transaction is not visible');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['audit', 'mailer'])),
          0, 'an uncommitted publish of another transaction is not claimable');
SELECT dblink_exec('pub', 'ROLLBACK');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'ev-remote'), 0,
          'remote rollback: no event');
-- 0.2 checked the key counter of cust-3; 0.3.0 has none: no delivery was written in its lane.
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE lane = relaybus.lane_of('cust-3')), 0,
          'remote rollback: no position taken in the key''s lane');

-- publish_batch is just as atomic.
BEGIN;
SELECT relaybus.publish_batch('[{"type": "order.created", "key": "cust-4", "id": "b1"},
                                {"type": "order.created", "key": "cust-4", "id": "b2"}]');
ROLLBACK;
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id IN ('b1', 'b2')), 0,
          'a rolled-back publish_batch leaves no event');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 0,
          'a rolled-back publish_batch leaves no delivery');

-- The rolled-back ids and keys are free: a committed publish reuses them as new events,
-- and the key's lane starts at position 1 (the rolled-back publishes took no position;
-- 0.2 checked the key counter and the deliveries' sequence 1).
SELECT relaybus.publish('order.created', '{"n": 3}', 'cust-1', 'ev-rolled');
SELECT is((SELECT max(position)::int FROM relaybus.deliveries WHERE lane = relaybus.lane_of('cust-1')), 1,
          'the key''s lane was not advanced by the rolled-back publishes');
SELECT bag_eq(
  $$SELECT handler, position::int FROM relaybus.deliveries WHERE event_id = 'ev-rolled'$$,
  $$VALUES ('audit', 1), ('mailer', 1)$$,
  'a rolled-back event id is published again as a new event with every handler');
SELECT is((SELECT payload FROM relaybus.events WHERE id = 'ev-rolled'), '{"n": 3}'::jsonb,
          'the committed event carries the committed payload, not the rolled-back one');

-- A committed publish is all there: the event and every delivery, claimable.
SELECT bag_eq(
  $$SELECT event_id, handler FROM relaybus.claim('w', 10, '30 seconds', ARRAY['audit', 'mailer'])$$,
  $$VALUES ('ev-rolled', 'audit'), ('ev-rolled', 'mailer')$$,
  'the committed publish is claimable for each handler');
SELECT is(pg_temp.unfinished(), 2, 'and both deliveries are listed as not finished');

SELECT dblink_disconnect('pub');
SELECT * FROM finish();
