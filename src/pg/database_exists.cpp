#include "database_exists.hpp"

#include "guard.hpp"

extern "C" {
#include "utils/syscache.h"
}

namespace relaybus::pg {

bool database_exists(std::uint32_t database) {
  bool exists = true;
  pg_call([&] { exists = SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(database)); });
  return exists;
}

}  // namespace relaybus::pg
