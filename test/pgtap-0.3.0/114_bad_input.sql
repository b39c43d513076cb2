-- Guarantee: bad input never corrupts state (test/pgtap/14_bad_input.sql on 0.3.0). Every
-- bad argument gets an ERROR with a specific SQLSTATE (22004 NULL, 22023 invalid value,
-- 42704 unknown handler, 42883 wrong sql_function signature), or the documented false /
-- 'lost' / 0 for a well-formed token that does not hold the delivery (forged: other
-- position, handler, lane, epoch or claims). After each group the complete state of the
-- bus (every row of events, deliveries, lanes, lane_progress, exceptions, subscriptions and
-- completions, with its ctid and xmin, so even a rewrite of identical values shows) must equal the
-- state before; at the end the genuine tokens still complete. A bad token that finished or
-- charged a delivery, a forged token accepted, a half-applied batch, or a NULL slipping
-- into a table would each fail here.
--
-- How 0.3.0 stores it: relaybus.exceptions (attempts, claims) replaces 0.2's delivery
-- columns and key_counters is gone; a lane runs positions (in_flight, retrying), its
-- progress the newest of its relaybus.lane_progress rows (relaybus.lane_state). Tokens
-- are r3.<lane>.<epoch>.<position>.<claims>.<handler length>.<handler>: the malformed and
-- forged tokens below are 0.2's cases written in that format (a token names no event, so
-- 0.2's "other event" forgeries name another position, and "handler/event split
-- elsewhere" becomes a handler named by a prefix or an extension of the real one), plus
-- what only r3 has (position 0 or out of range; a well-formed 0.2 token).
SELECT rb_reset();
SELECT plan(204);

SELECT relaybus.subscribe('bi_h1', ARRAY['bi.t']);
SELECT relaybus.subscribe('bi_h2', ARRAY['bi.t']);
SELECT relaybus.publish('bi.t', '{"n": 1}', key => 'k1', event_id => 'ev-1');
SELECT relaybus.publish('bi.t', '{"n": 2}', key => 'k1', event_id => 'ev-2');
SELECT relaybus.publish('bi.t', '{"n": 3}', event_id => 'ev-3');

-- bi_h1 claims ev-1 and ev-3 (ev-2 waits behind ev-1, same key); bi_h2 claims nothing.
CREATE TEMP TABLE tok AS
  SELECT event_id, lease_token AS token FROM relaybus.claim('bi-worker', 10, '5 minutes', ARRAY['bi_h1']);
SELECT is((SELECT array_agg(event_id ORDER BY event_id) FROM tok), ARRAY['ev-1', 'ev-3'],
          'setup: bi_h1 holds ev-1 and ev-3');

-- Everything the bus stores, readable counts first, then a digest of every row version.
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
  SELECT format('events=%s deliveries=%s lanes=%s progress_rows=%s exceptions=%s subscriptions=%s'
                ' completions=%s epochs=%s acked=%s done=%s in_flight=%s attempts=%s claims=%s digest=%s',
    (SELECT count(*) FROM relaybus.events), (SELECT count(*) FROM relaybus.deliveries),
    (SELECT count(*) FROM relaybus.lanes), (SELECT count(*) FROM relaybus.lane_progress),
    (SELECT count(*) FROM relaybus.exceptions),
    (SELECT count(*) FROM relaybus.subscriptions), (SELECT count(*) FROM relaybus.completions),
    (SELECT sum(epoch) FROM relaybus.lanes), (SELECT sum(acked_upto) FROM relaybus.lane_state),
    (SELECT sum(cardinality(done)) FROM relaybus.lane_state),
    (SELECT sum(cardinality(in_flight) + cardinality(retrying)) FROM relaybus.lane_state),
    (SELECT sum(attempts) FROM relaybus.exceptions), (SELECT sum(claims) FROM relaybus.exceptions),
    md5(concat(
      (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.id) FROM relaybus.events x),
      (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane, x.position)
         FROM relaybus.deliveries x),
      (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane)
         FROM relaybus.lanes x),
      (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane, x.seq)
         FROM relaybus.lane_progress x),
      (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler, x.lane, x.position)
         FROM relaybus.exceptions x),
      (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.handler)
         FROM relaybus.subscriptions x),
      (SELECT string_agg(format('%s %s %s', x.ctid, x.xmin, x.*), ';' ORDER BY x.event_id) FROM relaybus.completions x))))
$$;
SELECT pg_temp.state() AS state0 \gset

--------------------------------------------------------------------------------
-- Workers: NULL worker, batch size, lease.
--------------------------------------------------------------------------------
SELECT throws_ok($$SELECT * FROM relaybus.claim(NULL)$$, '22004', NULL, 'claim: NULL worker -> 22004');
SELECT throws_ok($$SELECT * FROM relaybus.claim('')$$, '22023', NULL, 'claim: empty worker -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', NULL)$$, '22004', NULL, 'claim: NULL batch_size -> 22004');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 0)$$, '22023', NULL, 'claim: batch_size 0 -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', -5)$$, '22023', NULL, 'claim: negative batch_size -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10001)$$, '22023', NULL, 'claim: batch_size above 10000 -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, NULL)$$, '22004', NULL, 'claim: NULL lease -> 22004');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '0 seconds')$$, '22023', NULL, 'claim: zero lease -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '-1 second')$$, '22023', NULL, 'claim: negative lease -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '1 day -25 hours')$$, '22023', NULL,
                 'claim: lease that sums to negative (1 day -25 hours) -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '2 days')$$, '22023', NULL, 'claim: lease above one day -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['nobody'])$$, '42704', NULL,
                 'claim: unknown handler -> 42704');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['bi_h2', 'nobody'])$$, '42704', NULL,
                 'claim: one unknown handler among known ones -> 42704');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY[''])$$, '22023', NULL,
                 'claim: empty handler name -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['bi_h2', NULL])$$, '22004', NULL,
                 'claim: NULL in handlers -> 22004');
SELECT throws_ok($$SELECT relaybus.extend_lease(NULL)$$, '22004', NULL, 'extend_lease: NULL worker -> 22004');
SELECT throws_ok($$SELECT relaybus.extend_lease('bi-worker', '0 seconds')$$, '22023', NULL,
                 'extend_lease: zero lease -> 22023');
SELECT throws_ok($$SELECT relaybus.extend_lease('bi-worker', '-1 second')$$, '22023', NULL,
                 'extend_lease: negative lease -> 22023');
SELECT throws_ok($$SELECT relaybus.relinquish(NULL)$$, '22004', NULL, 'relinquish: NULL worker -> 22004');
SELECT is(pg_temp.state(), :'state0', 'workers: nothing was written');

--------------------------------------------------------------------------------
-- Malformed tokens: 22023 from complete, fail, bury and release; NULL: 22004.
--------------------------------------------------------------------------------
SELECT throws_ok(format('SELECT relaybus.%s(%L)', fn, bad), '22023', NULL,
                 format('%s(%L) -> 22023', fn, bad))
  FROM unnest(ARRAY['', 'garbage', 'r3.999.0.1.0.2.ab', 'r3.1.x.1.0.2.ab', 'r3.1.1.1.1.0.x', 'r3.1.1.1.0.5.ab',
                    'r3.-1.1.1.0.2.ab', 'r3.01.1.1.0.2.ab', 'r2.1.1.1.0.2.ab', 'r3.1.1.1.0.1.ab',
                    'r3.1.9223372036854775808.1.0.2.ab', 'r3.1.1.1.2147483648.2.ab', 'r3.1.1.1.0',
                    -- only r3: position 0, position out of range, a (well-formed) 0.2 token
                    'r3.1.1.0.0.2.ab', 'r3.1.1.9223372036854775808.0.2.ab', 'r1.1.1.0.2.abev-1'])
         WITH ORDINALITY AS b(bad, n)
  CROSS JOIN unnest(ARRAY['complete', 'fail', 'bury', 'release']) WITH ORDINALITY AS f(fn, m)
 ORDER BY n, m;
SELECT throws_ok(format('SELECT relaybus.%s(NULL)', fn), '22004', NULL, format('%s(NULL) -> 22004', fn))
  FROM unnest(ARRAY['complete', 'fail', 'bury', 'release']) AS fn;
SELECT throws_ok(format('SELECT relaybus.complete_many(%L::text[])',
                        ARRAY[(SELECT token FROM tok WHERE event_id = 'ev-1'), 'r3.1.1.1.0.5.ab',
                              (SELECT token FROM tok WHERE event_id = 'ev-3')]),
                 '22023', NULL, 'complete_many: one malformed token among valid ones -> 22023');
SELECT throws_ok(format('SELECT relaybus.complete_many(%L::text[])',
                        ARRAY[(SELECT token FROM tok WHERE event_id = 'ev-1'), 'garbage']),
                 '22023', NULL, 'complete_many: a valid token then garbage -> 22023');
SELECT throws_ok(format('SELECT relaybus.complete_many(ARRAY[%L, NULL])',
                        (SELECT token FROM tok WHERE event_id = 'ev-1')),
                 '22004', NULL, 'complete_many: NULL element -> 22004');
SELECT throws_ok($$SELECT relaybus.complete_many(NULL)$$, '22004', NULL, 'complete_many(NULL) -> 22004');
SELECT throws_ok(format('SELECT relaybus.complete_many(%L::text[])',
                        ARRAY[ARRAY[(SELECT token FROM tok WHERE event_id = 'ev-1'), 'x'],
                              ARRAY[(SELECT token FROM tok WHERE event_id = 'ev-3'), 'y']]),
                 '22023', NULL, 'complete_many: a two-dimensional array -> 22023');
SELECT is(pg_temp.state(), :'state0', 'malformed tokens: nothing was written (the valid tokens'' deliveries remain)');

--------------------------------------------------------------------------------
-- Forged tokens: well-formed, but not the lease of a delivery in flight.
--------------------------------------------------------------------------------
CREATE TEMP TABLE real AS
  SELECT split_part(token, '.', 2)::int AS lane, split_part(token, '.', 3)::bigint AS epoch,
         split_part(token, '.', 4)::bigint AS pos, split_part(token, '.', 5)::int AS claims,
         (SELECT position FROM relaybus.deliveries WHERE event_id = 'ev-2' AND handler = 'bi_h1') AS pos2,
         (SELECT max(position) FROM relaybus.deliveries) + 1000 AS pos_none
    FROM tok WHERE event_id = 'ev-1';
CREATE FUNCTION pg_temp.token(lane int, epoch bigint, pos bigint, claims int, handler text)
  RETURNS text LANGUAGE sql AS $$
  SELECT format('r3.%s.%s.%s.%s.%s.%s', lane, epoch, pos, claims, length(handler), handler)
$$;
SELECT is(pg_temp.token(lane, epoch, pos, claims, 'bi_h1'),
          (SELECT regexp_replace(token, '\.[0-9]+$', '') FROM tok WHERE event_id = 'ev-1'),
          'the token format is understood (rebuilt token equals the real one, without the publish time it carries)')
  FROM real;
SELECT is((SELECT d.event_id FROM real r JOIN relaybus.deliveries d
            ON d.handler = 'bi_h1' AND d.lane = r.lane AND d.position = r.pos), 'ev-1',
          'the real token''s lane and position name ev-1''s delivery');
SELECT is((SELECT lane FROM relaybus.deliveries WHERE event_id = 'ev-2' AND handler = 'bi_h1'),
          (SELECT lane::smallint FROM real), 'ev-2 waits in the same lane (same key)');
CREATE TEMP TABLE forged (what text, token text);
INSERT INTO forged SELECT what, token FROM real, LATERAL (VALUES
  ('other position (ev-2: pending in the same lane, not in flight)', pg_temp.token(lane, epoch, pos2, claims, 'bi_h1')),
  ('position without a delivery', pg_temp.token(lane, epoch, pos_none, claims, 'bi_h1')),
  ('other handler (same position, lane not held)', pg_temp.token(lane, epoch, pos, claims, 'bi_h2')),
  ('other handler at its lane''s epoch', pg_temp.token(lane, 0, pos, claims, 'bi_h2')),
  ('unknown handler', pg_temp.token(lane, epoch, pos, claims, 'nobody')),
  ('handler named by a prefix of the real one', pg_temp.token(lane, epoch, pos, claims, 'bi_h')),
  ('handler named by an extension of the real one', pg_temp.token(lane, epoch, pos, claims, 'bi_h1e')),
  ('wrong claims', pg_temp.token(lane, epoch, pos, claims + 1, 'bi_h1')),
  ('wrong epoch (next)', pg_temp.token(lane, epoch + 1, pos, claims, 'bi_h1')),
  ('wrong epoch (previous)', pg_temp.token(lane, epoch - 1, pos, claims, 'bi_h1')),
  ('wrong lane', pg_temp.token((lane + 1) % 256, epoch, pos, claims, 'bi_h1'))) AS f(what, token);
SELECT is(relaybus.complete(token), false, 'complete, forged ' || what || ' -> false') FROM forged ORDER BY what;
SELECT is(relaybus.fail(token, 'x'), 'lost', 'fail, forged ' || what || ' -> lost') FROM forged ORDER BY what;
SELECT is(relaybus.bury(token, 'x'), false, 'bury, forged ' || what || ' -> false') FROM forged ORDER BY what;
SELECT is(relaybus.release(token), false, 'release, forged ' || what || ' -> false') FROM forged ORDER BY what;
SELECT is(relaybus.complete_many((SELECT array_agg(token) FROM forged)), 0, 'complete_many of every forged token -> 0');
SELECT is(pg_temp.state(), :'state0', 'forged tokens: nothing was written');

--------------------------------------------------------------------------------
-- publish: NULLs, empty names, non-object payload and headers, unknown handlers.
--------------------------------------------------------------------------------
SELECT throws_ok($$SELECT relaybus.publish(NULL, '{}')$$, '22004', NULL, 'publish: NULL type -> 22004');
SELECT throws_ok($$SELECT relaybus.publish('bi.t', NULL)$$, '22004', NULL, 'publish: NULL payload -> 22004');
SELECT throws_ok($$SELECT relaybus.publish('', '{}')$$, '22023', NULL, 'publish: empty type -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('bi.t', '{}', key => '')$$, '22023', NULL, 'publish: empty key -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('bi.t', '{}', event_id => '')$$, '22023', NULL,
                 'publish: empty event_id -> 22023');
SELECT throws_ok(format('SELECT relaybus.publish(%L, %L::jsonb, event_id => %L)', 'bi.t', p, 'ev-bad-payload'),
                 '22023', NULL, format('publish: payload %s -> 22023', p))
  FROM unnest(ARRAY['[1]', '"x"', 'null', '5', 'true', '[]']) AS p;
SELECT throws_ok(format('SELECT relaybus.publish(%L, %L, event_id => %L, headers => %L::jsonb)',
                        'bi.t', '{}', 'ev-bad-headers', h),
                 '22023', NULL, format('publish: headers %s -> 22023', h))
  FROM unnest(ARRAY['[1]', '"x"', '5']) AS h;
SELECT throws_ok($$SELECT relaybus.publish('bi.t', '{}', event_id => 'ev-bad-h', handlers => ARRAY['nobody'])$$,
                 '42704', NULL, 'publish: unknown handler -> 42704');
SELECT throws_ok($$SELECT relaybus.publish('bi.t', '{}', key => 'k9', event_id => 'ev-bad-h',
                                           handlers => ARRAY['bi_h1', 'nobody'])$$,
                 '42704', NULL, 'publish: one unknown handler among known ones -> 42704');
SELECT throws_ok($$SELECT relaybus.publish('bi.t', '{}', event_id => 'ev-bad-h', handlers => ARRAY[''])$$,
                 '22023', NULL, 'publish: empty handler name -> 22023');
SELECT throws_ok($$SELECT relaybus.publish('bi.t', '{}', event_id => 'ev-bad-h', handlers => ARRAY['bi_h1', NULL])$$,
                 '22004', NULL, 'publish: NULL in handlers -> 22004');
SELECT throws_ok($$SELECT relaybus.publish('bi.t', '{}', event_id => 'ev-1', handlers => ARRAY['nobody'])$$,
                 '42704', NULL, 'publish: a repeat of an existing event with an unknown handler -> 42704');
SELECT is(pg_temp.state(), :'state0', 'publish: nothing was written (no event, delivery or lane position)');

--------------------------------------------------------------------------------
-- publish_batch: the statement fails as a whole; earlier valid elements are not kept.
--------------------------------------------------------------------------------
SELECT throws_ok($$SELECT relaybus.publish_batch(NULL)$$, '22004', NULL, 'publish_batch(NULL) -> 22004');
SELECT throws_ok(format('SELECT relaybus.publish_batch(%L::jsonb)', b), '22023', NULL,
                 format('publish_batch: %s is not an array -> 22023', b))
  FROM unnest(ARRAY['{"type": "bi.t"}', '"x"', '5', 'null']) AS b;
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "bi.t", "id": "pb-1"}, 5]')$$, '22023', NULL,
                 'publish_batch: an element that is not an object -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "bi.t", "id": "pb-2"}, {"type": 5}]')$$, '22023', NULL,
                 'publish_batch: a type that is not a string -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "bi.t", "id": "pb-3"}, {"payload": {}}]')$$, '22023', NULL,
                 'publish_batch: a missing type -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "bi.t", "id": "pb-4", "key": "k7"},
                                                   {"type": "bi.t", "payload": [1]}]')$$, '22023', NULL,
                 'publish_batch: a later element with a non-object payload -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "bi.t", "id": "pb-5", "key": "k7"},
                                                   {"type": "bi.t", "handlers": ["nobody"]}]')$$, '42704', NULL,
                 'publish_batch: a later element with an unknown handler -> 42704');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "bi.t", "id": "pb-6"}, {"type": "bi.t", "id": ""}]')$$,
                 '22023', NULL, 'publish_batch: a later element with an empty id -> 22023');
SELECT throws_ok($$SELECT relaybus.publish_batch('[{"type": "bi.t", "id": "pb-7"}, {"type": "bi.t", "headers": [1]}]')$$,
                 '22023', NULL, 'publish_batch: a later element with non-object headers -> 22023');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id LIKE 'pb-%'), 0,
          'publish_batch: none of the earlier valid elements was kept');
SELECT is(pg_temp.state(), :'state0', 'publish_batch: nothing was written');

--------------------------------------------------------------------------------
-- subscribe / unsubscribe / admin functions.
--------------------------------------------------------------------------------
SELECT throws_ok($$SELECT relaybus.subscribe(NULL, ARRAY['bi.t'])$$, '22004', NULL, 'subscribe: NULL handler -> 22004');
SELECT throws_ok($$SELECT relaybus.subscribe('', ARRAY['bi.t'])$$, '22023', NULL, 'subscribe: empty handler name -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', NULL)$$, '22004', NULL, 'subscribe: NULL event_types -> 22004');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t', NULL])$$, '22004', NULL,
                 'subscribe: NULL in event_types -> 22004');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY[]::text[])$$, '22023', NULL,
                 'subscribe: no event types -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY[''])$$, '22023', NULL,
                 'subscribe: empty event type -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t'], 0)$$, '22023', NULL,
                 'subscribe: max_attempts 0 -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t'], -3)$$, '22023', NULL,
                 'subscribe: negative max_attempts -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t'], 5, '-1 second')$$, '22023', NULL,
                 'subscribe: negative backoff_base -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t'], 5, '10 seconds', '1 second')$$, '22023', NULL,
                 'subscribe: backoff_max < backoff_base -> 22023');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t'], sql_function => 'pg_catalog.lower(text)'::regprocedure)$$,
                 '42883', NULL, 'subscribe: sql_function taking text -> 42883');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t'], sql_function => 'pg_catalog.now()'::regprocedure)$$,
                 '42883', NULL, 'subscribe: sql_function without arguments -> 42883');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_new', ARRAY['bi.t'],
                   sql_function => 'pg_catalog.jsonb_concat(jsonb, jsonb)'::regprocedure)$$,
                 '42883', NULL, 'subscribe: sql_function taking two arguments -> 42883');
SELECT throws_ok($$SELECT relaybus.subscribe('bi_h1', ARRAY['other.t'], 0)$$, '22023', NULL,
                 'subscribe: updating an existing handler with a bad policy -> 22023');
SELECT throws_ok($$SELECT relaybus.unsubscribe('nobody')$$, '42704', NULL, 'unsubscribe: unknown handler -> 42704');
SELECT throws_ok($$SELECT relaybus.unsubscribe(NULL)$$, '22004', NULL, 'unsubscribe: NULL -> 22004');
SELECT throws_ok($$SELECT * FROM relaybus.list_deliveries('bogus')$$, '22023', NULL,
                 'list_deliveries: unknown status -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.list_deliveries(NULL, NULL, -1)$$, '22023', NULL,
                 'list_deliveries: negative max_rows -> 22023');
SELECT throws_ok($$SELECT relaybus.requeue(NULL, 'bi_h1')$$, '22004', NULL, 'requeue: NULL event_id -> 22004');
SELECT throws_ok($$SELECT relaybus.requeue_dead('nobody')$$, '42704', NULL, 'requeue_dead: unknown handler -> 42704');
SELECT is(relaybus.requeue('ev-1', 'bi_h1'), false, 'requeue of a delivery that is not dead -> false');
SELECT is(pg_temp.state(), :'state0', 'subscribe and admin: nothing was written (subscriptions and lanes unchanged)');

--------------------------------------------------------------------------------
-- After all that, the genuine leases are intact.
--------------------------------------------------------------------------------
SELECT is(relaybus.complete_many((SELECT token FROM tok WHERE event_id = 'ev-1')
                                  || ARRAY(SELECT token FROM forged ORDER BY what)
                                  || (SELECT token FROM tok WHERE event_id = 'ev-1')), 1,
          'complete_many of the genuine ev-1 token (twice) among forged ones completes exactly one');
SELECT is(relaybus.complete((SELECT token FROM tok WHERE event_id = 'ev-3')), true,
          'the genuine token of ev-3 still completes');
SELECT is((SELECT array_agg(event_id || '/' || handler || '/' || attempts ORDER BY event_id, handler)
             FROM relaybus.list_deliveries()),
          ARRAY['ev-1/bi_h2/0', 'ev-2/bi_h1/0', 'ev-2/bi_h2/0', 'ev-3/bi_h2/0'],
          'only the genuinely completed deliveries are finished, nothing was charged');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions), 0, 'and no exception row was written');

SELECT * FROM finish();
