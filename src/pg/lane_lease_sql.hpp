// SQL copies of core's lease rules (src/core/lane_lease.hpp), for statements that must
// filter lanes set-based: one copy each, shared by 0.2's claim and take_over_expired and
// 0.3.0's (src/pg/positions_claim.cpp, src/pg/positions_takeover.cpp).
#pragma once

// SQL copy of core::acquirable for lane row `l` and worker placeholder `worker`: nobody
// holds it, or another worker's lease expired. The contract suite's expiry cases run both.
#define RELAYBUS_ACQUIRABLE_SQL(worker)                    \
  "(l.lease_owner IS NULL OR (l.lease_expires_at <= now()" \
  " AND l.lease_owner <> " worker "))"

// SQL copy of core::due_for_takeover for lane row `l`: held, and its lease expired.
#define RELAYBUS_DUE_FOR_TAKEOVER_SQL "(l.lease_owner IS NOT NULL AND l.lease_expires_at <= now())"
