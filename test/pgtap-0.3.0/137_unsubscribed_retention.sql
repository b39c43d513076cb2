-- Retention of a handler that is no longer subscribed (0.2: purge_expired deleted its
-- pending deliveries created more than relaybus.retention_dead ago). On 0.3.0 they are
-- finished: its pending exception rows that old are deleted, and the cursor of each lane
-- nobody leases moves over the deliveries above it that old, from the cursor up (never past
-- a younger one: the cursor cannot leave a hole); their events go once no other handler
-- needs them. A lane a live lease holds is left alone, and a handler subscribed again finds
-- what is left.
-- Deliveries of an unsubscribed handler kept for ever (and their events with them), a
-- cursor moved past a younger delivery, a retirement under a live lease, or another
-- handler's deliveries touched fail here.
SELECT rb_reset();
SELECT plan(12);

SELECT relaybus.subscribe('ur_gone', ARRAY['ur.t']);
SELECT relaybus.subscribe('ur_kept', ARRAY['ur.t']);
SELECT relaybus.publish('ur.t', '{}', key => 'k', event_id => 'e1');
SELECT relaybus.publish('ur.t', '{}', key => 'k', event_id => 'e2');
SELECT relaybus.publish('ur.t', '{}', event_id => 'e3');
SELECT relaybus.publish('ur.t', '{}', key => 'k5', event_id => 'e5');
-- Published "a month ago" (written by hand: nothing else writes these columns).
UPDATE relaybus.deliveries SET created_at = now() - interval '30 days'
 WHERE event_id IN ('e1', 'e2', 'e3', 'e5');
UPDATE relaybus.events SET published_at = now() - interval '30 days'
 WHERE id IN ('e1', 'e2', 'e3', 'e5');
-- A young delivery of key k, then an old one behind it (e7's age is written by hand).
SELECT relaybus.publish('ur.t', '{}', key => 'k', event_id => 'e6');
SELECT relaybus.publish('ur.t', '{}', key => 'k', event_id => 'e7');
UPDATE relaybus.deliveries SET created_at = now() - interval '30 days' WHERE event_id = 'e7';
SELECT relaybus.publish('ur.t', '{}', event_id => 'e4');

-- e1 fails once: a pending exception row (a retry an hour away); the rest is released and
-- the lanes handed back.
SELECT CASE WHEN c.event_id = 'e1' THEN relaybus.fail(c.lease_token, 'no', now() + interval '1 hour')
            ELSE relaybus.release(c.lease_token)::text END
  FROM relaybus.claim('ur-w1', 10, '5 minutes', ARRAY['ur_gone']) c ORDER BY c.event_id;
SELECT relaybus.relinquish('ur-w1');
-- e5 stays in flight under a live lease; the other lanes go back.
SELECT CASE WHEN c.event_id = 'e5' THEN 'kept' ELSE relaybus.release(c.lease_token)::text END
  FROM relaybus.claim('ur-w2', 10, '1 hour', ARRAY['ur_gone']) c ORDER BY c.event_id;
SELECT relaybus.relinquish('ur-w2');
-- Above the cursors, never claimed: q1 and q3 a month old, q2 between them young.
SELECT relaybus.publish('ur.t', '{}', key => 'q', event_id => 'q' || n) FROM generate_series(1, 3) n;
UPDATE relaybus.deliveries SET created_at = now() - interval '30 days' WHERE event_id IN ('q1', 'q3');
UPDATE relaybus.events SET published_at = now() - interval '30 days' WHERE id IN ('q1', 'q3');
SELECT is((SELECT string_agg(event_id || ':' || status, ' ' ORDER BY event_id)
             FROM relaybus.list_deliveries(handler => 'ur_gone')),
          'e1:pending e2:pending e3:pending e4:pending e5:processing e6:pending e7:pending '
          'q1:pending q2:pending q3:pending',
          'before: every delivery of ur_gone is unfinished, e5 in flight');

SELECT relaybus.unsubscribe('ur_gone');
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
SELECT cmp_ok(pg_temp.purge_all(), '>=', 5::bigint, 'purge_expired counts what it finished');
SELECT is((SELECT string_agg(event_id || ':' || status, ' ' ORDER BY event_id)
             FROM relaybus.list_deliveries(handler => 'ur_gone')),
          'e4:pending e5:processing e6:pending q2:pending q3:pending',
          'the month-old deliveries of the unsubscribed handler are finished; the young ones, '
          'q3 behind the young q2 above the cursor, and e5 in flight under a live lease stay');
SELECT is((SELECT string_agg(event_id, ' ' ORDER BY event_id) FROM relaybus.exceptions
            WHERE handler = 'ur_gone'),
          'e4 e5 e6', 'its month-old pending exception rows are gone, the young and the running one stay');
SELECT is((SELECT string_agg(event_id, ' ' ORDER BY event_id)
             FROM relaybus.list_deliveries(handler => 'ur_kept')),
          'e1 e2 e3 e4 e5 e6 e7 q1 q2 q3', 'the subscribed handler keeps every delivery');
SELECT is((SELECT string_agg(id, ' ' ORDER BY id) FROM relaybus.events),
          'e1 e2 e3 e4 e5 e6 e7 q1 q2 q3', 'every event stays while ur_kept needs it');
SELECT is((SELECT pending || '/' || processing FROM relaybus.statistics() WHERE handler = 'ur_gone'),
          '4/1', 'statistics of the unsubscribed handler: 4 pending, 1 in flight');

-- Once the other handler goes too, the month-old events go with their deliveries.
SELECT relaybus.unsubscribe('ur_kept');
SELECT pg_temp.purge_all();
SELECT is((SELECT string_agg(id, ' ' ORDER BY id) FROM relaybus.events),
          'e4 e5 e6 e7 q2 q3',
          'events no handler needs any more are deleted (e5 is still in flight, e7 and q3 wait)');
SELECT is((SELECT string_agg(event_id, ' ' ORDER BY event_id)
             FROM relaybus.list_deliveries(handler => 'ur_kept')),
          'e4 e6 e7 q2 q3', 'ur_kept, never claimed: the cursors stop at the young e6 and q2');

-- Subscribed again: what is left runs, in key order.
SELECT relaybus.subscribe('ur_kept', ARRAY['ur.t']);
SELECT is((SELECT string_agg(c.event_id, ' ' ORDER BY c.event_id)
             FROM relaybus.claim('ur-w3', 10, '5 minutes', ARRAY['ur_kept']) c),
          'e4 e6 q2', 'a handler subscribed again claims what is left (e7 and q3 wait for their keys)');
SELECT relaybus.relinquish('ur-w3');

-- Nothing to do: a second purge finds nothing of these handlers.
SELECT is(relaybus_internal.retire_unsubscribed(now() - interval '14 days'), 0::bigint,
          'nothing left to retire');
SELECT is(relaybus_internal.retire_unsubscribed(NULL), NULL::bigint,
          'a NULL cutoff retires nothing (STRICT)');

SELECT * FROM finish();
