-- Port of test/pgtap/28_pause_cancel.sql to relaybus 0.3.0: pause, resume and cancel are
-- 0.2.1's API, so every guarantee is 0.2's. What changes is what a cancel leaves: 0.2
-- deleted the delivery; 0.3.0 finishes its position (the lane's cursor moves over it; an
-- exception row would be deleted), so the delivery row stays, below the cursor, and is no
-- longer listed by list_deliveries. "Nothing changed" for a refused cancel is checked on
-- the lane row (its version) and list_deliveries (0.2: deliveries.status).
--
-- Guarantees: a paused handler's deliveries are published and kept, and no claim hands
-- them out (asked for by name or not), while other handlers go on; resume hands them out
-- again and notifies; statistics() and metrics() show the pause. cancel removes a pending
-- or dead delivery (freeing its key), refuses one in flight with 55006 and changes nothing
-- then, records outcome 'cancelled' in the history when it is on (not counted as
-- completed), and returns false for no delivery; a REPEATABLE READ claim whose snapshot
-- predates a cancel fails with 40001 rather than hand out the deleted delivery. Bad input and privileges: 22004, 42704,
-- and only the admin right may call the three.
SELECT rb_reset();
SELECT plan(49);

SET client_min_messages = warning;
DROP ROLE IF EXISTS rbtest_p28_worker;
DROP ROLE IF EXISTS rbtest_p28_admin;
RESET client_min_messages;
CREATE ROLE rbtest_p28_worker;
SELECT FROM relaybus.grant_rights('rbtest_p28_worker', 'worker');
CREATE ROLE rbtest_p28_admin;
SELECT FROM relaybus.grant_rights('rbtest_p28_admin', 'admin');

SELECT relaybus.subscribe('p1', ARRAY['p.t']);
SELECT relaybus.subscribe('p2', ARRAY['p.t']);

--------------------------------------------------------------------------------
-- pause and resume
--------------------------------------------------------------------------------
SELECT is(relaybus.pause('p1'), true, 'pause returns true');
SELECT is(relaybus.pause('p1'), false, 'pausing again returns false');
SELECT isnt((SELECT paused_at FROM relaybus.subscriptions WHERE handler = 'p1'), NULL, 'paused_at is set');
SELECT relaybus.publish('p.t', '{}', key => 'k', event_id => 'pe1');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE handler = 'p1'), 1,
          'publishing to a paused handler keeps its delivery');
SELECT is((SELECT array_agg(handler ORDER BY handler) FROM relaybus.claim('w', 10)), ARRAY['p2'],
          'a claim of every handler skips the paused one, and the other goes on');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, handlers => ARRAY['p1'])), 0,
          'a claim of the paused handler by name hands out nothing, and is no error');
SELECT results_eq($$SELECT handler, paused FROM relaybus.statistics() ORDER BY handler$$,
                  $$VALUES ('p1', true), ('p2', false)$$, 'statistics() shows the pause');
SELECT results_eq($$SELECT handler, paused, pending FROM relaybus.metrics() ORDER BY handler$$,
                  $$VALUES ('p1', true, 1::bigint), ('p2', false, 0::bigint)$$, 'metrics() shows it too');
SELECT relaybus.subscribe('p1', ARRAY['p.t', 'p.u']);
SELECT is((SELECT paused FROM relaybus.statistics() WHERE handler = 'p1'), true, 'a re-subscribe keeps the pause');

SELECT is(relaybus.resume('p1'), true, 'resume returns true');
SELECT is(relaybus.resume('p1'), false, 'resuming again returns false');
SELECT is((SELECT paused_at FROM relaybus.subscriptions WHERE handler = 'p1'), NULL, 'paused_at is cleared');
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('w', 10, handlers => ARRAY['p1'])), ARRAY['pe1'],
          'after resume the delivery is claimed');

SELECT throws_ok($$SELECT relaybus.pause(NULL)$$, '22004', NULL, 'pause(NULL): 22004');
SELECT throws_ok($$SELECT relaybus.resume(NULL)$$, '22004', NULL, 'resume(NULL): 22004');
SELECT throws_ok($$SELECT relaybus.pause('nobody')$$, '42704', 'handler "nobody" is not subscribed',
                 'pause of an unsubscribed handler: 42704');
SELECT throws_ok($$SELECT relaybus.resume('nobody')$$, '42704', NULL, 'resume of an unsubscribed handler: 42704');
SELECT relaybus.pause('p2');
SELECT relaybus.unsubscribe('p2');
SELECT relaybus.subscribe('p2', ARRAY['p.t']);
SELECT is((SELECT paused FROM relaybus.statistics() WHERE handler = 'p2'), false, 'unsubscribe forgets the pause');

--------------------------------------------------------------------------------
-- cancel
--------------------------------------------------------------------------------
SELECT rb_reset();
SELECT relaybus.subscribe('c1', ARRAY['c.t'], max_attempts => 1);
SELECT relaybus.publish('c.t', '{}', key => 'ck', event_id => 'ce1');
SELECT relaybus.publish('c.t', '{}', key => 'ck', event_id => 'ce2');
SELECT is(relaybus.cancel('ce1', 'c1'), true, 'cancel of a pending delivery returns true');
-- (0.2: the row was deleted. 0.3.0: its position is finished, below the lane's cursor.)
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries(handler => 'c1') WHERE event_id = 'ce1'), 0,
          'and it is gone: list_deliveries no longer lists it');
SELECT ok((SELECT d.position <= l.acked_upto FROM relaybus.deliveries d JOIN relaybus.lane_state l USING (handler, lane)
            WHERE d.event_id = 'ce1' AND d.handler = 'c1'),
          'its position is finished: its lane''s cursor moved over it');
SELECT is(relaybus.cancel('ce1', 'c1'), false, 'a second cancel returns false');
SELECT is(relaybus.cancel('nothing', 'c1'), false, 'cancel of no delivery returns false');
CREATE TEMP TABLE tok AS SELECT lease_token, event_id FROM relaybus.claim('w', 10, handlers => ARRAY['c1']);
SELECT is((SELECT array_agg(event_id) FROM tok), ARRAY['ce2'], 'the key''s next delivery no longer waits for the cancelled one');
-- The lane: its lease row's version (ctid, xmin) and its progress (lane_state, with the
-- newest progress seq).
CREATE TEMP TABLE lane_before AS SELECT l.ctid::text AS at, l.xmin::text AS x, s.*
  FROM relaybus.lanes l JOIN relaybus.lane_state s USING (handler, lane)
  WHERE l.handler = 'c1' AND l.lane = relaybus.lane_of('ck');
SELECT throws_ok($$SELECT relaybus.cancel('ce2', 'c1')$$, '55006',
                 'delivery of event "ce2" to handler "c1" is in flight', 'cancel in flight: 55006');
SELECT is((SELECT status FROM relaybus.list_deliveries(handler => 'c1') WHERE event_id = 'ce2'), 'processing',
          'and nothing changed: it is still in flight');
SELECT results_eq($$SELECT l.ctid::text, l.xmin::text, s.* FROM relaybus.lanes l JOIN relaybus.lane_state s USING (handler, lane)
                     WHERE l.handler = 'c1' AND l.lane = relaybus.lane_of('ck')$$,
                  $$SELECT * FROM lane_before$$, '... its lane row is the same version, and its progress has no new row');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions), 0, '... and no exception row was written');
SELECT is((SELECT relaybus.fail(lease_token, 'boom') FROM tok), 'dead', 'it fails into a dead letter');
SET relaybus.completion_history = on;
SELECT is(relaybus.cancel('ce2', 'c1'), true, 'cancel of a dead letter returns true');
SELECT results_eq($$SELECT event_id, handler, attempts, outcome FROM relaybus.completions$$,
                  $$VALUES ('ce2', 'c1', 1, 'cancelled')$$, 'with history on, the cancel is recorded');
SELECT is((SELECT completed FROM relaybus.statistics() WHERE handler = 'c1'), 0::bigint,
          'statistics().completed does not count it');
SELECT is((SELECT status FROM relaybus.list_deliveries('completed', 'c1')), 'cancelled',
          'list_deliveries(''completed'') shows it as cancelled');
RESET relaybus.completion_history;
SELECT throws_ok($$SELECT relaybus.cancel(NULL, 'c1')$$, '22004', NULL, 'cancel(NULL, ...): 22004');

-- 0.3.0: a pending delivery may be an exception row (a retry waiting for its backoff) that
-- holds back the later deliveries of its key (parked, into exception rows of their own).
-- Cancelling it frees the key, as in 0.2; a retry being run is refused with 55006.
SELECT relaybus.subscribe('c2', ARRAY['c2.t'], backoff_base => '1 hour', backoff_max => '1 hour');
SELECT relaybus.publish('c2.t', '{}', key => 'xk', event_id => 'x1');
SELECT relaybus.publish('c2.t', '{}', key => 'xk', event_id => 'x2');
SELECT is((SELECT relaybus.fail(lease_token, 'boom') FROM relaybus.claim('w2', 10, handlers => ARRAY['c2'])), 'retry',
          'x1 fails: a retry in an hour, in an exception row');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2', 10, handlers => ARRAY['c2'])), 0,
          'x2 waits behind it (its key is held back)');
SELECT is(relaybus.cancel('x1', 'c2'), true, 'cancel of the waiting retry returns true');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE event_id = 'x1'), 0, 'its exception row is gone');
CREATE TEMP TABLE tok2 AS SELECT lease_token, event_id FROM relaybus.claim('w2', 10, handlers => ARRAY['c2']);
SELECT is((SELECT array_agg(event_id) FROM tok2), ARRAY['x2'], 'x2 no longer waits for the cancelled x1');
SELECT is((SELECT relaybus.release(lease_token) FROM tok2), true, 'x2 is released: it becomes an exception row, due at once');
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('w2', 10, handlers => ARRAY['c2'])), ARRAY['x2'],
          'and is run again from it (retrying)');
SELECT throws_ok($$SELECT relaybus.cancel('x2', 'c2')$$, '55006', NULL, 'cancel of a retry in flight: 55006');
SELECT is((SELECT status FROM relaybus.list_deliveries(handler => 'c2') WHERE event_id = 'x2'), 'processing',
          'and nothing changed');

-- A claim in REPEATABLE READ with a snapshot from before the cancel committed (the cancel
-- runs in a second session, through dblink): its snapshot still has the delivery, so it
-- must fail on the lane the cancel wrote, not hand the delivery out.
SELECT relaybus.publish('c.t', '{}', event_id => 'rr1');
SELECT rb_connect('c28');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM relaybus.deliveries;  -- takes the snapshot
SELECT is((SELECT ok FROM dblink('c28', $$SELECT relaybus.cancel('rr1', 'c1')$$) AS t(ok boolean)), true,
          'another session cancels rr1 and commits');
SELECT throws_ok($$SELECT * FROM relaybus.claim('rrw', 10, handlers => ARRAY['c1'])$$, '40001', NULL,
                 'the older snapshot''s claim fails with 40001 instead of handing rr1 out');
COMMIT;
SELECT is((SELECT count(*)::int FROM relaybus.claim('rrw', 10, handlers => ARRAY['c1'])), 0,
          'a claim with a new snapshot finds nothing');
SELECT dblink_disconnect('c28');

--------------------------------------------------------------------------------
-- privileges
--------------------------------------------------------------------------------
SET ROLE rbtest_p28_worker;
SELECT throws_ok($$SELECT relaybus.pause('c1')$$, '42501', NULL, 'a worker may not pause');
SELECT throws_ok($$SELECT relaybus.cancel('x', 'c1')$$, '42501', NULL, 'a worker may not cancel');
RESET ROLE;
SET ROLE rbtest_p28_admin;
SELECT lives_ok($$SELECT relaybus.pause('c1'), relaybus.resume('c1'), relaybus.cancel('x', 'c1')$$,
                'an admin may pause, resume and cancel');
RESET ROLE;

SELECT * FROM finish();
DROP OWNED BY rbtest_p28_worker;
DROP ROLE rbtest_p28_worker;
DROP OWNED BY rbtest_p28_admin;
DROP ROLE rbtest_p28_admin;
