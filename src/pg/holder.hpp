// The incarnation that holds a lane (core::LaneBinding). A claim that passes a holder binds
// the lanes it acquires to (worker, holder): lanes.holder records it, and any connection
// passing the same pair holds, renews and relinquishes them, so a pool that closes or
// swaps connections (PgBouncer in transaction mode) causes no takeover. Without a holder a
// lane is bound to the backend (pid and start time) whose claim acquired it: every
// connection of the worker name shares it while that backend is alive; once it is gone the
// lane is an orphan and is taken over at once (a name reused after a crash must not adopt
// in-flight deliveries that nobody will finish). The start time guards against pid reuse.
#pragma once

#include "postgres.hpp"

// SQL: true while the backend recorded on lane row `l` is alive. `pid` and `started` are
// the placeholders of the calling backend's own pid and start time: the common case, a
// worker's lanes held by its own connection, is answered without reading the activity of
// every backend once per lane.
#define RELAYBUS_HOLDER_ALIVE_SQL(pid, started)                      \
  "(coalesce(l.holder_pid = " pid " AND l.holder_started = " started \
  ", false) OR"                                                      \
  " (l.holder_pid IS NOT NULL AND EXISTS (SELECT 1 FROM"             \
  " pg_catalog.pg_stat_get_activity(l.holder_pid) a"                 \
  " WHERE a.backend_start = l.holder_started)))"

// SQL copy of core::is_callers for lane row `l`: the lane belongs to the caller's
// incarnation. `holder` is the placeholder of the caller's holder (NULL: none).
#define RELAYBUS_LANE_IS_CALLERS_SQL(holder, pid, started)                   \
  "(CASE WHEN " holder "::text IS NOT NULL THEN coalesce(l.holder = " holder \
  ", false)"                                                                 \
  " ELSE l.holder IS NULL AND " RELAYBUS_HOLDER_ALIVE_SQL(pid, started) " END)"

// SQL copy of core::relinquish_covers for lane row `l`: the lanes relinquish hands back.
// With a holder (placeholder `holder`), that holder's; without, the worker's lanes bound to
// a backend, any backend (a dead one's lane that runs nothing may as well go back now),
// never another holder's.
#define RELAYBUS_RELINQUISH_COVERS_SQL(holder) \
  "(CASE WHEN " holder "::text IS NULL THEN l.holder IS NULL ELSE l.holder = " holder " END)"

namespace relaybus::pg {

inline std::int32_t current_holder_pid() {
  return MyProcPid;
}
inline TimestampTz current_holder_started() {
  return MyStartTimestamp;
}

}  // namespace relaybus::pg
