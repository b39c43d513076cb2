--------------------------------------------------------------------------------
-- Upgrade 0.1.0 -> 0.2.0, first half: checks, then the tables. ALTER EXTENSION runs the
-- whole script in one transaction: if any step fails, nothing has changed.
--------------------------------------------------------------------------------

-- 0.1.0 workers would fail on the dropped lease columns, and a lease they still hold would
-- be silently ended. Refuse while any lease is live: stop the 0.1.0 workers, wait for their
-- leases to expire (or complete/fail what they hold), then update.
DO $check$
DECLARE
  live bigint;
BEGIN
  SELECT count(*) INTO live FROM relaybus.deliveries
   WHERE status = 'processing' AND lease_expires_at > now();
  IF live > 0 THEN
    RAISE EXCEPTION 'relaybus: % deliveries are still leased by 0.1.0 workers', live
      USING ERRCODE = 'object_in_use',
            HINT = 'Stop every 0.1.0 worker, wait until their leases expire, then run '
                   'ALTER EXTENSION relaybus UPDATE again. Nothing was changed.';
  END IF;
END
$check$;

-- The 0.1.0 functions go; the 0.2.0 API is created further down.
DO $drop$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'relaybus'::regnamespace LOOP
    EXECUTE format('DROP FUNCTION %s', f);
  END LOOP;
END
$drop$;

ALTER TABLE relaybus.subscriptions
  ADD COLUMN sql_timeout interval CHECK (sql_timeout > '0'),
  ADD COLUMN paused_at timestamptz;

-- 0.1.0's subscribe took any sql_function without asking who owns it, and nothing ran it.
-- 0.2.0 runs a handler function as its owner, and its subscribe lets only a role with the
-- owner's privileges name one; who subscribed a 0.1.0 row is not known. So none is carried
-- over as an in-database handler: each is paused (its backlog kept, nothing hands it out)
-- and loses its function, until a role with the owner's privileges subscribes it again.
DO $in_database$
DECLARE
  s record;
BEGIN
  FOR s IN SELECT handler, sql_function FROM relaybus.subscriptions
            WHERE sql_function IS NOT NULL ORDER BY handler LOOP
    RAISE WARNING 'relaybus: handler "%" is paused, and no longer runs %', s.handler, s.sql_function
      USING DETAIL = '0.1.0 accepted this sql_function without checking who owns it, and never '
                     'ran it; 0.2.0 would run it as its owner.',
            HINT = format('To run it in the database, subscribe it again with sql_function => %L '
                          'as a role with the privileges of the function''s owner, then call '
                          'relaybus.resume(%L).', s.sql_function::text, s.handler);
  END LOOP;
  UPDATE relaybus.subscriptions
     SET sql_function = NULL, paused_at = now(), updated_at = now()
   WHERE sql_function IS NOT NULL;
END
$in_database$;

-- Events remember every handler they ever had a delivery for, completed ones included, so
-- nothing completed under 0.1.0 runs again when the event is published again.
ALTER TABLE relaybus.events ADD COLUMN handlers text[];
UPDATE relaybus.events e
   SET handlers = coalesce((SELECT array_agg(d.handler ORDER BY d.handler)
                              FROM relaybus.deliveries d WHERE d.event_id = e.id), '{}');
ALTER TABLE relaybus.events ALTER COLUMN handlers SET NOT NULL;

-- Deliveries: 0.1.0 indexes go (the lease columns and two of them with them); an expired
-- lease's delivery becomes pending again, its attempt staying counted, exactly as a lane
-- takeover counts a lost attempt. The lane is filled after the API exists (lane_of).
DROP INDEX relaybus.deliveries_due_idx, relaybus.deliveries_due_unkeyed_idx,
           relaybus.deliveries_key_order_idx, relaybus.deliveries_status_created_idx,
           relaybus.deliveries_handler_created_idx, relaybus.deliveries_lease_idx,
           relaybus.deliveries_completed_idx;
UPDATE relaybus.deliveries
   SET status = 'pending', updated_at = now(),
       last_error = coalesce(last_error, 'lease lost: upgraded from 0.1.0 while in flight')
 WHERE status = 'processing';
ALTER TABLE relaybus.deliveries
  DROP COLUMN lease_owner,
  DROP COLUMN lease_token,
  DROP COLUMN lease_expires_at,
  DROP CONSTRAINT deliveries_status_check,  -- re-added once completed rows have moved
  ADD COLUMN lane smallint CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  ADD COLUMN claims integer NOT NULL DEFAULT 0,
  SET (autovacuum_vacuum_scale_factor = 0.02);
