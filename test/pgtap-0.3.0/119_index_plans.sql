-- Port of test/pgtap/19_index_plans.sql to relaybus 0.3.0. Guarantee: the delivery path
-- never reads a whole table, whatever the statistics said when its plans were made. Its
-- statements keep their plans for the life of a connection; a plan made while relaybus's
-- tables looked empty (a fresh install, a queue just drained and analyzed) would scan the
-- whole table on every call once the queue is deep again.
-- Here every plan is made on a new connection right after the tables were vacuumed and
-- analyzed empty; then 2,000 deliveries arrive and every delivery-path function of 0.3.0
-- runs again (publish and publish_batch with their statement at commit, claim with its
-- exception rows and window scans, complete, complete_many, fail, bury, release,
-- extend_lease, relinquish, take_over_expired with a charge to make). pg_stat_user_tables
-- must count index scans on deliveries, events, lanes, lane_progress and exceptions, and not
-- one sequential scan (lanes: see below). lane_progress, 0.3.0's lane progress (a row per
-- change, superseded rows kept until purge_expired), grows with the traffic: every read of
-- it must go through its primary key.
-- What does not carry over: 0.2's key_counters (0.3.0 has no per-key state; a key's order is
-- its lane's positions). exceptions is 0.3.0's table of failures, retries and deferred or
-- parked deliveries: failures, releases and the takeover below write it, and the next
-- claims read it, so it must be read through its indexes too.
SELECT rb_reset();
VACUUM ANALYZE relaybus.events, relaybus.deliveries, relaybus.exceptions, relaybus.lane_progress;
SELECT plan(14);

SELECT relaybus.subscribe('ip', ARRAY['ip.event'], max_attempts => 5);
VACUUM ANALYZE relaybus.lanes;
SELECT rb_connect('ip');

CREATE FUNCTION pg_temp.remote(sql text) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(x, ',') FROM dblink('ip', sql) AS t(x text)
$$;
-- One pass over every function of the delivery path, on the remote connection, each call
-- its own transaction. Returns how many deliveries it completed.
CREATE FUNCTION pg_temp.delivery_path(round int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  tokens text[];
  done int := 0;
BEGIN
  PERFORM pg_temp.remote(format($q$SELECT relaybus.publish('ip.event', '{}', key => 'k-%s',
    event_id => 'single-%s')$q$, round, round));
  PERFORM pg_temp.remote(format($q$SELECT count(*)::text FROM relaybus.publish_batch(
    jsonb_build_array(jsonb_build_object('type', 'ip.event', 'id', 'batch-%s')))$q$, round));
  SELECT array_agg(t) INTO tokens FROM dblink('ip', $q$SELECT lease_token FROM
    relaybus.claim('ip-worker', 50, '30 seconds', ARRAY['ip'])$q$) AS r(t text);
  IF cardinality(tokens) >= 5 THEN
    done := done + pg_temp.remote(format('SELECT relaybus.complete(%L)::int::text', tokens[1]))::int;
    PERFORM pg_temp.remote(format('SELECT relaybus.fail(%L, %L)', tokens[2], 'test'));
    PERFORM pg_temp.remote(format('SELECT relaybus.release(%L)', tokens[3]));
    PERFORM pg_temp.remote(format('SELECT relaybus.bury(%L, %L)', tokens[4], 'test'));
    done := done + pg_temp.remote(format('SELECT relaybus.complete_many(%L::text[])::text',
                                         tokens[5:]))::int;
  END IF;
  PERFORM pg_temp.remote($q$SELECT relaybus.extend_lease('ip-worker', '30 seconds')$q$);
  PERFORM pg_temp.remote($q$SELECT relaybus.relinquish('ip-worker')$q$);
  -- A lease that expires at once, for take_over_expired to charge (0.3.0: an exception row
  -- per in-flight position).
  PERFORM pg_temp.remote($q$SELECT count(*)::text FROM relaybus.claim('ip-short', 2, '1 millisecond', ARRAY['ip'])$q$);
  PERFORM pg_sleep(0.005);
  PERFORM pg_temp.remote('SELECT relaybus.take_over_expired()');
  RETURN done;
END
$$;

-- Plans made against empty tables: one event, one pass.
SELECT pg_temp.remote('SELECT pg_backend_pid()::text') AS planned_pid \gset
SELECT pg_temp.remote($$SELECT relaybus.publish('ip.event', '{}', key => 'k-0', event_id => 'first')$$);
SELECT pg_temp.delivery_path(0);

-- The queue grows deep.
SELECT pg_temp.remote($$SELECT count(*)::text FROM relaybus.publish_batch((SELECT jsonb_agg(
  jsonb_build_object('type', 'ip.event', 'id', 'deep-' || i,
                     'key', CASE WHEN i % 2 = 0 THEN 'k-' || (i % 300) END) ORDER BY i)
  FROM generate_series(1, 2000) i))$$);
SELECT pg_temp.remote('SELECT pg_stat_force_next_flush()::text');

CREATE TEMP TABLE baseline AS
  SELECT relname, seq_scan, idx_scan FROM pg_stat_user_tables WHERE schemaname = 'relaybus';
CREATE TEMP TABLE taken_before AS SELECT value FROM relaybus.counters() WHERE name = 'taken_over';
CREATE TEMP TABLE passes AS SELECT n, pg_temp.delivery_path(n) AS completed
  FROM generate_series(1, 5) n;
SELECT pg_temp.remote('SELECT pg_stat_force_next_flush()::text');
SELECT pg_stat_clear_snapshot();
CREATE TEMP TABLE scans AS
  SELECT s.relname, s.seq_scan - b.seq_scan AS seq, s.idx_scan - b.idx_scan AS idx
    FROM pg_stat_user_tables s JOIN baseline b USING (relname) WHERE s.schemaname = 'relaybus';

SELECT cmp_ok((SELECT sum(completed) FROM passes)::int, '>=', 5 * 46,
              'the passes ran on a deep queue: every claim was full');
SELECT cmp_ok((SELECT c.value - b.value FROM relaybus.counters() c, taken_before b WHERE c.name = 'taken_over'),
              '>=', 5::bigint, 'each pass''s take_over_expired took over the short lease''s lanes (and charged their positions)');
SELECT diag('scans in the passes: ' || (SELECT string_agg(format('%s seq %s idx %s', relname, seq, idx), ', ' ORDER BY relname) FROM scans));
SELECT is((SELECT seq FROM scans WHERE relname = 'deliveries'), 0::bigint,
          'deliveries: no sequential scan');
SELECT is((SELECT seq FROM scans WHERE relname = 'events'), 0::bigint,
          'events: no sequential scan');
-- Lanes are the one bounded table (256 rows per handler). extend_lease, relinquish and
-- take_over_expired find lanes by owner or by expiry, which no index covers (an index on
-- a lease column would make every lease change a non-HOT update): at most one scan each
-- per pass. Publishing, claiming and completing read lanes by primary key only (below).
SELECT cmp_ok((SELECT seq FROM scans WHERE relname = 'lanes'), '<=', 5 * 3::bigint,
              'lanes: sequential scans only by the three per-worker lease calls');
-- (0.2: key_counters, which 0.3.0 does not have.)
SELECT is((SELECT seq FROM scans WHERE relname = 'exceptions'), 0::bigint,
          'exceptions: no sequential scan');
SELECT is((SELECT seq FROM scans WHERE relname = 'lane_progress'), 0::bigint,
          'lane_progress: no sequential scan');
SELECT cmp_ok((SELECT idx FROM scans WHERE relname = 'deliveries'), '>', 0::bigint,
              'deliveries: read through its indexes');
SELECT cmp_ok((SELECT idx FROM scans WHERE relname = 'events'), '>', 0::bigint,
              'events: read through its index');
SELECT cmp_ok((SELECT idx FROM scans WHERE relname = 'lanes'), '>', 0::bigint,
              'lanes: read through its index');
SELECT cmp_ok((SELECT idx FROM scans WHERE relname = 'exceptions'), '>', 0::bigint,
              'exceptions: read through its indexes');
SELECT cmp_ok((SELECT idx FROM scans WHERE relname = 'lane_progress'), '>', 0::bigint,
              'lane_progress: read through its primary key');
-- Publish, claim and complete alone: not one sequential scan of lanes either.
CREATE TEMP TABLE baseline2 AS
  SELECT relname, seq_scan FROM pg_stat_user_tables WHERE schemaname = 'relaybus';
SELECT pg_temp.remote(format($q$SELECT relaybus.publish('ip.event', '{}', event_id => 'hot-%s')$q$, n))
  FROM generate_series(1, 5) n;
SELECT pg_temp.remote($q$SELECT relaybus.complete_many(ARRAY(SELECT lease_token FROM
  relaybus.claim('ip-worker', 50, '30 seconds', ARRAY['ip'])))::text$q$) FROM generate_series(1, 5);
SELECT pg_temp.remote('SELECT pg_stat_force_next_flush()::text');
SELECT pg_stat_clear_snapshot();
SELECT is((SELECT s.seq_scan - b.seq_scan FROM pg_stat_user_tables s JOIN baseline2 b USING (relname)
            WHERE s.schemaname = 'relaybus' AND s.relname = 'lanes'), 0::bigint,
          'lanes: publish, claim and complete_many read lanes by primary key only');
SELECT is(pg_temp.remote('SELECT pg_backend_pid()::text'), :'planned_pid',
          'every pass ran on the connection whose plans were made on empty tables');

SELECT * FROM finish();
