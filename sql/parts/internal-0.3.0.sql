--------------------------------------------------------------------------------
-- Internal helpers: functions no user is meant to call, in a schema of their own.
--------------------------------------------------------------------------------

-- Internal helpers of relaybus, called only by its own functions; not part of the SQL API
-- and usable by no role.
--
-- Why a schema and not a name prefix (0.1.0's "_check_name"): a prefixed helper sits in
-- schema relaybus, where the three roles have USAGE, so it shows in \df relaybus.* and one
-- GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA relaybus would hand it out. Here nobody but the
-- owner has USAGE, so nobody else can even name a helper, whatever EXECUTE it has; schema
-- relaybus holds exactly the API. The callers are relaybus's SECURITY DEFINER functions
-- (and subscribe, which takes the owner's rights in C) and the upgrade script: they run as
-- the owner, with search_path pinned to pg_catalog, pg_temp, and call each helper
-- schema-qualified, so no caller can put another function in its place.
CREATE SCHEMA relaybus_internal;

-- set_paused: the body of relaybus.pause (paused true) and relaybus.resume (false): marks
-- or unmarks the subscription; a resume also notifies channel relaybus with the handler,
-- when relaybus.notify is on. Returns false when it was so already. Internal.
--
-- Locks the subscription row (FOR NO KEY UPDATE, until commit); claims read it without a
-- lock. Writes subscriptions.
CREATE FUNCTION relaybus_internal.set_paused(want_handler text, paused boolean) RETURNS boolean
  LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  was_paused boolean;
BEGIN
  IF want_handler IS NULL THEN
    RAISE EXCEPTION 'handler must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  SELECT s.paused_at IS NOT NULL INTO was_paused
    FROM relaybus.subscriptions s WHERE s.handler = want_handler FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'handler "%" is not subscribed', want_handler
      USING ERRCODE = 'undefined_object',
            HINT = 'Only a subscribed handler can be paused or resumed: see relaybus.statistics().';
  END IF;
  IF was_paused = paused THEN
    RETURN false;
  END IF;
  UPDATE relaybus.subscriptions s
     SET paused_at = CASE WHEN paused THEN now() END, updated_at = now()
   WHERE s.handler = want_handler;
  -- The library may not be loaded in this session: the setting is then a placeholder (or
  -- absent), read as text.
  IF NOT paused AND coalesce(current_setting('relaybus.notify', true), 'on')::boolean THEN
    PERFORM pg_notify('relaybus', want_handler);
  END IF;
  RETURN true;
END
$fn$;

-- subscriptions_changed: marks every backend's copy of the subscriptions stale, before each
-- row that changes in relaybus.subscriptions and before each TRUNCATE of it. Internal: run
-- by the triggers subscriptions_changed and subscriptions_truncated on that table.
--
-- publish routes events by a copy of the subscriptions kept per backend
-- (src/pg/subscription_cache.hpp). This invalidates the table's relcache entry, which
-- reaches the writer's backend at the end of the statement and the others when its
-- transaction commits, and notes that the transaction changed them: until it ends, its
-- backend keeps no copy, its commit is announced in shared memory before it becomes
-- visible (src/pg/subscription_changes.hpp), and PREPARE TRANSACTION is refused (0A000).
-- Returns the row unchanged (a row trigger) or NULL (TRUNCATE). Writes nothing.
CREATE FUNCTION relaybus_internal.subscriptions_changed() RETURNS trigger
  AS 'MODULE_PATHNAME', 'relaybus_subscriptions_changed' LANGUAGE C VOLATILE
  SET search_path = pg_catalog, pg_temp;

-- subscriptions_changed: every row change to the subscriptions, whoever makes it
-- (subscribe, unsubscribe, pause, an operator's UPDATE, a logical replication apply
-- worker), marks the copies publish keeps stale.
--
-- FOR EACH ROW: a logical replication apply worker fires row triggers only, never
-- statement triggers (TRUNCATE aside). BEFORE: ahead of the row and of every AFTER
-- trigger, so that a publish from a trigger added to the table does not keep a copy with
-- a row the statement may roll back. ENABLE ALWAYS: it fires under
-- session_replication_role = replica too, where the apply worker runs and an ordinary
-- trigger would not.
CREATE TRIGGER subscriptions_changed BEFORE INSERT OR UPDATE OR DELETE ON relaybus.subscriptions
  FOR EACH ROW EXECUTE FUNCTION relaybus_internal.subscriptions_changed();
ALTER TABLE relaybus.subscriptions ENABLE ALWAYS TRIGGER subscriptions_changed;

-- subscriptions_truncated: a TRUNCATE of the subscriptions (which fires no row trigger)
-- marks the copies publish keeps stale, as subscriptions_changed does for rows. ENABLE
-- ALWAYS: it fires under session_replication_role = replica too.
CREATE TRIGGER subscriptions_truncated BEFORE TRUNCATE ON relaybus.subscriptions
  FOR EACH STATEMENT EXECUTE FUNCTION relaybus_internal.subscriptions_changed();
ALTER TABLE relaybus.subscriptions ENABLE ALWAYS TRIGGER subscriptions_truncated;

-- Nothing for PUBLIC: a new schema grants it nothing, but a new function grants it EXECUTE.
-- No role gets anything either: only the owner calls these.
REVOKE ALL ON SCHEMA relaybus_internal FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA relaybus_internal FROM PUBLIC;
