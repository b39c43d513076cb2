-- Experiment: relaybus.deliveries and relaybus.lane_progress as LIST-partitioned tables by
-- a generation column (3 and 2 partitions), every row in generation 0: what the other
-- generations' probes cost the delivery path.
BEGIN;
CREATE TEMP TABLE v AS SELECT pg_get_viewdef('relaybus.lane_state'::regclass) AS d;
ALTER EXTENSION relaybus DROP VIEW relaybus.lane_state;
DROP VIEW relaybus.lane_state;
ALTER EXTENSION relaybus DROP TABLE relaybus.deliveries;
ALTER EXTENSION relaybus DROP TABLE relaybus.lane_progress;
DROP TABLE relaybus.deliveries;
DROP TABLE relaybus.lane_progress;
CREATE TABLE relaybus.deliveries (
  handler      text NOT NULL,
  lane         smallint NOT NULL,
  position     bigint NOT NULL,
  event_id     text NOT NULL,
  key          text,
  available_at timestamptz NOT NULL,
  created_at   timestamptz NOT NULL,
  gen          smallint NOT NULL DEFAULT 0,
  PRIMARY KEY (handler, lane, position, gen)
) PARTITION BY LIST (gen);
CREATE TABLE relaybus.deliveries_g0 PARTITION OF relaybus.deliveries FOR VALUES IN (0);
CREATE TABLE relaybus.deliveries_g1 PARTITION OF relaybus.deliveries FOR VALUES IN (1);
CREATE TABLE relaybus.deliveries_g2 PARTITION OF relaybus.deliveries FOR VALUES IN (2);
CREATE INDEX ON relaybus.deliveries (event_id, handler);
CREATE TABLE relaybus.lane_progress (
  handler    text NOT NULL,
  lane       smallint NOT NULL,
  seq        bigint NOT NULL,
  acked_upto bigint NOT NULL,
  done       bigint[] NOT NULL,
  in_flight  bigint[] NOT NULL,
  retrying   bigint[] NOT NULL,
  written_at timestamptz NOT NULL DEFAULT now(),
  gen        smallint NOT NULL DEFAULT 0,
  PRIMARY KEY (handler, lane, seq, gen)
) PARTITION BY LIST (gen);
CREATE TABLE relaybus.lane_progress_g0 PARTITION OF relaybus.lane_progress FOR VALUES IN (0);
CREATE TABLE relaybus.lane_progress_g1 PARTITION OF relaybus.lane_progress FOR VALUES IN (1);
DO $$ BEGIN EXECUTE 'CREATE VIEW relaybus.lane_state AS ' || (SELECT d FROM v); END $$;
COMMIT;
