--------------------------------------------------------------------------------
-- Tables (0.3.0): positions and cursors. A delivery is written once, at its publishing
-- transaction's commit, at the next position of its (handler, lane); its lane's row says how
-- far the lane got (a cursor and the positions finished above it); a delivery that does not
-- finish on the happy path (a failure, a delivery not yet due, a key held back by an earlier
-- failure, a release, a takeover's charge) moves to an exception row. The happy path
-- updates one lane row per lane per batch and deletes nothing (src/core/positions.hpp).
--------------------------------------------------------------------------------

-- Handlers and what they receive, one row per subscribe (the retry policy included).
-- sql_function marks an in-database handler, run by the background workers rather than by
-- external workers; sql_timeout bounds one call of it (NULL: relaybus.sql_handler_timeout).
-- paused_at: set by pause (NULL: running); a paused handler's deliveries are published and
-- kept, but no claim hands them out.
CREATE TABLE relaybus.subscriptions (
  handler      text PRIMARY KEY CHECK (handler <> ''),
  event_types  text[] NOT NULL CHECK (cardinality(event_types) > 0),
  max_attempts integer NOT NULL DEFAULT @RETRY_MAX_ATTEMPTS@ CHECK (max_attempts >= 1),
  backoff_base interval NOT NULL DEFAULT '@RETRY_BACKOFF_BASE@',
  backoff_max  interval NOT NULL DEFAULT '@RETRY_BACKOFF_MAX@',
  sql_function regprocedure,
  sql_timeout  interval CHECK (sql_timeout > '0'),
  paused_at    timestamptz,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Published events, one per event id. handlers lists every handler the event ever had a
-- delivery for, so a repeated publish (a broker redelivery) never runs a completed handler
-- again.
--
-- publish inserts (or, on a repeat, updates handlers); purge_expired deletes.
CREATE TABLE relaybus.events (
  id           text PRIMARY KEY CHECK (id <> ''),
  type         text NOT NULL CHECK (type <> ''),
  key          text,
  payload      jsonb NOT NULL,
  headers      jsonb,
  handlers     text[] NOT NULL,
  published_at timestamptz NOT NULL DEFAULT now()
);
-- purge_expired: events by age.
--
-- A BRIN index costs next to nothing on a table that is appended to in publish order.
CREATE INDEX events_published_at_brin ON relaybus.events USING brin (published_at);

-- One row per (event, handler), written once when the publishing transaction commits (the
-- library stages it until then: src/pg/commit_order.hpp) at the next position of its
-- (handler, lane), so that a lane's positions follow commit order and have no holes.
-- Never updated: what happens to it is its lane row's cursor, done set and in-flight list,
-- and, off the happy path, its exception row. created_at is the publish's now(); a
-- delivery is due at available_at.
CREATE TABLE relaybus.deliveries (
  handler      text NOT NULL,
  lane         smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  position     bigint NOT NULL CHECK (position > 0),
  event_id     text NOT NULL,
  key          text,
  available_at timestamptz NOT NULL,
  created_at   timestamptz NOT NULL,
  CONSTRAINT deliveries_pkey PRIMARY KEY (handler, lane, position)
);
-- cancel, requeue, list_deliveries and the idempotent publish: a delivery by its event.
CREATE INDEX deliveries_event_idx ON relaybus.deliveries (event_id, handler);

-- Lane leases and progress: @LANE_COUNT@ per handler, made by subscribe. A worker holds a
-- lane to claim its deliveries. epoch moves whenever the lane changes hands; lease_owner and
-- lease_expires_at are the worker and its lease; the incarnation holding it is holder (a
-- claim's explicit holder) or, without one, holder_pid/holder_started (the backend that
-- acquired it). Progress (core::LaneProgress): every position <= acked_upto is finished,
-- done lists the finished ones above it (at most @POSITION_WINDOW@), in_flight the window
-- positions its holder runs, retrying the positions of exception rows its holder runs.
--
-- No secondary index, so an update can always be heap-only (HOT) when the new version fits
-- on its page; relaybus_internal.create_lanes spreads lanes at most three to a page.
CREATE TABLE relaybus.lanes (
  handler          text NOT NULL,
  lane             smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  epoch            bigint NOT NULL DEFAULT 0,
  lease_owner      text,
  lease_expires_at timestamptz,
  holder_pid       integer,
  holder_started   timestamptz,
  holder           text,
  acked_upto       bigint NOT NULL DEFAULT 0,
  done             bigint[] NOT NULL DEFAULT '{}',
  in_flight        bigint[] NOT NULL DEFAULT '{}',
  retrying         bigint[] NOT NULL DEFAULT '{}',
  CONSTRAINT lanes_pkey PRIMARY KEY (handler, lane)
) WITH (fillfactor = 10);

-- A delivery off the happy path, one row per (handler, lane, position) that has one: a
-- failed attempt waiting for its retry, a delivery not yet due or whose key waits behind an
-- earlier exception row (status pending), or a dead letter (status dead). Its lane's cursor
-- has passed it. attempts counts the attempts charged; claims counts the attempts that
-- ended here (its lease tokens carry it, so a token of an ended attempt changes nothing).
-- Written by the failure path, takeovers, claims (deferring and parking), requeue; deleted
-- when its attempt completes, by cancel, and by purge_expired.
CREATE TABLE relaybus.exceptions (
  handler      text NOT NULL,
  lane         smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  position     bigint NOT NULL,
  event_id     text NOT NULL,
  key          text,
  status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dead')),
  attempts     integer NOT NULL DEFAULT 0,
  claims       integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL,
  last_error   text,
  created_at   timestamptz NOT NULL,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT exceptions_pkey PRIMARY KEY (handler, lane, position)
);
-- claim: a lane's pending exception rows (keys held back, due retries) are read by the
-- primary key; free lanes with due retries by this one.
CREATE INDEX exceptions_due_idx ON relaybus.exceptions (handler, available_at, lane)
  WHERE status = 'pending';
-- purge_expired and requeue_dead: dead letters by age.
CREATE INDEX exceptions_dead_idx ON relaybus.exceptions (updated_at, handler)
  WHERE status = 'dead';

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

-- Extension tables hold user data: pg_dump must dump their rows, not only CREATE EXTENSION.
SELECT pg_catalog.pg_extension_config_dump('relaybus.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.events', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.deliveries', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.lanes', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.exceptions', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.completions', '');
