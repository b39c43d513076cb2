-- Guarantee: the happy path's write pattern, read from the pages themselves (pageinspect),
-- on relaybus's own tables. One delivery, published, claimed and completed, each step a
-- committed transaction of its own on another connection, leaves:
--  - in deliveries, exactly one heap tuple: inserted by the publish, deleted by the
--    completion, never updated (no HOT_UPDATED flag, t_ctid pointing at itself);
--  - in the indexes of deliveries, at most 3 entries in all (a keyed event: the primary
--    key and the two pending indexes), every one pointing at that tuple; entries of
--    deleted tuples that no vacuum has removed yet count, which is the point;
--  - in lanes, new versions of the claimed lane row only, each one heap-only, and no new
--    entry in the lanes' primary key.
-- If a claim or a completion UPDATEd the delivery (0.1.0's row lease), there would be more
-- line pointers, a ctid pointing elsewhere and more index entries; if a lane column got
-- indexed or the lanes lost their free space, a lane version would not be heap-only and
-- lanes_pkey would grow.
--
-- rb_reset() truncates the tables, so they start with empty pages. Autovacuum is switched
-- off on deliveries and lanes for the test (and reset at the end) so that nothing vacuums
-- the evidence away. Page pruning may still happen on the lane page (its fillfactor of 10
-- keeps it prunable: the completion's own lookup of the lane usually prunes it), which
-- turns the lane's root line pointer into a redirect to the surviving version: the walk
-- below follows t_ctid and redirects alike. The deliveries page is nearly empty and is
-- never pruned.
SELECT rb_reset();
SELECT plan(16);

SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pageinspect;
RESET client_min_messages;
ALTER TABLE relaybus.deliveries SET (autovacuum_enabled = off);
ALTER TABLE relaybus.lanes SET (autovacuum_enabled = off);

SELECT rb_connect('pe');
-- flush this session's own counters before the baseline
SELECT pg_stat_force_next_flush();

CREATE FUNCTION pg_temp.remote(sql text) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(x, ',') FROM dblink('pe', sql) AS t(x text)
$$;

-- Every line pointer of every block of rel, with the infomask bits that matter here.
CREATE FUNCTION pg_temp.heap(rel regclass)
  RETURNS TABLE(blk int, lp int, lp_flags int, lp_off int, t_xmin bigint, t_xmax bigint,
                t_ctid tid, hot_updated boolean, heap_only boolean, lock_only boolean,
                keys_updated boolean, attrs bytea[])
  LANGUAGE sql AS $$
  SELECT b, h.lp, h.lp_flags, h.lp_off, h.t_xmin::text::bigint, h.t_xmax::text::bigint, h.t_ctid,
         h.t_infomask2 & x'4000'::int <> 0,   -- HEAP_HOT_UPDATED
         h.t_infomask2 & x'8000'::int <> 0,   -- HEAP_ONLY_TUPLE
         h.t_infomask & x'0080'::int <> 0,    -- HEAP_XMAX_LOCK_ONLY
         h.t_infomask2 & x'2000'::int <> 0,   -- HEAP_KEYS_UPDATED (a delete sets it)
         h.t_attrs
    FROM generate_series(0, (pg_relation_size(rel) / current_setting('block_size')::int)::int - 1) b,
         heap_page_item_attrs(get_raw_page(rel::text, b), rel) h
$$;

-- The heap tids of every leaf entry of a btree index (each tid of a posting list; the high
-- key of a non-rightmost leaf is not an entry).
CREATE FUNCTION pg_temp.index_tids(idx regclass) RETURNS TABLE(blk int, htid tid)
  LANGUAGE sql AS $$
  SELECT b, t
    FROM generate_series(1, (pg_relation_size(idx) / current_setting('block_size')::int)::int - 1) b
   CROSS JOIN LATERAL bt_page_stats(idx::text, b) s
   CROSS JOIN LATERAL bt_page_items(idx::text, b) i
   CROSS JOIN LATERAL unnest(coalesce(i.tids, ARRAY[i.htid])) t
   WHERE s.type = 'l' AND NOT (s.btpo_next <> 0 AND i.itemoffset = 1)
$$;

CREATE TEMP TABLE baseline AS
  SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
    FROM pg_stat_user_tables WHERE schemaname = 'relaybus' AND relname IN ('deliveries', 'lanes');
CREATE FUNCTION pg_temp.delta(rel name, OUT ins bigint, OUT upd bigint, OUT hot bigint,
                              OUT del bigint) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_stat_clear_snapshot();
  SELECT s.n_tup_ins - b.n_tup_ins, s.n_tup_upd - b.n_tup_upd,
         s.n_tup_hot_upd - b.n_tup_hot_upd, s.n_tup_del - b.n_tup_del
    INTO ins, upd, hot, del
    FROM pg_stat_user_tables s JOIN baseline b USING (relname)
   WHERE s.schemaname = 'relaybus' AND s.relname = rel;
END
$$;

--------------------------------------------------------------------------------
-- One delivery: subscribe, publish (keyed), claim (batch 1), complete: each step committed
-- on the other connection, which also reports the id of the transaction that ran it.
--------------------------------------------------------------------------------
SELECT pg_temp.remote($$SELECT relaybus.subscribe('pe_mail', ARRAY['pe.order'])::text$$);
SELECT pg_temp.remote($$SELECT relaybus.publish('pe.order', '{"n": 1}', key => 'pe-key',
                        event_id => 'pe-1') || ' ' || pg_current_xact_id()$$) AS published \gset
SELECT pg_temp.remote($$SELECT lease_token || ' ' || pg_current_xact_id()
                          FROM relaybus.claim('pe-worker', 1, '1 hour', ARRAY['pe_mail'])$$)
  AS claimed \gset
SELECT split_part(:'claimed', ' ', 1) AS token, split_part(:'claimed', ' ', 2) AS claim_xact \gset
SELECT pg_temp.remote(format($$SELECT relaybus.complete(%L) || ' ' || pg_current_xact_id()$$,
                             :'token')) AS completed \gset
SELECT pg_temp.remote('SELECT pg_stat_force_next_flush()::text');

-- the 32-bit xid of a full transaction id, as heap_page_items shows it
CREATE FUNCTION pg_temp.xid32(full_xid text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
  SELECT full_xid::bigint % 4294967296
$$;
CREATE TEMP TABLE ids AS SELECT
  pg_temp.xid32(split_part(:'published', ' ', 2)) AS publish_xid,
  pg_temp.xid32(:'claim_xact') AS claim_xid,
  pg_temp.xid32(split_part(:'completed', ' ', 2)) AS complete_xid;

SELECT is(split_part(:'completed', ' ', 1), 'true', 'the delivery was claimed and completed');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 0, 'no delivery row is visible any more');

--------------------------------------------------------------------------------
-- deliveries: one heap tuple, deleted by the completion, never updated.
--------------------------------------------------------------------------------
CREATE TEMP TABLE delivery_tuples AS SELECT * FROM pg_temp.heap('relaybus.deliveries');
SELECT is((SELECT count(*)::int FROM delivery_tuples), 1,
          'deliveries: the heap holds exactly one line pointer');
SELECT is((SELECT t_xmin FROM delivery_tuples), (SELECT publish_xid FROM ids),
          'deliveries: the tuple was inserted by the publish');
SELECT is((SELECT t_xmax FROM delivery_tuples), (SELECT complete_xid FROM ids),
          'deliveries: its xmax is the completion''s transaction');
SELECT ok((SELECT keys_updated AND NOT lock_only FROM delivery_tuples),
          'deliveries: that xmax is a deletion, not a row lock');
SELECT ok((SELECT NOT hot_updated AND NOT heap_only
                  AND t_ctid = format('(%s,%s)', blk, lp)::tid FROM delivery_tuples),
          'deliveries: the tuple was never updated (not HOT_UPDATED, t_ctid points at itself)');

CREATE TEMP TABLE delivery_entries AS
  SELECT c.relname AS index_name, t.htid
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
   CROSS JOIN LATERAL pg_temp.index_tids(i.indexrelid) t
   WHERE i.indrelid = 'relaybus.deliveries'::regclass;
SELECT is((SELECT count(*)::int FROM delivery_entries WHERE index_name = 'deliveries_pkey'), 1,
          'deliveries: the primary key holds one entry');
SELECT cmp_ok((SELECT count(*)::int FROM delivery_entries), '<=', 3,
              'deliveries: at most 3 index entries in all, over every index');
SELECT ok((SELECT bool_and(htid = (SELECT format('(%s,%s)', blk, lp)::tid FROM delivery_tuples))
             FROM delivery_entries),
          'deliveries: every index entry points at that one tuple');
SELECT diag('deliveries index entries: ' || coalesce((SELECT string_agg(index_name || ' -> ' || htid,
            ', ' ORDER BY index_name) FROM delivery_entries), 'none'));

--------------------------------------------------------------------------------
-- lanes: the claimed lane row's versions after the first are heap-only.
--------------------------------------------------------------------------------
CREATE TEMP TABLE lane_tuples AS
  SELECT h.*, get_byte(h.attrs[2], 0) + 256 * get_byte(h.attrs[2], 1) AS lane_no
    FROM pg_temp.heap('relaybus.lanes') h;
-- the lane row's chain: its root (the first version, or the redirect pruning left in its
-- place), then t_ctid from a tuple, lp_off from a redirect
CREATE TEMP TABLE lane_chain AS
WITH RECURSIVE
  lane AS (SELECT relaybus.lane_of('pe-key') AS n),
  chain AS (
    SELECT 1 AS step, t.* FROM lane_tuples t, lane
     WHERE t.lp_flags = 1 AND t.lane_no = lane.n AND NOT t.heap_only
    UNION ALL
    SELECT 1, r.* FROM lane_tuples r JOIN lane_tuples t ON t.blk = r.blk AND t.lp = r.lp_off, lane
     WHERE r.lp_flags = 2 AND t.lane_no = lane.n
    UNION ALL
    SELECT c.step + 1, t.*
      FROM chain c JOIN lane_tuples t
        ON (c.lp_flags = 2 AND t.blk = c.blk AND t.lp = c.lp_off)
        OR (c.lp_flags = 1 AND c.t_ctid <> format('(%s,%s)', c.blk, c.lp)::tid
            AND t.blk = (c.t_ctid::text::point)[0] AND t.lp = (c.t_ctid::text::point)[1]))
  SELECT * FROM chain;

SELECT is((SELECT count(*)::int FROM lane_chain WHERE step = 1), 1,
          'lanes: the claimed lane row has one root line pointer');
SELECT ok((SELECT count(*) FROM lane_chain WHERE step > 1 AND lp_flags = 1) >= 1
          AND (SELECT bool_and(heap_only) FROM lane_chain WHERE step > 1),
          'lanes: every version of the lane row after the first is heap-only');
-- (subscribe's create_lanes writes the first heap-only version: it empties the placeholder
-- that gave the lane its own page)
SELECT ok(EXISTS (SELECT 1 FROM lane_chain WHERE step > 1 AND lp_flags = 1
                     AND t_xmin = (SELECT claim_xid FROM ids)),
          'lanes: the claim wrote one of those heap-only versions');
SELECT is((SELECT count(*)::int FROM pg_temp.index_tids('relaybus.lanes_pkey')), 256,
          'lanes: lanes_pkey holds one entry per lane row, none added by the update');
SELECT diag('lane ' || (SELECT relaybus.lane_of('pe-key')) || ': ' || (SELECT string_agg(
  CASE WHEN lp_flags = 2 THEN format('(%s,%s) redirect -> %s', blk, lp, lp_off)
       ELSE format('(%s,%s) xmin %s xmax %s ctid %s%s%s', blk, lp, t_xmin, t_xmax, t_ctid,
                   CASE WHEN hot_updated THEN ' HOT_UPDATED' ELSE '' END,
                   CASE WHEN heap_only THEN ' HEAP_ONLY' ELSE '' END) END,
  ', ' ORDER BY step) FROM lane_chain));

--------------------------------------------------------------------------------
-- The same in the counters: deliveries 1 insert, 0 updates, 1 delete; every lane update
-- heap-only.
--------------------------------------------------------------------------------
SELECT is((SELECT format('ins %s upd %s del %s', ins, upd, del) FROM pg_temp.delta('deliveries')),
          'ins 1 upd 0 del 1', 'counters: deliveries inserted once, never updated, deleted once');
SELECT ok((SELECT upd > 0 AND upd = hot FROM pg_temp.delta('lanes')),
          'counters: lanes were updated, and every update was heap-only');

SELECT dblink_disconnect('pe');
ALTER TABLE relaybus.deliveries RESET (autovacuum_enabled);
ALTER TABLE relaybus.lanes RESET (autovacuum_enabled);

SELECT * FROM finish();
