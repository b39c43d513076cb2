--------------------------------------------------------------------------------
-- Monitoring (0.3.0): metrics() with the age of the oldest delivery in flight, and from
-- the preloaded library's shared memory (src/pg/counters.cpp, named_counters.cpp) the
-- counters of each handler, its publish-to-completion latency histogram, and the event
-- types published to no handler.
--------------------------------------------------------------------------------

-- 0.2's metrics() (made just before by metrics-0.2.0.sql, or a 0.2.1 database's) is
-- replaced: its result gains a column, which CREATE OR REPLACE cannot add. What depends on
-- it (a view of the operator's) would go with it, so the update refuses, saying what, and
-- changes nothing. The roles that could execute it may execute the new one: its grants
-- are kept here and given again below.
DO $dependents$
DECLARE
  found text;
BEGIN
  -- A view depends through its rewrite rule: named as the view.
  SELECT pg_catalog.string_agg(DISTINCT CASE WHEN r.oid IS NOT NULL
              THEN pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass, r.ev_class, 0)
              ELSE pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) END, ', ')
    INTO found
    FROM pg_catalog.pg_depend d
    LEFT JOIN pg_catalog.pg_rewrite r
      ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.oid = d.objid
   WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
     AND d.refobjid = 'relaybus.metrics()'::pg_catalog.regprocedure
     AND d.deptype = 'n';
  IF found IS NOT NULL THEN
    RAISE EXCEPTION 'relaybus 0.3.0 replaces relaybus.metrics(), and other objects depend on it: %', found
      USING ERRCODE = 'dependent_objects_still_exist',
            DETAIL = 'metrics() gains a column, oldest_in_flight_age, which needs the function dropped and created again. Nothing was changed.',
            HINT = 'Drop those objects, run the update, then create them again.';
  END IF;
END
$dependents$;
SELECT pg_catalog.set_config('relaybus_update.metrics_acl',
                             coalesce(p.proacl::text, ''), true)
  FROM pg_catalog.pg_proc p WHERE p.oid = 'relaybus.metrics()'::pg_catalog.regprocedure;
DROP FUNCTION relaybus.metrics();

-- metrics: per handler (subscribed, or with deliveries left): paused, pending (waiting, not
-- in flight), due (pending and due now), in_flight, dead, oldest_pending_age (now() minus
-- the creation time of the oldest pending delivery; NULL when none), lanes_held (lanes
-- under a lease that has not expired), workers (distinct owners of those) and
-- oldest_in_flight_age (now() minus the creation time of the oldest delivery in flight;
-- NULL when none).
--
-- Cost: relaybus_internal.delivery_counts, which statistics() shares, reads what is left
-- of every lane (see relaybus_internal.unfinished) and the lanes once more for the lease
-- figures. Scrape it every 30 s or so, not every second, on a deep queue. Takes no lock
-- beyond reading. Reads subscriptions, lanes, lane_progress, deliveries, exceptions.
-- Without jit, as the reads under it (each call compiled its expressions first).
CREATE FUNCTION relaybus.metrics()
  RETURNS TABLE(handler text, paused boolean, pending bigint, due bigint, in_flight bigint,
                dead bigint, oldest_pending_age interval, lanes_held bigint, workers bigint,
                oldest_in_flight_age interval)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off
AS $fn$
  WITH counts AS (
    SELECT * FROM relaybus_internal.delivery_counts()
  ), leases AS (
    SELECT l.handler, count(*) AS lanes_held, count(DISTINCT l.lease_owner) AS workers
      FROM relaybus.lanes l
     WHERE l.lease_owner IS NOT NULL AND l.lease_expires_at > now()
     GROUP BY l.handler
  ), names AS (
    SELECT s.handler FROM relaybus.subscriptions s
    UNION SELECT c.handler FROM counts c
  )
  SELECT n.handler, coalesce(s.paused_at IS NOT NULL, false), coalesce(c.pending, 0),
         coalesce(c.due, 0), coalesce(c.in_flight, 0), coalesce(c.dead, 0),
         now() - c.oldest_pending, coalesce(l.lanes_held, 0), coalesce(l.workers, 0),
         now() - c.oldest_in_flight
    FROM names n
    LEFT JOIN relaybus.subscriptions s ON s.handler = n.handler
    LEFT JOIN counts c ON c.handler = n.handler
    LEFT JOIN leases l ON l.handler = n.handler
   ORDER BY n.handler
$fn$;

REVOKE ALL ON FUNCTION relaybus.metrics() FROM PUBLIC;
DO $grants$
DECLARE
  item record;
BEGIN
  FOR item IN
    SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(r.rolname) END AS grantee,
           a.is_grantable
      FROM pg_catalog.aclexplode(NULLIF(
             pg_catalog.current_setting('relaybus_update.metrics_acl', true), '')::pg_catalog.aclitem[]) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
     WHERE a.privilege_type = 'EXECUTE'
       AND a.grantee <> (SELECT p.proowner FROM pg_catalog.pg_proc p
                          WHERE p.oid = 'relaybus.metrics()'::pg_catalog.regprocedure)
  LOOP
    EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION relaybus.metrics() TO %s%s', item.grantee,
                              CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
  END LOOP;
END
$grants$;

-- handler_counters: what relaybus did for each handler in this database since the server
-- started or the last reset_counters(), one row per handler and counter: published
-- (deliveries the handler was given), claimed, completed, failed, dead_lettered,
-- taken_over (its lanes), attempts_charged, handler_worker_errors. Only committed work
-- counts. 55000 unless relaybus is in shared_preload_libraries.
--
-- A handler is listed from its first count until the server stops (unsubscribed, it keeps
-- what it counted); one of 1024 slots of the server, each a handler or an unrouted type of
-- one database. Touches no table.
CREATE FUNCTION relaybus.handler_counters()
  RETURNS TABLE(handler text, name text, value bigint, since timestamptz)
  AS 'MODULE_PATHNAME', 'relaybus_handler_counters' LANGUAGE C VOLATILE;

-- completion_latency: per handler, how long its completed deliveries took from the publish
-- of their event to their completion, as a cumulative histogram: le holds the buckets'
-- upper bounds in seconds (the last is Infinity), completions[i] how many took at most
-- le[i]; total and total_seconds their count and sum. Only committed completions count.
-- 55000 unless relaybus is in shared_preload_libraries.
--
-- The publish time comes from the lease token, which a claim gives it: a completion with a
-- token made by hand counts in handler_counters but not here. Touches no table.
CREATE FUNCTION relaybus.completion_latency()
  RETURNS TABLE(handler text, le double precision[], completions bigint[], total bigint,
                total_seconds double precision, since timestamptz)
  AS 'MODULE_PATHNAME', 'relaybus_completion_latency' LANGUAGE C VOLATILE;

-- unrouted_counters: per event type, how many events publish and publish_batch stored in
-- this database for no handler (no subscription matched the type) since the server started
-- or the last reset_counters(). Only committed publishes count. 55000 unless relaybus is in
-- shared_preload_libraries.
--
-- A type takes one of the server's 1024 slots, as a handler does. Touches no table.
CREATE FUNCTION relaybus.unrouted_counters()
  RETURNS TABLE(type text, events bigint, since timestamptz)
  AS 'MODULE_PATHNAME', 'relaybus_unrouted_counters' LANGUAGE C VOLATILE;

REVOKE ALL ON FUNCTION relaybus.handler_counters(), relaybus.completion_latency(),
  relaybus.unrouted_counters() FROM PUBLIC;
