// Where each in-database handler worker's turn stands (which handler it tries first in its
// next round), kept in shared memory per (database of relaybus.database, worker slot), so
// that a restarted worker goes on after the handler its predecessor was running. A turn
// kept in the process alone started a restarted worker wherever its PID pointed: a handler
// that gets its worker ended (it ignores its cancellation) could have the next turn again,
// and again, while the other handlers waited, with no bound on how long.
#pragma once

#include <cstdint>
#include <optional>

namespace relaybus::pg::handler_turns {

// From _PG_init: reserves the shared memory when preloading (the workers only run then).
void install(bool preloading);

// Worker `slot` of its database (worker::database_index()): the turn its last predecessor
// left, or nullopt for the first worker of the slot since the server started (or without
// the shared memory).
std::optional<std::uint64_t> load(int slot);

// Records the turn worker `slot` takes next.
void store(int slot, std::uint64_t turn);

}  // namespace relaybus::pg::handler_turns
