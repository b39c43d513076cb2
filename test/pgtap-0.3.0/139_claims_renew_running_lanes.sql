-- Guarantee: a claim renews the lease of every lane its worker holds once that lease is due
-- (less than one lease left), whether or not the claim picks anything from the lane: the
-- C++, Python and Node.js runtimes leave the renewal of their lanes to their claims while
-- claims go on (Store::claim_renews_held_lanes, lease_renewer.py, lease-renewer.js), so a
-- lane whose handler outlives the lease must not lapse under it and be taken over. Without the renewal, part 1 fails. A lane
-- not due is left unwritten (part 2): a rewrite per claim would leave a version per claim
-- under a held snapshot.
SELECT rb_reset();
SELECT plan(8);

SELECT relaybus.subscribe('rn', ARRAY['rn.event']);
SELECT relaybus.lane_of('k') AS lane \gset
SELECT relaybus.publish('rn.event', '{}', 'k', 'rn-1') AS published \gset
CREATE TEMP TABLE c1 AS
  SELECT lease_token, event_id FROM relaybus.claim('rw', 10, '10 seconds', ARRAY['rn']);
SELECT is((SELECT array_agg(event_id) FROM c1), ARRAY['rn-1'], 'the worker runs rn-1');

-- 1. Its handler outlives most of the lease: two seconds left when the worker claims again.
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '2 seconds'
 WHERE handler = 'rn' AND lane = :lane;
SELECT is((SELECT count(*)::int FROM relaybus.claim('rw', 10, '10 seconds', ARRAY['rn'])), 0,
          'the next claim finds nothing to pick');
SELECT ok((SELECT lease_expires_at >= now() + interval '10 seconds'
             FROM relaybus.lanes WHERE handler = 'rn' AND lane = :lane),
          'and renewed the lane it holds anyway, to a lease and a half from its start');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'rn' AND lane = :lane), 'rw',
          'still the worker''s');
SELECT is((SELECT count(*)::int FROM relaybus.claim('rival', 10, '10 seconds', ARRAY['rn'])), 0,
          'a rival takes nothing over');

-- 2. Not due (more than a lease left): the claim leaves the row alone.
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '12 seconds'
 WHERE handler = 'rn' AND lane = :lane;
SELECT lease_expires_at AS before, xmin::text AS version
  FROM relaybus.lanes WHERE handler = 'rn' AND lane = :lane \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('rw', 10, '10 seconds', ARRAY['rn'])), 0,
          'a claim with the lease fresh');
SELECT is((SELECT xmin::text FROM relaybus.lanes WHERE handler = 'rn' AND lane = :lane),
          :'version', 'leaves the lane row unwritten');

SELECT ok((SELECT relaybus.complete(lease_token) FROM c1),
          'rn-1 completes with the token it was claimed with');

SELECT * FROM finish();
