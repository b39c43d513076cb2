-- Guarantee: per-key ordering in commit order (test/pgtap/04_key_ordering.sql on 0.3.0).
-- The deliveries of one (handler, key) come out in the order their publishing transactions
-- committed, one at a time: the next only after the previous one completed. A failed head
-- that waits for its retry blocks the rest of its key; a dead head does not (dead letters
-- unblock the key, the documented rule). If any of this broke, a claim below would return
-- a later delivery of a key early, two of a key at once, or positions would not follow
-- commit order.
--
-- What 0.3.0 changes by design (docs/design.md, "0.3.0: positions in commit order without
-- publishers waiting"; docs/upgrading.md): there is no key counter. A delivery gets its
-- lane's next position when its transaction commits, under lane locks taken at commit, so
-- a publisher of the same key no longer waits for the other's open transaction: it waits,
-- at most, for the other's commit to finish. 0.2 asserted that the second publisher is
-- blocked until the first commits; here the same scenarios assert that it is not blocked
-- (dblink_is_busy 0, no lock wait) and that the order is still the commit order, which
-- is what the wait was for. A key's order is its lane's positions (0.2: sequence).
SELECT rb_reset();
SELECT plan(42);

SELECT relaybus.subscribe('ledger', ARRAY['entry.posted']);

-- One key, three events: handed out strictly one at a time, in publish order.
SELECT relaybus.publish('entry.posted', jsonb_build_object('n', n), 'acct-A', 'a' || n)
  FROM generate_series(1, 3) AS n;
CREATE TEMP TABLE handled (n serial, event_id text);

CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger']);
SELECT results_eq('SELECT event_id FROM c1', $$VALUES ('a1')$$,
                  'a batch of 10 gets only the head of the key');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger'])), 0,
          'while the head is in flight the same worker gets nothing more of the key');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2', 10, '30 seconds', ARRAY['ledger'])), 0,
          'and no other worker gets anything of the key');
INSERT INTO handled (event_id) SELECT event_id FROM c1;
SELECT ok(relaybus.complete((SELECT lease_token FROM c1)), 'head completed');
CREATE TEMP TABLE c2 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger']);
SELECT results_eq('SELECT event_id FROM c2', $$VALUES ('a2')$$, 'then the second, alone');
INSERT INTO handled (event_id) SELECT event_id FROM c2;
SELECT ok(relaybus.complete((SELECT lease_token FROM c2)), 'second completed');
CREATE TEMP TABLE c3 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger']);
INSERT INTO handled (event_id) SELECT event_id FROM c3;
SELECT ok(relaybus.complete((SELECT lease_token FROM c3)), 'third completed');
SELECT results_eq('SELECT event_id FROM handled ORDER BY n', $$VALUES ('a1'), ('a2'), ('a3')$$,
                  'the key was handled in publish order');

-- Two keys: a batch takes one delivery of each key, never two of the same key.
SELECT relaybus.publish('entry.posted', '{}', k, k || '-' || n)
  FROM generate_series(1, 2) AS n, unnest(ARRAY['acct-B1', 'acct-B2']) AS k ORDER BY n, k;
SELECT bag_eq($$SELECT event_id FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger'])$$,
              $$VALUES ('acct-B1-1'), ('acct-B2-1')$$,
              'one batch: the head of each key and nothing behind them');
SELECT rb_reset();
SELECT relaybus.subscribe('ledger', ARRAY['entry.posted']);

-- Commit order across connections, new key. Connection b starts its transaction FIRST
-- (and publishes elsewhere), then a publishes acct-C, then b publishes acct-C. 0.2: b
-- waited for a's counter lock. 0.3.0: b publishes at once; a commits first, so a's
-- delivery still comes first although b's transaction started first.
SELECT rb_connect('a');
SELECT rb_connect('b');
SELECT pid AS b_pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT dblink_exec('b', 'BEGIN');
SELECT * FROM dblink('b', $$SELECT relaybus.publish('entry.posted', '{}', 'acct-other', 'b-other')$$) AS t(id text);
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', $$SELECT relaybus.publish('entry.posted', '{"by": "a"}', 'acct-C', 'c-from-a')$$) AS t(id text);
SELECT is(dblink_send_query('b', $$SELECT relaybus.publish('entry.posted', '{"by": "b"}', 'acct-C', 'c-from-b')$$),
          1, 'b sends its publish of the same key');
SELECT pg_sleep(0.2);
-- 0.3.0 by design: 0.2 asserted dblink_is_busy = 1 here (b waiting for a's counter lock).
SELECT is(dblink_is_busy('b'), 0, 'b does not wait for a''s open transaction (0.3.0: no key counter lock)');
SELECT results_eq($$SELECT id FROM dblink_get_result('b') AS t(id text)$$, $$VALUES ('c-from-b')$$,
                  'b''s publish went through while a is open');
SELECT is((SELECT count(*)::int FROM dblink_get_result('b') AS t(id text)), 0, 'b has no further result');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger'])), 0,
          'nothing of either transaction is claimable before they commit');
SELECT dblink_exec('a', 'COMMIT');
SELECT dblink_exec('b', 'COMMIT');
SELECT ok((SELECT position FROM relaybus.deliveries WHERE event_id = 'c-from-a')
          < (SELECT position FROM relaybus.deliveries WHERE event_id = 'c-from-b'),
          'a (committed first) has the lower position although b''s transaction started first');
CREATE TEMP TABLE c4 AS
  SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger']) WHERE key = 'acct-C';
SELECT results_eq('SELECT event_id FROM c4', $$VALUES ('c-from-a')$$,
                  'the first committed publish of the key is delivered first, alone');
SELECT ok(relaybus.complete((SELECT lease_token FROM c4)), 'a''s event completed');
SELECT results_eq(
  $$SELECT event_id FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger']) WHERE key = 'acct-C'$$,
  $$VALUES ('c-from-b')$$, 'then the later committed one');

-- The same with a key whose lane already has positions. a publishes first and stays open;
-- b publishes the key in a transaction of its own. 0.2: b waited for a's commit, so a
-- came first. 0.3.0: b does not wait and commits first, so b comes first: commit order,
-- not publish order.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', $$SELECT relaybus.publish('entry.posted', '{}', 'acct-C', 'c2-from-a')$$) AS t(id text);
SELECT is(dblink_send_query('b', $$SELECT relaybus.publish('entry.posted', '{}', 'acct-C', 'c2-from-b')$$),
          1, 'b sends another publish of the key while a''s is open');
SELECT pg_sleep(0.2);
SELECT is(dblink_is_busy('b'), 0, 'b does not wait for a''s open transaction (0.2 did: existing counter row)');
SELECT results_eq($$SELECT id FROM dblink_get_result('b') AS t(id text)$$, $$VALUES ('c2-from-b')$$,
                  'b''s autocommitted publish completes (and commits) while a is open');
SELECT is((SELECT count(*)::int FROM dblink_get_result('b') AS t(id text)), 0, 'b has no further result');
SELECT dblink_exec('a', 'COMMIT');
SELECT results_eq(
  $$SELECT event_id FROM relaybus.deliveries WHERE key = 'acct-C' ORDER BY position$$,
  $$VALUES ('c-from-a'), ('c-from-b'), ('c2-from-b'), ('c2-from-a')$$,
  'position order of the key is commit order');

-- b's COMMIT of a publish may wait for a's commit in progress (the lane lock at commit),
-- never for a's open transaction: a publishes and stays open, b publishes and commits.
SELECT dblink_exec('a', 'BEGIN');
SELECT * FROM dblink('a', $$SELECT relaybus.publish('entry.posted', '{}', 'acct-C', 'c3-from-a')$$) AS t(id text);
SELECT dblink_exec('b', 'BEGIN');
SELECT * FROM dblink('b', $$SELECT relaybus.publish('entry.posted', '{}', 'acct-C', 'c3-from-b')$$) AS t(id text);
SELECT is(dblink_send_query('b', 'COMMIT'), 1, 'b sends its COMMIT while a is open');
SELECT pg_sleep(0.2);
SELECT ok(dblink_is_busy('b') = 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity
                                                   WHERE pid = :b_pid AND wait_event_type = 'Lock'),
          'b''s commit does not wait for a''s open transaction');
SELECT is((SELECT count(*)::int FROM dblink_get_result('b') AS t(r text)), 1, 'b committed');
SELECT dblink_exec('a', 'COMMIT');
SELECT results_eq(
  $$SELECT event_id FROM relaybus.deliveries WHERE key = 'acct-C' AND event_id LIKE 'c3-%' ORDER BY position$$,
  $$VALUES ('c3-from-b'), ('c3-from-a')$$,
  'the one that committed first is first');
SELECT dblink_disconnect('a');
SELECT dblink_disconnect('b');

-- A failed head waiting for its retry blocks the rest of its key, but only its key:
-- another key in the same lane keeps flowing.
SELECT rb_reset();
SELECT relaybus.subscribe('ledger', ARRAY['entry.posted']);
SELECT k AS lane_mate FROM (SELECT 'acct-F-' || g AS k FROM generate_series(1, 5000) AS g) s
 WHERE relaybus.lane_of(k) = relaybus.lane_of('acct-F') LIMIT 1 \gset
SELECT relaybus.publish('entry.posted', '{}', 'acct-F', 'f1');
SELECT relaybus.publish('entry.posted', '{}', 'acct-F', 'f2');
CREATE TEMP TABLE c5 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger']);
SELECT results_eq('SELECT event_id FROM c5', $$VALUES ('f1')$$, 'f1 is the head');
SELECT is(relaybus.fail((SELECT lease_token FROM c5), 'try later', now() + interval '1 hour'), 'retry',
          'the head fails and is rescheduled an hour ahead');
SELECT relaybus.publish('entry.posted', '{}', :'lane_mate', 'x1');
SELECT is(relaybus.lane_of(:'lane_mate'), relaybus.lane_of('acct-F'), 'x1''s key shares f1''s lane');
SELECT results_eq($$SELECT event_id FROM relaybus.claim('w', 10, '30 seconds', ARRAY['ledger'])$$,
                  $$VALUES ('x1')$$,
                  'f2 is due but blocked behind its retrying head; the other key in the lane is not');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2', 10, '30 seconds', ARRAY['ledger'])), 0,
          'no other worker gets f2 either');

-- A dead head does not block: dead letters unblock the key.
SELECT relaybus.publish('entry.posted', '{}', 'acct-G', 'g' || n) FROM generate_series(1, 3) AS n;
CREATE TEMP TABLE c6 AS
  SELECT * FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['ledger']) WHERE key = 'acct-G';
SELECT results_eq('SELECT event_id FROM c6', $$VALUES ('g1')$$, 'g1 is the head of acct-G');
SELECT ok(relaybus.bury((SELECT lease_token FROM c6), 'poison'), 'the head is buried');
CREATE TEMP TABLE c7 AS
  SELECT * FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['ledger']) WHERE key = 'acct-G';
SELECT results_eq('SELECT event_id FROM c7', $$VALUES ('g2')$$,
                  'with the head dead, the next delivery of the key is claimed (only it)');
SELECT ok(relaybus.complete((SELECT lease_token FROM c7)), 'g2 completed');
CREATE TEMP TABLE c8 AS
  SELECT * FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['ledger']) WHERE key = 'acct-G';
SELECT results_eq('SELECT event_id FROM c8', $$VALUES ('g3')$$, 'then g3');

-- One at a time holds even when a requeue puts an earlier delivery back: while g3 is in
-- flight, the requeued g1 (lower position) must wait until g3 is done (the reference
-- design: a keyed delivery is picked only if "none of its key is in flight").
SELECT ok(relaybus.requeue('g1', 'ledger'), 'the dead head g1 is requeued while g3 is in flight');
CREATE TEMP TABLE c9 AS
  SELECT * FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['ledger']) WHERE key = 'acct-G';
SELECT is((SELECT count(*)::int FROM c9), 0,
          'the holder of the key''s lane gets nothing more of acct-G while g3 is in flight');
-- 0.2 counted event ids in in_flight; 0.3.0 counts the key's positions in in_flight
-- (window picks) and retrying (exception rows run again).
SELECT is((SELECT count(*)::int FROM relaybus.lane_state l JOIN relaybus.deliveries d
              ON d.handler = l.handler AND d.lane = l.lane
            WHERE l.handler = 'ledger' AND d.key = 'acct-G'
              AND (d.position = ANY (l.in_flight) OR d.position = ANY (l.retrying))),
          1, 'exactly one delivery of acct-G is in flight');
SELECT ok(relaybus.complete((SELECT lease_token FROM c8)), 'g3 completed');
-- (c9 is included so that this step does not fail as well when the one above did)
SELECT results_eq(
  $$SELECT event_id FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['ledger']) WHERE key = 'acct-G'
    UNION ALL SELECT event_id FROM c9$$,
  $$VALUES ('g1')$$, 'then the requeued g1');

SELECT * FROM finish();
