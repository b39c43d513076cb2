-- Guarantee: atomic publish. relaybus.publish writes the event, its deliveries and the
-- key counter in the caller's transaction, so a rollback leaves nothing behind: no event,
-- no delivery, no advanced key counter, nothing claimable, and the event id stays free.
-- If publish wrote through another transaction (or committed early), the counts taken
-- after ROLLBACK would not be zero and the next sequence of the key would not be 1.
SELECT rb_reset();
SELECT plan(22);

SELECT relaybus.subscribe('audit', ARRAY['order.created']);
SELECT relaybus.subscribe('mailer', ARRAY['order.created']);

-- A rolled-back publish in this session: inside the transaction everything is there.
BEGIN;
SELECT relaybus.publish('order.created', '{"n": 1}', 'cust-1', 'ev-rolled') AS rolled_id \gset
SELECT relaybus.publish('order.created', '{"n": 2}', 'cust-1', 'ev-rolled-2');
SELECT (SELECT count(*) FROM relaybus.events) AS in_tx_events,
       (SELECT count(*) FROM relaybus.deliveries) AS in_tx_deliveries,
       (SELECT last_sequence FROM relaybus.key_counters WHERE key = 'cust-1') AS in_tx_sequence \gset
ROLLBACK;

SELECT is(:'rolled_id'::text, 'ev-rolled', 'publish returns the given event id');
SELECT is(:in_tx_events::int, 2, 'inside the transaction both events exist');
SELECT is(:in_tx_deliveries::int, 4, 'inside the transaction one delivery per (event, handler) exists');
SELECT is(:in_tx_sequence::int, 2, 'inside the transaction the key counter advanced twice');

SELECT is((SELECT count(*)::int FROM relaybus.events), 0, 'after rollback: no event');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 0, 'after rollback: no delivery');
SELECT is((SELECT count(*)::int FROM relaybus.key_counters), 0, 'after rollback: no key counter');
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
SELECT is((SELECT count(*)::int FROM relaybus.deliveries) + (SELECT count(*)::int FROM relaybus.key_counters),
          0, 'failed transaction: no delivery and no key counter');

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
SELECT is((SELECT count(*)::int FROM relaybus.key_counters WHERE key = 'cust-3'), 0,
          'remote rollback: no key counter');

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
-- and the key starts again at sequence 1 (the rolled-back increments never happened).
SELECT relaybus.publish('order.created', '{"n": 3}', 'cust-1', 'ev-rolled');
SELECT is((SELECT last_sequence::int FROM relaybus.key_counters WHERE key = 'cust-1'), 1,
          'the key counter was not advanced by the rolled-back publishes');
SELECT bag_eq(
  $$SELECT handler, sequence::int FROM relaybus.deliveries WHERE event_id = 'ev-rolled'$$,
  $$VALUES ('audit', 1), ('mailer', 1)$$,
  'a rolled-back event id is published again as a new event with every handler');
SELECT is((SELECT payload FROM relaybus.events WHERE id = 'ev-rolled'), '{"n": 3}'::jsonb,
          'the committed event carries the committed payload, not the rolled-back one');

-- A committed publish is all there: the event and every delivery, claimable.
SELECT bag_eq(
  $$SELECT event_id, handler FROM relaybus.claim('w', 10, '30 seconds', ARRAY['audit', 'mailer'])$$,
  $$VALUES ('ev-rolled', 'audit'), ('ev-rolled', 'mailer')$$,
  'the committed publish is claimable for each handler');

SELECT dblink_disconnect('pub');
SELECT * FROM finish();
