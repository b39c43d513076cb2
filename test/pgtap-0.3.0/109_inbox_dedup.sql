-- Guarantee: inbox deduplication (test/pgtap/09_inbox_dedup.sql on 0.3.0). An event id
-- published twice (a broker redelivery, a publish retry) adds nothing, before or after its
-- delivery completed: events.handlers remembers every handler the event ever had, so a
-- completed delivery is never recreated and the handler never runs twice. A repeat adds
-- deliveries only for handlers the event never had. Counting events, deliveries, lane
-- positions and claimable rows after each repeat makes any duplicate (or a lost addition)
-- fail.
--
-- How 0.3.0 stores it: a completion deletes no delivery row (its lane's cursor passes it),
-- so "the completed delivery is deleted" of 0.2 is "it is finished: list_deliveries no
-- longer lists it", and the delivery rows are counted including finished ones. There is no
-- key counter: a repeat that took a key sequence in 0.2 would take a position in the
-- key's lane here.
SELECT rb_reset();
SELECT plan(32);

SELECT relaybus.subscribe('h1', ARRAY['order.paid']);

SELECT is(relaybus.publish('order.paid', '{"v": 1}', 'cust-9', 'msg-1'), 'msg-1', 'first publish of msg-1');
SELECT is(relaybus.publish('order.paid', '{"v": 2}', 'cust-9', 'msg-1'), 'msg-1',
          'the repeat returns the same id');
SELECT is((SELECT count(*)::int FROM relaybus.events), 1, 'still one event');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 1, 'still one delivery');
SELECT is((SELECT max(position)::int FROM relaybus.deliveries WHERE lane = relaybus.lane_of('cust-9')), 1,
          'the repeat did not take a position in the key''s lane (0.2: a key sequence)');
SELECT is((SELECT payload FROM relaybus.events WHERE id = 'msg-1'), '{"v": 1}'::jsonb,
          'the stored event is the first one');
SELECT results_eq($$SELECT * FROM relaybus.publish_batch('[{"type": "order.paid", "id": "msg-1"}]')$$,
                  $$VALUES ('msg-1')$$, 'a repeat through publish_batch');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 1, 'publish_batch added nothing either');

-- Handled once; the delivery is finished; a redelivery after that does not run it again.
CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['h1']);
SELECT results_eq('SELECT event_id, handler FROM c1', $$VALUES ('msg-1', 'h1')$$, 'claimed once');
SELECT ok(relaybus.complete((SELECT lease_token FROM c1)), 'completed');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0,
          'the completed delivery is finished (0.3.0: its row stays, below its lane''s cursor)');
SELECT is(relaybus.publish('order.paid', '{"v": 3}', 'cust-9', 'msg-1'), 'msg-1', 'redelivery after completion');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 1, 'the redelivery created no delivery');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0, 'and nothing unfinished');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', NULL)), 0,
          'so the handler does not run again');
SELECT is((SELECT handlers FROM relaybus.events WHERE id = 'msg-1'), ARRAY['h1'],
          'the event remembers its handler');

-- A repeat naming an additional handler adds a delivery for that handler only, in the
-- stored event's key (not the repeat's).
SELECT relaybus.subscribe('h2', ARRAY['order.paid']);
SELECT is(relaybus.publish('order.paid', '{}', 'someone-else', 'msg-1', ARRAY['h1', 'h2']), 'msg-1',
          'repeat naming h1 and h2');
SELECT results_eq($$SELECT handler, key, lane FROM relaybus.deliveries WHERE handler <> 'h1'$$,
                  $$VALUES ('h2', 'cust-9', relaybus.lane_of('cust-9'))$$,
                  'only h2 got a delivery, with the stored key and its lane');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE handler = 'h1'), 1, 'h1 got none');
SELECT is((SELECT handlers FROM relaybus.events WHERE id = 'msg-1' ), ARRAY['h1', 'h2'],
          'the event now remembers both handlers');
SELECT results_eq($$SELECT event_id, handler FROM relaybus.claim('w', 10, '30 seconds', NULL)$$,
                  $$VALUES ('msg-1', 'h2')$$, 'only h2 runs');
SELECT relaybus.publish('order.paid', '{}', 'cust-9', 'msg-1');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 2,
          'a repeat to every subscriber (h1, h2) adds nothing while h2 is in flight');

-- A new subscriber of the type is a handler the event never had: a repeat adds it.
SELECT relaybus.subscribe('h3', ARRAY['*']);
SELECT relaybus.publish('order.paid', '{}', 'cust-9', 'msg-1');
SELECT bag_eq($$SELECT handler FROM relaybus.list_deliveries()$$, $$VALUES ('h2'), ('h3')$$,
              'a repeat after h3 subscribed adds h3 only');
SELECT relaybus.publish('order.paid', '{}', 'cust-9', 'msg-1');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 3, 'and repeating again adds nothing');

-- A dead letter is not resurrected by a redelivery either.
SELECT relaybus.publish('order.paid', '{}', NULL, 'msg-2', ARRAY['h1']);
SELECT ok(relaybus.bury((SELECT lease_token FROM relaybus.claim('w-dead', 10, '30 seconds', ARRAY['h1']))),
          'msg-2 is dead-lettered');
CREATE TEMP TABLE dead_before AS SELECT * FROM relaybus.exceptions WHERE event_id = 'msg-2';
SELECT relaybus.publish('order.paid', '{}', NULL, 'msg-2', ARRAY['h1']);
SELECT results_eq($$SELECT status, attempts FROM relaybus.list_deliveries() WHERE event_id = 'msg-2'$$,
                  $$VALUES ('dead', 1)$$, 'the redelivery left the dead letter as it was');
SELECT set_eq($$SELECT * FROM relaybus.exceptions WHERE event_id = 'msg-2'$$, 'SELECT * FROM dead_before',
              'its exception row unchanged, and no second delivery');
SELECT is((SELECT count(*)::int FROM relaybus.events), 2, 'two distinct event ids, two events');

-- Two concurrent deliveries of one message id: the second publisher waits for the first
-- (the event row) and then adds nothing (no unique violation, no second delivery).
SELECT rb_connect('x');
SELECT rb_connect('y');
SELECT dblink_exec('x', 'BEGIN');
SELECT * FROM dblink('x', $$SELECT relaybus.publish('order.paid', '{}', NULL, 'msg-3', ARRAY['h1'])$$) AS t(id text);
SELECT is(dblink_send_query('y', $$SELECT relaybus.publish('order.paid', '{}', NULL, 'msg-3', ARRAY['h1'])$$),
          1, 'a concurrent publish of the same id is sent');
SELECT pg_sleep(0.1);
SELECT dblink_exec('x', 'COMMIT');
SELECT results_eq($$SELECT id FROM dblink_get_result('y', false) AS t(id text)$$, $$VALUES ('msg-3')$$,
                  'the concurrent repeat succeeds and returns the id');
SELECT is((SELECT count(*)::int FROM dblink_get_result('y', false) AS t(id text)), 0, 'y has no further result');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'msg-3'), 1,
          'one delivery for the concurrently repeated message');
SELECT dblink_disconnect('x');
SELECT dblink_disconnect('y');

SELECT * FROM finish();
