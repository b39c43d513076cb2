// DROP EXTENSION relaybus while deliveries are left: a WARNING with their counts, and the
// drop goes on. An operator who drops the wrong database's relaybus, or forgot a backlog,
// learns what went with it. A ProcessUtility hook, because an event trigger cannot see
// which extension a DROP EXTENSION names before its objects are gone.
#pragma once

namespace relaybus::pg::drop_warning {

// From _PG_init. The hook only acts in backends that loaded the library: every backend
// when relaybus is preloaded (shared_preload_libraries), else those that called relaybus.
void install();

}  // namespace relaybus::pg::drop_warning
