-- What purge_expired deletes and keeps on 0.3.0, now that it finds events from the lanes'
-- finished rows instead of visiting every old event. Events past retention_completed
-- (aged by hand below; nothing else writes published_at) go once none of their deliveries
-- is unfinished or held by an exception row, whatever the order their handlers finished
-- in; a finished delivery row goes as soon as its event is past retention, even while
-- another handler's delivery of that event waits; a lane's last row stays after its event
-- is gone and goes once the lane has a later one; rows held by exception rows (a failed
-- delivery's retry, a dead letter, a stuck key's parked deliveries) stay, the walk passes
-- them once (relaybus.purge_horizons) and deletes what they leave once their exception
-- rows go; an event another transaction holds stays; events published to no handler go by
-- age; events of a 0.2.1 update (relaybus.events_from_021) go once all are past retention;
-- one call reads no more rows beside a larger unfinished backlog; and every lane is walked
-- when there are more than a call's 10,000 rows of them.
-- A purge that deletes an event whose other delivery is unfinished or held by an exception
-- row (its handler would get no payload), a lane's last row (the next commit would number
-- from an earlier one) or a held row, or that never deletes what a fan-out, a stuck key, a
-- lock or a lane late in the walk's order left behind, fails here.
SELECT rb_reset();
SELECT plan(58);

SELECT relaybus.subscribe('pw_one', ARRAY['pw.one', 'pw.fan']);
SELECT relaybus.subscribe('pw_two', ARRAY['pw.fan']);
SELECT relaybus.subscribe('pw_paused', ARRAY['pw.backlog']);
SELECT relaybus.pause('pw_paused');

-- Claims and completes everything due of handler, then hands its lanes back.
CREATE FUNCTION pg_temp.drain(handler text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int; total int := 0;
BEGIN
  LOOP
    SELECT relaybus.complete_many(ARRAY(SELECT c.lease_token
             FROM relaybus.claim('pw-worker', 100, '5 minutes', ARRAY[handler]) c)) INTO n;
    EXIT WHEN n = 0;
    total := total + n;
  END LOOP;
  PERFORM relaybus.relinquish('pw-worker');
  RETURN total;
END
$$;
CREATE FUNCTION pg_temp.purge_all() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint; total bigint := 0;
BEGIN
  LOOP
    n := relaybus.purge_expired();
    EXIT WHEN n = 0;
    total := total + n;
  END LOOP;
  RETURN total;
END
$$;
-- Past relaybus.retention_completed (7 days by default).
CREATE FUNCTION pg_temp.age(pattern text) RETURNS void LANGUAGE sql AS $$
  UPDATE relaybus.events SET published_at = now() - interval '30 days' WHERE id LIKE pattern;
  UPDATE relaybus.deliveries SET created_at = now() - interval '30 days' WHERE event_id LIKE pattern;
$$;
CREATE FUNCTION pg_temp.events(pattern text) RETURNS text LANGUAGE sql AS $$
  SELECT coalesce(string_agg(id, ' ' ORDER BY id), '') FROM relaybus.events WHERE id LIKE pattern
$$;
-- The delivery rows left, as event:handler.
CREATE FUNCTION pg_temp.rows(pattern text) RETURNS text LANGUAGE sql AS $$
  SELECT coalesce(string_agg(event_id || ':' || handler, ' ' ORDER BY event_id, handler), '')
    FROM relaybus.deliveries WHERE event_id LIKE pattern
$$;
-- A key (prefix || n) that lands in the lane of key, and one in a lane no delivery of
-- handler uses yet.
CREATE FUNCTION pg_temp.key_in_lane_of(prefix text, key text) RETURNS text LANGUAGE sql AS $$
  SELECT prefix || n FROM generate_series(1, 100000) n
   WHERE relaybus.lane_of(prefix || n) = relaybus.lane_of(key) ORDER BY n LIMIT 1
$$;
CREATE FUNCTION pg_temp.key_in_free_lane(prefix text, want_handler text) RETURNS text LANGUAGE sql AS $$
  SELECT prefix || n FROM generate_series(1, 100000) n
   WHERE relaybus.lane_of(prefix || n) NOT IN (SELECT d.lane FROM relaybus.deliveries d
                                                WHERE d.handler = want_handler)
   ORDER BY n LIMIT 1
$$;

--------------------------------------------------------------------------------
-- Fan-out: one handler finished, the other not yet.
--------------------------------------------------------------------------------
SELECT relaybus.publish('pw.fan', '{}', key => 'f', event_id => 'fan-1');
SELECT relaybus.publish('pw.fan', '{}', key => 'f', event_id => 'fan-2');
SELECT is(pg_temp.drain('pw_one'), 2, 'pw_one finishes both fan-out events');
SELECT pg_temp.age('fan-%');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('fan-%'), 'fan-1 fan-2', 'fan-out: events stay while pw_two has not finished them');
SELECT is(pg_temp.rows('fan-%'), 'fan-1:pw_two fan-2:pw_one fan-2:pw_two',
          'fan-out: the finished row of pw_one goes (its lane''s last, fan-2, stays); pw_two''s stay');
SELECT is((SELECT string_agg(event_id, ' ' ORDER BY event_id) FROM relaybus.list_deliveries(handler => 'pw_two')),
          'fan-1 fan-2', 'fan-out: pw_two still has both to run');
CREATE TEMP TABLE claimed AS
  SELECT c.* FROM relaybus.claim('pw-two-worker', 10, '5 minutes', ARRAY['pw_two']) c;
SELECT is((SELECT string_agg(event_id || ' ' || (payload IS NOT NULL)::text, ', ') FROM claimed),
          'fan-1 true', 'fan-out: pw_two claims its first with its event (one per key)');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM claimed)), 1, 'and completes it');
SELECT relaybus.relinquish('pw-two-worker');
SELECT is(pg_temp.drain('pw_two'), 1, 'pw_two finishes the second');
SELECT cmp_ok(pg_temp.purge_all(), '>=', 2::bigint, 'the purge counts the two events');
SELECT is(pg_temp.events('fan-%'), '', 'fan-out: both events go once the last handler finished');
SELECT is(pg_temp.rows('fan-%'), 'fan-2:pw_one fan-2:pw_two',
          'fan-out: each lane keeps its last row, the rest goes');

-- Fan-out where the other handler's delivery failed: its exception row holds the event.
SELECT relaybus.publish('pw.fan', '{}', key => 'g', event_id => 'fx-1');
SELECT relaybus.publish('pw.one', '{}', key => 'g', event_id => 'fx-2');  -- after it in pw_one's lane
SELECT is(pg_temp.drain('pw_one'), 2, 'pw_one finishes fx-1 and fx-2');
SELECT relaybus.fail(c.lease_token, 'later', now() + interval '1 hour')
  FROM relaybus.claim('pw-two-worker', 10, '5 minutes', ARRAY['pw_two']) c;
SELECT relaybus.relinquish('pw-two-worker');
SELECT pg_temp.age('fx-%');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('fx-%') || ' / ' || pg_temp.rows('fx-%'), 'fx-1 / fx-1:pw_two fx-2:pw_one',
          'fan-out: an event stays while another handler''s delivery of it waits for a retry '
          '(the finished one''s row goes)');
SELECT is(relaybus.cancel('fx-1', 'pw_two'), true, 'that retry is cancelled');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('fx-%'), '', 'then the event goes');

--------------------------------------------------------------------------------
-- Exception rows: a retry and a dead letter hold their events and rows.
--------------------------------------------------------------------------------
SELECT relaybus.publish('pw.one', '{}', event_id => 'ex-retry');
SELECT relaybus.publish('pw.one', '{}', event_id => 'ex-dead');
SELECT CASE c.event_id WHEN 'ex-retry' THEN relaybus.fail(c.lease_token, 'later', now() + interval '1 hour')
                       ELSE relaybus.bury(c.lease_token, 'poison')::text END
  FROM relaybus.claim('pw-worker', 10, '5 minutes', ARRAY['pw_one']) c ORDER BY c.event_id;
SELECT relaybus.relinquish('pw-worker');
SELECT pg_temp.age('ex-%');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('ex-%'), 'ex-dead ex-retry', 'exception rows: a retry and a dead letter keep their events');
SELECT is(pg_temp.rows('ex-%'), 'ex-dead:pw_one ex-retry:pw_one', 'and their delivery rows');
SET relaybus.retention_dead = 0;
SELECT pg_temp.purge_all();
RESET relaybus.retention_dead;
SELECT is(pg_temp.events('ex-%'), 'ex-retry',
          'the dead letter past retention_dead goes, and its event with it');
SELECT is(relaybus.cancel('ex-retry', 'pw_one'), true, 'the retry is cancelled');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('ex-%'), '', 'an event whose exception row went is deleted');

--------------------------------------------------------------------------------
-- A stuck key: its parked rows are held, the walk passes them once and deletes the
-- finished rows of other keys in the lane beyond them.
--------------------------------------------------------------------------------
SELECT pg_temp.key_in_lane_of('other-', 'stuck') AS other \gset
SELECT relaybus.publish('pw.one', '{}', key => 'stuck', event_id => 's-1');
SELECT relaybus.fail(c.lease_token, 'down', now() + interval '1 hour')
  FROM relaybus.claim('pw-worker', 10, '5 minutes', ARRAY['pw_one']) c;
SELECT relaybus.relinquish('pw-worker');
SELECT relaybus.publish('pw.one', '{}', key => 'stuck', event_id => 's-2');
SELECT relaybus.publish('pw.one', '{}', key => :'other', event_id => 'o-1');
SELECT relaybus.publish('pw.one', '{}', key => 'stuck', event_id => 's-3');
SELECT relaybus.publish('pw.one', '{}', key => :'other', event_id => 'o-2');
SELECT relaybus.publish('pw.one', '{}', key => :'other', event_id => 'o-3');
SELECT is(pg_temp.drain('pw_one'), 3, 'the other key''s three run; the stuck key''s two are parked');
SELECT is((SELECT string_agg(event_id, ' ' ORDER BY position) FROM relaybus.exceptions
            WHERE handler = 'pw_one' AND status = 'pending'), 's-1 s-2 s-3',
          'the stuck key: its failed delivery and the two parked behind it are exception rows');
SELECT pg_temp.age('s-%');
SELECT pg_temp.age('o-%');
SELECT cmp_ok(pg_temp.purge_all(), '>=', 2::bigint, 'a purge deletes past the parked rows');
SELECT is(pg_temp.events('s-%') || ' / ' || pg_temp.events('o-%'), 's-1 s-2 s-3 / ',
          'the stuck key''s events stay; the other key''s go (o-3''s too: only its row is the lane''s last)');
SELECT is(pg_temp.rows('s-%') || ' / ' || pg_temp.rows('o-%'), 's-1:pw_one s-2:pw_one s-3:pw_one / o-3:pw_one',
          'held rows stay; of the finished ones only the lane''s last');
SELECT ok((SELECT h.purged_upto >= (SELECT max(position) FROM relaybus.deliveries WHERE event_id LIKE 's-%')
                AND h.purged_upto < (SELECT position FROM relaybus.deliveries WHERE event_id = 'o-3')
             FROM relaybus.purge_horizons h WHERE h.handler = 'pw_one' AND h.lane = relaybus.lane_of('stuck')),
          'the lane''s horizon is past the last held row, below its last row');
SELECT is(relaybus.purge_expired(), 0::bigint, 'the next call passes nothing again');
-- A later finished delivery of the lane: its last row before it goes too.
SELECT relaybus.publish('pw.one', '{}', key => :'other', event_id => 'o-4');
SELECT is(pg_temp.drain('pw_one'), 1, 'o-4 runs');
SELECT pg_temp.age('o-%');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.rows('o-%'), 'o-4:pw_one', 'o-3''s row goes once the lane has a later one, beyond the held rows');
-- The key comes free: its rows are finished, below the horizon, and go from the lane's
-- lowest row up.
SELECT is(relaybus.cancel('s-1', 'pw_one'), true, 'the stuck delivery is cancelled');
SELECT is(pg_temp.drain('pw_one'), 2, 'the parked two run');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE handler = 'pw_one'), 0, 'no exception row is left');
SELECT cmp_ok(pg_temp.purge_all(), '>=', 3::bigint, 'the purge finds what the exception rows left');
SELECT is(pg_temp.events('s-%') || ' / ' || pg_temp.rows('s-%'), ' / ',
          'the stuck key''s events and rows are gone, below the horizon');

--------------------------------------------------------------------------------
-- A lane's last row: its event goes, the row stays until the lane has a later one.
--------------------------------------------------------------------------------
SELECT pg_temp.key_in_free_lane('last-', 'pw_one') AS last_key \gset
SELECT relaybus.publish('pw.one', '{}', key => :'last_key', event_id => 'l-1');
SELECT is(pg_temp.drain('pw_one'), 1, 'l-1 runs');
SELECT pg_temp.age('l-%');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('l-%') || ' / ' || pg_temp.rows('l-%'), ' / l-1:pw_one',
          'the lane''s last row stays after its event is gone');
SELECT relaybus.publish('pw.one', '{}', key => :'last_key', event_id => 'l-2');
SELECT is((SELECT d.position - l.position FROM relaybus.deliveries d, relaybus.deliveries l
            WHERE d.event_id = 'l-2' AND l.event_id = 'l-1'), 1::bigint,
          'the next delivery of the lane is numbered from it');
SELECT is(pg_temp.drain('pw_one'), 1, 'l-2 runs');
SELECT pg_temp.age('l-%');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('l-%') || ' / ' || pg_temp.rows('l-%'), ' / l-2:pw_one',
          'then it goes, and the later one stays as the lane''s last');
-- l-2's id published again: a new event, young, whose delivery follows the old row.
SELECT relaybus.publish('pw.one', '{}', key => :'last_key', event_id => 'l-2');
SELECT pg_temp.purge_all();
SELECT is((SELECT string_agg(d.event_id || ':' || (d.created_at > now() - interval '1 day')::text, ' ')
             FROM relaybus.deliveries d WHERE d.event_id LIKE 'l-%') || ' / ' || pg_temp.events('l-%'),
          'l-2:true / l-2', 'the old row of a purged id published again goes; the young event and its delivery stay');

-- An old event published again to another handler: it goes by its first publish time,
-- once the later delivery finished too.
SELECT pg_temp.key_in_free_lane('again-', 'pw_two') AS again_key \gset
SELECT relaybus.publish('pw.one', '{}', key => :'again_key', event_id => 'r-1');
SELECT is(pg_temp.drain('pw_one'), 2, 'r-1 runs, and l-2''s new delivery');
SELECT pg_temp.age('r-%');
SELECT relaybus.publish('pw.one', '{}', key => :'again_key', event_id => 'r-1', handlers => ARRAY['pw_two']);
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('r-%'), 'r-1', 'an old event published again to pw_two stays while that delivery waits');
SELECT is(pg_temp.drain('pw_two'), 1, 'pw_two runs it');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('r-%'), '', 'then it goes, though its last delivery is young');

--------------------------------------------------------------------------------
-- An event another transaction holds stays with its row, and goes once released.
--------------------------------------------------------------------------------
SELECT pg_temp.key_in_free_lane('lock-', 'pw_one') AS lock_key \gset
SELECT relaybus.publish('pw.one', '{}', key => :'lock_key', event_id => 'k-1');
SELECT relaybus.publish('pw.one', '{}', key => :'lock_key', event_id => 'k-2');
SELECT is(pg_temp.drain('pw_one'), 2, 'k-1 and k-2 run');
SELECT pg_temp.age('k-%');
SELECT rb_connect('pw_lock');
SELECT dblink_exec('pw_lock', 'BEGIN');
SELECT * FROM dblink('pw_lock', $$SELECT id FROM relaybus.events WHERE id = 'k-1' FOR UPDATE$$) AS t(id text);
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('k-%') || ' / ' || pg_temp.rows('k-%'), 'k-1 / k-1:pw_one k-2:pw_one',
          'a locked event stays with its row (k-2''s row is the lane''s last)');
SELECT dblink_exec('pw_lock', 'COMMIT');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('k-%') || ' / ' || pg_temp.rows('k-%'), ' / k-2:pw_one',
          'released, it goes at the next call');

--------------------------------------------------------------------------------
-- Events published to no handler; young ones.
--------------------------------------------------------------------------------
SELECT relaybus.publish('pw.none', '{}', event_id => 'u-old');
SELECT relaybus.publish('pw.none', '{}', event_id => 'u-young');
SELECT relaybus.publish('pw.one', '{}', event_id => 'y-young');
SELECT is(pg_temp.drain('pw_one'), 1, 'y-young runs');
SELECT pg_temp.age('u-old');
SELECT is((SELECT string_agg(id || ':' || handlers::text, ' ' ORDER BY id) FROM relaybus.events WHERE id LIKE 'u-%'),
          'u-old:{} u-young:{}', 'an event published to no handler records none');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('u-%') || ' / ' || pg_temp.events('y-%'), 'u-young / y-young',
          'an old unrouted event goes; young events, finished or unrouted, stay');

--------------------------------------------------------------------------------
-- A paused handler's old backlog: it stays, and a larger one costs a call no more reads
-- (each lane's walk stops at its first unfinished row).
--------------------------------------------------------------------------------
-- Progress in (nearly) every lane of pw_paused first, so that the walk has cursors to stop at.
SELECT relaybus.resume('pw_paused');
SELECT count(*) FROM relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object('type', 'pw.backlog', 'id', 'b0-' || n))
                                                FROM generate_series(1, 1000) n));
SELECT is(pg_temp.drain('pw_paused'), 1000, 'pw_paused finishes 1,000, then is paused');
SELECT relaybus.pause('pw_paused');
-- The rows of events and deliveries one call reads: this transaction's counts
-- (pg_stat_xact_user_tables), before and after it.
CREATE FUNCTION pg_temp.rows_read() RETURNS bigint LANGUAGE sql AS $$
  SELECT sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::bigint
    FROM pg_stat_xact_user_tables WHERE schemaname = 'relaybus' AND relname IN ('events', 'deliveries')
$$;
CREATE FUNCTION pg_temp.rows_read_by_a_purge() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE before bigint := pg_temp.rows_read();
BEGIN
  PERFORM relaybus.purge_expired();
  RETURN pg_temp.rows_read() - before;
END
$$;
SELECT count(*) FROM relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object('type', 'pw.backlog', 'id', 'b-' || n))
                                                FROM generate_series(1, 3000) n));
SELECT pg_temp.age('b%');
SELECT pg_temp.purge_all();
SELECT pg_temp.rows_read_by_a_purge() AS reads_3000 \gset
SELECT count(*) FROM relaybus.publish_batch((SELECT jsonb_agg(jsonb_build_object('type', 'pw.backlog', 'id', 'b-' || n))
                                                FROM generate_series(3001, 9000) n));
SELECT pg_temp.age('b%');
SELECT pg_temp.rows_read_by_a_purge() AS reads_9000 \gset
SELECT diag(format('event and delivery rows read by one call: %s with 3,000 old unfinished events, %s with 9,000',
                   :reads_3000, :reads_9000));
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id LIKE 'b%'), 9000,
          'the paused handler''s backlog stays (what it finished before is gone)');
SELECT cmp_ok(:reads_9000::bigint, '<', 3000::bigint, 'a call reads fewer rows than the backlog holds');
SELECT cmp_ok(:reads_9000::bigint, '<=', :reads_3000::bigint + 10,
              'and no more with three times the backlog (about one per lane)');

--------------------------------------------------------------------------------
-- Events whose deliveries 0.2.1 completed (no delivery row), before an update from it.
--------------------------------------------------------------------------------
INSERT INTO relaybus.events (id, type, payload, handlers, published_at)
VALUES ('v021', 'pw.one', '{}', '{pw_one}', now() - interval '30 days');
INSERT INTO relaybus.events_from_021 (published_before) VALUES (now() - interval '1 day');
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('v021') || ' / ' || (SELECT count(*) FROM relaybus.events_from_021),
          'v021 / 1', 'while an event of the update may still be young, none goes and the update''s time stays');
UPDATE relaybus.events_from_021 SET published_before = now() - interval '10 days';
SELECT pg_temp.purge_all();
SELECT is(pg_temp.events('v021') || ' / ' || (SELECT count(*) FROM relaybus.events_from_021),
          ' / 0', 'then those without a delivery row go, and the update''s time is forgotten');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id LIKE 'b%'), 9000,
          'older events with unfinished deliveries stay');

--------------------------------------------------------------------------------
-- More lanes than a call's 10,000 rows: 41 more handlers (11,264 lanes in all), each lane
-- with a finished old row below its last. A walk limited to 10,000 rows in all took the
-- first 10,000 lanes every call and never reached the others (handlers later in byte
-- order), returning 0 with their events left.
--------------------------------------------------------------------------------
SELECT count(*) FROM (SELECT relaybus.subscribe('pz_' || lpad(h::text, 2, '0'), ARRAY['pz.x'])
                        FROM generate_series(0, 40) h) s;
-- Written directly, as the benchmark does (publishing and draining them would take long).
INSERT INTO relaybus.events (id, type, payload, handlers, published_at)
SELECT format('pz-%s-%s-%s', l.handler, l.lane, p), 'pz.x', '{}', ARRAY[l.handler], now() - interval '30 days'
  FROM relaybus.lanes l, generate_series(1, 2) p WHERE l.handler LIKE 'pz\_%';
INSERT INTO relaybus.deliveries (handler, lane, position, event_id, available_at, created_at)
SELECT l.handler, l.lane, p, format('pz-%s-%s-%s', l.handler, l.lane, p), now() - interval '30 days',
       now() - interval '30 days'
  FROM relaybus.lanes l, generate_series(1, 2) p WHERE l.handler LIKE 'pz\_%';
INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
SELECT l.handler, l.lane, 1, 2, '{}', '{}', '{}' FROM relaybus.lanes l WHERE l.handler LIKE 'pz\_%';
SELECT cmp_ok((SELECT count(*) FROM relaybus.lanes), '>', 10000::bigint, 'more lanes than 10,000');
SELECT pg_temp.purge_all();
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id LIKE 'pz-%')
          || ' events / ' || (SELECT count(*)::int FROM relaybus.deliveries WHERE handler LIKE 'pz\_%') || ' rows',
          '0 events / 10496 rows',
          'every lane is walked: every finished event goes, each lane keeps its last row only');

SELECT * FROM finish();
