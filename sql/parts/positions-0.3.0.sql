--------------------------------------------------------------------------------
-- Tables (0.3.0): positions and cursors. A delivery is written once, at its publishing
-- transaction's commit, at the next position of its (handler, lane); its lane's row says how
-- far the lane got (a cursor and the positions finished above it); a delivery that does not
-- finish on the happy path (a failure, a delivery not yet due, a key held back by an earlier
-- failure, a release, a takeover's charge) moves to an exception row. The happy path
-- updates one lane row per lane per batch and deletes nothing (src/core/positions.hpp).
--------------------------------------------------------------------------------

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
-- lane to claim its deliveries; epoch moves whenever the lane changes hands. Progress
-- (core::LaneProgress): every position <= acked_upto is finished, done lists the finished
-- ones above it (at most @POSITION_WINDOW@), in_flight the window positions its holder runs,
-- retrying the positions of exception rows its holder runs.
--
-- lease_owner and lease_expires_at are the worker and its lease; the incarnation holding it
-- is holder (a claim's explicit holder) or, without one, holder_pid/holder_started (the
-- backend that acquired it). The first paragraph above is the table's COMMENT, which
-- test/pgtap-0.3.0/126_catalog_comments.sql keeps within 500 characters.
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
-- ended here.
--
-- Its lease tokens carry claims, so a token of an ended attempt changes nothing. Written by
-- the failure path, takeovers, claims (deferring and parking), requeue; deleted when its
-- attempt completes, by cancel, and by purge_expired.
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

-- Extension tables hold user data: pg_dump must dump their rows, not only CREATE EXTENSION.
SELECT pg_catalog.pg_extension_config_dump('relaybus.deliveries', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.lanes', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.exceptions', '');
