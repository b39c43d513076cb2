// Internal to src/mongo (not installed): MongoTransaction, what MongoStore::begin returns.
#pragma once

#include <mongoc/mongoc.h>

#include <string>

#include "store/store.hpp"

namespace relaybus::mongo::detail {

// Completion inside the caller's MongoDB transaction (store::Transaction).
class MongoTransaction final : public store::Transaction {
 public:
  // `history`: record completions (MongoOptions::completion_history).
  MongoTransaction(mongoc_client_t* client, const std::string& database, bool history);
  ~MongoTransaction() override;

  bool complete(const std::string& token) override;

  void commit() override;

  void rollback() override;

 private:
  mongoc_client_t* client_;
  std::string database_;
  mongoc_client_session_t* session_ = nullptr;
  bool history_;
  bool open_ = true;
};

}  // namespace relaybus::mongo::detail
