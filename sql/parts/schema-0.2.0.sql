--------------------------------------------------------------------------------
-- Tables
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

-- Published events, one per event id, until purge_expired deletes them. handlers lists
-- every handler the event ever had a delivery for, so a repeated publish (a broker
-- redelivery) never runs a completed handler again.
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

-- One row per (event, handler) from publish until the handler's completion commits:
-- pending (waiting or in flight) or dead. lane and sequence place it in its handler's lane
-- and key order; attempts counts the attempts charged (failures, takeovers); claims is the
-- counter its lease tokens carry.
--
-- A claim never writes here; completion deletes; only failures, takeovers and requeues
-- update. No index covers a column the happy path writes. No foreign key to events: it
-- would take a row lock on the event for every delivery inserted, and only relaybus's own
-- functions write both tables.
CREATE TABLE relaybus.deliveries (
  event_id     text NOT NULL,
  handler      text NOT NULL,
  lane         smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  key          text,
  sequence     bigint,
  status       text NOT NULL DEFAULT 'pending',
  attempts     integer NOT NULL DEFAULT 0,
  claims       integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT deliveries_pkey PRIMARY KEY (event_id, handler),
  CONSTRAINT deliveries_status_check CHECK (status IN ('pending', 'dead')),
  CONSTRAINT deliveries_key_sequence_check CHECK ((key IS NULL) = (sequence IS NULL))
) WITH (autovacuum_vacuum_scale_factor = 0.02);

-- Per-key counters: the last sequence number publish gave a delivery of each ordering key.
--
-- A keyed publish increments its key's row and holds that row lock until commit, so a later
-- publisher of the same key waits, and sequence order is commit order.
CREATE TABLE relaybus.key_counters (
  key           text PRIMARY KEY,
  last_sequence bigint NOT NULL
) WITH (fillfactor = 70);

-- Extension tables hold user data: pg_dump must dump their rows, not only CREATE EXTENSION.
SELECT pg_catalog.pg_extension_config_dump('relaybus.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.events', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.deliveries', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.key_counters', '');
