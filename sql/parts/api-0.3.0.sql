--------------------------------------------------------------------------------
-- Functions implemented in C++ (src/pg). Each is a thin entry point guarded against
-- C++ exceptions and PostgreSQL errors crossing each other.
--
-- The delivery path (publish, claim, completion, failure, lease and takeover functions)
-- runs with sequential, bitmap, hash and merge plans disabled. Its statements keep their
-- plans in the connection (re-made only after DDL, VACUUM or ANALYZE of their tables), and
-- relaybus's tables swing from empty to deep and back: a plan made while a table looked empty (a fresh install, a drained queue just
-- analyzed) scans the whole table on every call once it is deep again, exactly when the
-- queue can least afford it. Every statement on the path is a lookup along an index, so
-- an index plan is right at every size; the settings make it the only one on offer.
-- jit is off with them: the penalty cost of a disabled plan (a table with no usable index,
-- such as the handful of subscriptions) would otherwise cross jit_above_cost and compile
-- every call.
--
-- The header above each function: its first paragraph (what it does, what it returns) is
-- also its COMMENT, shown by \df+ (scripts/build-sql); the rest (tables, locks, why) is for
-- the source only.
--------------------------------------------------------------------------------

-- lane_of(key_or_event_id): the lane (0..@LANE_MAX@) a delivery with that ordering key, or with
-- that event id when it has no key, lives in: FNV-1a of the UTF-8 bytes, modulo @LANE_COUNT@.
--
-- Touches nothing.
CREATE OR REPLACE FUNCTION relaybus.lane_of(key_or_event_id text) RETURNS smallint
  AS 'MODULE_PATHNAME', 'relaybus_lane_of' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- subscribe: registers or updates handler for event_types ('*' = every type) with its
-- retry policy and creates its @LANE_COUNT@ lanes; sql_function(jsonb) makes it an in-database
-- handler, run by the background workers as the function's owner, each call bounded by
-- sql_timeout (@SQL_TIMEOUT_MIN@..@SQL_TIMEOUT_MAX@; NULL: relaybus.sql_handler_timeout). backoff_base and
-- backoff_max: 0..@BACKOFF_LIMIT@, a month counting 30 days. Returns nothing.
--
-- The workers call sql_function in a security-restricted operation; 42501 unless the
-- calling role has the privileges of sql_function's owner. The intervals are stored as the
-- microseconds checked. Writes subscriptions, lanes (relaybus_internal.create_lanes).
-- Not SECURITY DEFINER: the C body takes its owner's rights itself (src/pg/definer_rights.hpp),
-- because it must check sql_function's owner against the role that called it, which
-- PostgreSQL no longer knows inside a SECURITY DEFINER function.
CREATE OR REPLACE FUNCTION relaybus.subscribe(
  handler text, event_types text[], max_attempts integer DEFAULT @RETRY_MAX_ATTEMPTS@,
  backoff_base interval DEFAULT '@RETRY_BACKOFF_BASE@', backoff_max interval DEFAULT '@RETRY_BACKOFF_MAX@',
  sql_function regprocedure DEFAULT NULL, sql_timeout interval DEFAULT NULL) RETURNS void
  AS 'MODULE_PATHNAME', 'relaybus_subscribe' LANGUAGE C VOLATILE
  SET search_path = pg_catalog, pg_temp;

-- unsubscribe: removes the handler's subscription; its deliveries and lanes stay (a
-- re-subscribe resumes them) until purge_expired finishes those published more than
-- relaybus.retention_dead ago (relaybus_internal.retire_unsubscribed). Returns nothing.
--
-- Writes subscriptions.
CREATE OR REPLACE FUNCTION relaybus.unsubscribe(handler text) RETURNS void
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF handler IS NULL THEN
    RAISE EXCEPTION 'handler must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  DELETE FROM relaybus.subscriptions s WHERE s.handler = unsubscribe.handler;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'handler "%" is not subscribed', handler USING ERRCODE = 'undefined_object';
  END IF;
END
$fn$;

-- publish: in the caller's transaction, inserts the event and one delivery per handler
-- (the subscribers of type, or handlers). Idempotent by event_id: a repeat adds deliveries
-- only for handlers the event never had. Returns the event id (a UUID when not given).
--
-- Writes events. Its deliveries are staged in the backend and inserted when the transaction
-- commits, at each (handler, lane)'s next position, under lane locks taken only then
-- (src/pg/commit_order.hpp): a transaction does not see its own deliveries, and publishers
-- wait for each other's commits, never for their work.
CREATE OR REPLACE FUNCTION relaybus.publish(
  type text, payload jsonb DEFAULT '{}', key text DEFAULT NULL, event_id text DEFAULT NULL,
  handlers text[] DEFAULT NULL, available_at timestamptz DEFAULT NULL,
  headers jsonb DEFAULT NULL) RETURNS text
  AS 'MODULE_PATHNAME', 'relaybus_publish_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- publish_batch: publish for each element of a JSON array of
-- {type, payload, key, id, handlers, available_at, headers}, in order. Returns the event
-- ids in input order.
--
-- Writes events (one statement when every id is new, else event by event as publish); the
-- deliveries are staged in input order and inserted at commit, as publish's.
CREATE OR REPLACE FUNCTION relaybus.publish_batch(events jsonb) RETURNS SETOF text
  AS 'MODULE_PATHNAME', 'relaybus_publish_batch_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- claim: leases lanes to worker and returns up to batch_size due deliveries of handlers
-- (default: every handler without sql_function), respecting per-key order. holder binds
-- the lanes to (worker, holder), so any connection passing the pair holds them; NULL binds
-- them to this backend. lease: more than 0, at most @LEASE_MAX@ (22023 otherwise). Every lane
-- the worker keeps is leased for at least lease from now and at most 1.5 x lease (a lease row
-- is renewed only once less than lease is left: core::lease_renewal).
--
-- Takes over lanes whose lease expired, and the worker's lanes of an incarnation that is
-- gone. Writes lane_progress (a row per lane whose progress changed), lanes (leases acquired,
-- handed back or renewed), exceptions (takeover charges, deferred and parked deliveries).
-- Locks: FOR NO KEY UPDATE on held lanes, FOR UPDATE SKIP LOCKED on free ones.
CREATE OR REPLACE FUNCTION relaybus.claim(
  worker text, batch_size integer DEFAULT 10, lease interval DEFAULT '30 seconds',
  handlers text[] DEFAULT NULL, holder text DEFAULT NULL)
  RETURNS TABLE(lease_token text, event_id text, handler text, type text, key text,
                payload jsonb, headers jsonb, attempts integer, published_at timestamptz)
  AS 'MODULE_PATHNAME', 'relaybus_claim_positions' LANGUAGE C VOLATILE ROWS 10
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- extend_lease: renews every lane worker holds under the caller's incarnation ((worker,
-- holder), or with holder NULL this live backend's lanes), for lease (more than 0, at most
-- @LEASE_MAX@). Returns how many.
--
-- Writes lanes.
CREATE OR REPLACE FUNCTION relaybus.extend_lease(worker text, lease interval DEFAULT '30 seconds',
                                      holder text DEFAULT NULL)
  RETURNS integer
  AS 'MODULE_PATHNAME', 'relaybus_extend_lease' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- complete: ends the attempt as done if its lane has not changed hands since the claim.
-- Returns false (nothing changed) when the lease was lost. Inside the handler's own
-- transaction this is effectively-once.
--
-- Locks the lane (FOR NO KEY UPDATE, until commit: complete last, then commit) and moves its
-- cursor or done set (core::complete_positions) in a new lane_progress row; a retry's
-- exception row is deleted. Writes lane_progress, exceptions (retries), completions (when
-- history is on).
CREATE OR REPLACE FUNCTION relaybus.complete(lease_token text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'relaybus_complete_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- complete_many: complete for a batch of lease tokens in one call. Returns how many were
-- completed.
--
-- Locks and writes as complete: one write per lane, whatever the number of tokens.
CREATE OR REPLACE FUNCTION relaybus.complete_many(lease_tokens text[]) RETURNS integer
  AS 'MODULE_PATHNAME', 'relaybus_complete_many_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- fail: charges one attempt; returns 'retry' (rescheduled after backoff, or at retry_at,
-- which must be finite), 'dead' (attempts exhausted) or 'lost' (lease lost, nothing changed).
--
-- A window pick becomes an exception row; a retry's row is rewritten. Writes exceptions,
-- lane_progress (the position leaves the in-flight list), under FOR NO KEY UPDATE of the
-- lane.
CREATE OR REPLACE FUNCTION relaybus.fail(lease_token text, error text DEFAULT NULL,
                              retry_at timestamptz DEFAULT NULL) RETURNS text
  AS 'MODULE_PATHNAME', 'relaybus_fail_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- bury: dead-letters the delivery now, charging the attempt. Returns false (nothing
-- changed) when the lease was lost.
--
-- Writes exceptions, lane_progress, as fail.
CREATE OR REPLACE FUNCTION relaybus.bury(lease_token text, error text DEFAULT NULL) RETURNS boolean
  AS 'MODULE_PATHNAME', 'relaybus_bury_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- release: gives the delivery back without charging an attempt; it can be claimed again at
-- once. Returns false (nothing changed) when the lease was lost.
--
-- Writes exceptions (the attempt's row, its claims counter moved), lane_progress, as fail.
CREATE OR REPLACE FUNCTION relaybus.release(lease_token text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'relaybus_release_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- relinquish: hands back every lane of (worker, holder) that runs nothing; with holder
-- NULL, every lane of worker bound to a backend. Returns how many.
--
-- Writes lanes.
CREATE OR REPLACE FUNCTION relaybus.relinquish(worker text, holder text DEFAULT NULL) RETURNS integer
  AS 'MODULE_PATHNAME', 'relaybus_relinquish_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- take_over_expired: takes over up to 1000 lanes whose lease expired, charging each
-- in-flight delivery one attempt and dead-lettering those out of attempts. Returns how many
-- lanes were taken over. The background worker calls it every relaybus.maintenance_interval.
--
-- Skips lanes locked by a completion in progress. A lane whose takeover raises is skipped
-- with a WARNING (each lane then in a subtransaction of its own), so one cannot stop the
-- others. Writes lanes, lane_progress, exceptions.
CREATE OR REPLACE FUNCTION relaybus.take_over_expired() RETURNS integer
  AS 'MODULE_PATHNAME', 'relaybus_take_over_expired_positions' LANGUAGE C VOLATILE
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_bitmapscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- purge_expired: applies retention, at most 10,000 rows of each kind a call (call it until
-- it returns 0: the rows deleted, positions finished, held rows passed): events past
-- relaybus.retention_completed whose deliveries are all finished, with them; dead letters,
-- and the deliveries of handlers no longer subscribed, past relaybus.retention_dead;
-- history past relaybus.retention_completed; lane progress rows superseded for a minute.
--
-- A handler no longer subscribed (relaybus_internal.retire_unsubscribed): its pending
-- exception rows that old are deleted, and in each of its lanes nobody leases the cursor
-- moves over the deliveries that old from the cursor up, stopping at a younger one.
--
-- Events are found from what can go, never by visiting old events: a call costs a few index
-- probes per lane plus the rows it deletes or passes, whatever waits above the cursors (a
-- paused handler's backlog) or in exception rows (a stuck key's parked deliveries).
-- - The walk: each lane with a cursor from its lowest delivery row up, along its primary
--   key, one row after the other (every lane's lowest row, then at most 10,000 more a
--   call, so that every lane is walked however many handlers there are), to the first row
--   above its cursor, of an event not yet past retention (and not itself), or to the
--   lane's last row,
--   which stays (the next commit numbers the lane's deliveries from it:
--   src/pg/commit_order.hpp) and goes in a later call once the lane has a later row. A
--   finished row (at or below the cursor, without an exception row) of an event past
--   retention or gone is deleted, whatever the event's other deliveries wait for (a row
--   past retention whose id names a younger event now is an earlier event's: it goes, the
--   event stays); its event is deleted with it when none of its delivery rows is left
--   unfinished or held by an exception row, so an event goes with the last of its
--   deliveries to finish. A row held by an exception row stays (its attempts and its
--   cancel go through it) and the walk passes it; relaybus.purge_horizons records how far
--   it went past such rows, so that a later walk jumps from the first of them to there.
--   Rows they leave, once their exception rows go, are deleted when the walk reaches them
--   from the lane's lowest row (nothing held left below them).
-- - Events published to no handler (handlers empty) are found by events_unrouted_idx,
--   those 0.2.1 finished before the update (relaybus.events_from_021) by age, once all of
--   them are past retention.
-- An event is locked FOR UPDATE SKIP LOCKED (a repeated publish that adds a handler holds
-- its event), then checked again with a snapshot taken after the locks, before it is
-- deleted (of a lane's last row, only an event that looks finished: that row is met again
-- by every call). A row whose event another transaction holds stays, and the walk records
-- no horizon past it. One call walks at a
-- time (it locks relaybus.purge_horizons in SHARE ROW EXCLUSIVE mode, NOWAIT: a call that
-- finds it taken leaves the lanes to the other), so a call waits for nothing.
--
-- Planned with sequential scans, hash and merge joins off (jit with them), as the delivery
-- path is: every statement is a walk or a lookup along an index, right at every size, and a
-- plan made while a table looked small must not read the whole table once it is deep.
-- Bitmap scans stay on: the history, and the events of an update from 0.2.1, are found by
-- age through BRIN indexes. Probes are scalar subqueries, which PostgreSQL never turns into
-- a hashed read of a whole table.
--
-- Writes events, deliveries, exceptions, completions, lane_progress, purge_horizons,
-- events_from_021; locks lanes as retire_unsubscribed does. Interim: 0.3.0's retention is to
-- rotate instead of deleting (docs/design.md).
CREATE OR REPLACE FUNCTION relaybus.purge_expired() RETURNS bigint
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $fn$
DECLARE
  -- In seconds, as the settings store them; their defaults when the library is not loaded.
  keep_completed interval := make_interval(secs => coalesce((SELECT s.setting::int FROM pg_settings s
                               WHERE s.name = 'relaybus.retention_completed'), 604800));
  keep_dead interval := make_interval(secs => coalesce((SELECT s.setting::int FROM pg_settings s
                          WHERE s.name = 'relaybus.retention_dead'), 1209600));
  cutoff timestamptz := now() - keep_completed;
  -- The rows the walk read, in the order it read them (each lane's in position order).
  w_handler text[];
  w_lane smallint[];
  w_horizon bigint[];   -- its lane's horizon when the walk began
  w_position bigint[];
  w_event text[];
  w_held boolean[];     -- an exception row holds it: kept, passed
  w_finished boolean[]; -- at or below the cursor, not held, its event past retention or gone
  w_gone boolean[];     -- finished, its event gone (or a later one with its id)
  w_last boolean[];     -- its lane's last row
  w_stop boolean[];     -- the walk of its lane ended here without passing it
  w_ready boolean[];    -- finished, its event to be locked
  w_locked boolean[];   -- ready, and its event is locked here
  ids text[];
  from_021 timestamptz;
  budget integer := 10000;
  walking boolean;
  n bigint;
  deleted bigint := 0;
BEGIN
  deleted := relaybus_internal.retire_unsubscribed(now() - keep_dead);
  -- Dead letters before the walk: a row they held is finished by the time it comes, and
  -- its event can go in this call.
  DELETE FROM relaybus.exceptions x WHERE (x.handler, x.lane, x.position) IN (
    SELECT y.handler, y.lane, y.position FROM relaybus.exceptions y
     WHERE y.status = 'dead' AND y.updated_at < now() - keep_dead
     ORDER BY y.updated_at LIMIT 10000 FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  deleted := deleted + n;

  -- One walk at a time, never waiting: the table lock is the owner's alone to take (an
  -- advisory lock could be held by any role, stopping the purge).
  BEGIN
    LOCK TABLE relaybus.purge_horizons IN SHARE ROW EXCLUSIVE MODE NOWAIT;
    walking := true;
  EXCEPTION WHEN lock_not_available THEN
    walking := false;
  END;
  IF walking THEN
    -- One statement, breadth first (a row of every lane, then the next of each): a lane
    -- with much to do does not keep the others waiting for a later call. Its limit leaves
    -- room for the first row of every lane (at most one per lane row), so that every lane
    -- is walked at every call, however many handlers share the lanes. A lane without a
    -- progress row has finished nothing. A row above the cursor is not probed further; a
    -- held row's event and successor are not needed. Young: the row and its event within
    -- retention. Orphan: its event is gone, or the event with its id is younger than the
    -- row (an earlier event with that id went, and the id was published again).
    WITH RECURSIVE walk AS (
      SELECT l.handler, l.lane, l.acked_upto, l.horizon, r.position, r.event_id, r.held,
             r.young, r.orphan, r.has_next
        FROM (SELECT s.handler, s.lane, s.acked_upto, coalesce(h.purged_upto, 0) AS horizon
                FROM relaybus.lane_state s
                LEFT JOIN relaybus.purge_horizons h ON h.handler = s.handler AND h.lane = s.lane
               WHERE s.acked_upto > 0) l
       CROSS JOIN LATERAL (
         SELECT d.position, d.event_id, x.held,
                coalesce(v.published_at >= cutoff AND d.created_at >= cutoff, false) AS young,
                v.published_at IS NULL OR (v.published_at >= cutoff AND d.created_at < cutoff)
                  AS orphan,
                CASE WHEN d.position <= l.acked_upto AND NOT x.held THEN
                  EXISTS (SELECT 1 FROM relaybus.deliveries t WHERE t.handler = l.handler
                             AND t.lane = l.lane AND t.position > d.position)
                  ELSE x.held END AS has_next
           FROM (SELECT d.position, d.event_id, d.created_at FROM relaybus.deliveries d
                  WHERE d.handler = l.handler AND d.lane = l.lane
                  ORDER BY d.position LIMIT 1) d
          CROSS JOIN LATERAL (
            SELECT d.position <= l.acked_upto
                   AND coalesce((SELECT true FROM relaybus.exceptions x WHERE x.handler = l.handler
                                    AND x.lane = l.lane AND x.position = d.position), false)
                   AS held) x
          LEFT JOIN LATERAL (
            SELECT e.published_at FROM relaybus.events e
             WHERE d.position <= l.acked_upto AND NOT x.held AND e.id = d.event_id) v ON true) r
      UNION ALL
      SELECT w.handler, w.lane, w.acked_upto, w.horizon, r.position, r.event_id, r.held,
             r.young, r.orphan, r.has_next
        FROM walk w
       CROSS JOIN LATERAL (
         SELECT d.position, d.event_id, x.held,
                coalesce(v.published_at >= cutoff AND d.created_at >= cutoff, false) AS young,
                v.published_at IS NULL OR (v.published_at >= cutoff AND d.created_at < cutoff)
                  AS orphan,
                CASE WHEN d.position <= w.acked_upto AND NOT x.held THEN
                  EXISTS (SELECT 1 FROM relaybus.deliveries t WHERE t.handler = w.handler
                             AND t.lane = w.lane AND t.position > d.position)
                  ELSE x.held END AS has_next
           -- The next row; from a held row below the horizon, the first row past it.
           FROM (SELECT d.position, d.event_id, d.created_at FROM relaybus.deliveries d
                  WHERE d.handler = w.handler AND d.lane = w.lane
                    AND d.position > CASE WHEN w.held AND w.position < w.horizon THEN w.horizon
                                          ELSE w.position END
                  ORDER BY d.position LIMIT 1) d
          CROSS JOIN LATERAL (
            SELECT d.position <= w.acked_upto
                   AND coalesce((SELECT true FROM relaybus.exceptions x WHERE x.handler = w.handler
                                    AND x.lane = w.lane AND x.position = d.position), false)
                   AS held) x
          LEFT JOIN LATERAL (
            SELECT e.published_at FROM relaybus.events e
             WHERE d.position <= w.acked_upto AND NOT x.held AND e.id = d.event_id) v ON true) r
       -- Not past a row above the cursor, a young one, or the lane's last (a held row is
       -- passed, young or not: nothing of it goes).
       WHERE w.has_next AND w.position <= w.acked_upto AND NOT w.young
    )
    SELECT array_agg(w.handler), array_agg(w.lane), array_agg(w.horizon), array_agg(w.position),
           array_agg(w.event_id), array_agg(w.held), array_agg(w.finished),
           array_agg(w.finished AND w.orphan), array_agg(NOT w.has_next),
           array_agg(w.position > w.acked_upto OR w.young OR NOT w.has_next)
      INTO w_handler, w_lane, w_horizon, w_position, w_event, w_held, w_finished, w_gone,
           w_last, w_stop
      FROM (SELECT k.*, NOT k.held AND k.position <= k.acked_upto AND NOT k.young AS finished
              FROM (SELECT * FROM walk
                     LIMIT 10000 + (SELECT count(*) FROM relaybus.lanes)) k) w;

    -- The finished rows whose events are to be locked: all but those whose event is gone,
    -- and of a lane's last row (met again by every call while its lane has nothing later)
    -- only one whose event looks finished: none of its delivery rows is above its lane's
    -- cursor and outside its done set (no progress row: cursor 0), or held by an exception
    -- row (which always has its delivery row: the same handler, lane and position). The
    -- others wait for a delivery that will be walked once it finishes, and checked then.
    SELECT array_agg(CASE WHEN NOT u.finished OR u.gone THEN false
                          WHEN NOT u.last THEN true
                          ELSE NOT coalesce((
             SELECT true FROM relaybus.deliveries d
              WHERE d.event_id = u.event_id
                AND (coalesce((SELECT true FROM relaybus.exceptions x WHERE x.handler = d.handler
                                  AND x.lane = d.lane AND x.position = d.position), false)
                     OR coalesce((SELECT d.position > p.acked_upto AND d.position <> ALL (p.done)
                                    FROM relaybus.lane_progress p
                                   WHERE p.handler = d.handler AND p.lane = d.lane
                                   ORDER BY p.seq DESC LIMIT 1), true))
              LIMIT 1), false) END ORDER BY u.n) INTO w_ready
      FROM unnest(w_event, w_finished, w_gone, w_last) WITH ORDINALITY
           AS u(event_id, finished, gone, last, n);
    -- Their events, locked, each row's flag in the walk's order (a row whose event another
    -- transaction holds stays; an event of two rows is locked once).
    SELECT array_agg(k.id IS NOT NULL ORDER BY u.n) INTO w_locked
      FROM unnest(w_event, w_ready) WITH ORDINALITY AS u(event_id, ready, n)
      LEFT JOIN LATERAL (SELECT e.id FROM relaybus.events e
                          WHERE u.ready AND e.id = u.event_id
                          FOR UPDATE SKIP LOCKED) k ON true;
    -- Of the events locked, those none of whose delivery rows is unfinished or held (as
    -- above), read with a snapshot taken after the locks: a repeated publish that added a
    -- handler and committed after the walk began, but before the event was locked, wrote a
    -- delivery the walk's snapshot did not see (the lock re-checks the event row, not its
    -- deliveries). The locks keep any later one out until this transaction ends.
    SELECT coalesce(array_agg(i.id), '{}') INTO ids
      FROM (SELECT DISTINCT u.event_id AS id FROM unnest(w_event, w_locked) AS u(event_id, locked)
             WHERE u.locked) i
     WHERE NOT coalesce((
       SELECT true FROM relaybus.deliveries d
        WHERE d.event_id = i.id
          AND (coalesce((SELECT true FROM relaybus.exceptions x WHERE x.handler = d.handler
                            AND x.lane = d.lane AND x.position = d.position), false)
               OR coalesce((SELECT d.position > p.acked_upto AND d.position <> ALL (p.done)
                              FROM relaybus.lane_progress p
                             WHERE p.handler = d.handler AND p.lane = d.lane
                             ORDER BY p.seq DESC LIMIT 1), true))
        LIMIT 1), false);
    DELETE FROM relaybus.events e WHERE e.id = ANY (ids);
    GET DIAGNOSTICS n = ROW_COUNT;
    deleted := deleted + n;
    budget := budget - n::integer;
    -- The finished rows but each lane's last. Counted when their event stays (or went
    -- before): a call that deleted only rows like these does not return 0.
    WITH gone AS (
      DELETE FROM relaybus.deliveries d
       USING unnest(w_handler, w_lane, w_position, w_finished, w_gone, w_last, w_ready, w_locked)
             AS u(handler, lane, position, finished, gone, last, ready, locked)
       WHERE d.handler = u.handler AND d.lane = u.lane AND d.position = u.position
         AND u.finished AND NOT u.last AND (NOT u.ready OR u.locked)
      RETURNING d.event_id, u.gone)
    SELECT count(*) INTO n FROM gone g
     WHERE g.gone OR coalesce((SELECT true FROM relaybus.events e WHERE e.id = g.event_id), false);
    deleted := deleted + n;
    -- The horizon of each lane whose walk met a held row: below the row it stopped at, and
    -- below any row it kept because another transaction held its event. The held rows it
    -- passed for good are counted, so that a call that only went past them does not return
    -- 0 while the lane has more to purge beyond.
    WITH walked AS (
      SELECT u.* FROM unnest(w_handler, w_lane, w_horizon, w_position, w_held, w_stop, w_ready,
                             w_locked)
                      AS u(handler, lane, horizon, position, held, stop, ready, locked)
    ), lanes AS (
      SELECT w.handler, w.lane, max(w.horizon) AS horizon,
             least(max(w.position) - CASE WHEN (array_agg(w.stop ORDER BY w.position DESC))[1]
                                          THEN 1 ELSE 0 END,
                   min(w.position) FILTER (WHERE w.ready AND NOT w.locked) - 1)
               AS upto
        FROM walked w GROUP BY w.handler, w.lane HAVING bool_or(w.held)
    ), moved AS (
      INSERT INTO relaybus.purge_horizons AS h (handler, lane, purged_upto)
      SELECT l.handler, l.lane, l.upto FROM lanes l WHERE l.upto > l.horizon
      ON CONFLICT ON CONSTRAINT purge_horizons_pkey DO UPDATE SET purged_upto = EXCLUDED.purged_upto
      RETURNING h.handler, h.lane
    )
    SELECT count(*) INTO n FROM walked w
      JOIN lanes l ON l.handler = w.handler AND l.lane = w.lane
      JOIN moved m ON m.handler = w.handler AND m.lane = w.lane
     WHERE w.held AND w.position > l.horizon AND w.position <= l.upto;
    deleted := deleted + n;
  END IF;

  -- Events published to no handler, oldest first.
  SELECT coalesce(array_agg(e.id), '{}') INTO ids FROM (
    SELECT e.id FROM relaybus.events e
     WHERE e.handlers = '{}' AND e.published_at < cutoff
     ORDER BY e.published_at LIMIT greatest(budget, 0) FOR UPDATE OF e SKIP LOCKED) e;
  -- A publish that gave one a handler rewrote its handlers (the lock re-checked the row);
  -- its deliveries are checked again all the same, with this statement's snapshot.
  DELETE FROM relaybus.events e WHERE e.id = ANY (ids)
     AND NOT coalesce((SELECT true FROM relaybus.deliveries d WHERE d.event_id = e.id LIMIT 1), false);
  GET DIAGNOSTICS n = ROW_COUNT;
  deleted := deleted + n;
  budget := budget - n::integer;

  -- Events whose deliveries 0.2.1 completed (and deleted) before the update: once every
  -- event published before it is past retention, those without a delivery row, in calls
  -- of their own; then the update's time is forgotten.
  SELECT max(f.published_before) INTO from_021 FROM relaybus.events_from_021 f;
  IF from_021 < cutoff AND budget > 0 THEN
    SELECT coalesce(array_agg(e.id), '{}') INTO ids FROM (
      SELECT e.id FROM relaybus.events e
       WHERE e.published_at < from_021
         AND NOT coalesce((SELECT true FROM relaybus.deliveries d WHERE d.event_id = e.id LIMIT 1), false)
       LIMIT budget FOR UPDATE OF e SKIP LOCKED) e;
    -- Again after the locks, as above (a repeated publish may have added a delivery).
    DELETE FROM relaybus.events e WHERE e.id = ANY (ids)
       AND NOT coalesce((SELECT true FROM relaybus.deliveries d WHERE d.event_id = e.id LIMIT 1), false);
    GET DIAGNOSTICS n = ROW_COUNT;
    deleted := deleted + n;
    IF cardinality(ids) = 0 AND NOT EXISTS (
         SELECT 1 FROM relaybus.events e
          WHERE e.published_at < from_021
            AND NOT coalesce((SELECT true FROM relaybus.deliveries d WHERE d.event_id = e.id LIMIT 1), false)) THEN
      DELETE FROM relaybus.events_from_021;
    END IF;
  END IF;

  DELETE FROM relaybus.completions c WHERE c.ctid IN (
    SELECT y.ctid FROM relaybus.completions y WHERE y.completed_at < now() - keep_completed
     LIMIT 10000 FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  deleted := deleted + n;
  -- Superseded lane progress: a lane's rows below its newest, written over a minute ago.
  -- Nothing on the delivery path reads them (it reads a lane's newest row); the minute
  -- leaves them to a statement or snapshot that started before the newer row.
  DELETE FROM relaybus.lane_progress p WHERE p.ctid IN (
    SELECT o.ctid FROM relaybus.lanes l
     CROSS JOIN LATERAL (SELECT max(n.seq) AS seq FROM relaybus.lane_progress n
                          WHERE n.handler = l.handler AND n.lane = l.lane) newest
     CROSS JOIN LATERAL (SELECT o.ctid FROM relaybus.lane_progress o
                          WHERE o.handler = l.handler AND o.lane = l.lane AND o.seq < newest.seq
                            AND o.written_at < now() - interval '1 minute') o
     LIMIT 10000);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN deleted + n;
END
$fn$;

--------------------------------------------------------------------------------
-- Admin functions in SQL: not on the delivery path.
--------------------------------------------------------------------------------

-- requeue: moves one dead delivery back to pending with a fresh attempt budget, due now.
-- Returns false when (event_id, handler) is not a dead delivery.
--
-- Writes exceptions (its claims counter moves: a token of its last attempt stays dead), and
-- notes the lane as changed (relaybus_internal.lane_changed).
CREATE OR REPLACE FUNCTION relaybus.requeue(event_id text, handler text) RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  n bigint;
BEGIN
  IF event_id IS NULL OR handler IS NULL THEN
    RAISE EXCEPTION 'event_id and handler must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  -- core::requeues (src/core/attempt_end.hpp): only a dead delivery moves.
  WITH moved AS (
    UPDATE relaybus.exceptions x
       SET status = 'pending', attempts = 0, claims = x.claims + 1, available_at = now(),
           updated_at = now()
     WHERE x.event_id = requeue.event_id AND x.handler = requeue.handler AND x.status = 'dead'
    RETURNING x.handler, x.lane)
  SELECT count(*) FILTER (WHERE relaybus_internal.lane_changed(m.handler, m.lane)) INTO n
    FROM moved m;
  RETURN n > 0;
END
$fn$;

-- requeue_dead: requeue for every dead delivery of handler (NULL: of every handler).
-- Returns how many.
--
-- Writes exceptions, and notes each lane as changed (relaybus_internal.lane_changed).
CREATE OR REPLACE FUNCTION relaybus.requeue_dead(handler text DEFAULT NULL) RETURNS bigint
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  n bigint;
BEGIN
  IF handler IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM relaybus.subscriptions s WHERE s.handler = requeue_dead.handler)
     AND NOT EXISTS (SELECT 1 FROM relaybus.lanes l WHERE l.handler = requeue_dead.handler) THEN
    RAISE EXCEPTION 'handler "%" is not subscribed and has no deliveries', handler
      USING ERRCODE = 'undefined_object';
  END IF;
  WITH moved AS (
    UPDATE relaybus.exceptions x
       SET status = 'pending', attempts = 0, claims = x.claims + 1, available_at = now(),
           updated_at = now()
     WHERE x.status = 'dead' AND (requeue_dead.handler IS NULL OR x.handler = requeue_dead.handler)
    RETURNING x.handler, x.lane),
  lanes AS (SELECT m.handler, m.lane, count(*) AS rows FROM moved m GROUP BY m.handler, m.lane)
  SELECT coalesce(sum(l.rows) FILTER (WHERE relaybus_internal.lane_changed(l.handler, l.lane)), 0)
    INTO n FROM lanes l;
  RETURN n;
END
$fn$;

-- pause: stops handing out handler's deliveries: claims, the in-database handler workers'
-- included, skip it until resume. Publishing goes on and its deliveries are kept; attempts
-- in flight end as usual. Returns false when it was paused already.
--
-- A claim already running when pause commits may still hand out its batch; every claim
-- that starts after does not. A re-subscribe keeps the pause; unsubscribe forgets it.
-- Writes subscriptions (relaybus_internal.set_paused).
CREATE OR REPLACE FUNCTION relaybus.pause(handler text) RETURNS boolean
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus_internal.set_paused($1, true)
$fn$;

-- resume: hands out a paused handler's deliveries again, and wakes the workers listening on
-- channel relaybus (the in-database handler workers look at their next poll). Returns false
-- when it was not paused.
--
-- Writes subscriptions (relaybus_internal.set_paused); NOTIFY relaybus when relaybus.notify
-- is on.
CREATE OR REPLACE FUNCTION relaybus.resume(handler text) RETURNS boolean
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT relaybus_internal.set_paused($1, false)
$fn$;

-- cancel: removes one delivery that is dead, or pending and not in flight, so that it is
-- never run (again); a later delivery of its ordering key no longer waits for it. With
-- relaybus.completion_history on, the history records it with outcome 'cancelled'. Returns
-- false when (event_id, handler) has no delivery left; 55006 (object_in_use) while it is in
-- flight.
--
-- Writes the delivery's lane first (an update of its lease row that changes nothing, HOT,
-- then reads its progress, and finishes a window position): lanes before exception rows, the
-- order of every other writer. The
-- update waits for a claim holding the lane and keeps later ones from picking the delivery
-- meanwhile; and because it is a new version of the lane, a claim under REPEATABLE READ
-- whose snapshot predates the cancel fails with 40001 instead of handing it out. A window
-- position is finished through core::finish_positions (relaybus_internal.finish_position);
-- an exception row is deleted. Writes lanes, lane_progress, exceptions, completions (history
-- on).
CREATE OR REPLACE FUNCTION relaybus.cancel(event_id text, handler text) RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  d_lane smallint;
  d_position bigint;
  running boolean;
  x_attempts integer;
  found_row boolean;
BEGIN
  IF event_id IS NULL OR handler IS NULL THEN
    RAISE EXCEPTION 'event_id and handler must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  -- A delivery's place never changes once committed, so it can be read before the lane is
  -- locked.
  -- The newest: a purged event's lane may keep its last, finished, delivery (purge_expired)
  -- beside the delivery of the id published again.
  SELECT d.lane, d.position INTO d_lane, d_position FROM relaybus.deliveries d
   WHERE d.event_id = cancel.event_id AND d.handler = cancel.handler
   ORDER BY d.created_at DESC, d.position DESC LIMIT 1;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  UPDATE relaybus.lanes l SET epoch = l.epoch
   WHERE l.handler = cancel.handler AND l.lane = d_lane;
  -- After the lock, by a statement of its own: the progress its last holder committed.
  SELECT d_position = ANY (l.in_flight) OR d_position = ANY (l.retrying) INTO running
    FROM relaybus.lane_state l WHERE l.handler = cancel.handler AND l.lane = d_lane;
  -- core::cancel_verdict (src/core/attempt_end.hpp): an attempt running is refused.
  IF coalesce(running, false) THEN
    RAISE EXCEPTION 'delivery of event "%" to handler "%" is in flight', event_id, handler
      USING ERRCODE = 'object_in_use',
            DETAIL = 'A worker is running its attempt; it ends with complete, fail, bury or release, or when its expired lease is taken over (take_over_expired).',
            HINT = 'Cancel it once the attempt has ended (relaybus.pause stops further attempts).';
  END IF;
  DELETE FROM relaybus.exceptions x
   WHERE x.handler = cancel.handler AND x.lane = d_lane AND x.position = d_position
  RETURNING x.attempts INTO x_attempts;
  found_row := FOUND;
  IF NOT found_row THEN
    found_row := relaybus_internal.finish_position(cancel.handler, d_lane, d_position);
    x_attempts := 0;
  END IF;
  IF found_row AND coalesce(current_setting('relaybus.completion_history', true), 'off')::boolean THEN
    INSERT INTO relaybus.completions (event_id, handler, attempts, outcome)
    VALUES (cancel.event_id, cancel.handler, x_attempts, 'cancelled');
  END IF;
  RETURN found_row;
END
$fn$;

-- statistics: per handler (subscribed, with deliveries left, or with completion history):
-- pending = waiting and not in any lane's in-flight list, processing = in flight, dead,
-- completed = completion history (0.1.0's completed deliveries included, cancels not; 0
-- when it is off), oldest_pending = creation time of the oldest waiting delivery, paused =
-- subscribed and paused.
--
-- Reads subscriptions, deliveries, lanes, completions; the deliveries' figures are
-- relaybus_internal.delivery_counts (see there what it scans).
CREATE OR REPLACE FUNCTION relaybus.statistics()
  RETURNS TABLE(handler text, pending bigint, processing bigint, dead bigint, completed bigint,
                oldest_pending timestamptz, paused boolean)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off
AS $fn$
  WITH counts AS (
    SELECT c.handler, c.pending, c.in_flight AS processing, c.dead, c.oldest_pending AS oldest
      FROM relaybus_internal.delivery_counts() c
  ), history AS (
    SELECT c.handler, count(*) FILTER (WHERE c.outcome = 'completed') AS completed
      FROM relaybus.completions c GROUP BY c.handler
  ), names AS (
    SELECT s.handler FROM relaybus.subscriptions s
    UNION SELECT c.handler FROM counts c
    UNION SELECT h.handler FROM history h
  )
  SELECT n.handler, coalesce(c.pending, 0), coalesce(c.processing, 0), coalesce(c.dead, 0),
         coalesce(h.completed, 0), c.oldest, coalesce(s.paused_at IS NOT NULL, false)
    FROM names n
    LEFT JOIN counts c ON c.handler = n.handler
    LEFT JOIN history h ON h.handler = n.handler
    LEFT JOIN relaybus.subscriptions s ON s.handler = n.handler
   ORDER BY n.handler
$fn$;

-- list_deliveries: admin listing, newest first, at most max_rows rows. status: NULL
-- (pending, processing and dead), 'pending', 'processing', 'dead' or 'completed' (the
-- completion history, whose status is completed or, for a cancel, cancelled); handler
-- filters by handler.
--
-- A scan: filter by status or handler on a large table. The body is
-- relaybus_internal.list_deliveries_impl (see there why).
CREATE OR REPLACE FUNCTION relaybus.list_deliveries(status text DEFAULT NULL, handler text DEFAULT NULL,
                                         max_rows integer DEFAULT 100)
  RETURNS TABLE(event_id text, handler text, type text, key text, status text,
                attempts integer, available_at timestamptz, last_error text,
                lease_owner text, created_at timestamptz, updated_at timestamptz)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off
AS $fn$
  SELECT * FROM relaybus_internal.list_deliveries_impl($1, $2, $3)
$fn$;
