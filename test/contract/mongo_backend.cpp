// The contract over relaybus::mongo::MongoStore: a replica set named by the mongodb:// URI in
// RELAYBUS_MONGO_URI, database RELAYBUS_MONGO_DB (default relaybus_contract). Unset: the
// backend is skipped. Built in whenever libmongoc is found (the Makefile's CONTRACT_MONGO).
// It has never run here: no MongoDB server can be installed on the machines this was
// written on (docs/mongodb.md says what is expected to differ).
#include <cstdlib>

#include "contract/backend.hpp"
#include "mongo/mongo_store.hpp"

namespace relaybus::contract {
namespace {

const char* uri() {
  const char* u = std::getenv("RELAYBUS_MONGO_URI");
  return u && *u ? u : nullptr;
}

std::string database() {
  const char* d = std::getenv("RELAYBUS_MONGO_DB");
  return d && *d ? d : "relaybus_contract";
}

class MongoBackend final : public Backend {
 public:
  MongoBackend() { mongo::MongoStore(uri(), database()).setup(); }  // repeatable
  std::unique_ptr<store::Store> open() override {
    return std::make_unique<mongo::MongoStore>(uri(), database());
  }
  std::unique_ptr<store::Store> open_expiring() override {
    mongo::MongoOptions options;
    options.retention_completed = options.retention_dead = std::chrono::seconds(0);
    return std::make_unique<mongo::MongoStore>(uri(), database(), options);
  }
};

const RegisterBackend registered{{
    "mongo",
    [] {
      return uri() ? std::string()
                   : std::string(
                         "RELAYBUS_MONGO_URI is not set (a mongodb:// URI of a replica "
                         "set, e.g. mongodb://localhost:27017/?replicaSet=rs0)");
    },
    [] { return std::make_unique<MongoBackend>(); },
}};

}  // namespace
}  // namespace relaybus::contract

