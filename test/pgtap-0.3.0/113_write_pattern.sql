-- Guarantee: the happy path's write pattern (test/pgtap/13_write_pattern.sql on 0.3.0).
-- A delivery is inserted once and never updated: claim and complete never UPDATE a delivery
-- row, so no index entry and no dead version is left behind by them; claims and
-- completions write lanes only: a lane's progress as one new relaybus.lane_progress row per
-- lane per claim (and per completion), never an update or a delete, and a lane's lease row
-- (relaybus.lanes) only when its lease changes, every such update heap-only (HOT: no indexed
-- column changes and the lanes' fillfactor leaves room on the page). The happy path writes
-- no exception row.
--
-- What 0.3.0 changes by design (docs/design.md, "0.3.0: the store"): a completion writes
-- its lane's progress (the cursor) and deletes nothing, where 0.2 deleted the delivery. So
-- "deliveries deleted = 1 (200)" of 0.2 becomes "deleted = 0", and the completion's
-- progress row is counted: one delivery costs one lease write (the claim acquiring the
-- lane) and two progress rows, the claim's and the completion's; complete_many adds one
-- progress row per lane of its batch and writes no lease row.
-- If a claim stamped the delivery (0.1.0's row lease), deliveries.n_tup_upd would be > 0;
-- if a lane column got indexed or lanes lost their free space, n_tup_hot_upd would fall
-- behind n_tup_upd; if a claim or a completion wrote a lane per delivery, or progress were
-- updated in place, or a completion rewrote the lease, the per-lane counts would break.
-- The batch is published in one transaction, so every delivery has the same available_at
-- and each claim takes neighbouring lanes, i.e. writes many rows of the same heap page in
-- one statement (released lanes plus acquired ones): the hard case for HOT.
--
-- Every step runs on another connection (dblink), each step its own committed transaction.
-- The numbers come from pg_stat_user_tables: after each step that connection calls
-- pg_stat_force_next_flush(), so it flushes its counters before it reports ready, and this
-- session reads them after pg_stat_clear_snapshot(). (pg_stat_xact_user_tables is no help
-- on PostgreSQL 15: it also shows earlier transactions' counters not flushed yet.)
SELECT rb_reset();
SELECT plan(28);

SELECT relaybus.subscribe('wp_one', ARRAY['wp.one']);
SELECT relaybus.subscribe('wp_batch', ARRAY['wp.batch']);
SELECT rb_connect('wp');
-- flush this session's own counters (the subscribes above) before the baselines
SELECT pg_stat_force_next_flush();

CREATE TEMP TABLE baseline (relname name PRIMARY KEY, ins bigint, upd bigint, del bigint, hot bigint);
CREATE FUNCTION pg_temp.take_baseline() RETURNS void LANGUAGE sql AS $$
  SELECT pg_stat_clear_snapshot();
  DELETE FROM baseline;
  INSERT INTO baseline SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd
    FROM pg_stat_user_tables WHERE schemaname = 'relaybus';
$$;
-- the counters since the baseline, as 'ins/upd/del/hot'
CREATE FUNCTION pg_temp.delta(rel name) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
  PERFORM pg_stat_clear_snapshot();
  SELECT concat_ws('/', s.n_tup_ins - b.ins, s.n_tup_upd - b.upd, s.n_tup_del - b.del,
                   s.n_tup_hot_upd - b.hot)
    INTO r FROM pg_stat_user_tables s JOIN baseline b USING (relname)
   WHERE s.schemaname = 'relaybus' AND s.relname = rel;
  RETURN r;
END
$$;
CREATE FUNCTION pg_temp.remote(sql text) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(x, ',') FROM dblink('wp', sql) AS t(x text)
$$;
CREATE FUNCTION pg_temp.flush_remote() RETURNS void LANGUAGE sql AS $$
  SELECT pg_temp.remote('SELECT pg_stat_force_next_flush()::text');
$$;

--------------------------------------------------------------------------------
-- One delivery: publish, claim, complete, each committed on its own.
--------------------------------------------------------------------------------
SELECT pg_temp.take_baseline();
SELECT pg_temp.remote($$SELECT relaybus.publish('wp.one', '{}', event_id => 'wp-1')$$);
SELECT pg_temp.remote($$SELECT lease_token FROM relaybus.claim('wp-worker', 10, '30 seconds',
                        ARRAY['wp_one'])$$) AS one_token \gset
SELECT pg_temp.flush_remote();
SELECT split_part(pg_temp.delta('lanes'), '/', 2) AS one_claim_lane_upd,
       pg_temp.delta('lane_progress') AS one_claim_progress \gset
SELECT is(pg_temp.remote(format('SELECT relaybus.complete(%L)::text', :'one_token')), 'true',
          'one delivery: claimed and completed');
SELECT pg_temp.flush_remote();

SELECT is(split_part(pg_temp.delta('deliveries'), '/', 1), '1', 'one delivery: deliveries inserted = 1');
SELECT is(split_part(pg_temp.delta('deliveries'), '/', 2), '0', 'one delivery: deliveries updated = 0');
-- 0.3.0 by design: a completion deletes nothing (0.2: deleted = 1).
SELECT is(split_part(pg_temp.delta('deliveries'), '/', 3), '0', 'one delivery: deliveries deleted = 0');
SELECT is(pg_temp.delta('exceptions'), '0/0/0/0', 'one delivery: no exception row written');
SELECT ok(split_part(pg_temp.delta('lanes'), '/', 2)::int > 0, 'one delivery: the claim updated a lane row');
SELECT is(split_part(pg_temp.delta('lanes'), '/', 4), split_part(pg_temp.delta('lanes'), '/', 2),
          'one delivery: every lane update is HOT');
SELECT is(:'one_claim_lane_upd' || ' ' || :'one_claim_progress', '1 1/0/0/0',
          'one delivery: the claim wrote exactly one lease row (acquiring the lane) and inserted one progress row');
-- 0.3.0 by design: the completion writes the lane's progress (its cursor); 0.2 wrote none.
SELECT is(split_part(pg_temp.delta('lanes'), '/', 2), '1',
          'one delivery: the completion wrote no lease row: one lane row write in all, the claim''s');
SELECT is(pg_temp.delta('lane_progress'), '2/0/0/0',
          'one delivery: exactly two progress rows inserted, the claim''s and the completion''s; none updated or deleted');
SELECT is(split_part(pg_temp.delta('lanes'), '/', 1) || '/' || split_part(pg_temp.delta('lanes'), '/', 3), '0/0',
          'one delivery: no lane row inserted or deleted');
SELECT diag('one delivery (ins/upd/del/hot): deliveries ' || pg_temp.delta('deliveries')
            || ', lanes ' || pg_temp.delta('lanes') || ', lane_progress ' || pg_temp.delta('lane_progress')
            || ', events ' || pg_temp.delta('events'));

--------------------------------------------------------------------------------
-- A batch: 200 deliveries published in one transaction, claimed 50 at a time by one
-- worker, each batch completed with complete_many.
--------------------------------------------------------------------------------
SELECT pg_temp.take_baseline();
SELECT pg_temp.remote($$SELECT count(*)::text FROM relaybus.publish_batch((SELECT jsonb_agg(
  jsonb_build_object('type', 'wp.batch', 'id', 'wp-b-' || i)) FROM generate_series(1, 200) i))$$);
SELECT pg_temp.flush_remote();

CREATE TEMP TABLE batches (n int PRIMARY KEY, claimed int, picked_lanes int, held_before int,
                           lane_upd bigint, lane_hot bigint, delivery_writes bigint, completed int,
                           done_lane_upd bigint, done_lane_hot bigint, done_other_writes bigint,
                           progress_ins bigint, progress_other bigint,
                           done_progress_ins bigint, done_progress_other bigint);
-- the cumulative counters of one table, as (upd, hot, ins + upd + del, ins)
CREATE FUNCTION pg_temp.counters(rel name, OUT upd bigint, OUT hot bigint, OUT writes bigint,
                                 OUT ins bigint)
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_stat_clear_snapshot();
  SELECT n_tup_upd, n_tup_hot_upd, n_tup_ins + n_tup_upd + n_tup_del, n_tup_ins
    INTO upd, hot, writes, ins
    FROM pg_stat_user_tables WHERE schemaname = 'relaybus' AND relname = rel;
END
$$;
-- One claim of 50 (its own transaction, counters flushed right after it), then
-- complete_many of its tokens (another transaction, counters flushed right after it).
CREATE FUNCTION pg_temp.claim_and_complete(n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  tokens text[];
  held int;
  lanes0 record;
  lanes1 record;
  progress0 record;
  progress1 record;
  progress2 record;
  deliveries0 record;
  deliveries1 record;
  exceptions0 record;
  done int;
  lanes2 record;
  deliveries2 record;
  exceptions2 record;
BEGIN
  SELECT count(*) INTO held FROM relaybus.lanes WHERE lease_owner = 'wp-batch-worker';
  lanes0 := pg_temp.counters('lanes');
  progress0 := pg_temp.counters('lane_progress');
  deliveries0 := pg_temp.counters('deliveries');
  SELECT array_agg(t) INTO tokens FROM dblink('wp', $q$SELECT lease_token FROM relaybus.claim(
    'wp-batch-worker', 50, '30 seconds', ARRAY['wp_batch'])$q$) AS r(t text);
  PERFORM pg_temp.flush_remote();
  lanes1 := pg_temp.counters('lanes');
  progress1 := pg_temp.counters('lane_progress');
  deliveries1 := pg_temp.counters('deliveries');
  exceptions0 := pg_temp.counters('exceptions');
  done := pg_temp.remote(format('SELECT relaybus.complete_many(%L::text[])::text', tokens))::int;
  PERFORM pg_temp.flush_remote();
  lanes2 := pg_temp.counters('lanes');
  progress2 := pg_temp.counters('lane_progress');
  deliveries2 := pg_temp.counters('deliveries');
  exceptions2 := pg_temp.counters('exceptions');
  INSERT INTO batches VALUES (n, coalesce(cardinality(tokens), 0),
    (SELECT count(DISTINCT split_part(t, '.', 2)) FROM unnest(tokens) t), held,
    lanes1.upd - lanes0.upd, lanes1.hot - lanes0.hot, deliveries1.writes - deliveries0.writes, done,
    lanes2.upd - lanes1.upd, lanes2.hot - lanes1.hot,
    (deliveries2.writes - deliveries1.writes) + (exceptions2.writes - exceptions0.writes),
    progress1.ins - progress0.ins, (progress1.writes - progress1.ins) - (progress0.writes - progress0.ins),
    progress2.ins - progress1.ins, (progress2.writes - progress2.ins) - (progress1.writes - progress1.ins));
END
$$;
SELECT pg_temp.claim_and_complete(1);
SELECT pg_temp.claim_and_complete(2);
SELECT pg_temp.claim_and_complete(3);
SELECT pg_temp.claim_and_complete(4);
SELECT pg_temp.flush_remote();

SELECT is((SELECT array_agg(claimed ORDER BY n) FROM batches), ARRAY[50, 50, 50, 50],
          'batch: four claims of 50');
SELECT is((SELECT array_agg(completed ORDER BY n) FROM batches), ARRAY[50, 50, 50, 50],
          'batch: complete_many completed each batch');
-- 0.3.0: finished, not deleted (0.2: "every delivery is gone").
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries(NULL, 'wp_batch', 1000000)), 0,
          'batch: every delivery is finished');
SELECT is(split_part(pg_temp.delta('deliveries'), '/', 1), '200', 'batch: deliveries inserted = 200');
SELECT is(split_part(pg_temp.delta('deliveries'), '/', 2), '0', 'batch: deliveries updated = 0');
-- 0.3.0 by design: completions delete nothing (0.2: deleted = 200).
SELECT is(split_part(pg_temp.delta('deliveries'), '/', 3), '0', 'batch: deliveries deleted = 0');
SELECT is(pg_temp.delta('exceptions'), '0/0/0/0', 'batch: no exception row written');
SELECT ok(split_part(pg_temp.delta('lanes'), '/', 2)::int > 0, 'batch: claims updated lane rows');
SELECT is(split_part(pg_temp.delta('lanes'), '/', 4), split_part(pg_temp.delta('lanes'), '/', 2),
          'batch: every lane update is HOT');
SELECT is((SELECT sum(delivery_writes)::int FROM batches), 0,
          'batch: no claim wrote a delivery row');
SELECT ok((SELECT bool_and(lane_upd = lane_hot AND lane_upd > 0) FROM batches),
          'batch: within each claim every lane update is HOT');
-- A claim writes a lease row only for a lane whose lease changes (one it acquires, or one it
-- held before and hands back or renews): never more than one row write per lane per claim.
-- Its progress is one new lane_progress row per lane it picks from.
SELECT ok((SELECT bool_and(lane_upd <= picked_lanes + held_before) FROM batches),
          'batch: lane row writes per claim are bounded by one per lane');
SELECT ok((SELECT bool_and(progress_ins = picked_lanes AND progress_other = 0) FROM batches),
          'batch: each claim inserts exactly one progress row per lane it picks from, and updates or deletes none');
SELECT ok((SELECT bool_and(lane_upd <= claimed + held_before) FROM batches),
          'batch: lane row writes per claim do not exceed one per claimed delivery');
-- 0.3.0: a completion writes its lanes' progress (0.2 deleted the deliveries and wrote no
-- lane): one new progress row per lane, and no lease row (the lease does not change).
SELECT ok((SELECT bool_and(done_progress_ins = picked_lanes) FROM batches),
          'batch: complete_many inserts exactly one progress row per lane of its batch');
SELECT ok((SELECT bool_and(done_lane_upd = 0 AND done_progress_other = 0) FROM batches),
          'batch: complete_many writes no lease row, and updates or deletes no progress row');
SELECT is((SELECT sum(done_other_writes)::int FROM batches), 0,
          'batch: no complete_many wrote a delivery or exception row');
SELECT diag('batch totals (ins/upd/del/hot): deliveries ' || pg_temp.delta('deliveries')
            || ', lanes ' || pg_temp.delta('lanes') || ', lane_progress ' || pg_temp.delta('lane_progress'));
SELECT diag('batch ' || n || ': claimed ' || claimed || ' from ' || picked_lanes || ' lanes, held before '
            || held_before || ', lane updates ' || lane_upd || ' (hot ' || lane_hot || '), progress rows '
            || progress_ins || '; completion lane updates ' || done_lane_upd || ' (hot ' || done_lane_hot
            || '), progress rows ' || done_progress_ins || ')')
  FROM batches ORDER BY n;

SELECT dblink_disconnect('wp');

SELECT * FROM finish();
