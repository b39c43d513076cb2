--------------------------------------------------------------------------------
-- 0.1.0 tables: the row-lease baseline. A claim writes the delivery row (status,
-- attempts, lease owner, token and expiry), a renewal writes it again, a completion marks
-- it completed and keeps it; eight indexes, several over the columns those writes change.
-- 0.2.0 replaces this (relaybus--0.1.0--0.2.0.sql converts it in place).
--------------------------------------------------------------------------------

CREATE TABLE relaybus.subscriptions (
  handler      text PRIMARY KEY CHECK (handler <> ''),
  event_types  text[] NOT NULL CHECK (cardinality(event_types) > 0),
  max_attempts integer NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
  backoff_base interval NOT NULL DEFAULT '1 second',
  backoff_max  interval NOT NULL DEFAULT '1 hour',
  sql_function regprocedure,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE relaybus.events (
  id           text PRIMARY KEY CHECK (id <> ''),
  type         text NOT NULL CHECK (type <> ''),
  key          text,
  payload      jsonb NOT NULL,
  headers      jsonb,
  published_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_published_at_brin ON relaybus.events USING brin (published_at);

CREATE TABLE relaybus.deliveries (
  event_id         text NOT NULL,
  handler          text NOT NULL,
  key              text,
  sequence         bigint,
  status           text NOT NULL DEFAULT 'pending',
  attempts         integer NOT NULL DEFAULT 0,
  available_at     timestamptz NOT NULL DEFAULT now(),
  lease_owner      text,
  lease_token      text,
  lease_expires_at timestamptz,
  last_error       text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT deliveries_pkey PRIMARY KEY (event_id, handler),
  CONSTRAINT deliveries_status_check
    CHECK (status IN ('pending', 'processing', 'completed', 'dead')),
  CONSTRAINT deliveries_key_sequence_check CHECK ((key IS NULL) = (sequence IS NULL))
);
-- claim: due deliveries of a handler, keyed and not
CREATE INDEX deliveries_due_idx ON relaybus.deliveries (handler, available_at)
  WHERE status = 'pending';
CREATE INDEX deliveries_due_unkeyed_idx ON relaybus.deliveries (handler, available_at)
  WHERE status = 'pending' AND key IS NULL;
-- claim: per-key order (no earlier pending or processing delivery of the key)
CREATE INDEX deliveries_key_order_idx ON relaybus.deliveries (handler, key, sequence)
  WHERE key IS NOT NULL AND status IN ('pending', 'processing');
-- listings by status and by handler; dead-letter purge
CREATE INDEX deliveries_status_created_idx ON relaybus.deliveries (status, created_at);
CREATE INDEX deliveries_handler_created_idx ON relaybus.deliveries (handler, created_at);
-- take_over_expired: expired leases
CREATE INDEX deliveries_lease_idx ON relaybus.deliveries (lease_expires_at)
  WHERE status = 'processing';
-- purge_expired: completed deliveries by age
CREATE INDEX deliveries_completed_idx ON relaybus.deliveries (updated_at)
  WHERE status = 'completed';

-- Per-key counters, as in 0.2.0: sequence order is commit order.
CREATE TABLE relaybus.key_counters (
  key           text PRIMARY KEY,
  last_sequence bigint NOT NULL
) WITH (fillfactor = 70);

-- Extension tables hold user data: pg_dump must dump their rows, not only CREATE EXTENSION.
SELECT pg_catalog.pg_extension_config_dump('relaybus.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.events', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.deliveries', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.key_counters', '');
