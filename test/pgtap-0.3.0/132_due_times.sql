-- Port of test/pgtap/32_due_times.sql to relaybus 0.3.0: the bounds are 0.2.1's
-- (src/core/due_time.hpp), so every guarantee is 0.2's. What changes is where a refused or
-- accepted fail shows: 0.3.0 charges an attempt and schedules a retry in an exception row
-- (0.2: on the delivery), and the "nothing written" snapshot covers exception rows too.
--
-- Issue 32, finding 2: a publisher stalled another publisher's key for good with
-- available_at => '294276-12-31' (a keyed event that never comes due holds back every later
-- delivery of its key, for every handler it reached), and jumped the queue with
-- '4713-01-01 BC' (the next claim returned it before a backlog of 50 earlier events).
-- relaybus.max_delay now bounds how far ahead available_at and fail's retry_at may be
-- (22023 beyond it, nothing written), and a due time in the past counts as now
-- (src/core/due_time.hpp).
SELECT rb_reset();
SELECT plan(25);

SELECT relaybus.subscribe('due_h', ARRAY['due.t']);
SELECT relaybus.subscribe('due_other', ARRAY['due.t']);
CREATE FUNCTION pg_temp.bus() RETURNS text LANGUAGE sql AS $$
  SELECT concat((SELECT count(*) FROM relaybus.events), '/', (SELECT count(*) FROM relaybus.deliveries),
                '/', (SELECT string_agg(event_id || handler || available_at, ',' ORDER BY event_id, handler)
                        FROM relaybus.deliveries),
                '/', (SELECT string_agg(event_id || handler || available_at, ',' ORDER BY event_id, handler)
                        FROM relaybus.exceptions))
$$;

-- Far future: refused, with the setting named, nothing written.
CREATE TEMP TABLE before AS SELECT pg_temp.bus() AS state;
SELECT throws_ok($$SELECT relaybus.publish('due.t', '{}', key => 'shared', available_at => '294276-12-31')$$,
                 '22023', 'available_at is more than 30 days from now', 'publish: year 294276 -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('due.t', '{}', key => 'shared', available_at => now() + '31 days')$$,
                 '22023', NULL, 'publish: 31 days ahead (the default maximum is 30 days) -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "due.t", "key": "shared", "available_at": "294276-12-31"}]')$$,
                 '22023', 'events[0]: available_at is more than 30 days from now', 'publish_batch: year 294276 -> 22023');
SELECT is((SELECT state FROM before), pg_temp.bus(), 'the refused publishes wrote nothing');
CREATE FUNCTION pg_temp.hint_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE hint text;
BEGIN
  EXECUTE sql;
  RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
  GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
  RETURN hint;
END $$;
SELECT is(pg_temp.hint_of($$SELECT relaybus.publish('due.t', '{}', available_at => now() + '40 days')$$),
          'Schedule it sooner, or raise relaybus.max_delay.', 'the hint names the setting');

-- Within the maximum: kept as given.
SELECT is(relaybus.publish('due.t', '{}', key => 'shared', event_id => 'due-29d', available_at => now() + '29 days'),
          'due-29d', 'publish: 29 days ahead is accepted');
SELECT is((SELECT bool_and(available_at > now() + '28 days') FROM relaybus.deliveries WHERE event_id = 'due-29d'),
          true, 'and kept as given');

-- The maximum is the operator's: a superuser (or ALTER ROLE/DATABASE ... SET) lowers or
-- raises it; a publisher cannot.
SET relaybus.max_delay = '1h';
SELECT throws_ok($$SELECT relaybus.publish('due.t', '{}', available_at => now() + '2 hours')$$, '22023',
                 'available_at is more than 1 hour from now', 'with relaybus.max_delay = 1h, 2 hours ahead -> 22023');
SELECT lives_ok($$SELECT relaybus.publish('due.t', '{}', available_at => now() + '30 minutes')$$,
                'with relaybus.max_delay = 1h, 30 minutes ahead is accepted');
RESET relaybus.max_delay;
SET client_min_messages = warning;
DROP ROLE IF EXISTS rbtest_p32_publisher;
RESET client_min_messages;
CREATE ROLE rbtest_p32_publisher;
SELECT FROM relaybus.grant_rights('rbtest_p32_publisher', 'publisher');
SET ROLE rbtest_p32_publisher;
SELECT throws_ok($$SET relaybus.max_delay = '1000 days'$$, '42501', NULL, 'a publisher cannot raise relaybus.max_delay');
RESET ROLE;

-- Far past: counts as now, so it queues behind a backlog published before it.
SELECT rb_reset();
SELECT relaybus.subscribe('due_h', ARRAY['due.t']);
SELECT count(relaybus.publish('due.t', jsonb_build_object('n', i), event_id => 'backlog-' || lpad(i::text, 2, '0')))
  FROM generate_series(1, 50) i;
SELECT pg_sleep(0.01);
SELECT is(relaybus.publish('due.t', '{}', event_id => 'a-jumper', available_at => '4713-01-01 BC'), 'a-jumper',
          'publish: a due time in 4713 BC is accepted');
SELECT is((SELECT available_at >= (SELECT max(available_at) FROM relaybus.deliveries WHERE event_id LIKE 'backlog-%')
             FROM relaybus.deliveries WHERE event_id = 'a-jumper'),
          true, 'and stored as the time of its publish, after the backlog''s');
CREATE TEMP TABLE first_claim AS SELECT * FROM relaybus.claim('due-w', 1, '1 minute', ARRAY['due_h']);
SELECT isnt((SELECT event_id FROM first_claim), 'a-jumper', 'the next claim returns the backlog first, not the jumper');
CREATE TEMP TABLE rest AS SELECT * FROM relaybus.claim('due-w2', 50, '1 minute', ARRAY['due_h']);
SELECT is((SELECT count(*)::int FROM rest WHERE event_id LIKE 'backlog-%'), 49,
          'a claim of 50 returns the other 49 of the backlog');
SELECT is((SELECT count(*)::int FROM rest WHERE event_id = 'a-jumper'), 1, 'and the jumper last');

-- fail's retry_at: the same bounds.
SELECT throws_ok(format($$SELECT relaybus.fail(%L, 'x', '294276-12-31')$$, (SELECT lease_token FROM first_claim)),
                 '22023', 'retry_at is more than 30 days from now', 'fail: retry_at in year 294276 -> 22023');
-- (0.3.0: a charge would be an exception row; the delivery is still in flight, uncharged.)
SELECT results_eq($$SELECT status, attempts FROM relaybus.list_deliveries(handler => 'due_h')
                     WHERE event_id = (SELECT event_id FROM first_claim)$$,
                  $$VALUES ('processing', 0)$$, 'the refused fail charged nothing');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions), 0, '... and wrote no exception row');
SELECT is(relaybus.fail((SELECT lease_token FROM first_claim), 'x', '4713-01-01 BC'), 'retry',
          'fail: a retry_at in 4713 BC is accepted');
SELECT is((SELECT available_at >= (SELECT max(available_at) FROM relaybus.deliveries WHERE event_id = 'a-jumper')
             FROM relaybus.exceptions WHERE event_id = (SELECT event_id FROM first_claim)),
          true, 'and the retry (its exception row) is due now, not before work published earlier');

-- 0.3.0: a retry runs from its exception row, and its fail rewrites that row (another path
-- than a window pick's): the same bounds.
CREATE TEMP TABLE retry_claim AS SELECT * FROM relaybus.claim('due-w', 1, '1 minute', ARRAY['due_h']);
SELECT results_eq($$SELECT event_id, attempts FROM retry_claim$$,
                  $$SELECT event_id, 1 FROM first_claim$$, 'the retry is claimed again from its exception row');
CREATE TEMP TABLE x_before AS SELECT x.xmin::text AS x, x.* FROM relaybus.exceptions x;
SELECT throws_ok(format($$SELECT relaybus.fail(%L, 'x', '294276-12-31')$$, (SELECT lease_token FROM retry_claim)),
                 '22023', 'retry_at is more than 30 days from now', 'fail of a retry: retry_at in year 294276 -> 22023');
SELECT results_eq($$SELECT x.xmin::text, x.* FROM relaybus.exceptions x$$, $$SELECT * FROM x_before$$,
                  '... and its exception row is untouched');
SELECT is(relaybus.fail((SELECT lease_token FROM retry_claim), 'x', '4713-01-01 BC'), 'retry',
          'fail of a retry: a retry_at in 4713 BC is accepted');
SELECT ok((SELECT x.attempts = 2 AND x.available_at >= b.available_at AND x.available_at <= now()
             FROM relaybus.exceptions x, x_before b),
          '... and counts as now: due no earlier than its previous due time');

DROP OWNED BY rbtest_p32_publisher;
DROP ROLE rbtest_p32_publisher;
SELECT * FROM finish();
