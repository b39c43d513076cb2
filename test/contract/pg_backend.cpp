// The contract over relaybus::client::PgStore: a database with the extension created,
// named by the libpq connection string in RELAYBUS_CONTRACT_PG (scripts/run-tests makes
// one, `relaybus_contract`). Unset: the backend is skipped.
#include <libpq-fe.h>

#include <cstdlib>
#include <stdexcept>

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
  // The retention settings are PGC_SUSET: the contract database is reached as a superuser.
  std::unique_ptr<store::Store> open_expiring() override {
    auto s = std::make_unique<client::PgStore>(conninfo());
    PGresult* r = PQexec(s->connection(),
                         "SET relaybus.retention_dead = 0; SET relaybus.retention_completed = 0");
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok)
      throw std::runtime_error("cannot set the retention: " +
                               std::string(PQerrorMessage(s->connection())));
    return s;
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
