// relaybus's configuration parameters (GUCs). Defined in _PG_init; read at call time.
#pragma once

namespace relaybus::pg::settings {

void define();

// relaybus.completion_history: keep an append-only row per completion.
bool completion_history();
// relaybus.retention_completed, seconds: how long events without deliveries, legacy
// completed deliveries and completion history are kept.
int retention_completed_s();
// relaybus.retention_dead, seconds: how long dead letters are kept.
int retention_dead_s();

}  // namespace relaybus::pg::settings
