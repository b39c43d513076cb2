-- Guarantee: per-handler retry and dead letter (test/pgtap/03_retry_dead_letter.sql on
-- 0.3.0). Each (event, handler) is its own delivery: a failure of one handler reschedules
-- only that one, with backoff_base * 2^(n-1) capped at backoff_max (or at retry_at), and
-- dead-letters it once attempts reach max_attempts. A dead delivery is never claimed again
-- until requeue / requeue_dead gives it a fresh budget (attempts 0). The exact
-- available_at - updated_at deltas, attempt counts and statuses below break if the
-- backoff, the budget or the per-handler isolation breaks.
--
-- How 0.3.0 stores it: the delivery row is never updated; a failed attempt moves its
-- position to an exception row (relaybus.exceptions: status, attempts, last_error,
-- available_at, updated_at), which is what 0.2 read from the delivery row. A delivery with
-- no exception row is on the happy path, uncharged.
-- A due time far ahead (2090) is part of what is checked here: allow it.
SET relaybus.max_delay = '2147483647s';
SELECT rb_reset();
SELECT plan(46);

SELECT relaybus.subscribe('flaky', ARRAY['job.run'], 5, '50 ms', '150 ms');
SELECT relaybus.subscribe('steady', ARRAY['job.run']);
SELECT relaybus.publish('job.run', '{}', NULL, 'job-1');

CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky', 'steady']);
SELECT bag_eq('SELECT handler, attempts FROM c1', $$VALUES ('flaky', 0), ('steady', 0)$$,
              'one event, one delivery per handler, both claimed with no attempt charged');
SELECT available_at AS steady_due FROM relaybus.deliveries WHERE handler = 'steady' \gset

-- Attempt 1 fails: retry after backoff_base.
SELECT is(relaybus.fail((SELECT lease_token FROM c1 WHERE handler = 'flaky'), 'boom 1'), 'retry',
          'first failure: retry');
SELECT row_eq($$SELECT status, attempts, last_error, available_at - updated_at
                 FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW('pending'::text, 1, 'boom 1'::text, interval '50 ms'),
              'failure 1: one attempt charged, due after backoff_base (50 ms)');
-- 0.2 compared the other handler's delivery row (pending, 0 attempts, due time); 0.3.0
-- never updates a delivery row, so "untouched" is: no exception row, in flight, uncharged.
SELECT row_eq($$SELECT d.available_at, (SELECT count(*)::int FROM relaybus.exceptions WHERE handler = 'steady'),
                       (SELECT status || '/' || attempts FROM relaybus.list_deliveries(NULL, 'steady'))
                  FROM relaybus.deliveries d WHERE d.handler = 'steady'$$,
              ROW(:'steady_due'::timestamptz, 0, 'processing/0'::text),
              'the other handler''s delivery of the same event is untouched');
SELECT ok(relaybus.complete((SELECT lease_token FROM c1 WHERE handler = 'steady')),
          'the other handler completes while this one is retrying');
SELECT results_eq($$SELECT handler FROM relaybus.list_deliveries()$$, $$VALUES ('flaky')$$,
                  'only the failing handler''s delivery remains');

-- Attempt 2 fails: 50 ms * 2.
SELECT pg_sleep(0.06);
CREATE TEMP TABLE c2 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT results_eq('SELECT event_id, attempts FROM c2', $$VALUES ('job-1', 1)$$,
                  'after the backoff it is claimed again, reporting 1 attempt so far');
SELECT is(relaybus.fail((SELECT lease_token FROM c2), 'boom 2'), 'retry', 'second failure: retry');
SELECT row_eq($$SELECT attempts, available_at - updated_at FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW(2, interval '100 ms'), 'failure 2: backoff doubled (base * 2)');

-- Attempt 3 fails: 50 ms * 4 = 200 ms, capped at backoff_max = 150 ms.
SELECT pg_sleep(0.11);
CREATE TEMP TABLE c3 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT results_eq('SELECT attempts FROM c3', $$VALUES (2)$$, 'third claim reports 2 attempts');
SELECT is(relaybus.fail((SELECT lease_token FROM c3), 'boom 3'), 'retry', 'third failure: retry');
SELECT row_eq($$SELECT attempts, available_at - updated_at FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW(3, interval '150 ms'), 'failure 3: backoff capped at backoff_max');

-- Attempt 4 fails: stays at the cap.
SELECT pg_sleep(0.16);
CREATE TEMP TABLE c4a AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT results_eq('SELECT attempts FROM c4a', $$VALUES (3)$$, 'fourth claim reports 3 attempts');
SELECT is(relaybus.fail((SELECT lease_token FROM c4a), 'boom 4'), 'retry', 'fourth failure: retry');
SELECT row_eq($$SELECT attempts, available_at - updated_at FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW(4, interval '150 ms'), 'failure 4: backoff stays at the cap');

-- Attempt 5 = max_attempts: dead.
SELECT pg_sleep(0.16);
CREATE TEMP TABLE c4 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT results_eq('SELECT attempts FROM c4', $$VALUES (4)$$, 'fifth claim reports 4 attempts');
SELECT is(relaybus.fail((SELECT lease_token FROM c4), 'boom 5'), 'dead',
          'the failure that reaches max_attempts dead-letters');
SELECT row_eq($$SELECT status, attempts, last_error FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW('dead'::text, 5, 'boom 5'::text), 'dead letter: status dead, 5 attempts, last error kept');
-- 0.3.0: a lane runs window positions (in_flight) and exception rows (retrying).
SELECT is((SELECT count(*)::int FROM relaybus.lane_state l JOIN relaybus.deliveries d
              ON d.handler = l.handler AND d.lane = l.lane
            WHERE l.handler = 'flaky' AND d.event_id = 'job-1'
              AND (d.position = ANY (l.in_flight) OR d.position = ANY (l.retrying))), 0,
          'the dead delivery is not in its lane''s in-flight lists');

-- A dead delivery is never claimed again: not by the same worker, not by another one, not
-- after its due time (already past), not after a takeover round.
SELECT relaybus.take_over_expired();
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky'])), 0,
          'the dead delivery is not claimed by the same worker');
SELECT is((SELECT count(*)::int FROM relaybus.claim('other', 10, '30 seconds', NULL)), 0,
          'the dead delivery is not claimed by any other worker');
SELECT results_eq($$SELECT pending, processing, dead FROM relaybus.statistics() WHERE handler = 'flaky'$$,
                  $$VALUES (0::bigint, 0::bigint, 1::bigint)$$, 'statistics count one dead letter');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM c4)),
          'the token that dead-lettered it cannot complete it');
SELECT is((SELECT status FROM relaybus.exceptions WHERE handler = 'flaky'), 'dead', 'still dead');

-- requeue brings it back with a fresh budget, due now.
SELECT ok(relaybus.requeue('job-1', 'flaky'), 'requeue of a dead delivery returns true');
SELECT row_eq($$SELECT status, attempts, available_at <= now() FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW('pending'::text, 0, true), 'requeued: pending, attempts 0, due now');
SELECT ok(NOT relaybus.requeue('job-1', 'flaky'), 'requeue of a delivery that is not dead returns false');
CREATE TEMP TABLE c5 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT results_eq('SELECT event_id, attempts FROM c5', $$VALUES ('job-1', 0)$$,
                  'the requeued delivery is claimed again with attempts 0');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM c4)),
          'the pre-requeue token cannot complete the requeued delivery');

-- bury dead-letters at once (charging the attempt); requeue_dead brings it back.
SELECT ok(relaybus.bury((SELECT lease_token FROM c5), 'poison'), 'bury returns true');
SELECT row_eq($$SELECT status, attempts, last_error FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW('dead'::text, 1, 'poison'::text), 'buried: dead with one attempt charged');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky'])), 0,
          'a buried delivery is not claimed');
SELECT is(relaybus.requeue_dead('flaky'), 1::bigint, 'requeue_dead requeues the one dead letter');
SELECT row_eq($$SELECT status, attempts FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW('pending'::text, 0), 'requeue_dead: pending with attempts 0');
SELECT is(relaybus.requeue_dead('flaky'), 0::bigint, 'requeue_dead with nothing dead requeues nothing');

-- retry_at overrides the backoff.
CREATE TEMP TABLE c6 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT is((SELECT attempts FROM c6), 0, 'claimed again after requeue_dead with attempts 0');
SELECT is(relaybus.fail((SELECT lease_token FROM c6), 'later', '2090-01-01 00:00:00+00'), 'retry',
          'fail with retry_at: retry');
SELECT row_eq($$SELECT attempts, available_at FROM relaybus.exceptions WHERE handler = 'flaky'$$,
              ROW(1, '2090-01-01 00:00:00+00'::timestamptz), 'retry_at is the new due time exactly');

-- Per-handler budgets: max_attempts 1 dead-letters on the first failure, while another
-- handler of the same event with the default budget retries.
SELECT relaybus.subscribe('once', ARRAY['mail.send'], 1);
SELECT relaybus.subscribe('patient', ARRAY['mail.send']);
SELECT relaybus.publish('mail.send', '{}', NULL, 'mail-1');
CREATE TEMP TABLE c7 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['once', 'patient']);
SELECT is(relaybus.fail((SELECT lease_token FROM c7 WHERE handler = 'once')), 'dead',
          'max_attempts 1: the first failure is fatal');
SELECT is(relaybus.fail((SELECT lease_token FROM c7 WHERE handler = 'patient')), 'retry',
          'the same event''s other handler retries under its own budget');
SELECT bag_eq($$SELECT handler, status, attempts FROM relaybus.exceptions WHERE event_id = 'mail-1'$$,
              $$VALUES ('once', 'dead', 1), ('patient', 'pending', 1)$$,
              'each (event, handler) carries its own status and attempts');
SELECT row_eq($$SELECT available_at - updated_at FROM relaybus.exceptions
                 WHERE event_id = 'mail-1' AND handler = 'patient'$$,
              ROW(interval '1 second'), 'default backoff_base: retried after 1 second');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['patient'])), 0,
          'a retry is not claimable before its backoff has passed');
SELECT is(relaybus.requeue_dead(NULL), 1::bigint, 'requeue_dead(NULL) requeues the dead letters of every handler');
SELECT bag_eq($$SELECT handler, status, attempts FROM relaybus.exceptions WHERE event_id = 'mail-1'$$,
              $$VALUES ('once', 'pending', 0), ('patient', 'pending', 1)$$,
              'only the dead delivery got a fresh budget');
SELECT bag_eq($$SELECT handler, status, attempts FROM relaybus.list_deliveries() WHERE event_id = 'mail-1'$$,
              $$VALUES ('once', 'pending', 0), ('patient', 'pending', 1)$$,
              'and list_deliveries reports the same');

SELECT * FROM finish();
