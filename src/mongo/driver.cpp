#include "driver.hpp"

#include <chrono>
#include <cstring>
#include <mutex>
#include <random>

#include "mongo_store.hpp"

namespace relaybus::mongo::detail {

namespace {

constexpr char kTransientLabel[] = "TransientTransactionError";

// Server error codes that mean "raced with another writer; running again is safe":
// WriteConflict (112), DuplicateKey (11000: a concurrent publish of the same event id),
// NoSuchTransaction (251: the server aborted the transaction meanwhile).
bool conflict_code(std::uint32_t code) {
  return code == 112 || code == 11000 || code == 251;
}

// Server error codes of a server that cannot serve now (no primary, stepping down,
// shutting down).
bool unavailable_code(std::uint32_t code) {
  switch (code) {
    case 91:     // ShutdownInProgress
    case 189:    // PrimarySteppedDown
    case 10107:  // NotWritablePrimary
    case 11600:  // InterruptedAtShutdown
    case 11602:  // InterruptedDueToReplStateChange
    case 13435:  // NotPrimaryNoSecondaryOk
    case 13436:  // NotPrimaryOrSecondary
      return true;
    default:
      return false;
  }
}

}  // namespace

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A random (version 4) UUID in its canonical text form, as the PostgreSQL store makes them.
std::string new_event_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  unsigned char bytes[16];
  for (int i = 0; i < 16; i += 8) {
    const std::uint64_t r = random();
    std::memcpy(bytes + i, &r, 8);
  }
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[bytes[i] >> 4];
    out += hex[bytes[i] & 0x0f];
  }
  return out;
}

void init_driver() {
  static std::once_flag once;
  std::call_once(once, [] { mongoc_init(); });
}

core::ErrorCode code_of(const bson_error_t& error, const bson_t* reply) {
  if (error.domain == MONGOC_ERROR_STREAM || error.domain == MONGOC_ERROR_SERVER_SELECTION)
    return core::ErrorCode::kUnavailable;
  if (reply && mongoc_error_has_label(reply, kTransientLabel)) return core::ErrorCode::kConflict;
  if (error.domain == MONGOC_ERROR_SERVER || error.domain == MONGOC_ERROR_WRITE_CONCERN) {
    if (conflict_code(error.code)) return core::ErrorCode::kConflict;
    if (unavailable_code(error.code)) return core::ErrorCode::kUnavailable;
  }
  return core::ErrorCode::kInternal;
}

[[noreturn]] void fail_with(const char* what, const bson_error_t& error, Bson reply) {
  auto shared = std::make_shared<Bson>(std::move(reply));
  throw CommandFailed(code_of(error, shared->get()),
                      std::string("relaybus MongoDB store: ") + what + ": " + error.message,
                      std::to_string(error.code), shared, error);
}

// The first write error of a reply that is ok: 1 (insert, update, findAndModify report
// them so), or its write concern error, as a bson_error_t of the server domain.
bool write_error_of(const bson_t* reply, bson_error_t* error) {
  bson_iter_t it;
  bson_iter_t first;
  const char* path = nullptr;
  if (bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &first) && bson_iter_next(&first) &&
      BSON_ITER_HOLDS_DOCUMENT(&first)) {
    path = "writeErrors";
  } else if (bson_iter_init_find(&it, reply, "writeConcernError") &&
             BSON_ITER_HOLDS_DOCUMENT(&it)) {
    first = it;
    path = "writeConcernError";
  } else {
    return false;
  }
  bson_iter_t entry;
  std::uint32_t code = 0;
  std::string message = path;
  if (bson_iter_recurse(&first, &entry)) {
    while (bson_iter_next(&entry)) {
      if (std::strcmp(bson_iter_key(&entry), "code") == 0 &&
          (BSON_ITER_HOLDS_INT32(&entry) || BSON_ITER_HOLDS_INT64(&entry)))
        code = static_cast<std::uint32_t>(bson_iter_as_int64(&entry));
      if (std::strcmp(bson_iter_key(&entry), "errmsg") == 0 && BSON_ITER_HOLDS_UTF8(&entry))
        message += std::string(": ") + bson_iter_utf8(&entry, nullptr);
    }
  }
  bson_set_error(
      error,
      std::strcmp(path, "writeErrors") == 0 ? MONGOC_ERROR_SERVER : MONGOC_ERROR_WRITE_CONCERN,
      code, "%s", message.c_str());
  return true;
}

// Runs one command on the store's database, in `session` when given. Throws CommandFailed
// for an error reply; a reply with write errors is returned as it is.
Bson command(mongoc_client_t* client, const std::string& database, mongoc_client_session_t* session,
             const Bson& cmd, const char* what) {
  Bson opts;
  bson_error_t error;
  if (session && !mongoc_client_session_append(session, opts.get(), &error))
    fail_with(what, error, Bson());
  bson_t raw;
  const bool ok = mongoc_client_command_with_opts(client, database.c_str(), cmd.get(), nullptr,
                                                  opts.get(), &raw, &error);
  Bson reply(bson_copy(&raw));
  bson_destroy(&raw);
  if (!ok) fail_with(what, error, std::move(reply));
  return reply;
}

// command(), and throws CommandFailed for a write error or a write concern error too.
Bson run(mongoc_client_t* client, const std::string& database, mongoc_client_session_t* session,
         const Bson& cmd, const char* what) {
  Bson reply = command(client, database, session, cmd, what);
  bson_error_t error;
  if (write_error_of(reply.get(), &error)) fail_with(what, error, std::move(reply));
  return reply;
}

// The documents of a cursor reply's batch (firstBatch or nextBatch), and its cursor id.
std::int64_t take_batch(const bson_t* reply, const char* batch, std::vector<Bson>& out) {
  bson_iter_t it;
  bson_iter_t cursor;
  std::int64_t id = 0;
  if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
      !bson_iter_recurse(&it, &cursor))
    throw StoreError(core::ErrorCode::kInternal, "relaybus MongoDB store: a reply without cursor");
  while (bson_iter_next(&cursor)) {
    if (std::strcmp(bson_iter_key(&cursor), "id") == 0) {
      id = bson_iter_as_int64(&cursor);
    } else if (std::strcmp(bson_iter_key(&cursor), batch) == 0 && BSON_ITER_HOLDS_ARRAY(&cursor)) {
      bson_iter_t element;
      bson_iter_recurse(&cursor, &element);
      while (bson_iter_next(&element)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&element)) continue;
        std::uint32_t length = 0;
        const std::uint8_t* data = nullptr;
        bson_iter_document(&element, &length, &data);
        out.emplace_back(bson_new_from_data(data, length));
      }
    }
  }
  return id;
}

// Every document a find returns (getMore while the cursor is open).
std::vector<Bson> find_all(mongoc_client_t* client, const std::string& database,
                           mongoc_client_session_t* session, const Bson& find, const char* what) {
  std::vector<Bson> out;
  Bson reply = run(client, database, session, find, what);
  std::int64_t cursor = take_batch(reply.get(), "firstBatch", out);
  // The collection: the value of the command's first field (find, aggregate).
  bson_iter_t it;
  const std::string collection =
      bson_iter_init(&it, find.get()) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)
          ? bson_iter_utf8(&it, nullptr)
          : "";
  while (cursor != 0) {
    Bson more;
    BSON_APPEND_INT64(more.get(), "getMore", cursor);
    BSON_APPEND_UTF8(more.get(), "collection", collection.c_str());
    Bson next = run(client, database, session, more, what);
    cursor = take_batch(next.get(), "nextBatch", out);
  }
  return out;
}

std::vector<std::string> ids_of(const std::vector<Bson>& docs) {
  std::vector<std::string> ids;
  for (const auto& d : docs) ids.push_back(reported([&] { return read_string_id(d.get()); }));
  return ids;
}

// findAndModify's `value`.
Bson value_of(const Bson& reply) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, reply.get(), "value") || !BSON_ITER_HOLDS_DOCUMENT(&it))
    throw StoreError(core::ErrorCode::kInternal,
                     "relaybus MongoDB store: findAndModify returned no document");
  std::uint32_t length = 0;
  const std::uint8_t* data = nullptr;
  bson_iter_document(&it, &length, &data);
  return Bson(bson_new_from_data(data, length));
}

std::int64_t count_of(const Bson& reply, const char* name) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, reply.get(), name)) return 0;
  return bson_iter_as_int64(&it);
}

// The body of mongoc_client_session_with_transaction. A failed command hands the driver the
// server's reply, whose TransientTransactionError label makes it run the body again; past
// kMaxTransactionAttempts the body is not run and no label is handed on, so it stops.
bool run_body(mongoc_client_session_t* session, void* ctx, bson_t** reply, bson_error_t* error) {
  auto* run = static_cast<TransactionRun*>(ctx);
  run->failure = nullptr;
  if (++run->attempts > kMaxTransactionAttempts) {
    const std::string message = "relaybus MongoDB store: the transaction ran " +
                                std::to_string(kMaxTransactionAttempts) +
                                " times and conflicted each time (TransientTransactionError)";
    run->failure = std::make_exception_ptr(StoreError(core::ErrorCode::kConflict, message));
    bson_set_error(error, MONGOC_ERROR_TRANSACTION, MONGOC_ERROR_TRANSACTION_INVALID_STATE, "%s",
                   message.c_str());
    return false;
  }
  try {
    (*run->body)(session);
    return true;
  } catch (const CommandFailed& e) {
    run->failure = std::current_exception();
    *reply = bson_copy(e.reply());
    *error = e.error();
  } catch (const std::exception& e) {
    run->failure = std::current_exception();
    bson_set_error(error, MONGOC_ERROR_TRANSACTION, MONGOC_ERROR_TRANSACTION_INVALID_STATE, "%s",
                   e.what());
  } catch (...) {
    run->failure = std::current_exception();
  }
  return false;
}

const TransactionOptions& transaction_options() {
  static const TransactionOptions options;
  return options;
}

}  // namespace relaybus::mongo::detail
