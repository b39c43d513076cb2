// The incarnation that holds a lane: the backend (pid and start time) whose claim acquired
// it. A worker name reused after a crash must not adopt the lanes of its dead predecessor,
// whose in-flight deliveries nobody would ever finish, so a held lane counts as held only
// while that backend is alive; otherwise it is an orphan and is taken over like an expired
// lease. The start time guards against pid reuse.
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

namespace relaybus::pg {

inline std::int32_t current_holder_pid() {
  return MyProcPid;
}
inline TimestampTz current_holder_started() {
  return MyStartTimestamp;
}

}  // namespace relaybus::pg
