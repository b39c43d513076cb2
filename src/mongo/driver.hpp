// Internal to src/mongo (not installed): the libmongoc plumbing the MongoDB store's
// translation units share. Errors as the seam reports them and their classification, running
// commands and reading their replies, the options and body of the store's own transactions.
// The functions' comments are with their definitions in driver.cpp.
#pragma once

#include <mongoc/mongoc.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "documents.hpp"
#include "store/store.hpp"

namespace relaybus::mongo::detail {

using store::StoreError;

using store::reported;  // core::Error as the seam reports errors

std::int64_t now_ms();
std::string new_event_id();
void init_driver();

// A command that failed, with the server's reply (its errorLabels decide whether the
// driver runs the transaction again).
class CommandFailed : public StoreError {
 public:
  CommandFailed(core::ErrorCode code, const std::string& message, std::string native_code,
                std::shared_ptr<Bson> reply, bson_error_t error)
      : StoreError(code, message, std::move(native_code)),
        reply_(std::move(reply)),
        error_(error) {}
  const bson_t* reply() const { return reply_->get(); }
  const bson_error_t& error() const { return error_; }

 private:
  std::shared_ptr<Bson> reply_;
  bson_error_t error_;
};

core::ErrorCode code_of(const bson_error_t& error, const bson_t* reply);
[[noreturn]] void fail_with(const char* what, const bson_error_t& error, Bson reply);
bool write_error_of(const bson_t* reply, bson_error_t* error);
Bson command(mongoc_client_t* client, const std::string& database, mongoc_client_session_t* session,
             const Bson& cmd, const char* what);
Bson run(mongoc_client_t* client, const std::string& database, mongoc_client_session_t* session,
         const Bson& cmd, const char* what);
std::int64_t take_batch(const bson_t* reply, const char* batch, std::vector<Bson>& out);
std::vector<Bson> find_all(mongoc_client_t* client, const std::string& database,
                           mongoc_client_session_t* session, const Bson& find, const char* what);
std::vector<std::string> ids_of(const std::vector<Bson>& docs);
Bson value_of(const Bson& reply);
std::int64_t count_of(const Bson& reply, const char* name);

// The transaction options of every transaction of the store's own.
struct TransactionOptions {
  TransactionOptions() : opts(mongoc_transaction_opts_new()) {
    mongoc_read_concern_t* rc = mongoc_read_concern_new();
    mongoc_read_concern_set_level(rc, MONGOC_READ_CONCERN_LEVEL_SNAPSHOT);
    mongoc_write_concern_t* wc = mongoc_write_concern_new();
    mongoc_write_concern_set_wmajority(wc, 0);
    mongoc_read_prefs_t* rp = mongoc_read_prefs_new(MONGOC_READ_PRIMARY);
    mongoc_transaction_opts_set_read_concern(opts, rc);
    mongoc_transaction_opts_set_write_concern(opts, wc);
    mongoc_transaction_opts_set_read_prefs(opts, rp);
    mongoc_read_concern_destroy(rc);
    mongoc_write_concern_destroy(wc);
    mongoc_read_prefs_destroy(rp);
  }
  ~TransactionOptions() { mongoc_transaction_opts_destroy(opts); }
  mongoc_transaction_opt_t* opts;
};

struct TransactionRun {
  const std::function<void(mongoc_client_session_t*)>* body = nullptr;
  int attempts = 0;
  std::exception_ptr failure;
};

bool run_body(mongoc_client_session_t* session, void* ctx, bson_t** reply, bson_error_t* error);
const TransactionOptions& transaction_options();

}  // namespace relaybus::mongo::detail
