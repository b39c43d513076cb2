// The contract over relaybus::client::PgStore: a database with the extension created,
// named by the libpq connection string in RELAYBUS_CONTRACT_PG (scripts/run-tests makes
// one, `relaybus_contract`). Unset: the backend is skipped.
#include <cstdlib>

#include "client/pg_store.hpp"
#include "contract/backend.hpp"

namespace relaybus::contract {
namespace {

const char* conninfo() {
  const char* c = std::getenv("RELAYBUS_CONTRACT_PG");
  return c && *c ? c : nullptr;
}

class PgBackend final : public Backend {
 public:
  std::unique_ptr<store::Store> open() override {
    return std::make_unique<client::PgStore>(conninfo());
  }
};

const RegisterBackend registered{{
    "pg",
    [] {
      return conninfo() ? std::string()
                        : std::string(
                              "RELAYBUS_CONTRACT_PG is not set (a libpq connection string "
                              "of a database with the relaybus extension)");
    },
    [] { return std::make_unique<PgBackend>(); },
}};

}  // namespace
}  // namespace relaybus::contract
