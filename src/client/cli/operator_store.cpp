#include "operator_store.hpp"

#include "client/tool/store_uri.hpp"
#include "pg_readiness.hpp"

namespace relaybus::cli {

std::unique_ptr<store::Store> open_operator_store(const std::string& db, const std::string& command) {
  if (!tool::is_mongodb_uri(db)) check_pg_ready(db, command, true);
  return tool::open_store(db);
}

}  // namespace relaybus::cli
