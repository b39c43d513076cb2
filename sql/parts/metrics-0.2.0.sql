--------------------------------------------------------------------------------
-- Monitoring: per-handler gauges (metrics) and the cumulative counters the preloaded
-- library keeps in shared memory (counters, reset_counters; src/pg/counters.cpp). For
-- scrapers such as postgres_exporter (docs/postgres_exporter.yml).
--------------------------------------------------------------------------------

-- metrics: per handler (subscribed, or with deliveries left): paused, pending (waiting, not
-- in flight), due (pending and due now), in_flight, dead, oldest_pending_age (now() minus
-- the creation time of the oldest pending delivery; NULL when none), lanes_held (lanes
-- under a lease that has not expired) and workers (distinct owners of those).
--
-- Cost: relaybus_internal.delivery_counts, which statistics() shares, reads every delivery
-- once (a sequential scan, some hundreds of milliseconds at a million pending) and the
-- held lanes; the lease figures read lanes once more (0.7 to 2 MB per handler, usually
-- cached). Scrape it every 30 s or so, not every second, on a deep queue. Takes no lock
-- beyond reading. Reads subscriptions, deliveries, lanes.
CREATE FUNCTION relaybus.metrics()
  RETURNS TABLE(handler text, paused boolean, pending bigint, due bigint, in_flight bigint,
                dead bigint, oldest_pending_age interval, lanes_held bigint, workers bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
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
         now() - c.oldest_pending, coalesce(l.lanes_held, 0), coalesce(l.workers, 0)
    FROM names n
    LEFT JOIN relaybus.subscriptions s ON s.handler = n.handler
    LEFT JOIN counts c ON c.handler = n.handler
    LEFT JOIN leases l ON l.handler = n.handler
   ORDER BY n.handler
$fn$;

-- counters: what relaybus did in this database since the server started or the last
-- reset_counters(), one row per counter: published, deliveries_published, claimed,
-- completed, failed, dead_lettered, taken_over, attempts_charged, handler_worker_errors.
-- Only committed work counts. 55000 unless relaybus is in shared_preload_libraries.
--
-- Kept in shared memory, so a server restart (or crash) zeroes them; since says from
-- when they count. One row per counter rather than a column each: a counter added later
-- is a new row, not a new result type (which CREATE OR REPLACE cannot change).
-- Touches no table.
CREATE FUNCTION relaybus.counters() RETURNS TABLE(name text, value bigint, since timestamptz)
  AS 'MODULE_PATHNAME', 'relaybus_counters' LANGUAGE C VOLATILE ROWS 9;

-- reset_counters: sets this database's counters to 0 and their since to now. Returns the
-- new since. 55000 unless relaybus is in shared_preload_libraries.
--
-- At once, not at commit: a rollback does not bring the old values back. Touches no
-- table.
CREATE FUNCTION relaybus.reset_counters() RETURNS timestamptz
  AS 'MODULE_PATHNAME', 'relaybus_reset_counters' LANGUAGE C VOLATILE;
