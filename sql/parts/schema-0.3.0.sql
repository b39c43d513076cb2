--------------------------------------------------------------------------------
-- Tables (0.3.0) that 0.2 has too: subscriptions, events, the completion history. The
-- tables of positions and cursors are in positions-0.3.0.sql.
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
-- purge_expired: events published while nothing was subscribed to their type. They have no
-- delivery for its walk of the lanes to find; partial, so that a publish that goes to a
-- handler writes nothing here.
CREATE INDEX events_unrouted_idx ON relaybus.events (published_at) WHERE handlers = '{}';

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
SELECT pg_catalog.pg_extension_config_dump('relaybus.completions', '');
