-- Port of test/pgtap/30_sql_handler_max_payload.sql to relaybus 0.3.0: the limit is checked
-- by publish and publish_batch before anything is written or staged, the same in both
-- versions, so every assertion carries over unchanged (the deliveries read back are those
-- the autocommitted publishes wrote at commit). subscribe's NOTICE that no handler worker
-- serves this database is expected: the test checks the publishers' side only, no worker
-- runs a handler here (the workers' side: test/integration/handler_memory.sh).
--
-- Guarantees (issue 32, finding 3): an event for an in-database handler is at most
-- relaybus.sql_handler_max_payload, counting payload and headers at their uncompressed
-- size, since a handler worker holds it in memory. publish and publish_batch refuse a larger
-- one with 54000, naming the handler and the limit, with a hint naming the setting, and
-- write nothing; they accept one of exactly the limit; an event for handlers without
-- sql_function is not limited; a repeated id that would give a stored event over the
-- limit to an in-database handler is refused. The setting is one value for publishers and
-- workers alike (sighup): a session cannot raise it for itself. The workers' side (a
-- stored event over the limit, one they cannot load): test/integration/handler_memory.sh.
SELECT rb_reset();
SELECT plan(19);

CREATE FUNCTION public.rb30_handler(e jsonb) RETURNS void LANGUAGE sql AS 'SELECT';
SELECT relaybus.subscribe('h30', ARRAY['in.t', 'both.t'], sql_function => 'public.rb30_handler(jsonb)');
SELECT relaybus.subscribe('x30', ARRAY['out.t', 'both.t']);

-- The SQLSTATE, message and hint of what `call` raises (NULLs if it raises nothing).
CREATE FUNCTION pg_temp.error_of(call text) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE state text; message text; hint text;
BEGIN
  EXECUTE call;
  RETURN ARRAY[NULL, NULL, NULL];
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN ARRAY[state, message, hint];
END
$$;

-- Payloads of exactly the limit and one byte over it, and one of a byte over half of it, with
-- their sizes as pg_column_size measures a value in memory (uncompressed). Stored in a
-- table, so publish gets them compressed: the limit still counts their uncompressed size.
CREATE TEMP TABLE rb30 AS
  WITH s AS (SELECT pg_size_bytes(current_setting('relaybus.sql_handler_max_payload')) AS limit_bytes,
                    pg_column_size(jsonb_build_object('x', '')) AS overhead),
       v AS (SELECT limit_bytes,
                    jsonb_build_object('x', repeat('a', (limit_bytes - overhead)::int)) AS at_limit,
                    jsonb_build_object('x', repeat('a', (limit_bytes - overhead)::int + 1)) AS over_limit,
                    jsonb_build_object('x', repeat('a', (limit_bytes / 2 - overhead)::int + 1)) AS half
               FROM s)
  SELECT limit_bytes, at_limit, over_limit, half,
         pg_column_size(at_limit) AS at_size, pg_column_size(over_limit) AS over_size FROM v;

SELECT is((SELECT ARRAY[context, unit, boot_val] FROM pg_settings WHERE name = 'relaybus.sql_handler_max_payload'),
          ARRAY['sighup', 'kB', '16384'], 'relaybus.sql_handler_max_payload is a sighup setting in kB, 16MB by default');
SELECT throws_ok($$SET relaybus.sql_handler_max_payload = '1GB'$$, '55P02', NULL,
                 'a session cannot raise the limit for its own publishes (55P02)');
SELECT is((SELECT ARRAY[at_size, over_size]::bigint[] FROM rb30),
          (SELECT ARRAY[limit_bytes, limit_bytes + 1] FROM rb30),
          'the test payloads are the limit and one byte more');
SELECT ok((SELECT pg_column_size(r.over_limit) < r.limit_bytes / 10 FROM rb30 r),
          '... and stored compressed, to a fraction of that');

-- publish
SELECT is(pg_temp.error_of($$SELECT relaybus.publish('in.t', (SELECT over_limit FROM rb30), event_id => 'e30-over')$$),
          ARRAY['54000',
                format('payload and headers of %s bytes exceed the %s limit of in-database handler "h30"',
                       (SELECT limit_bytes + 1 FROM rb30), current_setting('relaybus.sql_handler_max_payload')),
                'Publish a reference to large data instead, or raise relaybus.sql_handler_max_payload (postgresql.conf, then reload).'],
          'publish refuses a payload over the limit for an in-database handler: 54000, naming the handler and the limit, the hint the setting');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id = 'e30-over'), 0, '... and writes nothing');
SELECT lives_ok($$SELECT relaybus.publish('in.t', (SELECT at_limit FROM rb30), event_id => 'e30-at')$$,
                'publish accepts a payload of exactly the limit');
SELECT is((SELECT array_agg(handler) FROM relaybus.deliveries WHERE event_id = 'e30-at'), ARRAY['h30'], '... and delivers it');
SELECT throws_ok($$SELECT relaybus.publish('in.t', (SELECT half FROM rb30), headers => (SELECT half FROM rb30), event_id => 'e30-headers')$$,
                 '54000', NULL, 'payload and headers count together: each a byte over half the limit, they are over it (54000)');
SELECT throws_ok($$SELECT relaybus.publish('both.t', (SELECT over_limit FROM rb30), event_id => 'e30-both')$$,
                 '54000', NULL, 'an event for an in-database and an external handler is refused as a whole (54000)');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE event_id IN ('e30-headers', 'e30-both')), 0,
          '... and nothing is written for either handler');
SELECT lives_ok($$SELECT relaybus.publish('out.t', (SELECT over_limit FROM rb30), event_id => 'e30-out');
                  SELECT relaybus.publish('both.t', (SELECT over_limit FROM rb30), event_id => 'e30-named', handlers => ARRAY['x30'])$$,
                'a handler without sql_function is not limited, also when named among the subscribers of an in-database one');

-- A repeated id adds deliveries that carry the stored event, whatever the repeat's payload.
SELECT throws_ok($$SELECT relaybus.publish('out.t', '{}', event_id => 'e30-out', handlers => ARRAY['h30'])$$,
                 '54000', NULL, 'a repeat that would give a stored event over the limit to an in-database handler is refused (54000)');
SELECT is((SELECT array_agg(handler) FROM relaybus.deliveries WHERE event_id = 'e30-out'), ARRAY['x30'],
          '... and adds nothing');

-- publish_batch: its one-statement path, and its element-by-element one (a repeated id).
SELECT is(pg_temp.error_of($$SELECT relaybus.publish_batch(jsonb_build_array(
            jsonb_build_object('type', 'in.t', 'id', 'b30-ok'),
            jsonb_build_object('type', 'in.t', 'id', 'b30-over', 'payload', (SELECT over_limit FROM rb30))))$$),
          ARRAY['54000',
                format('events[1]: payload and headers of %s bytes exceed the %s limit of in-database handler "h30"',
                       (SELECT limit_bytes + 1 FROM rb30), current_setting('relaybus.sql_handler_max_payload')),
                'Publish a reference to large data instead, or raise relaybus.sql_handler_max_payload (postgresql.conf, then reload).'],
          'publish_batch refuses an element over the limit the same way, naming the element');
SELECT throws_ok($$SELECT relaybus.publish_batch(jsonb_build_array(
                   jsonb_build_object('type', 'in.t', 'id', 'e30-at'),
                   jsonb_build_object('type', 'in.t', 'id', 'b30-over2', 'payload', (SELECT over_limit FROM rb30))))$$,
                 '54000', NULL, '... also on its element-by-element path (54000)');
SELECT is((SELECT count(*)::int FROM relaybus.events WHERE id LIKE 'b30-%'), 0,
          '... and neither batch writes anything, not even the elements before the refused one');
SELECT lives_ok($$SELECT relaybus.publish_batch(jsonb_build_array(
                  jsonb_build_object('type', 'in.t', 'id', 'b30-at', 'payload', (SELECT at_limit FROM rb30)),
                  jsonb_build_object('type', 'out.t', 'id', 'b30-out', 'payload', (SELECT over_limit FROM rb30))))$$,
                'publish_batch accepts an element of exactly the limit, and one over it for an external handler');
SELECT is((SELECT array_agg(event_id || ':' || handler ORDER BY event_id) FROM relaybus.deliveries WHERE event_id LIKE 'b30-%'),
          ARRAY['b30-at:h30', 'b30-out:x30'], '... and delivers both');

SELECT rb_reset();
DROP FUNCTION public.rb30_handler(jsonb);
SELECT * FROM finish();
