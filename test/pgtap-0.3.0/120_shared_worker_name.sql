-- Port of test/pgtap/20_shared_worker_name.sql to relaybus 0.3.0; the guarantee and the two
-- scenarios are 0.2's, observed on 0.3.0's lanes: in_flight lists positions (not event
-- ids), and a failed delivery leaves the lane's window for an exception row (its lane's
-- cursor passes it) instead of staying in deliveries with attempts and a due time. 0.3.0
-- lists a second kind of running position, retrying (exception rows run again): part 3
-- checks the same guarantee for it.
--
-- Guarantee: connections that share a worker name (the dispatcher claims on one and fails
-- or completes on another) keep each lane's in-flight list exact. A claim that waits for
-- such a connection's change to a held lane must read the in-flight list of the lane as
-- that change left it: if it used the list from before the wait, a delivery that `fail`
-- had just taken out of the lane would be written back as in flight. From then on no
-- claim would offer it, the lane would never be handed back, and the delivery would sit
-- there until a takeover charged it an attempt it never ran.
--
-- 1. Connection A claims D; connection B fails D in an open transaction (which locks the
--    lane); a new delivery E arrives in the same lane. A claim that locks the lane for its
--    work does not wait: it passes over the lane. A claim with a longer lease renews the
--    lane, which it locks waiting: it waits for B's lock; B commits. That claim must return
--    E and leave exactly E in flight.
-- 2. The other way round: what committed while A's transaction held the lane must count as
--    in flight too. A holds a lane and, in an open transaction, claims H from it (locking
--    it); B's claim (another incarnation) leaves A's lane alone without waiting; F is published into the lane and A claims it, then commits. B must not
--    get F: its look at the lane's deliveries must see F, though F did not exist when
--    B's claim began.
SELECT rb_reset();
SELECT plan(22);

SELECT relaybus.subscribe('sw', ARRAY['sw.event'], backoff_base => '1 hour');
SELECT rb_connect('sw_a');
SELECT rb_connect('sw_b');
SELECT p AS a_pid FROM dblink('sw_a', 'SELECT pg_backend_pid()') AS t(p int) \gset

-- D, and an event id E whose delivery lands in D's lane.
SELECT relaybus.publish('sw.event', '{}', event_id => 'sw-d');
SELECT relaybus.lane_of('sw-d') AS lane \gset
SELECT min(id) AS e_id FROM (SELECT 'sw-e-' || i AS id FROM generate_series(1, 20000) i) c
 WHERE relaybus.lane_of(c.id) = :lane \gset

SELECT t AS d_token FROM dblink('sw_a', $$SELECT lease_token FROM relaybus.claim('shared', 1,
  '30 seconds', ARRAY['sw'])$$) AS r(t text) \gset
SELECT is(split_part(:'d_token', '.', 2)::int, :lane, 'A claims D in its lane');

SELECT dblink_exec('sw_b', 'BEGIN');
SELECT is((SELECT r FROM dblink('sw_b', format('SELECT relaybus.fail(%L, %L)', :'d_token', 'boom'))
             AS t(r text)), 'retry', 'B fails D (not yet committed): retry in an hour');
SELECT relaybus.publish('sw.event', '{}', event_id => :'e_id');

-- A claim locks a held lane for its work without waiting: it passes over the lane B holds.
SELECT is((SELECT count(*)::int FROM dblink('sw_a', $$SELECT event_id FROM relaybus.claim('shared',
  10, '30 seconds', ARRAY['sw'])$$) AS r(e text)), 0,
  'A''s claim passes over the lane B holds, without waiting');
-- A claim with a longer lease renews the lane, which it locks whatever the lane holds, waiting.
SELECT dblink_send_query('sw_a', $$SELECT event_id FROM relaybus.claim('shared', 10,
  '1 hour', ARRAY['sw'])$$);
SELECT ok(rb_waits_for_lock(:a_pid), 'A''s claim that renews the lane waits for B''s lock on it');
SELECT dblink_exec('sw_b', 'COMMIT');
SELECT is((SELECT array_agg(e) FROM dblink_get_result('sw_a') AS r(e text)), ARRAY[:'e_id'],
          'once B commits, A''s claim returns E');
SELECT is((SELECT count(*)::int FROM dblink_get_result('sw_a') AS r(e text)), 0,
          '(no further result)');

-- 0.3.0: the lane lists E's position; D's (the position before it) went to an exception row
-- and the cursor passed it. With the list from before the wait, D's position would be
-- written back as in flight.
SELECT results_eq(format($$SELECT l.in_flight, l.retrying, l.acked_upto FROM relaybus.lane_state l
                            WHERE l.handler = 'sw' AND l.lane = %s$$, :lane),
                  format($$SELECT ARRAY[e.position], '{}'::bigint[], d.position
                            FROM relaybus.deliveries e, relaybus.deliveries d
                           WHERE e.handler = 'sw' AND e.event_id = %L AND d.handler = 'sw' AND d.event_id = 'sw-d'$$, :'e_id'),
                  'the lane lists E in flight, and not the failed D (whose position the cursor passed)');
SELECT is((SELECT status || '/' || attempts || '/' || (available_at > now() + interval '30 minutes')
             FROM relaybus.exceptions WHERE handler = 'sw' AND event_id = 'sw-d'), 'pending/1/true',
          'D waits for its retry in an exception row, charged once');

--------------------------------------------------------------------------------
-- 2. What a transaction holding the lane claimed counts as in flight.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('sw2', ARRAY['sw2.event']);
SELECT p AS b_pid FROM dblink('sw_b', 'SELECT pg_backend_pid()') AS t(p int) \gset
SELECT relaybus.publish('sw2.event', '{}', event_id => 'sw2-g');
SELECT relaybus.lane_of('sw2-g') AS lane2 \gset
SELECT min(id) AS f_id FROM (SELECT 'sw2-f-' || i AS id FROM generate_series(1, 20000) i) c
 WHERE relaybus.lane_of(c.id) = :lane2 \gset
SELECT is((SELECT array_agg(e) FROM dblink('sw_a', $$SELECT event_id FROM relaybus.claim('shared2',
  10, '30 seconds', ARRAY['sw2'])$$) AS r(e text)), ARRAY['sw2-g'], 'A claims G and holds its lane');
SELECT min(id) AS h_id FROM (SELECT 'sw2-h-' || i AS id FROM generate_series(1, 20000) i) c
 WHERE relaybus.lane_of(c.id) = :lane2 \gset
-- H, for A's next claim: a claim locks a held lane only when it acts on it.
SELECT relaybus.publish('sw2.event', '{}', event_id => :'h_id');
-- F's publish takes this transaction's now(), older than A's: F is due for A at once
-- (a due time in the past would count as now, since 0.2.1).
BEGIN;
SELECT dblink_exec('sw_a', 'BEGIN');
SELECT is((SELECT array_agg(e) FROM dblink('sw_a', $$SELECT event_id FROM relaybus.claim('shared2',
  10, '30 seconds', ARRAY['sw2'])$$) AS r(e text)), ARRAY[:'h_id'],
  'A claims H in an open transaction, which locks the lane');
-- B is another incarnation of the worker: it reads A's lanes without locking them and
-- leaves them alone, so it neither waits for A's transaction nor takes F.
SELECT is((SELECT count(*)::int FROM dblink('sw_b', $$SELECT event_id FROM relaybus.claim('shared2',
  10, '30 seconds', ARRAY['sw2'])$$) AS r(e text)), 0,
  'B''s claim does not wait for A''s lock on the lane and takes nothing of it');
SELECT relaybus.publish('sw2.event', '{}', event_id => :'f_id');
COMMIT;
SELECT is((SELECT array_agg(e) FROM dblink('sw_a', $$SELECT event_id FROM relaybus.claim('shared2',
  10, '30 seconds', ARRAY['sw2'])$$) AS r(e text)), ARRAY[:'f_id'], 'A claims F, published meanwhile');
SELECT dblink_exec('sw_a', 'COMMIT');
SELECT is((SELECT count(*)::int FROM dblink('sw_b', $$SELECT event_id FROM relaybus.claim('shared2',
  10, '30 seconds', ARRAY['sw2'])$$) AS r(e text)), 0,
  'B''s claim gets nothing: G, H and F are in flight');
SELECT is((SELECT in_flight FROM relaybus.lane_state WHERE handler = 'sw2' AND lane = :lane2),
          (SELECT array_agg(position ORDER BY position) FROM relaybus.deliveries
            WHERE handler = 'sw2' AND event_id IN ('sw2-g', :'h_id', :'f_id')),
          'the lane lists G''s, H''s and F''s positions in flight, once each');

--------------------------------------------------------------------------------
-- 3. (0.3.0) The same for the retrying list: A runs R again from its exception row; B
--    completes R in an open transaction (which deletes the row and takes R out of
--    retrying); S arrives in the lane; A claims again (renewing, as in 1) and waits for
--    B's lock; B commits.
--    A's claim must return S and leave nothing in retrying: with the list from before the
--    wait it would write R back as retrying, with no exception row behind it, and the lane
--    would run "something" for good.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('sw3', ARRAY['sw3.event'], backoff_base => '0', backoff_max => '0');
SELECT relaybus.publish('sw3.event', '{}', event_id => 'sw3-r');
SELECT relaybus.lane_of('sw3-r') AS lane3 \gset
SELECT min(id) AS s_id FROM (SELECT 'sw3-s-' || i AS id FROM generate_series(1, 20000) i) c
 WHERE relaybus.lane_of(c.id) = :lane3 \gset
SELECT is((SELECT array_agg(r) FROM dblink('sw_a', $$SELECT relaybus.fail(lease_token, 'once')
  FROM relaybus.claim('shared3', 1, '30 seconds', ARRAY['sw3'])$$) AS t(r text)), ARRAY['retry'],
          'A claims R and fails it: retry, due at once (backoff 0)');
SELECT t AS r_token FROM dblink('sw_a', $$SELECT lease_token FROM relaybus.claim('shared3', 1,
  '30 seconds', ARRAY['sw3'])$$) AS r(t text) \gset
SELECT results_eq(format($$SELECT l.retrying, l.in_flight FROM relaybus.lane_state l WHERE l.handler = 'sw3' AND l.lane = %s$$, :lane3),
                  $$SELECT ARRAY[position], '{}'::bigint[] FROM relaybus.exceptions WHERE event_id = 'sw3-r'$$,
                  'A runs R again from its exception row (retrying)');
SELECT dblink_exec('sw_b', 'BEGIN');
SELECT is((SELECT r FROM dblink('sw_b', format('SELECT relaybus.complete(%L)', :'r_token')) AS t(r boolean)),
          true, 'B completes R (not yet committed)');
SELECT relaybus.publish('sw3.event', '{}', event_id => :'s_id');
SELECT dblink_send_query('sw_a', $$SELECT event_id FROM relaybus.claim('shared3', 10,
  '1 hour', ARRAY['sw3'])$$);
SELECT ok(rb_waits_for_lock(:a_pid), 'A''s claim that renews the lane waits for B''s lock on it');
SELECT dblink_exec('sw_b', 'COMMIT');
SELECT is((SELECT array_agg(e) FROM dblink_get_result('sw_a') AS r(e text)), ARRAY[:'s_id'],
          'once B commits, A''s claim returns S');
SELECT is((SELECT count(*)::int FROM dblink_get_result('sw_a') AS r(e text)), 0,
          '(no further result)');
SELECT results_eq(format($$SELECT l.retrying, l.in_flight FROM relaybus.lane_state l WHERE l.handler = 'sw3' AND l.lane = %s$$, :lane3),
                  format($$SELECT '{}'::bigint[], ARRAY[position] FROM relaybus.deliveries WHERE handler = 'sw3' AND event_id = %L$$, :'s_id'),
                  'the lane lists S in flight and retries nothing: R is not written back');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE handler = 'sw3'), 0, 'R''s exception row is gone');

SELECT * FROM finish();
