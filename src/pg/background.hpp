// relaybus's background workers, registered when the library is preloaded:
// - one maintenance worker: takes over lanes whose lease expired and applies retention,
//   every relaybus.maintenance_interval;
// - relaybus.sql_handler_workers workers that run in-database handlers.
#pragma once

namespace relaybus::pg::background {

// From _PG_init while shared_preload_libraries is processed; registers nothing during a
// binary upgrade. The workers start once recovery has finished, so never on a standby.
void register_workers();

}  // namespace relaybus::pg::background
