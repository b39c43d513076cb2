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
-- it returns 0, the rows deleted and positions finished): events past
-- relaybus.retention_completed whose deliveries are all finished, with them; dead letters,
-- and the deliveries of handlers no longer subscribed, past relaybus.retention_dead;
-- history past relaybus.retention_completed; lane progress rows superseded for a minute.
--
-- A handler no longer subscribed (relaybus_internal.retire_unsubscribed): its pending
-- exception rows that old are deleted, and in each of its lanes nobody leases the cursor
-- moves over the deliveries that old from the cursor up, stopping at a younger one.
--
-- Never a lane's last delivery: the next commit numbers the lane's deliveries from it
-- (src/pg/commit_order.hpp). That row stays, finished, after its event is gone, and goes in
-- a later call once the lane has a later delivery (the lowest delivery of each lane is
-- looked at: one probe per lane). Events are locked SKIP LOCKED first (a republish adding
-- a handler holds its event), so the call waits for nothing. Writes events, deliveries,
-- exceptions, completions, lane_progress; locks lanes as retire_unsubscribed does. Interim:
-- 0.3.0's retention is to rotate instead of deleting (docs/design.md).
CREATE OR REPLACE FUNCTION relaybus.purge_expired() RETURNS bigint
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  -- In seconds, as the settings store them; their defaults when the library is not loaded.
  keep_completed interval := make_interval(secs => coalesce((SELECT s.setting::int FROM pg_settings s
                               WHERE s.name = 'relaybus.retention_completed'), 604800));
  keep_dead interval := make_interval(secs => coalesce((SELECT s.setting::int FROM pg_settings s
                          WHERE s.name = 'relaybus.retention_dead'), 1209600));
  ids text[];
  n bigint;
  deleted bigint := 0;
BEGIN
  deleted := relaybus_internal.retire_unsubscribed(now() - keep_dead);
  SELECT coalesce(array_agg(e.id), '{}') INTO ids FROM (
    SELECT e.id FROM relaybus.events e
     WHERE e.published_at < now() - keep_completed
       AND NOT EXISTS (SELECT 1 FROM relaybus.exceptions x WHERE x.event_id = e.id)
       AND NOT EXISTS (
         SELECT 1 FROM relaybus.deliveries d
           JOIN relaybus.lane_state l ON l.handler = d.handler AND l.lane = d.lane
          WHERE d.event_id = e.id AND d.position > l.acked_upto AND d.position <> ALL (l.done))
     LIMIT 10000 FOR UPDATE OF e SKIP LOCKED) e;
  -- Again, with a snapshot taken after the locks: a repeated publish that added a handler
  -- and committed after the statement above began, but before it locked the event, wrote
  -- a delivery that statement's snapshot did not see (the lock re-checks the event row, not
  -- its deliveries). The locks keep any later one out until this transaction ends.
  SELECT coalesce(array_agg(i.id), '{}') INTO ids FROM unnest(ids) AS i(id)
   WHERE NOT EXISTS (SELECT 1 FROM relaybus.exceptions x WHERE x.event_id = i.id)
     AND NOT EXISTS (
       SELECT 1 FROM relaybus.deliveries d
         JOIN relaybus.lane_state l ON l.handler = d.handler AND l.lane = d.lane
        WHERE d.event_id = i.id AND d.position > l.acked_upto AND d.position <> ALL (l.done));
  DELETE FROM relaybus.deliveries d
   WHERE d.event_id = ANY (ids)
     AND EXISTS (SELECT 1 FROM relaybus.deliveries t WHERE t.handler = d.handler
                    AND t.lane = d.lane AND t.position > d.position);
  DELETE FROM relaybus.events e WHERE e.id = ANY (ids);
  GET DIAGNOSTICS n = ROW_COUNT;
  deleted := deleted + n;
  -- A lane's last delivery kept above once its event went: its lowest delivery, finished,
  -- of an event that is gone, with a later delivery behind it.
  DELETE FROM relaybus.deliveries d WHERE (d.handler, d.lane, d.position) IN (
    SELECT f.handler, f.lane, f.position FROM relaybus.lane_state l
     CROSS JOIN LATERAL (SELECT d.handler, d.lane, d.position, d.event_id FROM relaybus.deliveries d
                          WHERE d.handler = l.handler AND d.lane = l.lane
                          ORDER BY d.position LIMIT 1) f
     WHERE f.position <= l.acked_upto
       AND NOT EXISTS (SELECT 1 FROM relaybus.events e WHERE e.id = f.event_id)
       AND EXISTS (SELECT 1 FROM relaybus.deliveries t WHERE t.handler = f.handler
                      AND t.lane = f.lane AND t.position > f.position));
  DELETE FROM relaybus.exceptions x WHERE (x.handler, x.lane, x.position) IN (
    SELECT y.handler, y.lane, y.position FROM relaybus.exceptions y
     WHERE y.status = 'dead' AND y.updated_at < now() - keep_dead
     ORDER BY y.updated_at LIMIT 10000 FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  deleted := deleted + n;
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
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
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
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT * FROM relaybus_internal.list_deliveries_impl($1, $2, $3)
$fn$;
