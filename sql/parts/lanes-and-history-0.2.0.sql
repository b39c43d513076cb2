-- Lane leases: 256 per handler. No secondary index, so an update can always be heap-only
-- (HOT) when the new version fits on its page. A lane row is ~100 bytes when created but
-- carries its in-flight event ids (40 uuids are ~1.5 kB), so pages are filled to 10% only:
-- measured on 10,000 deliveries, fillfactor 50 left 2.8% of lane updates non-HOT, 10 left
-- 0.3%, for 264 kB per handler. epoch moves whenever the lane changes hands;
-- holder_pid/holder_started name the backend (the incarnation) that acquired it.
CREATE TABLE relaybus.lanes (
  handler          text NOT NULL,
  lane             smallint NOT NULL CHECK (lane >= 0 AND lane < 256),
  epoch            bigint NOT NULL DEFAULT 0,
  lease_owner      text,
  lease_expires_at timestamptz,
  holder_pid       integer,
  holder_started   timestamptz,
  in_flight        text[] NOT NULL DEFAULT '{}',
  CONSTRAINT lanes_pkey PRIMARY KEY (handler, lane)
) WITH (fillfactor = 10);

-- Optional append-only completion history (relaybus.completion_history = on).
CREATE TABLE relaybus.completions (
  event_id     text NOT NULL,
  handler      text NOT NULL,
  attempts     integer NOT NULL,
  completed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX completions_completed_at_brin ON relaybus.completions USING brin (completed_at);

SELECT pg_catalog.pg_extension_config_dump('relaybus.lanes', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.completions', '');
