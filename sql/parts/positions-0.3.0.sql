--------------------------------------------------------------------------------
-- Tables (0.3.0): positions and cursors. A delivery is written once, at its publishing
-- transaction's commit, at the next position of its (handler, lane); its lane's newest progress row says
-- how far the lane got (a cursor and the positions finished above it); a delivery that does not
-- finish on the happy path (a failure, a delivery not yet due, a key held back by an earlier
-- failure, a release, a takeover's charge) moves to an exception row. The happy path
-- inserts a progress row per lane per batch, and updates and deletes nothing
-- (src/core/positions.hpp).
--------------------------------------------------------------------------------

-- One row per (event, handler), written once when the publishing transaction commits (the
-- library stages it until then: src/pg/commit_order.hpp) at the next position of its
-- (handler, lane), so that a lane's positions follow commit order and have no holes.
-- Never updated: what happens to it is its lane's cursor, done set and in-flight list,
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

-- Lane leases: @LANE_COUNT@ per handler, made by subscribe. A worker holds a lane to claim its
-- deliveries; epoch moves whenever the lane changes hands. A lane's progress is not here but
-- in relaybus.lane_progress, so this row is rewritten only when the lease changes: acquired,
-- handed back, taken over, or renewed (core::lease_renewal).
--
-- lease_owner and lease_expires_at are the worker and its lease; the incarnation holding it
-- is holder (a claim's explicit holder) or, without one, holder_pid/holder_started (the
-- backend that acquired it). The first paragraph above is the table's COMMENT, which
-- test/pgtap-0.3.0/126_catalog_comments.sql keeps within 500 characters.
--
-- Claims and completions lock the row (FOR NO KEY UPDATE) without writing it: a row lock
-- makes no new version. No secondary index, so a lease write can be heap-only (HOT).
CREATE TABLE relaybus.lanes (
  handler          text NOT NULL,
  lane             smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  epoch            bigint NOT NULL DEFAULT 0,
  lease_owner      text,
  lease_expires_at timestamptz,
  holder_pid       integer,
  holder_started   timestamptz,
  holder           text,
  CONSTRAINT lanes_pkey PRIMARY KEY (handler, lane)
) WITH (fillfactor = 50);

-- Lane progress (core::LaneProgress), one row per change, never updated: every position <=
-- acked_upto is finished, done lists the finished ones above it (at most @POSITION_WINDOW@),
-- in_flight the window positions the lane's holder runs, retrying the positions of
-- exception rows it runs. A lane's progress is its row of highest seq; no row: nothing yet.
--
-- Why rows and not columns of relaybus.lanes: every claim and completion changes a lane's
-- progress, and an update leaves a version that a held snapshot (a long transaction, an
-- idle-in-transaction session) keeps from vacuum, so every later read of the lane walked a
-- longer chain of versions. A reader here descends the primary key to the lane's newest row
-- and stops at the first visible one, however many older rows exist. Written under the
-- lane's row lock (seq = the newest read after the lock + 1); superseded rows are deleted by
-- purge_expired.
CREATE TABLE relaybus.lane_progress (
  handler    text NOT NULL,
  lane       smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  seq        bigint NOT NULL CHECK (seq > 0),
  acked_upto bigint NOT NULL,
  done       bigint[] NOT NULL,
  in_flight  bigint[] NOT NULL,
  retrying   bigint[] NOT NULL,
  written_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT lane_progress_pkey PRIMARY KEY (handler, lane, seq)
);

-- lane_state: each lane with its lease and its progress (the newest relaybus.lane_progress
-- row, or none yet: cursor 0, nothing done or in flight), as one row. What admin functions
-- and people read; the delivery path reads the two tables itself.
CREATE VIEW relaybus.lane_state AS
  SELECT l.handler, l.lane, l.epoch, l.lease_owner, l.lease_expires_at, l.holder_pid,
         l.holder_started, l.holder, coalesce(p.acked_upto, 0) AS acked_upto,
         coalesce(p.done, '{}') AS done, coalesce(p.in_flight, '{}') AS in_flight,
         coalesce(p.retrying, '{}') AS retrying, coalesce(p.seq, 0) AS progress_seq
    FROM relaybus.lanes l
    LEFT JOIN LATERAL (SELECT p.seq, p.acked_upto, p.done, p.in_flight, p.retrying
                         FROM relaybus.lane_progress p
                        WHERE p.handler = l.handler AND p.lane = l.lane
                        ORDER BY p.seq DESC LIMIT 1) p ON true;

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
-- claim: the lowest pending row of each key of a lane, found one key at a time, so that a
-- key parked behind a failing row costs a claim one step however many of its deliveries
-- wait, and the lanes with pending rows, one lane at a time (src/pg/exception_heads.hpp).
CREATE INDEX exceptions_heads_idx ON relaybus.exceptions (handler, lane, key, position)
  WHERE status = 'pending';
-- claim: a lane's unkeyed pending rows, earliest due first (src/pg/exception_heads.hpp).
CREATE INDEX exceptions_unkeyed_idx ON relaybus.exceptions (handler, lane, available_at)
  WHERE status = 'pending' AND key IS NULL;
-- purge_expired and requeue_dead: dead letters by age.
CREATE INDEX exceptions_dead_idx ON relaybus.exceptions (updated_at, handler)
  WHERE status = 'dead';

-- purge_expired's place in each lane (at most one row per lane): every delivery row of the
-- lane at or below purged_upto is gone, or was held by an exception row when purge_expired
-- went past it, so that its next call goes on from there instead of stepping over those
-- rows again. Written and read by purge_expired alone.
--
-- Why: an exception row keeps its delivery row (a retry completes, a dead letter is
-- requeued or cancelled through it), so a lane's finished positions may begin with rows
-- that stay for a long time: a key parked behind a failing delivery, deliveries deferred to
-- a later due time, dead letters. purge_expired passes them once and records where it
-- stands; the rows they leave when their exception rows go are found from the lane's lowest
-- row, once nothing held lies below them. A lane without a row here is walked from its
-- lowest row. A row too high (the deliveries emptied by hand and this table not) delays the
-- purge of rows between an exception row below it and it, and never makes purge_expired
-- delete anything else. Not dumped: a restore starts without it.
CREATE TABLE relaybus.purge_horizons (
  handler     text NOT NULL,
  lane        smallint NOT NULL CHECK (lane >= 0 AND lane < @LANE_COUNT@),
  purged_upto bigint NOT NULL,
  CONSTRAINT purge_horizons_pkey PRIMARY KEY (handler, lane)
);

-- Set by the update from 0.2.1 to its time: 0.2.1 deleted a delivery when it completed, so
-- an event published before published_before without any delivery row may be one whose
-- deliveries all completed there. purge_expired deletes those once all of them are past
-- relaybus.retention_completed, then this row. Empty on a fresh install.
--
-- Events published since have a delivery row for each handler they went to (finished ones
-- included, until purge_expired), or none at all and an empty handlers list
-- (events_unrouted_idx): that is how purge_expired finds them without visiting every old
-- event.
CREATE TABLE relaybus.events_from_021 (
  published_before timestamptz NOT NULL
);

-- Extension tables hold user data: pg_dump must dump their rows, not only CREATE EXTENSION.
SELECT pg_catalog.pg_extension_config_dump('relaybus.events_from_021', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.deliveries', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.lanes', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.lane_progress', '');
SELECT pg_catalog.pg_extension_config_dump('relaybus.exceptions', '');
