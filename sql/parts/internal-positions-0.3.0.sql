--------------------------------------------------------------------------------
-- Internal helpers over positions (0.3.0): the reading of what is left, the admin
-- listings and counts built on it, the lanes' creation and the finish of one position. A
-- fresh install and the update from 0.2.1 both create them here.
--------------------------------------------------------------------------------

-- create_lanes: creates the @LANE_COUNT@ lanes of handler that do not exist yet (their
-- leases; a lane without a relaybus.lane_progress row has no progress yet). Internal: run by
-- subscribe. Returns nothing.
--
-- Writes lanes. Not SECURITY DEFINER: its callers already run with the owner's rights.
CREATE FUNCTION relaybus_internal.create_lanes(handler text) RETURNS void
  LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $fn$
  INSERT INTO relaybus.lanes (handler, lane)
  SELECT create_lanes.handler, n FROM generate_series(0, @LANE_MAX@) n
  ON CONFLICT DO NOTHING;
$fn$;

-- unfinished: every delivery of handler (NULL: of every handler) its lane has not finished,
-- as one row each: the window's (position above the cursor, not in done; in flight when
-- the lane lists it) and the exception rows' (pending, in flight when the lane retries it,
-- or dead). Internal: the one reading of "what is left" that delivery_counts and
-- list_deliveries_impl share.
--
-- A range scan of the positions above each lane's cursor (deliveries_pkey) and a scan of
-- the exception rows: its cost grows with the lanes and the backlog, as 0.2's scan of the
-- deliveries did, not with the finished deliveries kept. Reads lanes, lane_progress,
-- deliveries, exceptions. Without jit: a SQL function with settings is planned at each call,
-- and the estimate of its 256 probes crossed jit_above_cost, so that every call compiled
-- its expressions first (statistics() took 20-24 ms instead of 4-7 with nothing to count).
CREATE FUNCTION relaybus_internal.unfinished(want_handler text)
  RETURNS TABLE(handler text, lane smallint, lane_position bigint, event_id text, key text,
                status text, attempts integer, available_at timestamptz, last_error text,
                lease_owner text, created_at timestamptz, updated_at timestamptz)
  LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp SET jit = off
AS $fn$
  SELECT d.handler, d.lane, d.position, d.event_id, d.key,
         CASE WHEN d.position = ANY (l.in_flight) THEN 'processing' ELSE 'pending' END,
         0, d.available_at, NULL::text,
         CASE WHEN d.position = ANY (l.in_flight) THEN l.lease_owner END,
         d.created_at, d.created_at
    FROM relaybus.lane_state l
    -- Per lane, a range scan above its cursor (fenced, OFFSET 0, so that it stays one: a
    -- join planned over the whole table read every delivery kept, finished ones included).
    CROSS JOIN LATERAL (SELECT d.* FROM relaybus.deliveries d
                         WHERE d.handler = l.handler AND d.lane = l.lane
                           AND d.position > l.acked_upto OFFSET 0) d
   WHERE (want_handler IS NULL OR l.handler = want_handler)
     AND d.position <> ALL (l.done)
  UNION ALL
  SELECT x.handler, x.lane, x.position, x.event_id, x.key,
         CASE WHEN x.status = 'pending' AND x.position = ANY (l.retrying) THEN 'processing'
              ELSE x.status END,
         x.attempts, x.available_at, x.last_error,
         CASE WHEN x.status = 'pending' AND x.position = ANY (l.retrying) THEN l.lease_owner END,
         x.created_at, x.updated_at
    FROM relaybus.exceptions x
    LEFT JOIN relaybus.lane_state l ON l.handler = x.handler AND l.lane = x.lane
   WHERE want_handler IS NULL OR x.handler = want_handler
$fn$;

-- list_deliveries_impl: the body of relaybus.list_deliveries, called with the same
-- arguments. Internal: only list_deliveries calls it.
--
-- PL/pgSQL rejects an argument named like an output column, so list_deliveries, whose
-- arguments are named status and handler like two of its columns, is a SQL function that
-- calls this one. Reads what relaybus_internal.unfinished reads, events, completions.
CREATE FUNCTION relaybus_internal.list_deliveries_impl(want_status text, want_handler text,
                                                       row_limit integer)
  RETURNS TABLE(event_id text, handler text, type text, key text, status text,
                attempts integer, available_at timestamptz, last_error text,
                lease_owner text, created_at timestamptz, updated_at timestamptz)
  LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp SET jit = off
AS $fn$
BEGIN
  IF want_status IS NOT NULL
     AND want_status NOT IN ('pending', 'processing', 'dead', 'completed') THEN
    RAISE EXCEPTION 'unknown status "%"', want_status
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Use pending, processing, dead, completed or NULL.';
  END IF;
  IF row_limit IS NULL OR row_limit < 0 THEN
    RAISE EXCEPTION 'max_rows must be zero or more' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF want_status = 'completed' THEN
    RETURN QUERY
      SELECT c.event_id, c.handler, e.type, e.key, c.outcome, c.attempts,
             NULL::timestamptz, NULL::text, NULL::text, c.completed_at, c.completed_at
        FROM relaybus.completions c LEFT JOIN relaybus.events e ON e.id = c.event_id
       WHERE want_handler IS NULL OR c.handler = want_handler
       ORDER BY 10 DESC, 1 LIMIT row_limit;
    RETURN;
  END IF;
  RETURN QUERY
    SELECT u.event_id, u.handler, e.type, u.key, u.status, u.attempts, u.available_at,
           u.last_error, u.lease_owner, u.created_at, u.updated_at
      FROM relaybus_internal.unfinished(want_handler) u
      LEFT JOIN relaybus.events e ON e.id = u.event_id
     WHERE want_status IS NULL OR u.status = want_status
     ORDER BY u.created_at DESC, u.event_id, u.handler LIMIT row_limit;
END
$fn$;

-- delivery_counts: per handler with deliveries left: pending = waiting and not in flight,
-- due = those of pending whose available_at has come, in_flight, dead, oldest_pending =
-- creation time of the oldest delivery counted in pending, oldest_in_flight = the same of
-- those in flight. Internal: the figures statistics() and metrics() share.
--
-- One pass over relaybus_internal.unfinished (see there what it scans). Reads lanes,
-- deliveries, exceptions.
CREATE FUNCTION relaybus_internal.delivery_counts()
  RETURNS TABLE(handler text, pending bigint, due bigint, in_flight bigint, dead bigint,
                oldest_pending timestamptz, oldest_in_flight timestamptz)
  LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp SET jit = off
AS $fn$
  SELECT u.handler,
         count(*) FILTER (WHERE u.status = 'pending'),
         count(*) FILTER (WHERE u.status = 'pending' AND u.available_at <= now()),
         count(*) FILTER (WHERE u.status = 'processing'),
         count(*) FILTER (WHERE u.status = 'dead'),
         min(u.created_at) FILTER (WHERE u.status = 'pending'),
         min(u.created_at) FILTER (WHERE u.status = 'processing')
    FROM relaybus_internal.unfinished(NULL) u GROUP BY u.handler
$fn$;

-- finish_position: finishes one position of handler's lane that is in the window, neither
-- in flight nor finished, through core::finish_positions (the cursor moves over it when it
-- is the next one). Returns whether it did. Internal: cancel's finish of a delivery that
-- has no exception row.
--
-- Locks the lane row (FOR NO KEY UPDATE) and writes it.
CREATE FUNCTION relaybus_internal.finish_position(handler text, lane smallint, lane_position bigint)
  RETURNS boolean
  AS 'MODULE_PATHNAME', 'relaybus_finish_position' LANGUAGE C VOLATILE STRICT
  SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- lane_changed: requeue's note that it made work in handler's lane without a publish, so
-- that a claim that passes over the lanes it found idle (src/pg/lane_changes.hpp) looks at
-- it again once the transaction commits. Returns true. Internal.
--
-- Touches no table.
CREATE FUNCTION relaybus_internal.lane_changed(handler text, lane smallint) RETURNS boolean
  AS 'MODULE_PATHNAME', 'relaybus_lane_changed' LANGUAGE C VOLATILE STRICT
  SET search_path = pg_catalog, pg_temp;

-- retire_unsubscribed: purge_expired's retention of handlers no longer subscribed, as 0.2
-- deleted their pending deliveries: in their lanes that nobody leases, the deliveries
-- published before cutoff are finished from the cursor up (core::retire_expired_positions),
-- and the pending exception rows published before it deleted. Returns the positions
-- finished plus the rows deleted. Internal.
--
-- Locks up to 1,000 such lanes (FOR NO KEY UPDATE SKIP LOCKED: it waits for nothing);
-- writes lane_progress, exceptions (deletes).
CREATE FUNCTION relaybus_internal.retire_unsubscribed(cutoff timestamptz) RETURNS bigint
  AS 'MODULE_PATHNAME', 'relaybus_retire_unsubscribed' LANGUAGE C VOLATILE STRICT
  SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- lanes_changed: the trigger of relaybus.lanes, after each insert and update of a lease row
-- however it is written: moves the lane's lease counter in shared memory at commit, so that
-- a claim that remembers the lane's lease reads it again (src/pg/lease_memory.hpp). No
-- parameters; returns the row. Writes nothing, locks nothing. A trigger function cannot be
-- called directly.
CREATE FUNCTION relaybus_internal.lanes_changed() RETURNS trigger
  AS 'MODULE_PATHNAME', 'relaybus_lanes_changed' LANGUAGE C VOLATILE
  SET search_path = pg_catalog, pg_temp;

-- lanes_changed: after each insert and update of a lease row, tells the claims that
-- remember that lane's lease to read it again (relaybus_internal.lanes_changed).
CREATE TRIGGER lanes_changed AFTER INSERT OR UPDATE ON relaybus.lanes
  FOR EACH ROW EXECUTE FUNCTION relaybus_internal.lanes_changed();
-- Also under session_replication_role = replica: a lease written then is a lease changed.
ALTER TABLE relaybus.lanes ENABLE ALWAYS TRIGGER lanes_changed;

-- A new function grants EXECUTE to PUBLIC: only the owner calls these.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA relaybus_internal FROM PUBLIC;
