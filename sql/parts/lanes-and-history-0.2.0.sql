-- Lane leases: @LANE_COUNT@ per handler, made by subscribe; a worker holds a lane to claim the
-- deliveries in it. epoch moves whenever the lane changes hands; lease_owner and
-- lease_expires_at are the worker and its lease; the incarnation holding it is holder (a
-- claim's explicit holder) or, without one, holder_pid/holder_started (the backend that
-- acquired it); in_flight lists the event ids of the deliveries claimed and not yet ended.
--
-- No secondary index, so an update can always be heap-only (HOT) when the new version fits
-- on its page. A lane row is ~100 bytes when created, but every claim that picks from a lane
-- writes a new version carrying its in-flight event ids (at most @LANE_MAX_IN_FLIGHT@: ~1.3 kB of
-- uuids). relaybus_internal.create_lanes spreads lanes at most three to a page: at
-- fillfactor 10 alone (eight lanes to a page), four dispatcher processes draining a deep
-- queue left 5-7% of lane updates non-HOT, the versions of busy neighbours filling pages
-- faster than pruning (which needs the page unpinned) emptied them; one or three lanes to a
-- page left none. 0.7 to 2 MB per handler.
CREATE TABLE relaybus.lanes (
  handler          text NOT NULL,
  lane             smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  epoch            bigint NOT NULL DEFAULT 0,
  lease_owner      text,
  lease_expires_at timestamptz,
  holder_pid       integer,
  holder_started   timestamptz,
  holder           text,
  in_flight        text[] NOT NULL DEFAULT '{}',
  CONSTRAINT lanes_pkey PRIMARY KEY (handler, lane)
) WITH (fillfactor = 10);

-- Optional append-only completion history: one row per completion while
-- relaybus.completion_history is on (and 0.1.0's completed deliveries, after an upgrade),
-- read by statistics() and list_deliveries('completed'), deleted by purge_expired. outcome
-- says how the delivery ended: 'completed' by its handler, or 'cancelled' by an admin
-- (cancel).
CREATE TABLE relaybus.completions (
  event_id     text NOT NULL,
  handler      text NOT NULL,
  attempts     integer NOT NULL,
  completed_at timestamptz NOT NULL DEFAULT now(),
  outcome      text NOT NULL DEFAULT 'completed' CHECK (outcome IN ('completed', 'cancelled'))
);
-- purge_expired: completion history by age.
CREATE INDEX completions_completed_at_brin ON relaybus.completions USING brin (completed_at);

SELECT pg_catalog.pg_extension_config_dump('relaybus.lanes', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.completions', '');
