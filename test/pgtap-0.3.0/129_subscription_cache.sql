-- Port of test/pgtap/29_subscription_cache.sql to relaybus 0.3.0: publish's routing by the
-- per-backend copy of the subscriptions is the same code in both versions, so every
-- assertion carries over unchanged. Every routed() below is read after the publishing
-- transaction has ended, so 0.3.0's deliveries, written at commit, are there to read (a
-- transaction does not see its own, by design); a publish rolled back (to a savepoint, or
-- whole) leaves none, as in 0.2.
--
-- Guarantees: publish routes an event by the subscriptions as they are when it runs, though
-- each backend keeps a copy of them (src/pg/subscription_cache.hpp): a subscribe, an
-- unsubscribe, an operator's UPDATE or a TRUNCATE committed by another session is seen by
-- this session's next publish, also inside a READ COMMITTED transaction that had published
-- before, and one made under session_replication_role = replica; its own uncommitted
-- subscribe is seen at once, and forgotten when rolled back (to a savepoint or whole); a
-- REPEATABLE READ transaction routes by its snapshot. A trigger added to the table that
-- publishes, in a statement that then fails, leaves no copy with the failed row. The
-- trigger function cannot be called outside the trigger. (A commit seen by others before
-- its invalidations are sent, and a logical replication apply worker's changes:
-- test/integration/subscription_commit.sh.)
SELECT rb_reset();
SELECT plan(16);

-- The handlers of one published event, in order.
CREATE FUNCTION pg_temp.routed(id text) RETURNS text[] LANGUAGE sql AS $$
  SELECT coalesce(array_agg(handler ORDER BY handler), '{}') FROM relaybus.deliveries WHERE event_id = id
$$;

-- Runs a call in the second session, committed there.
CREATE FUNCTION pg_temp.elsewhere(call text) RETURNS void LANGUAGE sql AS $$
  SELECT dblink_exec('c29', format('DO $d$BEGIN PERFORM %s; END$d$', call))
$$;

SELECT rb_connect('c29');
SELECT relaybus.subscribe('sc_a', ARRAY['sc.t']);
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-1');
SELECT is(pg_temp.routed('sc-1'), ARRAY['sc_a'], 'a publish after this session''s subscribe routes to it');

SELECT pg_temp.elsewhere($$relaybus.subscribe('sc_b', ARRAY['sc.t'])$$);
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-2');
SELECT is(pg_temp.routed('sc-2'), ARRAY['sc_a', 'sc_b'], 'a subscribe another session committed is seen');

SELECT dblink_exec('c29', $$UPDATE relaybus.subscriptions SET event_types = ARRAY['sc.u'] WHERE handler = 'sc_b'$$);
SELECT relaybus.publish('sc.u', '{}', event_id => 'sc-3');
SELECT is(pg_temp.routed('sc-3'), ARRAY['sc_b'], 'an operator''s UPDATE of event_types in another session is seen');

SELECT pg_temp.elsewhere($$relaybus.unsubscribe('sc_b')$$);
SELECT throws_ok($$SELECT relaybus.publish('sc.u', '{}', handlers => ARRAY['sc_b'])$$, '42704',
                 'handler "sc_b" is not subscribed', 'an unsubscribe another session committed is seen');

-- Inside one READ COMMITTED transaction that published already, as each statement would
-- see a subscribe committed meanwhile.
BEGIN;
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-4');
SELECT pg_temp.elsewhere($$relaybus.subscribe('sc_c', ARRAY['sc.t'])$$);
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-5');
COMMIT;
SELECT is(pg_temp.routed('sc-4'), ARRAY['sc_a'], 'READ COMMITTED: the first publish came before the subscribe');
SELECT is(pg_temp.routed('sc-5'), ARRAY['sc_a', 'sc_c'],
          'READ COMMITTED: a later publish in the same transaction sees the subscribe committed meanwhile');

-- This session's own subscribe, rolled back to a savepoint and whole.
BEGIN;
SAVEPOINT before_d;
SELECT relaybus.subscribe('sc_d', ARRAY['sc.t']);
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-6');
ROLLBACK TO SAVEPOINT before_d;
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-7');
COMMIT;
SELECT is(pg_temp.routed('sc-6'), '{}'::text[], 'the publish that saw the uncommitted subscribe went with it');
SELECT is(pg_temp.routed('sc-7'), ARRAY['sc_a', 'sc_c'], 'after ROLLBACK TO SAVEPOINT the subscribe is forgotten');
BEGIN;
SELECT relaybus.subscribe('sc_e', ARRAY['sc.t']);
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-8');
ROLLBACK;
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-9');
SELECT is(pg_temp.routed('sc-9'), ARRAY['sc_a', 'sc_c'], 'after ROLLBACK the subscribe is forgotten');

-- REPEATABLE READ routes by the transaction's snapshot, as a query would.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-10');
SELECT pg_temp.elsewhere($$relaybus.subscribe('sc_f', ARRAY['sc.t'])$$);
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-11');
COMMIT;
SELECT is(pg_temp.routed('sc-11'), ARRAY['sc_a', 'sc_c'],
          'REPEATABLE READ: a subscribe committed after the snapshot is not seen');
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-12');
SELECT is(pg_temp.routed('sc-12'), ARRAY['sc_a', 'sc_c', 'sc_f'], 'the next transaction sees it');

-- Under session_replication_role = replica, where ordinary triggers do not fire (a logical
-- replication apply worker's own changes: test/integration/subscription_commit.sh). The
-- publish before it makes sure this session's copy is fresh.
SELECT relaybus.publish('sc.r', '{}');
SELECT dblink_exec('c29', $$SET session_replication_role = replica$$);
SELECT dblink_exec('c29', $$UPDATE relaybus.subscriptions SET event_types = ARRAY['sc.r'] WHERE handler = 'sc_f'$$);
SELECT dblink_exec('c29', $$RESET session_replication_role$$);
SELECT relaybus.publish('sc.r', '{}', event_id => 'sc-14');
SELECT is(pg_temp.routed('sc-14'), ARRAY['sc_f'], 'a change under session_replication_role = replica is seen');

-- An owner's row triggers on the table: the first publishes as each subscription is
-- added (the publish sees the new row), the second then refuses one. The failed statement
-- must not leave this session a copy holding the row it rolled back.
CREATE FUNCTION pg_temp.announce() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN PERFORM relaybus.publish('sc.r', '{}'); RETURN NULL; END $$;
CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN IF NEW.handler = 'sc_g' THEN RAISE EXCEPTION 'no sc_g' USING ERRCODE = 'P0001'; END IF;
        RETURN NULL; END $$;
CREATE TRIGGER a_announce AFTER INSERT ON relaybus.subscriptions FOR EACH ROW EXECUTE FUNCTION pg_temp.announce();
CREATE TRIGGER b_refuse AFTER INSERT ON relaybus.subscriptions FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse();
SELECT throws_ok($$SELECT relaybus.subscribe('sc_g', ARRAY['sc.r'])$$, 'P0001', 'no sc_g',
                 'a subscribe refused by an owner''s trigger after another one published fails');
-- Before the triggers are dropped: that is DDL on the table, which invalidates the copy.
SELECT relaybus.publish('sc.r', '{}', event_id => 'sc-15');
SELECT is(pg_temp.routed('sc-15'), ARRAY['sc_f'], 'the refused subscription is not routed to afterwards');
DROP TRIGGER a_announce ON relaybus.subscriptions;
DROP TRIGGER b_refuse ON relaybus.subscriptions;

SELECT pg_temp.elsewhere('rb_reset()');
SELECT relaybus.publish('sc.t', '{}', event_id => 'sc-13');
SELECT is(pg_temp.routed('sc-13'), '{}'::text[], 'a TRUNCATE another session committed is seen');
SELECT dblink_disconnect('c29');

SELECT throws_ok($$SELECT relaybus_internal.subscriptions_changed()$$, '39P01', NULL,
                 'the trigger function runs only as the trigger');

SELECT * FROM finish();
