-- Guarantees: the optional completion history, retention, and the statistics split
-- (test/pgtap/16_completion_history_purge.sql on 0.3.0). With relaybus.completion_history
-- = on a completion appends exactly one history row (counted by statistics().completed,
-- listed by list_deliveries('completed')); with it off, a completion writes nothing but
-- its lane's progress. purge_expired() with zero retention removes events whose deliveries are all
-- finished, dead deliveries and history, keeps every event that still has a pending or
-- in-flight delivery, and returns the number of rows it deleted. statistics() counts a
-- claimed delivery as processing, never as pending.
-- History that is not written (or written twice), a purge that drops an event whose
-- delivery is still pending (the handler would get no payload), or a claimed delivery
-- counted as pending fails here.
--
-- How 0.3.0 stores it: a completion moves its lane's cursor and deletes no delivery row
-- (0.2: "the delivery itself is deleted" becomes "it is finished: list_deliveries no
-- longer lists it"); a dead delivery is a dead exception row, which purge deletes and
-- counts as 0.2 counted the dead delivery row. (purge_expired also deletes finished
-- delivery rows of events past retention, except each lane's last one; it counts events,
-- dead letters and history rows, as in 0.2.) A lane's progress is its newest
-- relaybus.lane_progress row; purge_expired deletes the rows below it once they are a minute
-- old, and never the newest: a purge that did would move a lane's cursor back.
SELECT rb_reset();
SELECT plan(42);

SELECT relaybus.subscribe('hp_h', ARRAY['hp.t'], max_attempts => 3);
SELECT relaybus.subscribe('hp_other', ARRAY['hp.other']);

CREATE FUNCTION pg_temp.claim_one(event_id text) RETURNS text LANGUAGE sql AS $$
  SELECT c.lease_token FROM relaybus.claim('hp-worker-' || event_id, 1, '5 minutes', ARRAY['hp_h']) c
$$;
CREATE FUNCTION pg_temp.stat(col text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  EXECUTE format('SELECT %I FROM relaybus.statistics() WHERE handler = %L', col, 'hp_h') INTO n;
  RETURN n;
END
$$;

--------------------------------------------------------------------------------
-- Completion history on: one row per completion.
--------------------------------------------------------------------------------
SET relaybus.completion_history = on;
SELECT relaybus.publish('hp.t', '{"n": 1}', event_id => 'hp-1');
SELECT pg_temp.claim_one('hp-1') AS tok1 \gset
SELECT is(relaybus.complete(:'tok1'), true, 'history on: hp-1 completes');
SELECT is((SELECT count(*)::int FROM relaybus.completions), 1, 'history on: one row in relaybus.completions');
SELECT is((SELECT event_id || '/' || handler || '/' || attempts FROM relaybus.completions), 'hp-1/hp_h/1',
          'history on: the row names the event and handler, attempts counts this one');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries() WHERE event_id = 'hp-1'), 0,
          'history on: the delivery itself is finished (0.3.0: not deleted, below its lane''s cursor)');
SELECT is(pg_temp.stat('completed'), 1::bigint, 'history on: statistics().completed = 1');
SELECT is((SELECT array_agg(event_id || '/' || status || '/' || attempts)
             FROM relaybus.list_deliveries('completed')), ARRAY['hp-1/completed/1'],
          'history on: list_deliveries(''completed'') lists it');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries('completed', 'hp_other')), 0,
          'history on: list_deliveries(''completed'', other handler) does not');
SELECT is(relaybus.complete(:'tok1'), false, 'history on: completing again returns false');
SELECT is((SELECT count(*)::int FROM relaybus.completions), 1, 'history on: and adds no second row');

-- complete_many appends one row per completed delivery
SELECT relaybus.publish('hp.t', '{"n": 2}', event_id => 'hp-2');
SELECT relaybus.publish('hp.t', '{"n": 3}', event_id => 'hp-3');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM relaybus.claim('hp-worker-many', 10, '5 minutes',
                                                                          ARRAY['hp_h']))), 2,
          'history on: complete_many completes two');
SELECT is((SELECT count(*)::int FROM relaybus.completions), 3, 'history on: two more history rows');
SELECT is(pg_temp.stat('completed'), 3::bigint, 'history on: statistics().completed = 3');

--------------------------------------------------------------------------------
-- Completion history off: nothing is inserted.
--------------------------------------------------------------------------------
SET relaybus.completion_history = off;
SELECT relaybus.publish('hp.t', '{"n": 4}', event_id => 'hp-4');
SELECT pg_temp.claim_one('hp-4') AS tok4 \gset
SELECT is(relaybus.complete(:'tok4'), true, 'history off: hp-4 completes');
SELECT is((SELECT count(*)::int FROM relaybus.completions), 3, 'history off: no history row was inserted');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries() WHERE event_id = 'hp-4'), 0,
          'history off: the delivery is finished');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions), 0, 'and no exception row was written');
SELECT is(pg_temp.stat('completed'), 3::bigint, 'history off: statistics().completed unchanged');

--------------------------------------------------------------------------------
-- statistics(): pending vs processing (and dead).
--------------------------------------------------------------------------------
SELECT relaybus.publish('hp.t', '{"n": 5}', event_id => 'hp-5');
SELECT relaybus.publish('hp.t', '{"n": 6}', event_id => 'hp-6');
SELECT relaybus.publish('hp.t', '{"n": 7}', event_id => 'hp-7');
SELECT is(pg_temp.stat('pending'), 3::bigint, 'statistics: three published deliveries are pending');
SELECT is(pg_temp.stat('processing'), 0::bigint, 'statistics: none processing');
SELECT pg_temp.claim_one('hp-x') AS tok_a \gset
SELECT is(pg_temp.stat('pending'), 2::bigint, 'statistics: after claiming one, two are pending');
SELECT is(pg_temp.stat('processing'), 1::bigint, 'statistics: and the claimed one counts as processing');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries('processing', 'hp_h')), 1,
          'list_deliveries(''processing'') lists the claimed delivery');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries('pending', 'hp_h')), 2,
          'list_deliveries(''pending'') does not list it');
-- bury a second one: dead
SELECT pg_temp.claim_one('hp-y') AS tok_b \gset
SELECT is(relaybus.bury(:'tok_b', 'poison'), true, 'a second claimed delivery is buried');
SELECT is(pg_temp.stat('pending') || '/' || pg_temp.stat('processing') || '/' || pg_temp.stat('dead'), '1/1/1',
          'statistics: pending 1, processing 1, dead 1');
SELECT (SELECT event_id FROM relaybus.exceptions WHERE status = 'dead') AS dead_id \gset
SELECT (SELECT event_id FROM relaybus.list_deliveries('processing', 'hp_h')) AS processing_id \gset
SELECT (SELECT event_id FROM relaybus.list_deliveries('pending', 'hp_h')) AS pending_id \gset

--------------------------------------------------------------------------------
-- purge_expired() with zero retention.
--------------------------------------------------------------------------------
-- an event nobody subscribed to: no delivery at all
SELECT relaybus.publish('hp.nobody', '{}', event_id => 'hp-orphan');
SET relaybus.retention_completed = 0;
SET relaybus.retention_dead = 0;
-- now() is the start of the purge's own transaction, later than every row written above
-- Dead letters go before events in a call (0.3.0: relaybus.purge_expired in
-- sql/parts/api-0.3.0.sql; an event with an exception row is kept), so the dead delivery's
-- event goes in the same call.
SELECT is(relaybus.purge_expired(), 10::bigint,
          'purge_expired returns the rows deleted: 6 events + 3 history rows + 1 dead delivery');
SELECT is(relaybus.purge_expired(), 0::bigint, 'a second call finds nothing left');
SELECT is((SELECT count(*)::int FROM relaybus.completions), 0, 'purge: the completion history is gone');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE status = 'dead')
          + (SELECT count(*)::int FROM relaybus.list_deliveries('dead')), 0, 'purge: the dead delivery is gone');
SELECT bag_eq($$SELECT event_id, status FROM relaybus.list_deliveries()$$,
              format($$VALUES (%L, 'processing'), (%L, 'pending')$$, :'processing_id', :'pending_id'),
              'purge: the pending and the in-flight delivery are still there');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries d
            WHERE NOT EXISTS (SELECT 1 FROM relaybus.events e WHERE e.id = d.event_id)
              AND d.position > (SELECT acked_upto FROM relaybus.lane_state l WHERE l.handler = d.handler AND l.lane = d.lane)),
          0, 'purge: no delivery above its lane''s cursor lost its event');
SELECT is((SELECT array_agg(id ORDER BY id) FROM relaybus.events),
          ARRAY(SELECT unnest(ARRAY[:'processing_id', :'pending_id']) ORDER BY 1),
          'purge: only the events with a pending or in-flight delivery are kept');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id IN ('hp-1', 'hp-2', 'hp-3', 'hp-4', 'hp-orphan', :'dead_id')), 0,
          'purge: events of completed deliveries, the dead delivery and the unsubscribed type are gone');
SELECT is(pg_temp.stat('pending') || '/' || pg_temp.stat('processing') || '/' || pg_temp.stat('dead')
            || '/' || pg_temp.stat('completed'), '1/1/0/0',
          'purge: statistics pending 1, processing 1, dead 0, completed 0');
SELECT is(relaybus.purge_expired(), 0::bigint, 'purge again: nothing left to delete');
-- the kept deliveries are still workable: their events (payload) are there
SELECT is(relaybus.complete(:'tok_a'), true, 'the in-flight delivery still completes after the purge');
SELECT is((SELECT event_id || ' ' || payload::text FROM relaybus.claim('hp-worker-z', 10, '5 minutes', ARRAY['hp_h'])),
          :'pending_id' || ' ' || (SELECT payload::text FROM relaybus.events WHERE id = :'pending_id'),
          'the pending delivery is still claimable with its payload');

-- default retention keeps recent rows
RESET relaybus.retention_completed;
RESET relaybus.retention_dead;
SET relaybus.completion_history = on;
SELECT relaybus.publish('hp.t', '{"n": 8}', event_id => 'hp-8');
SELECT is(relaybus.complete((SELECT lease_token FROM relaybus.claim('hp-worker-8', 10, '5 minutes', ARRAY['hp_h'])
                             WHERE event_id = 'hp-8')), true, 'hp-8 completes');
SELECT is(relaybus.purge_expired(), 0::bigint, 'default retention: recent events and history are kept');
RESET relaybus.completion_history;

--------------------------------------------------------------------------------
-- Superseded progress rows: kept for a minute (above: young ones are not purged), then
-- purged, a lane's newest row never.
--------------------------------------------------------------------------------
CREATE TEMP TABLE lanes_before AS SELECT * FROM relaybus.lane_state;
SELECT count(*) AS superseded FROM relaybus.lane_progress p
 WHERE p.seq < (SELECT max(n.seq) FROM relaybus.lane_progress n WHERE n.handler = p.handler AND n.lane = p.lane) \gset
UPDATE relaybus.lane_progress SET written_at = now() - interval '2 minutes';
SELECT is(relaybus.purge_expired(), :superseded::bigint,
          'progress rows over a minute old: purge deletes every superseded one (and nothing else is due)');
SELECT is((SELECT count(*) FROM relaybus.lane_progress),
          (SELECT count(*) FROM (SELECT DISTINCT handler, lane FROM relaybus.lane_progress) l),
          'each lane keeps one progress row');
SELECT set_eq('SELECT * FROM relaybus.lane_state', 'SELECT * FROM lanes_before',
              'and it is the newest: every lane''s progress (cursor, done, in flight, seq) is as it was');

SELECT * FROM finish();
