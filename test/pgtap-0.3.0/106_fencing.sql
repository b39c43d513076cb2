-- Guarantee: multi-process safety, fencing (test/pgtap/06_fencing.sql on 0.3.0). A lease
-- token names the lane epoch and the attempt's claims counter. After a takeover bumps the
-- epoch, every write of the previous holder is rejected: complete -> false, fail -> 'lost',
-- bury/release -> false, and the delivery, exception and lane rows are byte-for-byte
-- unchanged by those calls. A token of an older claim in the SAME lane epoch (fail or
-- release, then a re-claim by the same worker) is rejected through the claims counter. If
-- fencing broke, a stale call would return true/'retry'/'dead' or the snapshots compared
-- below would differ.
--
-- How 0.3.0 stores it: a token is r3.<lane>.<epoch>.<position>.<claims>.<handler length>.
-- <handler> (no event id: the position names the delivery); a window pick has claims 0 and
-- is listed in its lane's in_flight, a retry of an exception row carries the row's claims
-- and is listed in retrying. Attempts and statuses are exception rows' (list_deliveries),
-- and a takeover's charge makes the taken-over positions retries of exception rows.
SELECT rb_reset();
SELECT plan(49);

SELECT relaybus.subscribe('fx', ARRAY['t']);
SELECT relaybus.publish('t', '{}', NULL, 'e' || n) FROM generate_series(1, 4) AS n;

-- A token naming position p of handler h's lane l, epoch ep, claims c.
CREATE FUNCTION pg_temp.tok(h text, l int, ep bigint, p bigint, c int) RETURNS text LANGUAGE sql AS $$
  SELECT format('r3.%s.%s.%s.%s.%s.%s', l, ep, p, c, octet_length(h), h)
$$;

-- The old holder claims everything with a short lease and stalls.
CREATE TEMP TABLE old AS SELECT * FROM relaybus.claim('w-old', 10, '150 ms', ARRAY['fx']);
SELECT is((SELECT count(*)::int FROM old), 4, 'the old holder has 4 deliveries in flight');
SELECT pg_sleep(0.3);  -- past the lease: a claim leases for up to 1.5 x lease
-- The new holder takes the expired lanes over.
CREATE TEMP TABLE new AS SELECT * FROM relaybus.claim('w-new', 10, '30 seconds', ARRAY['fx']);
SELECT set_eq('SELECT event_id FROM new', 'SELECT event_id FROM old',
              'the new holder got the same 4 deliveries after the takeover');
SELECT ok((SELECT bool_and(l.epoch > 1) FROM relaybus.lanes l
            WHERE l.handler = 'fx' AND l.lease_owner = 'w-new'),
          'each taken-over lane moved to a newer epoch');
SELECT ok((SELECT bool_and(o.lease_token <> n.lease_token) FROM old o JOIN new n USING (event_id)),
          'the new tokens differ from the old ones');

CREATE TEMP TABLE deliveries_snap AS SELECT * FROM relaybus.deliveries;
CREATE TEMP TABLE exceptions_snap AS SELECT * FROM relaybus.exceptions;
CREATE TEMP TABLE lanes_snap AS SELECT * FROM relaybus.lane_state WHERE handler = 'fx';

SELECT ok(NOT relaybus.complete((SELECT lease_token FROM old WHERE event_id = 'e1')),
          'stale complete returns false');
SELECT is(relaybus.fail((SELECT lease_token FROM old WHERE event_id = 'e2'), 'stale'), 'lost',
          'stale fail returns lost');
SELECT is(relaybus.fail((SELECT lease_token FROM old WHERE event_id = 'e2'), 'stale', now() + interval '1 day'),
          'lost', 'stale fail with retry_at returns lost');
SELECT ok(NOT relaybus.bury((SELECT lease_token FROM old WHERE event_id = 'e3'), 'stale'),
          'stale bury returns false');
SELECT ok(NOT relaybus.release((SELECT lease_token FROM old WHERE event_id = 'e4')),
          'stale release returns false');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM old)), 0,
          'stale complete_many completes nothing');
SELECT set_eq('SELECT * FROM relaybus.deliveries', 'SELECT * FROM deliveries_snap',
              'the stale calls changed no delivery row');
-- 0.3.0: status, attempts, claims, due time and error live in the exception rows.
SELECT set_eq('SELECT * FROM relaybus.exceptions', 'SELECT * FROM exceptions_snap',
              'the stale calls changed no exception row (status, attempts, claims, due time, error)');
SELECT set_eq($$SELECT * FROM relaybus.lane_state WHERE handler = 'fx'$$, 'SELECT * FROM lanes_snap',
              'the stale calls changed no lane (epoch, owner, cursor, in-flight lists, progress seq)');

-- The new holder's tokens work.
SELECT ok(relaybus.complete((SELECT lease_token FROM new WHERE event_id = 'e1')), 'new complete works');
SELECT is(relaybus.fail((SELECT lease_token FROM new WHERE event_id = 'e2'), 'real'), 'retry', 'new fail works');
SELECT ok(relaybus.bury((SELECT lease_token FROM new WHERE event_id = 'e3'), 'real'), 'new bury works');
SELECT ok(relaybus.release((SELECT lease_token FROM new WHERE event_id = 'e4')), 'new release works');
SELECT bag_eq('SELECT event_id, status, attempts FROM relaybus.list_deliveries()',
              $$VALUES ('e2', 'pending', 2), ('e3', 'dead', 2), ('e4', 'pending', 1)$$,
              'only the new holder''s calls took effect (takeover charged 1, fail/bury 1 more)');

-- Older claim, same lane epoch: the claims counter fences it.
SELECT rb_reset();
SELECT relaybus.subscribe('fx', ARRAY['t']);
SELECT relaybus.publish('t', '{}', 'k', 'c1');
SELECT relaybus.lane_of('k') AS lane \gset
CREATE TEMP TABLE first_claim AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['fx']);
SELECT epoch AS epoch_first FROM relaybus.lanes WHERE handler = 'fx' AND lane = :lane \gset
SELECT is(relaybus.fail((SELECT lease_token FROM first_claim), 'retry now', now()), 'retry',
          'first attempt fails, due again at once');
CREATE TEMP TABLE second_claim AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['fx']);
SELECT results_eq('SELECT event_id, attempts FROM second_claim', $$VALUES ('c1', 1)$$,
                  'the same worker claims it again');
SELECT is((SELECT epoch FROM relaybus.lanes WHERE handler = 'fx' AND lane = :lane), :epoch_first::bigint,
          'the lane did not change hands: same epoch, same owner');
SELECT isnt((SELECT lease_token FROM second_claim), (SELECT lease_token FROM first_claim),
            'the second claim has its own token');

DROP TABLE deliveries_snap, exceptions_snap, lanes_snap;
CREATE TEMP TABLE deliveries_snap AS SELECT * FROM relaybus.deliveries;
CREATE TEMP TABLE exceptions_snap AS SELECT * FROM relaybus.exceptions;
CREATE TEMP TABLE lanes_snap AS SELECT * FROM relaybus.lane_state WHERE handler = 'fx';
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM first_claim)),
          'the older claim''s complete returns false');
SELECT is(relaybus.fail((SELECT lease_token FROM first_claim), 'stale'), 'lost',
          'the older claim''s fail returns lost');
SELECT ok(NOT relaybus.bury((SELECT lease_token FROM first_claim)), 'the older claim''s bury returns false');
SELECT ok(NOT relaybus.release((SELECT lease_token FROM first_claim)),
          'the older claim''s release returns false');
SELECT set_eq('SELECT * FROM relaybus.exceptions', 'SELECT * FROM exceptions_snap',
              'the older claim''s calls changed no exception row');
SELECT set_eq('SELECT * FROM relaybus.deliveries', 'SELECT * FROM deliveries_snap',
              'the older claim''s calls changed no delivery row');
SELECT set_eq($$SELECT * FROM relaybus.lane_state WHERE handler = 'fx'$$, 'SELECT * FROM lanes_snap',
              'the older claim''s calls changed no lane (lease or progress seq)');

-- The same after a release and re-claim.
SELECT ok(relaybus.release((SELECT lease_token FROM second_claim)), 'the second claim is released');
CREATE TEMP TABLE third_claim AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['fx']);
SELECT is((SELECT count(*)::int FROM third_claim), 1, 'and claimed a third time');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM second_claim)),
          'the released claim''s token cannot complete the new claim');
SELECT is(relaybus.fail((SELECT lease_token FROM second_claim)), 'lost',
          'nor fail it');

-- A forged token (a real token naming another delivery of the same lane) touches nothing.
-- 0.2 swapped the event id in the token; a 0.3.0 token names the delivery by its position:
-- c2's position, with the third claim's epoch and claims, or as a window pick (claims 0).
SELECT relaybus.publish('t', '{}', 'k', 'c2');
SELECT (SELECT position FROM relaybus.deliveries WHERE event_id = 'c2') AS c2_position \gset
SELECT split_part(lease_token, '.', 3) AS third_epoch, split_part(lease_token, '.', 5) AS third_claims
  FROM third_claim \gset
SELECT ok(NOT relaybus.complete(pg_temp.tok('fx', :lane, :third_epoch, :c2_position, :third_claims))
          AND NOT relaybus.complete(pg_temp.tok('fx', :lane, :third_epoch, :c2_position, 0)),
          'a token naming a delivery that is not in flight completes nothing');
SELECT is((SELECT status FROM relaybus.list_deliveries() WHERE event_id = 'c2'), 'pending', 'c2 is still there');
SELECT throws_ok($$SELECT relaybus.complete('not-a-token')$$, '22023', NULL,
                 'a malformed token raises 22023');

SELECT ok(relaybus.complete((SELECT lease_token FROM third_claim)), 'the current token completes');
SELECT results_eq('SELECT event_id FROM relaybus.list_deliveries()', $$VALUES ('c2')$$, 'only c2 is left');

-- Fencing is about the lane changing hands, not the clock: an expired lease whose lane
-- nobody took over still completes.
CREATE TEMP TABLE slow AS SELECT * FROM relaybus.claim('w', 10, '100 ms', ARRAY['fx']);
SELECT results_eq('SELECT event_id FROM slow', $$VALUES ('c2')$$, 'w claims c2 with a 100 ms lease');
SELECT pg_sleep(0.2);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT ok(relaybus.complete((SELECT lease_token FROM slow)),
          'a completion after the lease expired but before any takeover succeeds');

-- One complete_many over many lanes: the tokens are grouped by lane and epoch. A batch of
-- current tokens in no lane order, mixed with the previous epoch's tokens of the same
-- lanes and a duplicate, completes exactly the current deliveries, once each.
SELECT rb_reset();
SELECT relaybus.subscribe('fx', ARRAY['t']);
SELECT relaybus.publish('t', '{}', NULL, 'm' || n) FROM generate_series(1, 40) AS n;
CREATE TEMP TABLE many_old AS SELECT * FROM relaybus.claim('w-old', 40, '150 ms', ARRAY['fx']);
SELECT pg_sleep(0.3);  -- past the lease: a claim leases for up to 1.5 x lease
CREATE TEMP TABLE many_new AS SELECT * FROM relaybus.claim('w-new', 40, '30 seconds', ARRAY['fx']);
SELECT ok((SELECT count(*) = 40 AND count(DISTINCT relaybus.lane_of(event_id)) >= 10 FROM many_new),
          'the 40 deliveries were taken over in at least 10 lanes');
-- 0.3.0: the takeover made each in-flight position an exception row, so the new holder
-- runs them as retries: a lane lists them in retrying (in_flight for window picks).
SELECT set_eq($$SELECT l.lane, d.event_id FROM relaybus.lane_state l
                 CROSS JOIN LATERAL unnest(l.in_flight || l.retrying) AS f(p)
                 JOIN relaybus.deliveries d ON d.handler = l.handler AND d.lane = l.lane AND d.position = f.p
                WHERE l.handler = 'fx'$$,
              'SELECT relaybus.lane_of(event_id), event_id FROM many_new',
              'each lane lists exactly its own deliveries in flight');
SELECT is(relaybus.complete_many(ARRAY(
            SELECT lease_token FROM (SELECT lease_token, event_id FROM many_new
                                     UNION ALL SELECT lease_token, event_id FROM many_old
                                     UNION ALL SELECT lease_token, event_id FROM many_new WHERE event_id = 'm7') x
             ORDER BY md5(event_id || lease_token))), 40,
          'the current tokens complete once each; the stale ones and the duplicate add nothing');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0, 'no delivery is left');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM many_new)), 0,
          'completing them again completes nothing');

-- A completion none of whose tokens is in its lane's in-flight list any more (the owner's
-- next claim pruned it) locks nothing: a takeover of the lane is not held up while that
-- completion's transaction stays open.
SELECT rb_reset();
SELECT relaybus.subscribe('fx', ARRAY['t']);
SELECT relaybus.publish('t', '{}', 'kk', 'p1');
SELECT relaybus.publish('t', '{}', 'kk', 'p2');
CREATE TEMP TABLE pc1 AS SELECT * FROM relaybus.claim('w-p', 10, '30 seconds', ARRAY['fx']);
SELECT ok(relaybus.complete((SELECT lease_token FROM pc1 WHERE event_id = 'p1')), 'p1 is claimed and completed');
CREATE TEMP TABLE pc2 AS SELECT * FROM relaybus.claim('w-p', 10, '200 ms', ARRAY['fx']);
SELECT results_eq('SELECT event_id FROM pc2', $$VALUES ('p2')$$,
                  'p2 is claimed next, in the same lane, which no longer lists p1');
SELECT rb_connect('pa');
SELECT dblink_exec('pa', 'BEGIN');
SELECT is((SELECT n FROM dblink('pa', format('SELECT relaybus.complete_many(ARRAY[%L])',
                                              (SELECT lease_token FROM pc1))) AS t(n int)), 0,
          'completing p1 again, in an open transaction, completes nothing');
SELECT pg_sleep(0.4);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT is(relaybus.take_over_expired(), 1, 'the expired lane is taken over meanwhile, not skipped');
SELECT dblink_exec('pa', 'COMMIT');
SELECT dblink_disconnect('pa');

SELECT * FROM finish();
