-- Guarantees of a claim's reading of its held lanes:
-- 1. A delivery published without a delay is due as soon as a claim sees it, whatever the
--    claim's clock. A claim's now() is its transaction's start; a publish whose transaction
--    began later and committed before the claim read the lane has a later available_at.
--    Judged by the clock, it would move to an exception row (a write, and a wait for a later
--    claim); it must be picked.
-- 2. A claim locks only the held lanes it acts on: a worker may hold every lane of a
--    handler, and a lock per idle lane per claim is a WAL record and a step each.
SELECT rb_reset();
SELECT plan(6);

SELECT relaybus.subscribe('clock', ARRAY['clock.event']);
SELECT rb_connect('publisher');

-- 1. The claim's transaction begins, then another session publishes and commits.
BEGIN;
SELECT now() AS claim_began \gset
SELECT pg_sleep(0.01) AS slept \gset
SELECT * FROM dblink('publisher', $$SELECT relaybus.publish('clock.event', '{}'::jsonb, 'k1', 'clock-1')$$) AS t(id text) \gset
SELECT cmp_ok((SELECT available_at FROM relaybus.deliveries WHERE event_id = 'clock-1'),
              '>', :'claim_began'::timestamptz,
              'the delivery is due at its publisher''s now(), later than the claim''s');
CREATE TEMP TABLE c1 AS
  SELECT lease_token, event_id FROM relaybus.claim('cw', 10, '30 seconds', ARRAY['clock']);
COMMIT;
SELECT is((SELECT array_agg(event_id) FROM c1), ARRAY['clock-1'],
          'the claim picks it');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions), 0,
          'and writes no exception row for it');
SELECT ok(relaybus.complete(lease_token), 'it completes') FROM c1;

-- 2. Forty keys over many lanes, claimed and completed: the worker holds those lanes, idle,
-- with fresh leases. One new delivery to one of them: the next claim locks that lane only.
SELECT count(*) AS published FROM relaybus.publish_batch((
  SELECT jsonb_agg(jsonb_build_object('type', 'clock.event', 'id', 'clock-k' || i, 'key', 'k' || i))
  FROM generate_series(2, 40) i)) \gset
CREATE TEMP TABLE c2 AS
  SELECT lease_token FROM relaybus.claim('cw', 100, '30 seconds', ARRAY['clock']);
SELECT relaybus.complete_many(array_agg(lease_token)) AS completed FROM c2 \gset
SELECT relaybus.publish('clock.event', '{}'::jsonb, 'k2', 'clock-new') AS published \gset
BEGIN;
CREATE TEMP TABLE c3 AS
  SELECT lease_token, event_id FROM relaybus.claim('cw', 100, '30 seconds', ARRAY['clock']);
SELECT is((SELECT count(*)::int FROM pgrowlocks('relaybus.lanes')), 1,
          format('the claim locked the one lane it took from, not the other %s it holds',
                 (SELECT count(*) - 1 FROM relaybus.lanes WHERE handler = 'clock' AND lease_owner = 'cw')));
COMMIT;
SELECT is((SELECT array_agg(event_id) FROM c3), ARRAY['clock-new'], 'and took the new delivery');

SELECT dblink_disconnect('publisher');
SELECT * FROM finish();
