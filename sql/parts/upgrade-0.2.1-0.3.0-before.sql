--------------------------------------------------------------------------------
-- Update 0.2.1 -> 0.3.0, first part: the check, then 0.2's deliveries and lanes are moved
-- aside for positions-0.3.0.sql to create 0.3.0's; upgrade-0.2.1-0.3.0-data.sql fills them
-- and drops 0.2's. ALTER EXTENSION runs the whole script in one transaction: if any step
-- fails, nothing has changed.
--------------------------------------------------------------------------------
-- A live lease's worker would go on with tokens 0.3.0 no longer takes, and what it runs
-- would run again. Refuse while any lease is live, as the update from 0.1.0 does: stop the
-- workers (external ones, and the in-database handler workers: pause their handlers or
-- take the database out of relaybus.database), wait for their leases to expire, then
-- update. What an expired lease still lists in flight is charged below, as a takeover
-- would charge it.
DO $check$
DECLARE
  live bigint;
BEGIN
  SELECT count(*) INTO live FROM relaybus.lanes
   WHERE lease_owner IS NOT NULL AND lease_expires_at > now();
  IF live > 0 THEN
    RAISE EXCEPTION 'relaybus: % lanes are still leased by workers', live
      USING ERRCODE = 'object_in_use',
            DETAIL = 'relaybus 0.3.0 does not take the lease tokens of 0.2.',
            HINT = 'Stop every worker (pause the handlers the in-database handler workers run), '
                   'wait until their leases expire, then run ALTER EXTENSION relaybus UPDATE again. '
                   'Nothing was changed.';
  END IF;
END
$check$;

-- Renamed with the constraints 0.3.0's tables name the same way (PostgreSQL would otherwise
-- choose another name for the new ones, and the catalog would differ from a fresh install's).
ALTER TABLE relaybus.deliveries RENAME TO deliveries_020;
ALTER INDEX relaybus.deliveries_pkey RENAME TO deliveries_020_pkey;
ALTER TABLE relaybus.deliveries_020 RENAME CONSTRAINT deliveries_lane_check TO deliveries_020_lane_check;
DROP INDEX relaybus.deliveries_lane_due_idx, relaybus.deliveries_lane_key_idx,
           relaybus.deliveries_dead_idx;
ALTER TABLE relaybus.lanes RENAME TO lanes_020;
ALTER INDEX relaybus.lanes_pkey RENAME TO lanes_020_pkey;
ALTER TABLE relaybus.lanes_020 RENAME CONSTRAINT lanes_lane_check TO lanes_020_lane_check;

-- 0.2's internal helpers over those tables; internal-positions-0.3.0.sql makes 0.3.0's
-- (no role has rights on them to keep).
DROP FUNCTION relaybus_internal.create_lanes(text),
              relaybus_internal.list_deliveries_impl(text, text, integer),
              relaybus_internal.delivery_counts();
