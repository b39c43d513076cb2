-- Port of test/pgtap/21_lane_layout.sql to relaybus 0.3.0. 0.2's guarantee was a layout: lane
-- rows spread over the heap, at most three to a page (create_lanes inserted each one with a
-- placeholder, then emptied it), so that the versions a busy lane's claims and completions
-- wrote found room on its own page and its updates stayed heap-only. 0.3.0 keeps a lane's
-- progress out of relaybus.lanes (sql/parts/positions-0.3.0.sql): progress is a new
-- relaybus.lane_progress row per change, and a lane's row holds its lease only, rewritten
-- only when the lease changes. The layout trick is gone with the updates it served; what
-- this test checks now is what replaced it:
--  - subscribe inserts each lane once (no placeholder, no update), with no progress row: a
--    new lane reads as cursor 0, nothing done, in flight or retried; subscribing again
--    leaves the lanes as they are;
--  - the lease writes a claim does (acquiring lanes) are heap-only;
--  - on the happy path, a claim and a complete_many on lanes the worker keeps rewrite no
--    lane row (same xmin and ctid: no dead tuple in relaybus.lanes), the claim adds exactly
--    one progress row per lane it picks from and complete_many exactly one per lane it
--    completes in, and nothing updates or deletes a delivery.
-- If create_lanes went back to its placeholder, lanes would show updates at subscribe; if
-- progress went back into relaybus.lanes, or a claim rewrote the leases of lanes it keeps,
-- the kept lanes would show new versions; if progress were written per delivery, or not at
-- all, the progress rows would not match the lanes.
SELECT rb_reset();
SELECT plan(12);

-- the cumulative counters of one relaybus table, flushed by this session beforehand
CREATE FUNCTION pg_temp.counters(rel name, OUT ins bigint, OUT upd bigint, OUT hot bigint,
                                 OUT del bigint) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_stat_clear_snapshot();
  SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del INTO ins, upd, hot, del
    FROM pg_stat_user_tables WHERE schemaname = 'relaybus' AND relname = rel;
END
$$;
CREATE TEMP TABLE stats (step text, rel name, ins bigint, upd bigint, hot bigint, del bigint,
                         PRIMARY KEY (step, rel));
-- Records the counters of lanes and deliveries as step (the previous statement's counters
-- are flushed by pg_stat_force_next_flush() before this one runs).
CREATE FUNCTION pg_temp.mark(step text) RETURNS void LANGUAGE sql AS $$
  INSERT INTO stats SELECT step, r, c.* FROM unnest(ARRAY['lanes', 'deliveries']::name[]) r,
                                        LATERAL pg_temp.counters(r) c;
$$;
-- each lane's lease row version and newest progress seq
CREATE FUNCTION pg_temp.versions(want_handler text)
  RETURNS TABLE(handler text, lane smallint, version text, seq bigint) LANGUAGE sql AS $$
  SELECT l.handler, l.lane, l.xmin::text || ' ' || l.ctid::text, s.progress_seq
    FROM relaybus.lanes l JOIN relaybus.lane_state s USING (handler, lane)
   WHERE l.handler = want_handler
$$;

SELECT pg_stat_force_next_flush();
SELECT pg_temp.mark('start');
SELECT relaybus.subscribe('ly_a', ARRAY['ly.event']);
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE handler = 'ly_a'), 256, 'one subscribe: 256 lanes');
SELECT is((SELECT count(*)::int FROM relaybus.lane_progress)
          + (SELECT count(*)::int FROM relaybus.lane_state
              WHERE done <> '{}' OR in_flight <> '{}' OR retrying <> '{}' OR acked_upto <> 0
                 OR progress_seq <> 0), 0,
          'a new lane has no progress row: cursor 0, nothing done, in flight or retried');

CREATE TEMP TABLE before_resubscribe AS SELECT handler, lane, xmin::text AS x, ctid::text AS at FROM relaybus.lanes;
SELECT relaybus.subscribe('ly_a', ARRAY['ly.event', 'ly.other']);
SELECT is((SELECT count(*)::int FROM relaybus.lanes l JOIN before_resubscribe b USING (handler, lane)
            WHERE l.ctid::text = b.at AND l.xmin::text = b.x)
          - (SELECT count(*)::int FROM relaybus.lane_progress), 256,
          'subscribing again leaves the lanes as they are (same versions), with no progress row');

SELECT relaybus.subscribe('ly_b', ARRAY['ly.event']);
SELECT relaybus.subscribe('ly_c_with_a_much_longer_handler_name', ARRAY['ly.event']);
SELECT is((SELECT count(*)::int FROM relaybus.lanes), 3 * 256, 'three handlers, 768 lanes');
SELECT pg_stat_force_next_flush();
SELECT pg_temp.mark('subscribed');
SELECT is((SELECT format('ins %s upd %s del %s', e.ins - s.ins, e.upd - s.upd, e.del - s.del)
             FROM stats s JOIN stats e USING (rel) WHERE rel = 'lanes' AND s.step = 'start' AND e.step = 'subscribed'),
          'ins 768 upd 0 del 0', 'the subscribes inserted each lane once and updated none (no placeholder pass)');
SELECT is((SELECT count(*)::int FROM relaybus.lane_progress), 0, 'still no progress row');

-- The happy path on ly_b. Two deliveries per key, so that a lane the first claim picks from
-- has work left and is kept: the second round runs on lanes the worker holds.
SELECT count(relaybus.publish('ly.event', '{}', key => 'k' || (i % 10), event_id => 'ly-' || i))
  FROM generate_series(1, 20) i;
SELECT pg_stat_force_next_flush();
SELECT pg_temp.mark('published');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM relaybus.claim('ly-w', 100, '1 minute', ARRAY['ly_b']))),
          10, 'first round: a claim acquires the keys'' lanes, complete_many completes the head of each key');
SELECT pg_stat_force_next_flush();
SELECT pg_temp.mark('round 1');
SELECT ok((SELECT e.upd > s.upd AND e.upd - s.upd = e.hot - s.hot
             FROM stats s JOIN stats e USING (rel) WHERE rel = 'lanes' AND s.step = 'published' AND e.step = 'round 1'),
          'the lease writes of a claim acquiring lanes are heap-only');

CREATE TEMP TABLE before_claim AS SELECT * FROM pg_temp.versions('ly_b');
CREATE TEMP TABLE kept AS
  SELECT b.* FROM before_claim b JOIN relaybus.lanes l USING (handler, lane) WHERE l.lease_owner = 'ly-w';
CREATE TEMP TABLE round2 AS
  SELECT lease_token, split_part(lease_token, '.', 2)::smallint AS lane
    FROM relaybus.claim('ly-w', 100, '1 minute', ARRAY['ly_b']);
CREATE TEMP TABLE after_claim AS SELECT * FROM pg_temp.versions('ly_b');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM round2)), 10,
          'second round: the claim runs the rest of each key from the kept lanes, complete_many completes them');
SELECT pg_stat_force_next_flush();
SELECT pg_temp.mark('round 2');
CREATE TEMP TABLE after_complete AS SELECT * FROM pg_temp.versions('ly_b');

SELECT ok((SELECT count(*) FROM kept) > 0
          AND NOT EXISTS (SELECT 1 FROM round2 r WHERE r.lane NOT IN (SELECT lane FROM kept))
          AND NOT EXISTS (SELECT 1 FROM kept k JOIN after_complete a USING (handler, lane) WHERE a.version <> k.version)
          AND (SELECT e.upd - s.upd + e.del - s.del FROM stats s JOIN stats e USING (rel)
                WHERE rel = 'lanes' AND s.step = 'round 1' AND e.step = 'round 2') = 0,
          'a claim and complete_many on kept lanes rewrite no lane row: same xmin and ctid, no lane update (no dead tuple)');
-- Over all 256 lanes of ly_b: one more progress row per step for a lane of round 2, none
-- for any other.
SELECT ok((SELECT count(*) FROM before_claim) = 256
          AND NOT EXISTS (SELECT 1 FROM before_claim b JOIN after_claim c USING (handler, lane)
                           WHERE c.seq - b.seq <> CASE WHEN b.lane IN (SELECT lane FROM round2) THEN 1 ELSE 0 END)
          AND NOT EXISTS (SELECT 1 FROM after_claim c JOIN after_complete a USING (handler, lane)
                           WHERE a.seq - c.seq <> CASE WHEN c.lane IN (SELECT lane FROM round2) THEN 1 ELSE 0 END),
          'the claim adds exactly one progress row per lane it picks from, complete_many one per lane it completes in');
SELECT is((SELECT format('upd %s del %s', e.upd - s.upd, e.del - s.del)
             FROM stats s JOIN stats e USING (rel) WHERE rel = 'deliveries' AND s.step = 'start' AND e.step = 'round 2'),
          'upd 0 del 0', 'nothing on the happy path updated or deleted a delivery');

SELECT * FROM finish();
