-- Port of test/pgtap/23_interval_bounds.sql to relaybus 0.3.0. Every assertion is 0.2's;
-- what changes is where 0.3.0 keeps what they look at: a failed or taken-over delivery's
-- attempts, due time and last change are its exception row's (relaybus.exceptions), not the
-- delivery's (which 0.3.0 never updates); the "nothing was written" snapshot covers the
-- exception rows and the lanes' progress rows (relaybus.lane_progress) too; and the trigger that makes one lane's takeover raise sits on
-- exceptions, where 0.3.0's takeover writes its charges.
--
-- Issue 9, findings 5, 6 and 8: every interval the API takes goes through one checked
-- conversion with the documented calendar (a month is 30 days, a day 24 hours) and one set
-- of bounds; anything outside is 22023 at the call and nothing is written; subscribe stores
-- the validated microseconds; a value stored by other means (a superuser's UPDATE, an older
-- version) is clamped when read back, so fail, claim and take_over_expired keep working.
-- - Finding 6: a lease of interval '2147483647 days' + interval '-1075146363699 seconds'
--   wrapped around to 5.48 s in claim and extend_lease.
-- - Finding 5: sql_timeout '1 year -360 days 1 ms' was stored as given and read back with
--   extract(epoch) (365.25-day years) as 5.25 days; backoffs of '3550000 mons',
--   '295000 years' and '292260 years' were accepted, then fail() and take_over_expired()
--   raised 22003/22008; one lane whose takeover raised stopped the takeover of all others.
-- - Finding 8: a '1 year' backoff waited 365.25 days instead of 360; publish_batch with
--   handlers [1] raised 22004 (NULL) instead of 22023 (wrong JSON type). Also: a non-finite
--   retry_at in fail() is 22023.
SELECT rb_reset();
SELECT plan(72);

CREATE OR REPLACE FUNCTION public.rb23_handler(e jsonb) RETURNS void LANGUAGE sql AS 'SELECT';

SELECT relaybus.subscribe('ib_h', ARRAY['ib.t']);
SELECT relaybus.subscribe('ib_sql', ARRAY['ib.s'], sql_function => 'public.rb23_handler(jsonb)',
                          sql_timeout => '5 s');
SELECT relaybus.publish('ib.t', '{}', key => 'k1', event_id => 'ib-1');
CREATE TEMP TABLE tok AS
  SELECT event_id, lease_token AS token FROM relaybus.claim('ib-worker', 10, '5 minutes', ARRAY['ib_h']);
SELECT is((SELECT count(*) FROM tok), 1::bigint, 'setup: ib-worker holds ib-1');

-- Everything the bus stores, with ctid and xmin, so even a rewrite of equal values shows.
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
  SELECT md5(concat(
    (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.id) FROM relaybus.events x),
    (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane, x.position)
       FROM relaybus.deliveries x),
    (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane)
       FROM relaybus.lanes x),
    (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane, x.seq)
       FROM relaybus.lane_progress x),
    (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane, x.position)
       FROM relaybus.exceptions x),
    (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler)
       FROM relaybus.subscriptions x)))
$$;
SELECT pg_temp.state() AS state0 \gset

--------------------------------------------------------------------------------
-- Finding 6: lease (more than 0, at most 1 day) in claim and extend_lease.
--------------------------------------------------------------------------------
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, interval '2147483647 days' + interval '-1075146363699 seconds')$$,
                 '22023', 'lease is out of range', 'claim: a lease that overflows 64 bits (wrapped to 5.48 s) -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, interval '2147483647 mons')$$,
                 '22023', 'lease is out of range', 'claim: 2147483647 months -> 22023 out of range');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, interval '-2147483648 mons -2147483648 days')$$,
                 '22023', 'lease is out of range', 'claim: the most negative interval -> 22023 out of range');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, interval '1 mon')$$,
                 '22023', 'lease must be at most 1 day', 'claim: 1 month (30 days) -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, interval '1 day 1 microsecond')$$,
                 '22023', 'lease must be at most 1 day', 'claim: 1 day 1 microsecond -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 1, interval '1 mon -30 days')$$,
                 '22023', 'lease must be positive', 'claim: 1 month -30 days (zero) -> 22023');
SELECT throws_ok($$SELECT relaybus.extend_lease('ib-worker', interval '2147483647 days' + interval '-1075146363699 seconds')$$,
                 '22023', 'lease is out of range', 'extend_lease: a lease that overflows 64 bits -> 22023');
SELECT throws_ok($$SELECT relaybus.extend_lease('ib-worker', interval '178956970 years')$$,
                 '22023', 'lease is out of range', 'extend_lease: 178956970 years -> 22023 out of range');
SELECT throws_ok($$SELECT relaybus.extend_lease('ib-worker', interval '1 mon')$$,
                 '22023', 'lease must be at most 1 day', 'extend_lease: 1 month -> 22023');
SELECT throws_ok($$SELECT relaybus.extend_lease('ib-worker', interval '1 mon -31 days')$$,
                 '22023', 'lease must be positive', 'extend_lease: 1 month -31 days (negative) -> 22023');
SELECT is(pg_temp.state(), :'state0', 'leases: nothing was written');

--------------------------------------------------------------------------------
-- Finding 5: backoff_base and backoff_max (0 <= base <= max <= 365 days) at subscribe.
--------------------------------------------------------------------------------
SELECT throws_ok($$SELECT relaybus.subscribe('ib_h', ARRAY['ib.t'], backoff_max => '3550000 mons')$$,
                 '22023', 'backoff_max must be at most 365 days', 'subscribe: backoff_max 3550000 months -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_h', ARRAY['ib.t'], backoff_max => '295000 years')$$,
                 '22023', 'backoff_max must be at most 365 days', 'subscribe: backoff_max 295000 years -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_h', ARRAY['ib.t'], backoff_base => '292260 years', backoff_max => '292260 years')$$,
                 '22023', 'backoff_base must be at most 365 days', 'subscribe: backoff_base = backoff_max = 292260 years -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_new', ARRAY['ib.t'], backoff_max => '366 days')$$,
                 '22023', 'backoff_max must be at most 365 days', 'subscribe: backoff_max 366 days -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_new', ARRAY['ib.t'], backoff_max => '1 year 5 days 1 microsecond')$$,
                 '22023', 'backoff_max must be at most 365 days', 'subscribe: backoff_max 1 year 5 days 1 us (365 days 1 us) -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_new', ARRAY['ib.t'], backoff_base => '2147483647 mons', backoff_max => '2147483647 mons')$$,
                 '22023', 'backoff_base is out of range', 'subscribe: backoff_base that overflows 64 bits -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_new', ARRAY['ib.t'], backoff_max => interval '2147483647 days' + interval '-1075146363699 seconds')$$,
                 '22023', 'backoff_max is out of range', 'subscribe: backoff_max that wraps around -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_new', ARRAY['ib.t'], backoff_base => '1 mon -31 days')$$,
                 '22023', 'backoff_base must not be negative', 'subscribe: backoff_base 1 month -31 days (negative) -> 22023');

-- sql_timeout: 1 ms .. 1 hour.
SELECT throws_ok($$SELECT relaybus.subscribe('ib_sql', ARRAY['ib.s'], sql_function => 'public.rb23_handler(jsonb)', sql_timeout => interval '2147483647 days' + interval '-1075146363699 seconds')$$,
                 '22023', 'sql_timeout is out of range', 'subscribe: sql_timeout that wraps around -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_sql', ARRAY['ib.s'], sql_function => 'public.rb23_handler(jsonb)', sql_timeout => '1 mon -30 days')$$,
                 '22023', 'sql_timeout must be at least 1 ms', 'subscribe: sql_timeout 1 month -30 days (zero) -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_sql', ARRAY['ib.s'], sql_function => 'public.rb23_handler(jsonb)', sql_timeout => '999 microseconds')$$,
                 '22023', 'sql_timeout must be at least 1 ms', 'subscribe: sql_timeout 999 us -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_sql', ARRAY['ib.s'], sql_function => 'public.rb23_handler(jsonb)', sql_timeout => '1 hour 1 microsecond')$$,
                 '22023', 'sql_timeout must be at most 1 hour', 'subscribe: sql_timeout 1 hour 1 us -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('ib_sql', ARRAY['ib.s'], sql_function => 'public.rb23_handler(jsonb)', sql_timeout => '1 year -359 days')$$,
                 '22023', 'sql_timeout must be at most 1 hour', 'subscribe: sql_timeout 1 year -359 days (1 day) -> 22023');
SELECT is(pg_temp.state(), :'state0', 'subscribe: nothing was written');

--------------------------------------------------------------------------------
-- subscribe stores the validated value as microseconds only, in the 30-day calendar.
--------------------------------------------------------------------------------
SELECT lives_ok($$SELECT relaybus.subscribe('ib_sql', ARRAY['ib.s'], sql_function => 'public.rb23_handler(jsonb)', sql_timeout => '1 year -360 days 1 ms')$$,
                'subscribe: sql_timeout 1 year -360 days 1 ms (1 ms) is accepted');
SELECT is((SELECT sql_timeout::text FROM relaybus.subscriptions WHERE handler = 'ib_sql'), '00:00:00.001',
          'it is stored as 1 ms, the value that was checked (finding 5)');
SELECT is((SELECT extract(epoch FROM sql_timeout) FROM relaybus.subscriptions WHERE handler = 'ib_sql'), 0.001,
          'and any reader of the table sees 1 ms, whatever its calendar');
SELECT lives_ok($$SELECT relaybus.subscribe('ib_year', ARRAY['ib.y'], backoff_base => '1 year', backoff_max => '1 year')$$,
                'subscribe: backoff 1 year (360 days) is accepted');
SELECT results_eq($$SELECT backoff_base::text, backoff_max::text FROM relaybus.subscriptions WHERE handler = 'ib_year'$$,
                  $$VALUES ('8640:00:00', '8640:00:00')$$, 'a backoff of 1 year is stored as 360 days of time');
SELECT lives_ok($$SELECT relaybus.subscribe('ib_max', ARRAY['ib.m'], backoff_base => '365 days', backoff_max => '1 year 5 days')$$,
                'subscribe: backoff 365 days, the bound, is accepted');
SELECT lives_ok($$SELECT * FROM relaybus.claim('ib-bound', 1, '1 mon -29 days', ARRAY['ib_max'])$$,
                'claim: a lease of 1 month -29 days (1 day, the bound) is accepted');
SELECT is(relaybus.extend_lease('ib-bound', '1 mon -29 days'), 0, 'extend_lease: 1 month -29 days is accepted');

--------------------------------------------------------------------------------
-- Finding 8: a backoff of '1 year' waits 360 days.
--------------------------------------------------------------------------------
SELECT relaybus.publish('ib.y', '{}', event_id => 'ib-y1');
SELECT is(relaybus.fail(lease_token, 'x'), 'retry', 'fail with a 1 year backoff -> retry')
  FROM relaybus.claim('ib-year-worker', 1, '30 s', ARRAY['ib_year']);
-- (0.3.0: the retry is ib-y1's exception row.)
SELECT is((SELECT available_at - updated_at FROM relaybus.exceptions WHERE event_id = 'ib-y1'),
          interval '360 days', 'the retry waits 360 days (30-day months), not 365.25');

--------------------------------------------------------------------------------
-- fail: a non-finite retry_at is 22023; nothing written.
--------------------------------------------------------------------------------
SELECT pg_temp.state() AS state1 \gset
SELECT throws_ok(format('SELECT relaybus.fail(%L, %L, %L)', token, 'x', 'infinity'), '22023',
                 'retry_at must be a finite timestamp', 'fail: retry_at infinity -> 22023')
  FROM tok;
SELECT throws_ok(format('SELECT relaybus.fail(%L, %L, %L)', token, 'x', '-infinity'), '22023',
                 'retry_at must be a finite timestamp', 'fail: retry_at -infinity -> 22023')
  FROM tok;
SELECT is(pg_temp.state(), :'state1', 'fail with a non-finite retry_at: nothing was written');

-- publish and publish_batch: a non-finite available_at is 22023, as retry_at is ('infinity'
-- would hold every later delivery of the key back for good, '-infinity' sort before all).
SELECT throws_ok($$SELECT relaybus.publish('ib.t', '{}', 'k1', 'ib-inf', available_at => 'infinity')$$,
                 '22023', 'available_at must be a finite timestamp', 'publish: available_at infinity -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('ib.t', '{}', NULL, 'ib-inf', available_at => '-infinity')$$,
                 '22023', 'available_at must be a finite timestamp', 'publish: available_at -infinity -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type":"ib.t","id":"ib-inf1"},{"type":"ib.t","id":"ib-inf2","available_at":"infinity"}]')$$,
                 '22023', 'events[1]: available_at must be a finite timestamp', 'publish_batch: available_at infinity -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('ib.t', '{}', 'k1', 'ib-1', available_at => 'infinity')$$,
                 '22023', 'available_at must be a finite timestamp', 'publish: a repeated id with available_at infinity -> 22023');
SELECT is(pg_temp.state(), :'state1', 'publish with a non-finite available_at: nothing was written');

--------------------------------------------------------------------------------
-- Finding 8: publish_batch handlers of the wrong JSON type are 22023; JSON null stays 22004.
--------------------------------------------------------------------------------
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type":"ib.t","handlers":[1]}]')$$, '22023',
                 'events[0]: handlers must be an array of strings or null', 'publish_batch: handlers [1] -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type":"ib.t"},{"type":"ib.t","handlers":["ib_h", true]}]')$$, '22023',
                 'events[1]: handlers must be an array of strings or null', 'publish_batch: handlers ["ib_h", true] -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type":"ib.t","handlers":[["ib_h"]]}]')$$, '22023',
                 'events[0]: handlers must be an array of strings or null', 'publish_batch: handlers [["ib_h"]] -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type":"ib.t","handlers":[{"h":"ib_h"}]}]')$$, '22023',
                 'events[0]: handlers must be an array of strings or null', 'publish_batch: handlers [{...}] -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type":"ib.t","handlers":[null]}]')$$, '22004',
                 NULL, 'publish_batch: handlers [null] -> 22004, as publish with a NULL handler');
SELECT is(pg_temp.state(), :'state1', 'publish_batch: nothing was written');

--------------------------------------------------------------------------------
-- Finding 5: absurd values written into relaybus.subscriptions directly are clamped.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe(h, ARRAY['ib.a']) FROM unnest(ARRAY['ib_a1', 'ib_a2', 'ib_a3', 'ib_a4']) AS h;
UPDATE relaybus.subscriptions SET backoff_base = '292260 years', backoff_max = '292260 years' WHERE handler = 'ib_a1';
UPDATE relaybus.subscriptions SET backoff_base = '1 second', backoff_max = '3550000 mons' WHERE handler = 'ib_a2';
UPDATE relaybus.subscriptions SET backoff_base = '1 second', backoff_max = '295000 years' WHERE handler = 'ib_a3';
UPDATE relaybus.subscriptions SET backoff_base = '-5 days', backoff_max = '-10 days' WHERE handler = 'ib_a4';
UPDATE relaybus.subscriptions SET sql_timeout = '178000000 years' WHERE handler = 'ib_sql';
SELECT relaybus.publish('ib.a', '{}', event_id => 'ib-a');
CREATE TEMP TABLE absurd AS
  SELECT handler, lease_token AS token FROM relaybus.claim('ib-absurd', 10, '30 s', ARRAY['ib_a1', 'ib_a2', 'ib_a3', 'ib_a4']);
SELECT is((SELECT count(*) FROM absurd), 4::bigint, 'claim works for handlers with absurd stored backoffs');
SELECT is(relaybus.fail(token, 'x'), 'retry', format('fail for %s with an absurd stored backoff -> retry', handler))
  FROM absurd ORDER BY handler;
SELECT results_eq($$SELECT handler, available_at - updated_at FROM relaybus.exceptions
                     WHERE event_id = 'ib-a' ORDER BY handler$$,
                  $$VALUES ('ib_a1', interval '365 days'), ('ib_a2', interval '1 second'),
                           ('ib_a3', interval '1 second'), ('ib_a4', interval '0')$$,
                  'the stored backoffs were clamped: 292260 years -> 365 days; a negative one -> 0');

-- Takeover with the same policies, from take_over_expired and from a claim.
UPDATE relaybus.exceptions SET available_at = now() WHERE event_id = 'ib-a';
SELECT is((SELECT count(*) FROM relaybus.claim('ib-absurd', 10, '30 s', ARRAY['ib_a1', 'ib_a2', 'ib_a3', 'ib_a4'])),
          4::bigint, 'claimed again');
UPDATE relaybus.lanes SET lease_expires_at = now() - interval '1 second'
 WHERE handler IN ('ib_a1', 'ib_a2') AND lease_owner = 'ib-absurd';
SELECT is(relaybus.take_over_expired(), 2, 'take_over_expired works with absurd stored backoffs');
UPDATE relaybus.lanes SET lease_expires_at = now() - interval '1 second'
 WHERE handler IN ('ib_a3', 'ib_a4') AND lease_owner = 'ib-absurd';
CREATE TEMP TABLE other_claim AS
  SELECT handler, lease_token AS token FROM relaybus.claim('ib-other', 10, '30 s', ARRAY['ib_a3', 'ib_a4']);
SELECT is((SELECT count(*) FROM other_claim), 2::bigint,
          'a claim takes over expired lanes with absurd stored backoffs');
SELECT results_eq($$SELECT handler, attempts FROM relaybus.exceptions WHERE event_id = 'ib-a' ORDER BY handler$$,
                  $$VALUES ('ib_a1', 2), ('ib_a2', 2), ('ib_a3', 2), ('ib_a4', 2)$$,
                  'each takeover charged one attempt');
-- 0.3.0: a retry runs from its exception row, and its fail rewrites that row: the stored
-- policies are clamped on that path too. (Lost attempts are due at once: the claim below
-- runs ib_a1's and ib_a2's again; ib-other runs ib_a3's and ib_a4's already.) Attempts 3:
-- base * 2^2, capped at max.
INSERT INTO other_claim
  SELECT handler, lease_token FROM relaybus.claim('ib-other', 10, '30 s', ARRAY['ib_a1', 'ib_a2']);
SELECT is((SELECT array_agg(relaybus.fail(token, 'x') ORDER BY handler) FROM other_claim),
          ARRAY['retry', 'retry', 'retry', 'retry'], 'fail of a retry, for each absurd stored backoff -> retry');
SELECT results_eq($$SELECT handler, attempts, available_at - updated_at FROM relaybus.exceptions
                     WHERE event_id = 'ib-a' ORDER BY handler$$,
                  $$VALUES ('ib_a1', 3, interval '365 days'), ('ib_a2', 3, interval '4 seconds'),
                           ('ib_a3', 3, interval '4 seconds'), ('ib_a4', 3, interval '0')$$,
                  'the retries'' backoffs were clamped the same way');
SELECT is((SELECT sql_timeout FROM relaybus.subscriptions WHERE handler = 'ib_sql'), interval '178000000 years',
          'setup: an absurd sql_timeout stays stored (the workers clamp it to 1 hour)');

--------------------------------------------------------------------------------
-- One lane whose takeover raises is reported and skipped; the others are taken over.
--------------------------------------------------------------------------------
SELECT rb_reset();
SELECT relaybus.subscribe(h, ARRAY['ib.l']) FROM unnest(ARRAY['ib_bad', 'ib_good1', 'ib_good2']) AS h;
SELECT relaybus.publish('ib.l', '{}', event_id => 'ib-l1');
SELECT relaybus.publish('ib.l', '{}', event_id => 'ib-l2');
SELECT is((SELECT count(*) FROM relaybus.claim('ib-lanes', 10, '30 s')), 6::bigint, 'setup: 6 deliveries claimed');
SELECT relaybus.subscribe('ib_later', ARRAY['ib.later']);
SELECT relaybus.publish('ib.later', '{}', event_id => 'ib-later');
SELECT is((SELECT count(*) FROM relaybus.claim('ib-lanes-2', 10, '30 s', ARRAY['ib_later'])), 1::bigint,
          'setup: one more delivery claimed');
-- Every lane expired; ib_bad's lanes the longest, so they come first.
UPDATE relaybus.lanes SET lease_expires_at = now() - CASE WHEN handler = 'ib_bad' THEN interval '1 hour'
                                                          ELSE interval '1 second' END
 WHERE lease_owner IS NOT NULL;
CREATE TEMP TABLE held AS
  SELECT handler, lane, epoch FROM relaybus.lanes WHERE lease_owner IS NOT NULL;
SELECT is((SELECT count(*) FROM held WHERE handler = 'ib_bad'), 2::bigint, 'setup: ib_bad holds two lanes');
CREATE FUNCTION public.rb23_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.handler = 'ib_bad' THEN RAISE EXCEPTION 'rb23: ib_bad cannot be charged'; END IF;
  RETURN NEW;
END
$$;
-- 0.3.0: a takeover charges each in-flight window position by inserting its exception row.
CREATE TRIGGER rb23_refuse BEFORE INSERT OR UPDATE ON relaybus.exceptions
  FOR EACH ROW EXECUTE FUNCTION public.rb23_refuse();
-- Each skipped lane is a WARNING naming the handler, the lane and the error; kept out of
-- the test output.
SET client_min_messages = error;
SELECT is(relaybus.take_over_expired(), (SELECT count(*)::int FROM held WHERE handler <> 'ib_bad'),
          'take_over_expired takes over every lane but the bad ones, and does not raise');
RESET client_min_messages;
SELECT results_eq($$SELECT l.handler, l.epoch = h.epoch + 1, l.lease_owner IS NULL
                      FROM relaybus.lanes l JOIN held h USING (handler, lane) ORDER BY l.handler, l.lane$$,
                  $$SELECT handler, handler <> 'ib_bad', handler <> 'ib_bad' FROM held ORDER BY handler, lane$$,
                  'the good lanes moved to a new epoch with no owner; the bad ones were left as they were');
-- Every delivery left, with its attempts: list_deliveries reads the window and the exception
-- rows alike (the bad lanes' deliveries are still in flight, uncharged).
SELECT results_eq($$SELECT handler, attempts FROM relaybus.list_deliveries() ORDER BY handler, event_id$$,
                  $$VALUES ('ib_bad', 0), ('ib_bad', 0), ('ib_good1', 1), ('ib_good1', 1),
                           ('ib_good2', 1), ('ib_good2', 1), ('ib_later', 1)$$,
                  'the good lanes'' deliveries were charged; the bad lanes'' were not');
DROP TRIGGER rb23_refuse ON relaybus.exceptions;
DROP FUNCTION public.rb23_refuse();
SELECT is(relaybus.take_over_expired(), 2, 'once the cause is gone, the next round takes over the bad lanes');
SELECT results_eq($$SELECT handler, attempts FROM relaybus.exceptions WHERE handler = 'ib_bad' ORDER BY event_id$$,
                  $$VALUES ('ib_bad', 1), ('ib_bad', 1)$$, 'and charges their deliveries');
SELECT is((SELECT count(*) FROM relaybus.lanes WHERE lease_owner IS NOT NULL), 0::bigint, 'no lane is held any more');

SELECT * FROM finish();
SELECT rb_reset();
DROP FUNCTION public.rb23_handler(jsonb);
