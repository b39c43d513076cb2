-- Guarantee: a lane's progress is its newest lane_progress row, whatever this backend
-- remembers of it. Every read of the newest row starts from the backend's hint (the
-- newest seq it read or wrote, src/pg/progress_hints.hpp) and must fall back to an
-- unbounded probe when nothing is at or above the hint. The hint overshoots after a
-- rolled-back write: here each ROLLBACK leaves the backend's hint one row above the
-- lane's newest. If the fallback went, the claim's read would take the lane for one
-- without progress (and fail to insert a row that exists), and the completion's and the
-- failure's lock filters would not find the lane's in-flight positions (false, not true).
SELECT rb_reset();
SELECT plan(9);

SELECT relaybus.subscribe('hints', ARRAY['hints.event']);
-- Five events of one key: one lane, taken one at a time (one per key per batch).
SELECT count(*) AS published FROM relaybus.publish_batch((
  SELECT jsonb_agg(jsonb_build_object('type', 'hints.event', 'id', 'hints-' || i, 'key', 'k')
                   ORDER BY i) FROM generate_series(1, 5) i)) \gset
SELECT relaybus.lane_of('k') AS lane \gset

CREATE TEMP TABLE c1 AS SELECT lease_token, event_id FROM relaybus.claim('hints', 10, '30 seconds', ARRAY['hints']);
SELECT max(seq) AS seq1 FROM relaybus.lane_progress WHERE handler = 'hints' AND lane = :lane \gset

-- A claim's write rolled back: the hint is seq1 + 1, the newest row seq1.
BEGIN;
SELECT relaybus.complete(lease_token) AS completed FROM c1 \gset
ROLLBACK;
SELECT is((SELECT max(seq) FROM relaybus.lane_progress WHERE handler = 'hints' AND lane = :lane),
          :seq1::bigint, 'the rolled-back completion left no row');
SELECT ok(relaybus.complete(lease_token), 'the completion finds the lane behind an overshooting hint')
  FROM c1;
SELECT is((SELECT acked_upto FROM relaybus.lane_state WHERE handler = 'hints' AND lane = :lane),
          1::bigint, 'and moves the cursor over its position');

-- The same for a claim: its read of the lane's progress falls back.
BEGIN;
SELECT count(*) AS claimed FROM relaybus.claim('hints', 10, '30 seconds', ARRAY['hints']) \gset
ROLLBACK;
CREATE TEMP TABLE c2 AS SELECT lease_token, event_id FROM relaybus.claim('hints', 10, '30 seconds', ARRAY['hints']);
SELECT is((SELECT event_id FROM c2), 'hints-2', 'the next claim takes the key''s next delivery');
SELECT is((SELECT in_flight FROM relaybus.lane_state WHERE handler = 'hints' AND lane = :lane),
          ARRAY[2]::bigint[], 'the lane lists it in flight');

-- And for the end of an attempt.
BEGIN;
SELECT relaybus.fail(lease_token, 'boom') AS failed FROM c2 \gset
ROLLBACK;
SELECT is(relaybus.fail(lease_token, 'boom'), 'retry',
          'a failure finds the lane behind an overshooting hint') FROM c2;
SELECT is((SELECT status || '/' || attempts FROM relaybus.exceptions
            WHERE handler = 'hints' AND lane = :lane AND position = 2),
          'pending/1', 'and its position becomes a pending exception row, one attempt charged');

-- Under REPEATABLE READ the read is checked against the transaction's snapshot with the
-- newest row as its bound: a lane the snapshot sees as it is now is no conflict.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT is((SELECT count(*)::int FROM relaybus.claim('hints', 10, '30 seconds', ARRAY['hints'])), 0,
          'a REPEATABLE READ claim reads the lane (its key waits for the retry) without a conflict');
COMMIT;
SELECT is((SELECT count(*)::int FROM relaybus.lane_progress p WHERE handler = 'hints' AND lane = :lane
            AND NOT EXISTS (SELECT 1 FROM relaybus.lane_progress q WHERE q.handler = p.handler
                              AND q.lane = p.lane AND q.seq = p.seq - 1) AND p.seq > 1), 0,
          'the lane''s rows have no gap in seq: every write followed the newest row');

SELECT * FROM finish();
