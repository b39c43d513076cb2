-- Port of test/pgtap/21_lane_layout.sql to relaybus 0.3.0. Guarantee: lane rows are spread
-- over the heap, at most three to a page, so the versions a busy lane's claims and
-- completions write find room on its own page and its updates stay heap-only
-- (docs/design.md, "lanes"; schema: relaybus.lanes, fillfactor 10). At fillfactor 10 alone,
-- eight lanes share a page. If create_lanes lost its placeholder, or the placeholder got
-- short enough to share a page, the counts below would show several lanes per page; if the
-- placeholder survived, a lane's progress would not be empty.
-- What changes: 0.3.0's create_lanes puts its placeholder in done (0.2's in in_flight), and
-- a lane's progress is acked_upto, done, in_flight and retrying, all of which must start
-- empty (0): a placeholder left in done would read as positions finished above the cursor.
-- Everything else of 0.2's test carries over unchanged (the same create_lanes scheme, the
-- same fillfactor); the last part adds what the layout is for, on 0.3.0's lane rows.
SELECT rb_reset();
SELECT plan(8);

CREATE FUNCTION pg_temp.lanes_per_page(want_handler text) RETURNS TABLE(page int, lanes bigint)
  LANGUAGE sql AS $$
  SELECT (l.ctid::text::point)[0]::int, count(*) FROM relaybus.lanes l
   WHERE want_handler IS NULL OR l.handler = want_handler GROUP BY 1
$$;

SELECT relaybus.subscribe('ly_a', ARRAY['ly.event']);
SELECT is((SELECT count(*)::int FROM pg_temp.lanes_per_page('ly_a')), 256,
          'one subscribe: 256 lanes on 256 pages');
SELECT is((SELECT count(*)::int FROM relaybus.lanes
             WHERE done <> '{}' OR in_flight <> '{}' OR retrying <> '{}' OR acked_upto <> 0), 0,
          'no placeholder is left in any lane''s progress (done, in_flight, retrying empty; acked_upto 0)');

CREATE TEMP TABLE before_resubscribe AS SELECT handler, lane, ctid::text AS at FROM relaybus.lanes;
SELECT relaybus.subscribe('ly_a', ARRAY['ly.event', 'ly.other']);
SELECT is((SELECT count(*)::int FROM relaybus.lanes l JOIN before_resubscribe b USING (handler, lane)
            WHERE l.ctid::text = b.at), 256, 'subscribing again leaves the lanes where they are');

-- Vacuum records the free space of the lane pages; a handler subscribed later may reuse it.
VACUUM relaybus.lanes;
SELECT relaybus.subscribe('ly_b', ARRAY['ly.event']);
VACUUM relaybus.lanes;
SELECT relaybus.subscribe('ly_c_with_a_much_longer_handler_name', ARRAY['ly.event']);
SELECT is((SELECT count(*)::int FROM relaybus.lanes), 3 * 256, 'three handlers, 768 lanes');
SELECT cmp_ok((SELECT max(lanes) FROM pg_temp.lanes_per_page(NULL)), '<=', 3::bigint,
              'after vacuum, later handlers put at most three lanes on a page');
SELECT is((SELECT count(*)::int FROM relaybus.lanes
             WHERE done <> '{}' OR in_flight <> '{}' OR retrying <> '{}' OR acked_upto <> 0), 0,
          'still no placeholder left');

-- 0.3.0: the versions a claim and a completion write stay on the lane's page (heap-only),
-- with every handler's lanes three to a page at most.
SELECT relaybus.publish('ly.event', '{}', event_id => 'ly-' || i) FROM generate_series(1, 20) i;
CREATE TEMP TABLE lane_pages AS SELECT handler, lane, (ctid::text::point)[0]::int AS page FROM relaybus.lanes;
SELECT pg_stat_force_next_flush();
CREATE TEMP TABLE lane_stats AS SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
  WHERE relid = 'relaybus.lanes'::regclass;
SELECT relaybus.complete_many(ARRAY(SELECT lease_token FROM relaybus.claim('ly-w', 100, '1 minute', ARRAY['ly_b'])))
  FROM generate_series(1, 3);
SELECT pg_stat_force_next_flush();
SELECT pg_stat_clear_snapshot();
SELECT ok((SELECT s.n_tup_upd > b.n_tup_upd AND s.n_tup_upd - b.n_tup_upd = s.n_tup_hot_upd - b.n_tup_hot_upd
             FROM pg_stat_user_tables s, lane_stats b WHERE s.relid = 'relaybus.lanes'::regclass),
          'claims and completions of a handler''s lanes: every lane update heap-only');
SELECT is((SELECT count(*)::int FROM relaybus.lanes l JOIN lane_pages p USING (handler, lane)
            WHERE (l.ctid::text::point)[0]::int <> p.page), 0,
          'every lane row stayed on its page');

SELECT * FROM finish();
