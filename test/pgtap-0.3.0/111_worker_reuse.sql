-- Guarantee: a worker name reused after a crash does not strand its predecessor's work
-- (test/pgtap/11_worker_reuse.sql on 0.3.0). A lane records the backend (pid + start time)
-- that acquired it. When the connection that claimed as 'w' dies without completing, a new
-- connection claiming as 'w' must get the stranded delivery again (one attempt charged,
-- lane epoch bumped, old token fenced) instead of adopting the lane with the delivery
-- still "in flight" forever, and extend_lease('w') must not keep the dead predecessor's
-- lanes alive. Live connections sharing one worker name (a pool) do share lanes, without
-- any takeover. If the holder check broke, the successor's claim would return nothing and
-- extend_lease would renew; if it were too eager, the pool case would charge attempts and
-- fence live tokens.
--
-- How 0.3.0 stores it: attempts are exception rows' (a delivery without one has none);
-- a lane lists the positions it runs, in_flight for window picks and retrying for
-- exception rows run again (a takeover's charge makes the stranded delivery one); a
-- completed delivery is finished, not deleted (list_deliveries no longer lists it).
SELECT rb_reset();
SELECT plan(24);

SELECT relaybus.subscribe('reuse', ARRAY['t']);

-- The positive case first: two live connections of one pool, both named 'pool'.
CREATE TEMP TABLE same_lane AS
  SELECT id FROM (SELECT 'q' || g AS id FROM generate_series(1, 5000) AS g) s
   WHERE relaybus.lane_of(id) = relaybus.lane_of('q1') ORDER BY id LIMIT 2;
SELECT relaybus.publish('t', '{}', NULL, id) FROM same_lane;
SELECT relaybus.lane_of('q1') AS lane \gset
SELECT rb_connect('p1');
SELECT rb_connect('p2');
CREATE TEMP TABLE pc1 AS SELECT * FROM dblink('p1',
  $$SELECT lease_token, event_id, attempts FROM relaybus.claim('pool', 1, '30 seconds', ARRAY['reuse'])$$)
  AS t(lease_token text, event_id text, attempts int);
SELECT results_eq('SELECT event_id, attempts FROM pc1', $$VALUES ('q1', 0)$$, 'pool connection 1 claims q1');
SELECT epoch AS pool_epoch FROM relaybus.lanes WHERE handler = 'reuse' AND lane = :lane \gset
CREATE TEMP TABLE pc2 AS SELECT * FROM dblink('p2',
  $$SELECT lease_token, event_id, attempts FROM relaybus.claim('pool', 10, '30 seconds', ARRAY['reuse'])$$)
  AS t(lease_token text, event_id text, attempts int);
SELECT results_eq('SELECT attempts FROM pc2', $$VALUES (0)$$,
                  'pool connection 2 gets the other delivery of the shared lane, no attempt charged');
SELECT isnt((SELECT event_id FROM pc2), 'q1', 'and not the one connection 1 is running');
SELECT is((SELECT epoch FROM relaybus.lanes WHERE handler = 'reuse' AND lane = :lane), :pool_epoch::bigint,
          'the lane did not change hands (same epoch)');
SELECT is((SELECT cardinality(in_flight) FROM relaybus.lane_state WHERE handler = 'reuse' AND lane = :lane), 2,
          'both deliveries are in flight in the shared lane');
SELECT is((SELECT sum(attempts)::int FROM relaybus.list_deliveries()) + (SELECT count(*)::int FROM relaybus.exceptions),
          0, 'nothing was charged (no exception row)');
SELECT results_eq($$SELECT * FROM dblink('p2', 'SELECT relaybus.extend_lease(''pool'', ''30 seconds'')') AS t(n int)$$,
                  $$VALUES (1)$$, 'a live pool member renews the shared lane');
SELECT results_eq($$SELECT * FROM dblink('p1', format('SELECT relaybus.complete(%L)',
                      (SELECT lease_token FROM pc1))) AS t(ok boolean)$$,
                  $$VALUES (true)$$, 'connection 1''s token still completes');
SELECT results_eq($$SELECT * FROM dblink('p2', format('SELECT relaybus.complete(%L)',
                      (SELECT lease_token FROM pc2))) AS t(ok boolean)$$,
                  $$VALUES (true)$$, 'connection 2''s token completes');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0, 'the pool handled both, once each');
SELECT dblink_disconnect('p1');
SELECT dblink_disconnect('p2');

-- The crash case: connection 'old' claims as 'w' (long lease) and disconnects.
SELECT rb_reset();
SELECT relaybus.subscribe('reuse', ARRAY['t']);
SELECT relaybus.publish('t', '{}', NULL, 'r1');
SELECT relaybus.lane_of('r1') AS lane \gset
SELECT rb_connect('old');
SELECT pid AS old_pid FROM dblink('old', 'SELECT pg_backend_pid()') AS t(pid int) \gset
CREATE TEMP TABLE old_claim AS SELECT * FROM dblink('old',
  $$SELECT lease_token, event_id, attempts FROM relaybus.claim('w', 10, '30 seconds', ARRAY['reuse'])$$)
  AS t(lease_token text, event_id text, attempts int);
SELECT results_eq('SELECT event_id, attempts FROM old_claim', $$VALUES ('r1', 0)$$,
                  'the predecessor claims r1 as w');
SELECT results_eq(format($$SELECT lease_owner, holder_pid, lease_expires_at > now() + interval '20 seconds'
                            FROM relaybus.lanes WHERE handler = 'reuse' AND lane = %s$$, :lane),
                  format($$VALUES ('w'::text, %s, true)$$, :old_pid),
                  'its lane records the predecessor''s backend and a long lease');
SELECT epoch AS old_epoch, lease_expires_at AS old_expiry
  FROM relaybus.lanes WHERE handler = 'reuse' AND lane = :lane \gset
SELECT dblink_disconnect('old');
SELECT ok(rb_wait_backend_gone(:old_pid), 'the predecessor''s backend is gone');

-- extend_lease under the reused name does not keep the dead predecessor's lane alive.
SELECT is(relaybus.extend_lease('w', '30 seconds'), 0, 'extend_lease(w) renews nothing');
SELECT is((SELECT lease_expires_at FROM relaybus.lanes WHERE handler = 'reuse' AND lane = :lane),
          :'old_expiry'::timestamptz, 'the orphaned lane''s lease was not moved');
SELECT is((SELECT count(*)::int FROM relaybus.claim('someone-else', 10, '30 seconds', ARRAY['reuse'])), 0,
          'another worker still waits for the lease (the orphan is recognised by its name)');

-- The successor reusing the name gets the stranded delivery at once.
CREATE TEMP TABLE new_claim AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['reuse']);
SELECT results_eq('SELECT event_id, attempts FROM new_claim', $$VALUES ('r1', 1)$$,
                  'the successor named w gets r1 again, charged the lost attempt');
SELECT results_eq($$SELECT status, attempts FROM relaybus.exceptions WHERE event_id = 'r1'$$,
                  $$VALUES ('pending', 1)$$, 'the delivery''s exception row carries the charged attempt');
-- 0.3.0: the charged r1 runs again as a retry of its exception row (retrying).
SELECT results_eq(format($$SELECT epoch > %s, holder_pid = pg_backend_pid(), in_flight || retrying
                            FROM relaybus.lane_state WHERE handler = 'reuse' AND lane = %s$$, :old_epoch, :lane),
                  format($$VALUES (true, true, ARRAY[%s::bigint])$$,
                         (SELECT position FROM relaybus.deliveries WHERE event_id = 'r1')),
                  'the lane changed hands: newer epoch, held by this backend, r1 in flight');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM old_claim)), 'the predecessor''s token cannot complete');
SELECT is(relaybus.fail((SELECT lease_token FROM old_claim)), 'lost', 'nor fail');
SELECT is(relaybus.extend_lease('w', '30 seconds'), 1, 'the successor''s own lane is renewed');
SELECT ok(relaybus.complete((SELECT lease_token FROM new_claim)), 'the successor completes r1');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0, 'nothing stranded');

SELECT * FROM finish();
