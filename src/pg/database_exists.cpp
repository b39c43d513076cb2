#include "database_exists.hpp"

#include "guard.hpp"

extern "C" {
#include "utils/syscache.h"
}

namespace relaybus::pg {

bool database_exists(std::uint32_t database) noexcept {
  bool exists = true;
  try {
    pg_call([&] { exists = SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(database)); });
  } catch (const PgError& e) {
    FreeErrorData(e.data);
    exists = true;
  } catch (...) {
    exists = true;
  }
  return exists;
}

}  // namespace relaybus::pg
