-- Guarantee: a hot key slows nobody. A key whose first delivery fails with a long backoff
-- parks every later delivery of the key as a pending exception row (a claim parks its
-- window's), so one lane may hold hundreds of thousands of them. A claim reads only the
-- heads of a lane's pending rows (the lowest row of each key, one key at a time; the
-- unkeyed rows earliest due first) and finds the lanes with pending rows one lane at a
-- time (src/pg/exception_heads.hpp), so what it reads of relaybus.exceptions does not grow
-- with the parked rows. Before, every claim read every pending row of the lane and every
-- due pending row of the handler: here, 3,000 of them a claim.
SELECT rb_reset();
SELECT plan(6);

SELECT relaybus.subscribe('hk', ARRAY['hk.event']);
SELECT count(*) AS published FROM relaybus.publish_batch(
  '[{"type": "hk.event", "id": "k0", "key": "K"}]') \gset
SELECT relaybus.fail(lease_token, 'boom', now() + interval '1 hour') AS failed
  FROM relaybus.claim('hk-worker', 10, '30 seconds', ARRAY['hk']) \gset
SELECT count(*) AS published FROM relaybus.publish_batch((
  SELECT jsonb_agg(jsonb_build_object('type', 'hk.event', 'id', 'k' || i, 'key', 'K') ORDER BY i)
    FROM generate_series(1, 3000) i)) \gset
-- Claims park the key's deliveries, a window at a time, until all 3,000 are parked.
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    PERFORM relaybus.claim('hk-worker', 10, '30 seconds', ARRAY['hk']);
    EXIT WHEN (SELECT count(*) FROM relaybus.exceptions WHERE handler = 'hk') > 3000;
  END LOOP;
END
$$;
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE handler = 'hk' AND status = 'pending'),
          3001, 'the key''s 3,000 deliveries are parked behind its failing head');

-- Other work, in other lanes.
SELECT count(*) AS published FROM relaybus.publish_batch((
  SELECT jsonb_agg(jsonb_build_object('type', 'hk.event', 'id', 'o' || i) ORDER BY i)
    FROM generate_series(1, 40) i)) \gset

BEGIN;
SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) AS before
  FROM pg_stat_xact_user_tables WHERE relid = 'relaybus.exceptions'::regclass \gset
CREATE TEMP TABLE c AS SELECT * FROM relaybus.claim('hk-worker', 10, '30 seconds', ARRAY['hk']);
SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) - :before AS read
  FROM pg_stat_xact_user_tables WHERE relid = 'relaybus.exceptions'::regclass \gset
SELECT is((SELECT count(*)::int FROM c), 10, 'a claim of 10 takes 10 of the other work');
SELECT ok(NOT EXISTS (SELECT 1 FROM c WHERE key = 'K'), 'and none of the parked key');
SELECT cmp_ok(:read::int, '<', 100,
              'it reads fewer than 100 exception rows, not the 3,000 parked ones (read: ' || :read || ')');
COMMIT;

-- When the head goes, the next delivery of the key is the head, due: it runs next.
SELECT is((SELECT relaybus.cancel(event_id, 'hk') FROM relaybus.exceptions
            WHERE handler = 'hk' AND position = (SELECT min(position) FROM relaybus.exceptions
                                                  WHERE handler = 'hk')), true,
          'the failing head is cancelled');
SELECT is((SELECT string_agg(event_id, ',') FROM relaybus.claim('hk-worker', 10, '30 seconds', ARRAY['hk'])
            WHERE key = 'K'), 'k1', 'and the key''s next delivery runs next, alone of its key');
SELECT * FROM finish();
