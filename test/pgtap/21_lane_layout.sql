-- Guarantee: lane rows are spread over the heap, at most three to a page, so the versions a
-- busy lane's claims write find room on its own page and its updates stay heap-only
-- (docs/design.md, "lanes"). At fillfactor 10 alone, eight lanes share a page. If
-- create_lanes lost its placeholder, or the placeholder got short enough to share a page,
-- the counts below would show several lanes per page; if the placeholder survived,
-- in_flight would not be empty.
SELECT rb_reset();
SELECT plan(6);

CREATE FUNCTION pg_temp.lanes_per_page(want_handler text) RETURNS TABLE(page int, lanes bigint)
  LANGUAGE sql AS $$
  SELECT (l.ctid::text::point)[0]::int, count(*) FROM relaybus.lanes l
   WHERE want_handler IS NULL OR l.handler = want_handler GROUP BY 1
$$;

SELECT relaybus.subscribe('ly_a', ARRAY['ly.event']);
SELECT is((SELECT count(*)::int FROM pg_temp.lanes_per_page('ly_a')), 256,
          'one subscribe: 256 lanes on 256 pages');
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE in_flight <> '{}'), 0,
          'no placeholder is left in any in-flight list');

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
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE in_flight <> '{}'), 0,
          'still no placeholder left');

SELECT * FROM finish();
