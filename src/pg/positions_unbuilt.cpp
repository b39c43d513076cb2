// 0.3.0's entry points that are not built yet: each refuses with 0A000, so that the 0.3.0
// script loads (CREATE FUNCTION ... LANGUAGE C needs the symbol) while its parts are built
// one by one. Delete an entry here when its real one lands; the file goes when it is empty.
#include "postgres.hpp"

#include "guard.hpp"

namespace relaybus::pg {

namespace {

Datum unbuilt(FunctionCallInfo fcinfo) {
  ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                  errmsg("relaybus 0.3.0: %s is not built yet",
                         get_func_name(fcinfo->flinfo->fn_oid))));
  return (Datum)0;
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_publish_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_publish_batch_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_complete_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_complete_many_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_fail_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_bury_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_release_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_relinquish_positions, relaybus::pg::unbuilt)
RELAYBUS_SQL_FUNCTION(relaybus_finish_position, relaybus::pg::unbuilt)
