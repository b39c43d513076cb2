#include "mongo_transaction.hpp"

#include "completion.hpp"
#include "driver.hpp"

namespace relaybus::mongo::detail {

MongoTransaction::MongoTransaction(mongoc_client_t* client, const std::string& database,
                                   bool history)
    : client_(client), database_(database), history_(history) {
  bson_error_t error;
  session_ = mongoc_client_start_session(client_, nullptr, &error);
  if (!session_) fail_with("start a session", error, Bson());
  if (!mongoc_client_session_start_transaction(session_, transaction_options().opts, &error)) {
    mongoc_client_session_destroy(session_);
    fail_with("start a transaction", error, Bson());
  }
}

MongoTransaction::~MongoTransaction() {
  if (open_) mongoc_client_session_abort_transaction(session_, nullptr);
  mongoc_client_session_destroy(session_);
}

bool MongoTransaction::complete(const std::string& token) {
  return complete_in(client_, database_, session_, parse_tokens({token}), history_) == 1;
}

void MongoTransaction::commit() {
  if (!open_) return;
  open_ = false;
  bson_t raw;
  bson_error_t error;
  const bool ok = mongoc_client_session_commit_transaction(session_, &raw, &error);
  Bson reply(bson_copy(&raw));
  bson_destroy(&raw);
  if (!ok) fail_with("commit", error, std::move(reply));
}

void MongoTransaction::rollback() {
  if (!open_) return;
  open_ = false;
  bson_error_t error;
  if (!mongoc_client_session_abort_transaction(session_, &error)) fail_with("abort", error, Bson());
}

}  // namespace relaybus::mongo::detail
