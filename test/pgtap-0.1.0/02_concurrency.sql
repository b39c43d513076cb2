-- The 0.1.0 row-lease baseline under concurrency, with a second and third session through
-- dblink (each commits on its own): a completion in progress is skipped by a takeover and
-- a completion waiting behind a takeover finds its lease lost (effectively-once inside the
-- handler's transaction); two claimers never get the same delivery, and a key's head that
-- another claimer is taking still blocks the rest of its key.
TRUNCATE relaybus.events, relaybus.deliveries, relaybus.key_counters, relaybus.subscriptions;
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT plan(14);

CREATE FUNCTION pg_temp.connect(name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF name = ANY (coalesce(dblink_get_connections(), '{}')) THEN
    PERFORM dblink_disconnect(name);
  END IF;
  PERFORM dblink_connect(name, format('dbname=%s host=%s port=%s user=%s',
    current_database(), split_part(current_setting('unix_socket_directories'), ',', 1),
    current_setting('port'), current_user));
END
$$;
SELECT pg_temp.connect('b');
SELECT pg_temp.connect('c');

SELECT relaybus.subscribe('mail', ARRAY['order.created']);

--------------------------------------------------------------------------------
-- A completion in progress is skipped by a takeover, then commits.
--------------------------------------------------------------------------------
SELECT relaybus.publish('order.created', '{}', NULL, 'e-1');
CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w1', 1, '10 milliseconds');
SELECT pg_sleep(0.05);
BEGIN;
SELECT ok(relaybus.complete((SELECT lease_token FROM c1)),
          'the expired lease completes in the handler''s transaction (not committed yet)');
SELECT is((SELECT n FROM dblink('b', 'SELECT relaybus.take_over_expired()') AS t(n int)), 0,
          'a takeover in another session skips the delivery being completed');
COMMIT;
SELECT is((SELECT status FROM relaybus.deliveries WHERE event_id = 'e-1'), 'completed',
          'the completion committed; the delivery was not handed to anyone else');
SELECT is((SELECT n FROM dblink('b', 'SELECT relaybus.take_over_expired()') AS t(n int)), 0,
          'after the commit there is nothing to take over');

--------------------------------------------------------------------------------
-- A completion that waits behind a takeover finds the lease lost.
--------------------------------------------------------------------------------
SELECT relaybus.publish('order.created', '{}', NULL, 'e-2');
CREATE TEMP TABLE c2 AS SELECT * FROM relaybus.claim('w1', 1, '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT dblink_exec('b', 'BEGIN');
SELECT is((SELECT n FROM dblink('b', 'SELECT relaybus.take_over_expired()') AS t(n int)), 1,
          'session b takes the expired delivery over (not committed yet)');
SELECT dblink_exec('c', 'BEGIN');
SELECT dblink_exec('c', 'CREATE TEMP TABLE side_effect AS SELECT 1 AS x');
SELECT is(dblink_send_query('c', format('SELECT relaybus.complete(%L)',
                                        (SELECT lease_token FROM c2))), 1,
          'session c starts the handler''s transaction and its completion');
SELECT pg_sleep(0.1);
SELECT is(dblink_is_busy('c'), 1, 'the completion waits for the takeover''s row lock');
SELECT dblink_exec('b', 'COMMIT');
SELECT is((SELECT done FROM dblink_get_result('c') AS t(done boolean)), false,
          'once the takeover commits, the waiting completion returns false');
SELECT is((SELECT count(*)::int FROM dblink_get_result('c') AS t(done boolean)), 0,
          'no further result');
SELECT dblink_exec('c', 'ROLLBACK');
SELECT row_eq($$SELECT status, attempts, lease_token FROM relaybus.deliveries WHERE event_id = 'e-2'$$,
              ROW('pending'::text, 1, NULL::text),
              'the delivery is pending again, to run once more');

--------------------------------------------------------------------------------
-- Two claimers: no delivery twice, and a head being claimed still blocks its key.
--------------------------------------------------------------------------------
TRUNCATE relaybus.events, relaybus.deliveries, relaybus.key_counters;
SELECT relaybus.publish('order.created', '{}', 'cust-1', 'k-a');
SELECT relaybus.publish('order.created', '{}', 'cust-1', 'k-b');
SELECT relaybus.publish('order.created', '{}', NULL, 'u-' || i) FROM generate_series(1, 4) i;
SELECT dblink_exec('b', 'BEGIN');
SELECT set_eq($$SELECT event_id FROM dblink('b', 'SELECT event_id FROM relaybus.claim(''wb'', 3)')
                  AS t(event_id text)$$,
              $$VALUES ('k-a'), ('u-1'), ('u-2')$$,
              'session b claims the key''s head and two unkeyed events (not committed yet)');
SELECT set_eq($$SELECT event_id FROM relaybus.claim('wa', 10)$$,
              $$VALUES ('u-3'), ('u-4')$$,
              'a concurrent claim skips the locked rows and does not pass the key''s head');
SELECT dblink_exec('b', 'COMMIT');
SELECT is((SELECT count(*)::int FROM relaybus.claim('wc', 10)), 0,
          'after b commits, the key''s head is processing and still blocks its follower');
SELECT results_eq($$SELECT lease_owner, count(*)::int FROM relaybus.deliveries
                     WHERE status = 'processing' GROUP BY 1 ORDER BY 1$$,
                  $$VALUES ('wa', 2), ('wb', 3)$$,
                  'each delivery is leased to exactly one worker');

SELECT dblink_disconnect('b');
SELECT dblink_disconnect('c');
SELECT * FROM finish();
