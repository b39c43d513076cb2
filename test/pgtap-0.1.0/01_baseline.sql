-- The 0.1.0 row-lease baseline (CREATE EXTENSION relaybus VERSION '0.1.0'): a claim
-- writes the delivery row (status 'processing', the attempt charged, lease owner, token and
-- expiry), a completion marks it 'completed' and keeps it, fail/bury/release/takeover end
-- the lease on the same row. Each block below starts from an empty bus (:reset) and checks
-- the rows the functions leave, so a broken rule shows up as a wrong status, attempt count,
-- due time or token outcome. Lease expiry uses leases of milliseconds; retries move the due
-- time to now() instead of sleeping through the backoff.
TRUNCATE relaybus.events, relaybus.deliveries, relaybus.key_counters, relaybus.subscriptions;
\set reset 'TRUNCATE relaybus.events, relaybus.deliveries, relaybus.key_counters, relaybus.subscriptions'
SELECT plan(177);

--------------------------------------------------------------------------------
-- Atomic publish: the event and its deliveries commit or roll back with the caller.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('mail', ARRAY['order.created']);
SELECT relaybus.subscribe('audit', ARRAY['*']);
SELECT relaybus.subscribe('billing', ARRAY['invoice.sent']);

BEGIN;
SELECT relaybus.publish('order.created', '{"n": 1}', NULL, 'rolled-back');
ROLLBACK;
SELECT is((SELECT count(*)::int FROM relaybus.events), 0, 'publish rolled back: no event');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 0, 'publish rolled back: no delivery');

BEGIN;
SELECT relaybus.publish('order.created', '{"n": 1}', 'cust-9', 'rolled-back-keyed');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'rolled-back-keyed'), 2,
          'inside the publishing transaction the deliveries exist');
ROLLBACK;
SELECT is((SELECT count(*)::int FROM relaybus.key_counters), 0,
          'a rolled-back keyed publish leaves no key counter');

SELECT is(relaybus.publish('order.created', '{"n": 1}', NULL, 'o-1'), 'o-1',
          'publish returns the given event id');
SELECT bag_eq($$SELECT handler, status, attempts, key, sequence FROM relaybus.deliveries
                WHERE event_id = 'o-1'$$,
              $$VALUES ('audit', 'pending', 0, NULL::text, NULL::bigint),
                       ('mail', 'pending', 0, NULL, NULL)$$,
              'one pending delivery per subscriber of the type (''*'' matches every type)');
SELECT ok(relaybus.publish('order.created')
            ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$',
          'without an event id, publish generates a UUID');
SELECT is(relaybus.publish('order.created', '{}', NULL, 'o-direct', ARRAY['billing']), 'o-direct',
          'publish to explicit handlers');
SELECT results_eq($$SELECT handler FROM relaybus.deliveries WHERE event_id = 'o-direct'$$,
                  $$VALUES ('billing')$$,
                  'explicit handlers replace the subscribers of the type');
SELECT relaybus.publish('nobody.listens', '{}', NULL, 'o-none');
SELECT results_eq($$SELECT handler FROM relaybus.deliveries WHERE event_id = 'o-none'$$,
                  $$VALUES ('audit')$$,
                  'a type nobody names goes only to the ''*'' subscriber');
SELECT relaybus.publish('order.created', '{}', NULL, 'o-later', ARRAY['mail'],
                        now() + interval '1 hour');
SELECT ok((SELECT available_at > now() + interval '59 minutes' FROM relaybus.deliveries
            WHERE event_id = 'o-later'), 'available_at delays the delivery');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', NULL, 'o-bad',
                                           ARRAY['mail', 'nobody'])$$,
                 '42704', 'handler "nobody" is not subscribed',
                 'publish to an unknown handler: 42704');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'o-bad'), 0,
          'a failed publish writes nothing');

--------------------------------------------------------------------------------
-- claim charges the attempt and writes the delivery; complete marks it completed.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('mail', ARRAY['order.created']);
SELECT relaybus.publish('order.created', '{"n": 1}', NULL, 'o-1', NULL, NULL, '{"trace": "t1"}');
CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w1', 10, '30 seconds');
SELECT results_eq($$SELECT event_id, handler, type, key, payload, headers, attempts FROM c1$$,
                  $$VALUES ('o-1', 'mail', 'order.created', NULL::text, '{"n": 1}'::jsonb,
                            '{"trace": "t1"}'::jsonb, 0)$$,
                  'claim returns the event; attempts = attempts charged before this claim (0)');
SELECT ok((SELECT published_at IS NOT NULL FROM c1), 'claim returns published_at');
SELECT ok((SELECT lease_token ~ '^v0\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.4\.mailo-1$'
             FROM c1),
          'token: v0.<uuid>.<handler length>.<handler><event id>');
SELECT row_eq($$SELECT status, attempts, lease_owner, lease_token = (SELECT lease_token FROM c1),
                       lease_expires_at - updated_at
                  FROM relaybus.deliveries WHERE event_id = 'o-1'$$,
              ROW('processing'::text, 1, 'w1'::text, true, interval '30 seconds'),
              'claim writes the row: processing, attempt charged, owner, token, expiry');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2')), 0,
          'a processing delivery is not claimed by another worker');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w1')), 0,
          'nor again by the same worker');
SELECT results_eq($$SELECT handler, pending, processing, dead, completed FROM relaybus.statistics()$$,
                  $$VALUES ('mail', 0::bigint, 1::bigint, 0::bigint, 0::bigint)$$,
                  'statistics: one processing');
SELECT results_eq($$SELECT event_id, status, lease_owner FROM relaybus.list_deliveries('processing')$$,
                  $$VALUES ('o-1', 'processing', 'w1')$$,
                  'list_deliveries(''processing'') names the lease owner');
SELECT is(relaybus.extend_lease('w1', '1 minute'), 1, 'extend_lease renews the worker''s deliveries');
SELECT ok((SELECT lease_expires_at > now() + interval '50 seconds' FROM relaybus.deliveries
            WHERE event_id = 'o-1'), 'extend_lease moves lease_expires_at to now() + lease');
SELECT is(relaybus.extend_lease('w2'), 0, 'extend_lease of another worker renews nothing');
SELECT is(relaybus.relinquish('w1'), 0, 'relinquish: 0.1.0 has no lanes to hand back');

SELECT ok(relaybus.complete((SELECT lease_token FROM c1)), 'complete returns true');
SELECT row_eq($$SELECT status, attempts, lease_owner, lease_token, lease_expires_at
                  FROM relaybus.deliveries WHERE event_id = 'o-1'$$,
              ROW('completed'::text, 1, NULL::text, NULL::text, NULL::timestamptz),
              'complete marks the row completed, keeps it, clears the lease');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM c1)), 'a second complete returns false');
SELECT is(relaybus.fail((SELECT lease_token FROM c1)), 'lost', 'fail after completion: lost');
SELECT ok(NOT relaybus.release((SELECT lease_token FROM c1)), 'release after completion: false');
SELECT ok(NOT relaybus.bury((SELECT lease_token FROM c1)), 'bury after completion: false');
SELECT is((SELECT status FROM relaybus.deliveries WHERE event_id = 'o-1'), 'completed',
          'the completed row is unchanged by the spent token');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w1')), 0, 'a completed delivery is not claimed');
SELECT results_eq($$SELECT handler, pending, processing, dead, completed FROM relaybus.statistics()$$,
                  $$VALUES ('mail', 0::bigint, 0::bigint, 0::bigint, 1::bigint)$$,
                  'statistics: one completed');
SELECT results_eq($$SELECT event_id, status FROM relaybus.list_deliveries('completed')$$,
                  $$VALUES ('o-1', 'completed')$$, 'list_deliveries(''completed'') lists it');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0,
          'list_deliveries() leaves completed rows out');

-- complete_many: one statement, duplicates count once, lost tokens are skipped.
SELECT relaybus.publish('order.created', '{}', NULL, 'm-' || i) FROM generate_series(1, 3) i;
CREATE TEMP TABLE c2 AS SELECT * FROM relaybus.claim('w1', 10);
SELECT is((SELECT count(*)::int FROM c2), 3, 'three claimed');
SELECT is(relaybus.complete_many((SELECT array_agg(lease_token) || (SELECT lease_token FROM c1)
                                    FROM c2)), 3,
          'complete_many: three completed, the spent token is skipped');
SELECT is(relaybus.complete_many((SELECT array_agg(lease_token) FROM c2)), 0,
          'complete_many of spent tokens completes nothing');
SELECT is(relaybus.complete_many('{}'), 0, 'complete_many of an empty array: 0');
SELECT relaybus.publish('order.created', '{}', NULL, 'm-4');
CREATE TEMP TABLE c3 AS SELECT * FROM relaybus.claim('w1', 10);
SELECT is(relaybus.complete_many((SELECT ARRAY[lease_token, lease_token] FROM c3)), 1,
          'complete_many: a token given twice counts once');

-- A completion after the lease expired succeeds while nobody took the delivery over.
SELECT relaybus.publish('order.created', '{}', NULL, 'late');
CREATE TEMP TABLE c4 AS SELECT * FROM relaybus.claim('w1', 10, '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT ok(relaybus.complete((SELECT lease_token FROM c4)),
          'complete after expiry, before any takeover: true');

--------------------------------------------------------------------------------
-- fail: retry with backoff (the attempt was charged at claim), dead at max_attempts.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('flaky', ARRAY['job'], 3, '1 second', '3 seconds');
SELECT relaybus.subscribe('steady', ARRAY['job']);
SELECT relaybus.publish('job', '{}', NULL, 'j-1');
CREATE TEMP TABLE f1 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT is(relaybus.fail((SELECT lease_token FROM f1), 'boom 1'), 'retry', 'failure 1: retry');
SELECT row_eq($$SELECT status, attempts, last_error, available_at - updated_at, lease_owner,
                       lease_token, lease_expires_at
                  FROM relaybus.deliveries WHERE handler = 'flaky'$$,
              ROW('pending'::text, 1, 'boom 1'::text, interval '1 second', NULL::text, NULL::text,
                  NULL::timestamptz),
              'failure 1: pending, 1 attempt, due after backoff_base, lease cleared');
SELECT row_eq($$SELECT status, attempts FROM relaybus.deliveries WHERE handler = 'steady'$$,
              ROW('pending'::text, 0), 'the other handler''s delivery is untouched');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky'])), 0,
          'not claimed before its backoff ends');
UPDATE relaybus.deliveries SET available_at = now() WHERE handler = 'flaky';
CREATE TEMP TABLE f2 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT results_eq('SELECT event_id, attempts FROM f2', $$VALUES ('j-1', 1)$$,
                  'claimed again, reporting 1 attempt so far');
SELECT is((SELECT attempts FROM relaybus.deliveries WHERE handler = 'flaky'), 2,
          'the second claim charged the second attempt');
SELECT is(relaybus.fail((SELECT lease_token FROM f2), 'boom 2'), 'retry', 'failure 2: retry');
SELECT is((SELECT available_at - updated_at FROM relaybus.deliveries WHERE handler = 'flaky'),
          interval '2 seconds', 'failure 2: backoff doubled');
UPDATE relaybus.deliveries SET available_at = now() WHERE handler = 'flaky';
CREATE TEMP TABLE f3 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky']);
SELECT results_eq('SELECT attempts FROM f3', $$VALUES (2)$$, 'third claim reports 2 attempts');
SELECT is(relaybus.fail((SELECT lease_token FROM f3)), 'dead',
          'the failure of attempt max_attempts dead-letters');
SELECT row_eq($$SELECT status, attempts, last_error, lease_token FROM relaybus.deliveries
                 WHERE handler = 'flaky'$$,
              ROW('dead'::text, 3, 'boom 2'::text, NULL::text),
              'dead: 3 attempts, a NULL error keeps the last one, lease cleared');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky'])), 0,
          'a dead delivery is not claimed');
SELECT is(relaybus.fail((SELECT lease_token FROM f3)), 'lost', 'the spent token: lost');
SELECT is(relaybus.take_over_expired(), 0, 'nothing to take over');

-- The cap: backoff_base * 2^(n-1) stops at backoff_max.
SELECT relaybus.subscribe('capped', ARRAY['cap'], 10, '1 second', '3 seconds');
SELECT relaybus.publish('cap', '{}', NULL, 'cap-1');
UPDATE relaybus.deliveries SET attempts = 2 WHERE event_id = 'cap-1';
CREATE TEMP TABLE f4 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['capped']);
SELECT is(relaybus.fail((SELECT lease_token FROM f4)), 'retry', 'failure 3 of 10: retry');
SELECT is((SELECT available_at - updated_at FROM relaybus.deliveries WHERE event_id = 'cap-1'),
          interval '3 seconds', 'failure 3: 4 seconds capped at backoff_max (3 seconds)');

-- retry_at overrides the backoff; bury dead-letters at once.
SELECT relaybus.publish('job', '{}', NULL, 'j-2', ARRAY['steady']);
CREATE TEMP TABLE f5 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['steady']);
SELECT is((SELECT count(*)::int FROM f5), 2, 'steady claims j-1 and j-2');
SELECT is(relaybus.fail((SELECT lease_token FROM f5 WHERE event_id = 'j-2'), 'later',
                        '2030-01-01 00:00:00+00'), 'retry', 'fail with retry_at: retry');
SELECT is((SELECT available_at FROM relaybus.deliveries WHERE event_id = 'j-2'),
          '2030-01-01 00:00:00+00'::timestamptz, 'retry_at is taken as is');
SELECT ok(relaybus.bury((SELECT lease_token FROM f5 WHERE event_id = 'j-1'), 'poison'),
          'bury returns true');
SELECT row_eq($$SELECT status, attempts, last_error FROM relaybus.deliveries
                 WHERE event_id = 'j-1' AND handler = 'steady'$$,
              ROW('dead'::text, 1, 'poison'::text),
              'bury: dead at once, the attempt charged at claim, error stored');
SELECT results_eq($$SELECT handler, pending, processing, dead FROM relaybus.statistics()$$,
                  $$VALUES ('capped', 1::bigint, 0::bigint, 0::bigint),
                           ('flaky', 0::bigint, 0::bigint, 1::bigint),
                           ('steady', 1::bigint, 0::bigint, 1::bigint)$$,
                  'statistics count pending and dead per handler');

--------------------------------------------------------------------------------
-- requeue and requeue_dead: dead -> pending, fresh budget, due now.
--------------------------------------------------------------------------------
SELECT ok(relaybus.requeue('j-1', 'flaky'), 'requeue a dead delivery: true');
SELECT row_eq($$SELECT status, attempts, available_at <= now() FROM relaybus.deliveries
                 WHERE event_id = 'j-1' AND handler = 'flaky'$$,
              ROW('pending'::text, 0, true), 'requeued: pending, attempts 0, due now');
SELECT ok(NOT relaybus.requeue('j-1', 'flaky'), 'requeue of a delivery that is not dead: false');
SELECT results_eq($$SELECT event_id, attempts FROM relaybus.claim('w', 10, '30 seconds', ARRAY['flaky'])$$,
                  $$VALUES ('j-1', 0)$$, 'the requeued delivery is claimed with a fresh budget');
SELECT is(relaybus.requeue_dead('steady'), 1::bigint, 'requeue_dead(handler) requeues its dead letters');
SELECT is((SELECT status FROM relaybus.deliveries WHERE event_id = 'j-1' AND handler = 'steady'),
          'pending', 'requeue_dead: pending again');
SELECT is(relaybus.requeue_dead(), 0::bigint, 'requeue_dead() with no dead letters left: 0');
SELECT throws_ok($$SELECT relaybus.requeue_dead('nobody')$$, '42704', NULL,
                 'requeue_dead of an unknown handler: 42704');
SELECT throws_ok($$SELECT relaybus.requeue(NULL, 'flaky')$$, '22004', NULL, 'requeue(NULL): 22004');

--------------------------------------------------------------------------------
-- Per-key order: the next delivery of a (handler, key) only after the previous one ended.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('ship', ARRAY['order']);
SELECT relaybus.publish('order', '{}', 'cust-1', 'k1-a');
SELECT relaybus.publish('order', '{}', 'cust-1', 'k1-b');
SELECT relaybus.publish('order', '{}', 'cust-1', 'k1-c');
SELECT relaybus.publish('order', '{}', 'cust-2', 'k2-a');
SELECT relaybus.publish('order', '{}', NULL, 'u-1');
SELECT results_eq($$SELECT event_id, sequence FROM relaybus.deliveries WHERE key = 'cust-1'
                     ORDER BY sequence$$,
                  $$VALUES ('k1-a', 1::bigint), ('k1-b', 2::bigint), ('k1-c', 3::bigint)$$,
                  'a key''s events are numbered in publish order');
CREATE TEMP TABLE k1 AS SELECT * FROM relaybus.claim('w1', 10);
SELECT bag_eq('SELECT event_id FROM k1', $$VALUES ('k1-a'), ('k2-a'), ('u-1')$$,
              'one batch: the head of each key and the unkeyed event, not the followers');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2', 10)), 0,
          'while a key''s head is processing, no other worker gets its followers');
SELECT ok(relaybus.complete((SELECT lease_token FROM k1 WHERE event_id = 'k1-a')), 'head completed');
CREATE TEMP TABLE k2 AS SELECT * FROM relaybus.claim('w2', 10);
SELECT results_eq('SELECT event_id FROM k2', $$VALUES ('k1-b')$$,
                  'after the head completed, the next of the key (and only it) is claimed');
SELECT is(relaybus.fail((SELECT lease_token FROM k2), 'boom', now() + interval '1 hour'), 'retry',
          'the new head fails and waits for its retry');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2', 10)), 0,
          'a failed head waiting for its retry blocks the rest of its key');
UPDATE relaybus.deliveries SET available_at = now() WHERE event_id = 'k1-b';
CREATE TEMP TABLE k3 AS SELECT * FROM relaybus.claim('w3', 10);
SELECT results_eq('SELECT event_id, attempts FROM k3', $$VALUES ('k1-b', 1)$$,
                  'once due, the failed head runs again before its followers');
SELECT ok(relaybus.bury((SELECT lease_token FROM k3)), 'the head is dead-lettered');
SELECT results_eq($$SELECT event_id FROM relaybus.claim('w3', 10)$$, $$VALUES ('k1-c')$$,
                  'a dead delivery does not block its key');

-- A batch holds at most one delivery per (handler, key), whatever the batch size.
:reset;
SELECT relaybus.subscribe('ship', ARRAY['order']);
SELECT relaybus.subscribe('bill', ARRAY['order']);
SELECT relaybus.publish('order', '{}', 'cust-1', 'b-' || i) FROM generate_series(1, 5) i;
SELECT bag_eq($$SELECT handler, event_id FROM relaybus.claim('w', 100)$$,
              $$VALUES ('ship', 'b-1'), ('bill', 'b-1')$$,
              'one delivery per (handler, key): each handler gets the key''s head');

--------------------------------------------------------------------------------
-- Lease expiry: a takeover returns the delivery to the queue and fences the old token.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('slow', ARRAY['task'], 2);
SELECT relaybus.publish('task', '{}', NULL, 't-1');
CREATE TEMP TABLE e1 AS SELECT * FROM relaybus.claim('w1', 1, '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT is(relaybus.take_over_expired(), 1, 'take_over_expired takes over the expired delivery');
SELECT row_eq($$SELECT status, attempts, last_error, lease_owner, lease_token, lease_expires_at
                 FROM relaybus.deliveries WHERE event_id = 't-1'$$,
              ROW('pending'::text, 1, 'lease expired'::text, NULL::text, NULL::text,
                  NULL::timestamptz),
              'taken over: pending, the attempt charged at claim stays, lease cleared');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM e1)),
          'the old token''s complete returns false after the takeover');
SELECT is(relaybus.fail((SELECT lease_token FROM e1)), 'lost', 'the old token''s fail: lost');
SELECT ok(NOT relaybus.release((SELECT lease_token FROM e1)), 'the old token''s release: false');
SELECT is((SELECT status FROM relaybus.deliveries WHERE event_id = 't-1'), 'pending',
          'the stale token changed nothing');
CREATE TEMP TABLE e2 AS SELECT * FROM relaybus.claim('w2', 1, '10 milliseconds');
SELECT results_eq('SELECT event_id, attempts FROM e2', $$VALUES ('t-1', 1)$$,
                  'claimed again by another worker, reporting the attempt the lost lease used');
SELECT ok((SELECT e2.lease_token <> e1.lease_token FROM e1, e2), 'a new claim issues a new token');
SELECT pg_sleep(0.05);
SELECT is((SELECT count(*)::int FROM relaybus.claim('w3')), 0,
          'a claim takes over expired leases itself: out of attempts, nothing to return');
SELECT row_eq($$SELECT status, attempts, last_error FROM relaybus.deliveries WHERE event_id = 't-1'$$,
              ROW('dead'::text, 2, 'lease expired'::text),
              'a lease expiring on the last attempt dead-letters the delivery');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM e2)), 'that token is fenced too');

-- A claim's own takeover returns the delivery, and it may be picked by the same claim.
SELECT relaybus.publish('task', '{}', NULL, 't-2');
CREATE TEMP TABLE e3 AS SELECT * FROM relaybus.claim('w1', 1, '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT results_eq($$SELECT event_id, attempts FROM relaybus.claim('w4', 5)$$,
                  $$VALUES ('t-2', 1)$$,
                  'a claim takes over an expired lease and can pick the delivery at once');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM e3)), 'the first worker''s token is fenced');
SELECT is((SELECT lease_owner FROM relaybus.deliveries WHERE event_id = 't-2'), 'w4',
          'the new owner holds it');

--------------------------------------------------------------------------------
-- release gives the delivery back without charging an attempt.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('mail', ARRAY['order.created'], 1);
SELECT relaybus.publish('order.created', '{}', NULL, 'r-1');
SELECT available_at AS r1_due FROM relaybus.deliveries WHERE event_id = 'r-1' \gset
CREATE TEMP TABLE r1 AS SELECT * FROM relaybus.claim('w1');
SELECT is((SELECT attempts FROM relaybus.deliveries WHERE event_id = 'r-1'), 1,
          'the claim charged an attempt');
SELECT ok(relaybus.release((SELECT lease_token FROM r1)), 'release returns true');
SELECT row_eq($$SELECT status, attempts, available_at, lease_owner, lease_token
                 FROM relaybus.deliveries WHERE event_id = 'r-1'$$,
              ROW('pending'::text, 0, :'r1_due'::timestamptz, NULL::text, NULL::text),
              'released: pending, the attempt given back, due time unchanged, lease cleared');
SELECT ok(NOT relaybus.release((SELECT lease_token FROM r1)), 'the released token is spent');
CREATE TEMP TABLE r2 AS SELECT * FROM relaybus.claim('w2');
SELECT results_eq('SELECT event_id, attempts FROM r2', $$VALUES ('r-1', 0)$$,
                  'claimed again at once, still on its first attempt');
SELECT is(relaybus.fail((SELECT lease_token FROM r2)), 'dead',
          'with max_attempts 1 the first real failure is the last: release did not use it up');

--------------------------------------------------------------------------------
-- Inbox deduplication by event id.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('inbox', ARRAY['msg']);
SELECT is(relaybus.publish('msg', '{"v": 1}', NULL, 'broker-1'), 'broker-1', 'first publish');
SELECT is(relaybus.publish('msg', '{"v": 2}', NULL, 'broker-1'), 'broker-1',
          'the repeat returns the same id');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'broker-1'), 1,
          'same id twice: one delivery');
SELECT is((SELECT payload FROM relaybus.events WHERE id = 'broker-1'), '{"v": 1}'::jsonb,
          'the repeat does not change the stored event');
CREATE TEMP TABLE i1 AS SELECT * FROM relaybus.claim('w1');
SELECT ok(relaybus.complete((SELECT lease_token FROM i1)), 'completed');
SELECT relaybus.publish('msg', '{}', NULL, 'broker-1');
SELECT results_eq($$SELECT handler, status FROM relaybus.deliveries WHERE event_id = 'broker-1'$$,
                  $$VALUES ('inbox', 'completed')$$,
                  'a redelivery after completion adds no delivery');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w1')), 0, 'and nothing runs again');
SELECT relaybus.subscribe('inbox2', ARRAY['msg']);
SELECT relaybus.publish('msg', '{}', NULL, 'broker-1');
SELECT bag_eq($$SELECT handler, status FROM relaybus.deliveries WHERE event_id = 'broker-1'$$,
              $$VALUES ('inbox', 'completed'), ('inbox2', 'pending')$$,
              'a repeat adds deliveries only for handlers without a delivery of the event');
SELECT relaybus.publish('msg', '{}', 'key-x', 'broker-2');
SELECT relaybus.publish('msg', '{}', 'key-y', 'broker-2', ARRAY['inbox', 'inbox2']);
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id = 'broker-2'), 2,
          'a repeat naming handlers the event already has adds nothing');
SELECT is((SELECT count(*)::int FROM relaybus.key_counters WHERE key = 'key-y'), 0,
          'a repeat keeps the stored key');

--------------------------------------------------------------------------------
-- publish_batch: in order, one failure fails the whole call.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('mail', ARRAY['order.created']);
SELECT results_eq($$SELECT * FROM relaybus.publish_batch('[
                       {"type": "order.created", "id": "pb-1", "key": "k", "payload": {"n": 1}},
                       {"type": "order.created", "id": "pb-2", "key": "k", "headers": {"h": 1}},
                       {"type": "order.created", "id": "pb-1"}]')$$,
                  $$VALUES ('pb-1'), ('pb-2'), ('pb-1')$$,
                  'publish_batch returns the ids in input order (a repeat included)');
SELECT results_eq($$SELECT event_id, sequence FROM relaybus.deliveries ORDER BY sequence$$,
                  $$VALUES ('pb-1', 1::bigint), ('pb-2', 2::bigint)$$,
                  'keyed elements are numbered in array order; the repeat adds nothing');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "order.created", "id": "pb-3"},
                                                   {"type": "order.created", "payload": [1]}]')$$,
                 '22023', 'events[1]: payload must be a JSON object',
                 'publish_batch: a bad element fails with its index');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'pb-3'), 0,
          'publish_batch: nothing of a failed call is written');
SELECT throws_ok($$SELECT relaybus.publish_batch('{"type": "x"}')$$, '22023', NULL,
                 'publish_batch of a non-array: 22023');

--------------------------------------------------------------------------------
-- Bad input: specific SQLSTATEs, nothing written.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('mail', ARRAY['order.created']);
SELECT relaybus.publish('order.created', '{}', NULL, 'good-1');
CREATE TEMP TABLE b1 AS SELECT * FROM relaybus.claim('w1');
SELECT throws_ok($$SELECT * FROM relaybus.claim(NULL)$$, '22004', 'worker must not be NULL',
                 'claim: NULL worker: 22004');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', NULL)$$, '22004', NULL,
                 'claim: NULL batch_size: 22004');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 0)$$, '22023', NULL, 'claim: batch 0: 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10001)$$, '22023', NULL,
                 'claim: batch 10001: 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('', 1)$$, '22023', NULL, 'claim: empty worker: 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, '0 seconds')$$, '22023', NULL,
                 'claim: zero lease: 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, '25 hours')$$, '22023', NULL,
                 'claim: lease over a day: 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, '1 second', ARRAY['nobody'])$$, '42704',
                 'handler "nobody" is not subscribed', 'claim: unknown handler: 42704');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, '1 second', ARRAY[NULL::text])$$, '22004',
                 NULL, 'claim: NULL handler: 22004');
SELECT throws_ok($$SELECT relaybus.extend_lease('w', '2 days')$$, '22023', NULL,
                 'extend_lease: lease over a day: 22023');
SELECT throws_ok($$SELECT relaybus.complete(NULL)$$, '22004', NULL, 'complete(NULL): 22004');
SELECT throws_ok($$SELECT relaybus.complete('garbage')$$, '22023', NULL,
                 'complete: malformed token: 22023');
SELECT throws_ok($$SELECT relaybus.complete('v0.not-a-uuid.4.mailgood-1')$$, '22023', NULL,
                 'complete: token without a UUID: 22023');
SELECT throws_ok($$SELECT relaybus.complete('v0.' || gen_random_uuid() || '.04.mailgood-1')$$,
                 '22023', NULL, 'complete: handler length with a leading zero: 22023');
SELECT throws_ok($$SELECT relaybus.complete('v0.' || gen_random_uuid() || '.0.good-1')$$,
                 '22023', NULL, 'complete: empty handler: 22023');
SELECT throws_ok($$SELECT relaybus.complete('v0.' || gen_random_uuid() || '.4.mail')$$,
                 '22023', NULL, 'complete: token without an event id: 22023');
SELECT ok(NOT relaybus.complete('v0.' || gen_random_uuid() || '.4.mailgood-1'),
          'complete: a well-formed forged token returns false');
SELECT throws_ok($$SELECT relaybus.complete_many(ARRAY[(SELECT lease_token FROM b1), 'garbage'])$$,
                 '22023', NULL, 'complete_many: one malformed token: 22023');
SELECT is((SELECT status FROM relaybus.deliveries WHERE event_id = 'good-1'), 'processing',
          'complete_many with a malformed token completed nothing');
SELECT throws_ok($$SELECT relaybus.complete_many(ARRAY[NULL::text])$$, '22004', NULL,
                 'complete_many: NULL element: 22004');
SELECT throws_ok($$SELECT relaybus.fail(NULL)$$, '22004', NULL, 'fail(NULL): 22004');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '[1, 2]')$$, '22023',
                 'payload must be a JSON object', 'publish: non-object payload: 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '"text"')$$, '22023', NULL,
                 'publish: scalar payload: 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', NULL)$$, '22004', NULL,
                 'publish: NULL payload: 22004');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', headers => '[]')$$, '22023', NULL,
                 'publish: non-object headers: 22023');
SELECT throws_ok($$SELECT relaybus.publish('', '{}')$$, '22023', NULL, 'publish: empty type: 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', '')$$, '22023', NULL,
                 'publish: empty key: 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', NULL, '')$$, '22023', NULL,
                 'publish: empty event id: 22023');
SELECT throws_ok($$SELECT relaybus.publish('order.created', '{}', NULL, 'x', ARRAY['nobody'])$$,
                 '42704', NULL, 'publish: unknown handler: 42704');
SELECT is((SELECT count(*)::int FROM relaybus.events), 1, 'no bad publish wrote an event');
SELECT throws_ok($$SELECT relaybus.subscribe(NULL, ARRAY['t'])$$, '22004', NULL,
                 'subscribe: NULL handler: 22004');
SELECT throws_ok($$SELECT relaybus.subscribe('h', '{}')$$, '22023', NULL,
                 'subscribe: no event types: 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('h', ARRAY['t'], 0)$$, '22023', NULL,
                 'subscribe: max_attempts 0: 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('h', ARRAY['t'], 5, '-1 second')$$, '22023', NULL,
                 'subscribe: negative backoff: 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('h', ARRAY['t'], 5, '1 minute', '1 second')$$, '22023',
                 NULL, 'subscribe: backoff_max < backoff_base: 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('h', ARRAY['t'], 5, '1 second', '1 hour',
                                             'pg_catalog.abs(integer)'::regprocedure)$$,
                 '42883', NULL, 'subscribe: sql_function not taking one jsonb: 42883');
SELECT throws_ok($$SELECT relaybus.unsubscribe('nobody')$$, '42704', NULL,
                 'unsubscribe: unknown handler: 42704');
SELECT throws_ok($$SELECT * FROM relaybus.list_deliveries('bogus')$$, '22023', NULL,
                 'list_deliveries: unknown status: 22023');
SELECT is((SELECT count(*)::int FROM relaybus.subscriptions), 1, 'no bad subscribe wrote anything');

-- In-database handlers are skipped by a plain claim.
CREATE FUNCTION pg_temp.sql_handler(jsonb) RETURNS void LANGUAGE sql AS '';
SELECT relaybus.subscribe('indb', ARRAY['order.created'], 5, '1 second', '1 hour',
                          'pg_temp.sql_handler(jsonb)'::regprocedure);
SELECT relaybus.publish('order.created', '{}', NULL, 'good-2');
SELECT results_eq($$SELECT handler FROM relaybus.claim('w9', 10)$$, $$VALUES ('mail')$$,
                  'claim without handlers skips handlers with an sql_function');
SELECT results_eq($$SELECT handler FROM relaybus.claim('w9', 10, '30 seconds', ARRAY['indb'])$$,
                  $$VALUES ('indb')$$, 'naming the in-database handler claims it');
SELECT relaybus.unsubscribe('indb');

--------------------------------------------------------------------------------
-- purge_expired: retention of dead letters, completed rows and events.
--------------------------------------------------------------------------------
:reset;
SELECT relaybus.subscribe('mail', ARRAY['order.created']);
SELECT relaybus.publish('order.created', '{}', NULL, 'p-' || i) FROM generate_series(1, 3) i;
CREATE TEMP TABLE p1 AS SELECT * FROM relaybus.claim('w1', 2);
SELECT relaybus.complete((SELECT lease_token FROM p1 ORDER BY event_id LIMIT 1));
SELECT relaybus.bury((SELECT lease_token FROM p1 ORDER BY event_id DESC LIMIT 1));
SELECT relaybus.publish('order.created', '{}', NULL, 'p-x', '{}');
SELECT is(relaybus.purge_expired(), 0::bigint, 'default retention: nothing is old enough');
SET relaybus.retention_dead = 0;
SET relaybus.retention_completed = 0;
SELECT is(relaybus.purge_expired(), 5::bigint,
          'retention 0: the dead and the completed delivery, and the three events left without deliveries');
SELECT bag_eq('SELECT id FROM relaybus.events', $$VALUES ('p-3')$$,
              'only the event with a pending delivery stays');
SELECT is(relaybus.purge_expired(), 0::bigint, 'a second call finds nothing');
SET relaybus.retention_dead = '2h';
SELECT is(relaybus._retention('relaybus.retention_dead', 5), interval '2 hours',
          'a retention with a unit is read as an interval');
RESET relaybus.retention_dead;
RESET relaybus.retention_completed;
SELECT is(relaybus._retention('relaybus.retention_dead', 14 * 24 * 3600), interval '14 days',
          'retention_dead defaults to 14 days');
SELECT is(relaybus._retention('relaybus.no_such_setting', 7 * 24 * 3600), interval '7 days',
          'an unset retention falls back to the default');

--------------------------------------------------------------------------------
-- Privileges: each role gets its job, PUBLIC and the internal helpers nothing.
--------------------------------------------------------------------------------
SELECT ok(has_function_privilege('relaybus_publisher',
            'relaybus.publish(text, jsonb, text, text, text[], timestamptz, jsonb)', 'EXECUTE'),
          'publisher may publish');
SELECT ok(NOT has_function_privilege('relaybus_publisher',
            'relaybus.claim(text, integer, interval, text[])', 'EXECUTE'),
          'publisher may not claim');
SELECT ok(has_function_privilege('relaybus_worker', 'relaybus.complete(text)', 'EXECUTE'),
          'worker may complete');
SELECT ok(NOT has_function_privilege('relaybus_worker',
            'relaybus.subscribe(text, text[], integer, interval, interval, regprocedure)', 'EXECUTE'),
          'worker may not subscribe');
SELECT ok(has_function_privilege('relaybus_admin', 'relaybus.claim(text, integer, interval, text[])',
                                 'EXECUTE'),
          'admin may work too (member of relaybus_worker)');
SELECT ok(NOT has_function_privilege('relaybus_admin',
            'relaybus._publish(text, text, jsonb, text, text, text[], timestamptz, jsonb)', 'EXECUTE'),
          'internal helpers are granted to nobody');
SELECT ok(NOT has_function_privilege('public', 'relaybus.complete(text)', 'EXECUTE'),
          'PUBLIC may not execute relaybus functions');
SELECT ok(has_table_privilege('relaybus_admin', 'relaybus.deliveries', 'SELECT')
          AND NOT has_table_privilege('relaybus_worker', 'relaybus.deliveries', 'SELECT'),
          'admin reads the tables, workers do not');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = 'relaybus'::regnamespace
                        AND p.proname !~ '^_' AND NOT p.prosecdef),
          'every API function is SECURITY DEFINER');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = 'relaybus'::regnamespace
                        AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)),
          'every function pins search_path = pg_catalog, pg_temp');

SELECT * FROM finish();
