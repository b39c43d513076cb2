-- Port of test/pgtap/18_page_evidence.sql to relaybus 0.3.0. Guarantee: the happy path's
-- write pattern, read from the pages themselves (pageinspect), on relaybus's own tables.
-- One delivery, published, claimed and completed, each step a committed transaction of its
-- own on another connection, leaves:
--  - in deliveries, exactly one heap tuple, inserted by the publish (at its commit) and
--    never touched again: no xmax (neither deleted nor locked), no HOT_UPDATED flag,
--    t_ctid pointing at itself;
--  - in the indexes of deliveries, exactly 2 entries (its primary key and deliveries_event_idx,
--    the only two indexes 0.3.0 has on it), both pointing at that tuple;
--  - in exceptions, nothing at all: no heap tuple and no index entry (the happy path writes
--    no exception row);
--  - in lanes (the leases), one new version of the claimed lane row, heap-only, written by
--    the claim acquiring the lease; none by the completion, which only locks the row (FOR NO
--    KEY UPDATE: an xmax marked lock-only, no new version), none by the publish, and no new
--    entry in the lanes' primary key;
--  - in lane_progress, exactly two tuples for the lane, inserted by the claim (seq 1) and by
--    the completion (seq 2), never updated, deleted or locked, and one primary key entry
--    each.
-- What changes by design (docs/design.md, "0.3.0: the store"): 0.2 deleted the delivery
-- when it completed (an xmax of the completion's transaction, one more index-visible dead
-- tuple); 0.3.0 writes the delivery once and acknowledges it by moving its lane's cursor, so
-- the delivery row stays, below the cursor, and the completion's write is a new progress
-- row of its lane (insert-only: no version of anything is left dead by it).
-- 0.2's "at most 3 index entries (primary key and two pending indexes)" becomes "exactly
-- 2": 0.3.0's deliveries have two indexes, and no index of a pending status.
-- If a claim or a completion updated or deleted the delivery, it would have an xmax, more
-- line pointers and more index entries; if a lane column got indexed or the lanes lost
-- their free space, a lane version would not be heap-only and lanes_pkey would grow; if a
-- completion rewrote the lease row, a lane version would carry its transaction id; if
-- progress were updated in place, a progress tuple would carry an xmax; if the publish's
-- commit wrote its lane (a counter row per lane, the rejected prototype), a lane version or
-- a progress row would carry the publish's transaction id.
--
-- rb_reset() truncates the tables, so they start with empty pages. Autovacuum is switched
-- off on deliveries, lanes, lane_progress and exceptions for the test (and reset at the end)
-- so that nothing vacuums the evidence away. Page pruning may still happen on the lane page
-- (the completion's own lookup of the lane may prune it), which turns the lane's root line
-- pointer into a redirect to the surviving version: the walk below follows t_ctid and
-- redirects alike. The claim's version is the live one, so pruning never removes it.
SELECT rb_reset();
SELECT plan(26);

SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pageinspect;
RESET client_min_messages;
ALTER TABLE relaybus.deliveries SET (autovacuum_enabled = off);
ALTER TABLE relaybus.lanes SET (autovacuum_enabled = off);
ALTER TABLE relaybus.lane_progress SET (autovacuum_enabled = off);
ALTER TABLE relaybus.exceptions SET (autovacuum_enabled = off);

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
    FROM pg_stat_user_tables WHERE schemaname = 'relaybus'
     AND relname IN ('deliveries', 'lanes', 'lane_progress', 'exceptions');
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
-- 0.2: "no delivery row is visible any more" (the completion deleted it). 0.3.0 keeps the
-- row and finishes it by the lane's cursor: the lane acknowledges position 1, nothing is left
-- in flight, and the admin functions see nothing left to do.
SELECT results_eq($$SELECT d.position, l.acked_upto, l.done, l.in_flight, l.retrying
                      FROM relaybus.deliveries d JOIN relaybus.lane_state l USING (handler, lane)$$,
                  $$VALUES (1::bigint, 1::bigint, '{}'::bigint[], '{}'::bigint[], '{}'::bigint[])$$,
                  'the delivery row stays at position 1, below its lane''s cursor (acked_upto 1, nothing in flight)');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0,
          'list_deliveries: nothing is left pending, processing or dead');

--------------------------------------------------------------------------------
-- deliveries: one heap tuple, written by the publish, never updated, deleted or locked.
--------------------------------------------------------------------------------
CREATE TEMP TABLE delivery_tuples AS SELECT * FROM pg_temp.heap('relaybus.deliveries');
SELECT is((SELECT count(*)::int FROM delivery_tuples), 1,
          'deliveries: the heap holds exactly one line pointer');
SELECT is((SELECT t_xmin FROM delivery_tuples), (SELECT publish_xid FROM ids),
          'deliveries: the tuple was inserted by the publish');
-- 0.2: its xmax was the completion's transaction, a deletion. 0.3.0's completion writes the
-- lane's progress, not the delivery: no transaction ever set its xmax (not a deletion, not even a row
-- lock: neither the claim nor the completion locks deliveries).
SELECT is((SELECT t_xmax FROM delivery_tuples), 0::bigint,
          'deliveries: its xmax is 0: no claim or completion deleted, updated or locked it');
SELECT ok((SELECT NOT keys_updated AND NOT lock_only FROM delivery_tuples),
          'deliveries: neither a deletion nor a row lock is recorded on it');
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
-- 0.2: at most 3 (its primary key and two pending indexes); 0.3.0 has two indexes on
-- deliveries and writes one entry in each, once.
SELECT is((SELECT count(*)::int FROM delivery_entries), 2,
          'deliveries: exactly 2 index entries in all, over every index (deliveries_pkey, deliveries_event_idx)');
SELECT ok((SELECT bool_and(htid = (SELECT format('(%s,%s)', blk, lp)::tid FROM delivery_tuples))
             FROM delivery_entries),
          'deliveries: every index entry points at that one tuple');
SELECT diag('deliveries index entries: ' || coalesce((SELECT string_agg(index_name || ' -> ' || htid,
            ', ' ORDER BY index_name) FROM delivery_entries), 'none'));

--------------------------------------------------------------------------------
-- exceptions: nothing. The happy path writes no exception row.
--------------------------------------------------------------------------------
SELECT is((SELECT count(*)::int FROM pg_temp.heap('relaybus.exceptions')), 0,
          'exceptions: the heap holds no line pointer (no row was ever written)');
SELECT is((SELECT count(*)::int FROM pg_index i CROSS JOIN LATERAL pg_temp.index_tids(i.indexrelid) t
            WHERE i.indrelid = 'relaybus.exceptions'::regclass), 0,
          'exceptions: none of its indexes holds an entry');

--------------------------------------------------------------------------------
-- lanes: the claimed lane row's one later version is heap-only, and the claim's.
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
-- 0.3.0: the claim acquiring the lane writes its lease: the chain's last version, the claim's.
SELECT ok((SELECT t_xmin = (SELECT claim_xid FROM ids) AND heap_only AND NOT hot_updated
             FROM lane_chain WHERE step = (SELECT max(step) FROM lane_chain)),
          'lanes: the live version of the lane row is the claim''s (acquiring the lease), heap-only');
-- 0.3.0: the completion's acknowledgement is a progress row, not a lane version: it locks
-- the lane row (FOR NO KEY UPDATE) and leaves no version of it.
SELECT ok(NOT EXISTS (SELECT 1 FROM lane_tuples WHERE lp_flags = 1 AND t_xmin = (SELECT complete_xid FROM ids))
          AND (SELECT t_xmax = 0 OR (t_xmax = (SELECT complete_xid FROM ids) AND lock_only)
                 FROM lane_chain WHERE step = (SELECT max(step) FROM lane_chain)),
          'lanes: the completion wrote no lane row version (at most a row lock on the claim''s)');
-- 0.3.0: the publish orders its deliveries under a lock at commit, and writes no lane.
SELECT is((SELECT count(*)::int FROM lane_tuples WHERE lp_flags = 1 AND t_xmin = (SELECT publish_xid FROM ids))
          + (SELECT count(*)::int FROM pg_temp.heap('relaybus.lane_progress')
              WHERE lp_flags = 1 AND t_xmin = (SELECT publish_xid FROM ids)), 0,
          'lanes: the publish wrote no lane row version and no progress row');
SELECT is((SELECT count(*)::int FROM pg_temp.index_tids('relaybus.lanes_pkey')), 256,
          'lanes: lanes_pkey holds one entry per lane row, none added by the update');

--------------------------------------------------------------------------------
-- lane_progress: two rows inserted, the claim's and the completion's, never touched again.
--------------------------------------------------------------------------------
CREATE TEMP TABLE progress_tuples AS
  SELECT h.*, get_byte(h.attrs[2], 0) + 256 * get_byte(h.attrs[2], 1) AS lane_no
    FROM pg_temp.heap('relaybus.lane_progress') h;
SELECT results_eq($$SELECT lane_no = relaybus.lane_of('pe-key'), lp_flags, t_xmin FROM progress_tuples ORDER BY blk, lp$$,
                  $$VALUES (true, 1, (SELECT claim_xid FROM ids)), (true, 1, (SELECT complete_xid FROM ids))$$,
                  'lane_progress: the heap holds exactly two tuples, of the lane: the claim''s, then the completion''s');
SELECT ok((SELECT bool_and(t_xmax = 0 AND NOT hot_updated AND NOT heap_only
                           AND t_ctid = format('(%s,%s)', blk, lp)::tid) FROM progress_tuples),
          'lane_progress: neither was updated, deleted or locked (xmax 0, t_ctid points at itself)');
SELECT is((SELECT count(*)::int FROM pg_temp.index_tids('relaybus.lane_progress_pkey')), 2,
          'lane_progress: its primary key holds one entry per row');
SELECT diag('lane ' || (SELECT relaybus.lane_of('pe-key')) || ': ' || (SELECT string_agg(
  CASE WHEN lp_flags = 2 THEN format('(%s,%s) redirect -> %s', blk, lp, lp_off)
       ELSE format('(%s,%s) xmin %s xmax %s ctid %s%s%s', blk, lp, t_xmin, t_xmax, t_ctid,
                   CASE WHEN hot_updated THEN ' HOT_UPDATED' ELSE '' END,
                   CASE WHEN heap_only THEN ' HEAP_ONLY' ELSE '' END) END,
  ', ' ORDER BY step) FROM lane_chain));

--------------------------------------------------------------------------------
-- The same in the counters: deliveries 1 insert, 0 updates, 0 deletes (0.2: 1 delete);
-- exceptions nothing; lanes inserted by subscribe and updated once (the claim's lease),
-- heap-only; lane_progress two inserts and nothing else.
--------------------------------------------------------------------------------
SELECT is((SELECT format('ins %s upd %s del %s', ins, upd, del) FROM pg_temp.delta('deliveries')),
          'ins 1 upd 0 del 0', 'counters: deliveries inserted once, never updated, never deleted');
SELECT is((SELECT format('ins %s upd %s del %s', ins, upd, del) FROM pg_temp.delta('exceptions')),
          'ins 0 upd 0 del 0', 'counters: exceptions untouched');
SELECT is((SELECT format('ins %s upd %s hot %s del %s', ins, upd, hot, del) FROM pg_temp.delta('lanes')),
          'ins 256 upd 1 hot 1 del 0',
          'counters: lanes inserted by subscribe, updated once (the claim''s lease), heap-only');
SELECT is((SELECT format('ins %s upd %s del %s', ins, upd, del) FROM pg_temp.delta('lane_progress')),
          'ins 2 upd 0 del 0', 'counters: lane_progress inserted twice (claim, completion), never updated or deleted');

SELECT dblink_disconnect('pe');
ALTER TABLE relaybus.deliveries RESET (autovacuum_enabled);
ALTER TABLE relaybus.lanes RESET (autovacuum_enabled);
ALTER TABLE relaybus.lane_progress RESET (autovacuum_enabled);
ALTER TABLE relaybus.exceptions RESET (autovacuum_enabled);

SELECT * FROM finish();
