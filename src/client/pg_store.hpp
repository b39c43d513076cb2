// The Store on PostgreSQL through libpq: one connection, its statements prepared once.
#pragma once

#include <memory>
#include <string>

#include "seam.hpp"

struct pg_conn;
struct pg_result;

namespace relaybus::client {

class PgStore final : public Store {
 public:
  // Connects (a libpq connection string or URI), sets client_encoding to UTF8 (the strings
  // it sends and returns are UTF-8 whatever the database's encoding), checks that relaybus
  // is installed in the database with the functions this runtime calls and that the role may
  // use its schema (SetupError otherwise, saying what to run), and prepares the worker
  // statements. The connection's application_name is "relaybus-cpp" unless the connection
  // string or PGAPPNAME sets one (identify() changes it).
  explicit PgStore(const std::string& conninfo);
  ~PgStore() override;
  PgStore(const PgStore&) = delete;
  PgStore& operator=(const PgStore&) = delete;

  std::vector<Delivery> claim(const Worker& worker, int batch, std::chrono::milliseconds lease,
                              const std::vector<std::string>& handlers) override;
  int complete_many(const std::vector<std::string>& tokens) override;
  FailOutcome fail(const std::string& token, const std::string& error,
                   std::optional<std::chrono::milliseconds> retry_after) override;
  bool bury(const std::string& token, const std::string& error) override;
  bool release(const std::string& token) override;
  int relinquish(const Worker& worker) override;
  int extend_lease(const Worker& worker, std::chrono::milliseconds lease) override;
  void listen() override;
  bool wait_for_wakeup(std::chrono::milliseconds timeout) override;
  // A transaction on this store's connection: the handler's own statements go through
  // connection() while it is open, and complete() deletes the delivery inside it.
  std::unique_ptr<Transaction> begin() override;
  // The extension's worker functions executable by the role (the worker right), and every
  // handler subscribed: one claim of them inside a transaction that is rolled back, so
  // relaybus itself checks what the claim loop will send. SetupError says what to run.
  void check_worker(const Worker& worker, const std::vector<std::string>& handlers,
                    std::chrono::milliseconds lease) override;
  // Sets application_name (now and after a reconnect) unless the connection string or
  // PGAPPNAME chose one.
  void identify(const std::string& name) override;
  // relaybus's installed version, the database and the role, as found when connecting.
  const std::string& extension_version() const { return version_; }
  // 0.3's claim renews the held lanes of its handlers that are due (src/core/lane_lease.hpp:
  // lease_renewal); 0.2's and 0.1's do not promise it.
  bool claim_renews_held_lanes() const override { return version_.rfind("0.3.", 0) == 0; }

  std::string publish(const Event& event) override;
  std::vector<std::string> publish_batch(const std::vector<Event>& events) override;
  void subscribe(const store::Subscription& subscription) override;
  bool requeue(const std::string& event_id, const std::string& handler) override;
  std::optional<store::DeliveryState> lookup(const std::string& event_id,
                                             const std::string& handler) override;
  // The operator half and maintenance (pg_operator.cpp): the SQL functions of the same names.
  void unsubscribe(const std::string& handler) override;
  bool pause(const std::string& handler) override;
  bool resume(const std::string& handler) override;
  bool cancel(const std::string& event_id, const std::string& handler) override;
  std::int64_t requeue_dead(const std::optional<std::string>& handler) override;
  std::vector<store::HandlerStatistics> statistics() override;
  std::vector<store::ListedDelivery> list_deliveries(const store::DeliveryFilter& filter) override;
  int take_over_expired() override;
  std::int64_t purge_expired() override;

  // The libpq connection, for a handler's statements inside begin()'s transaction.
  pg_conn* connection() const { return conn_; }

 private:
  struct ResultDeleter {
    void operator()(pg_result* r) const;
  };
  using Result = std::unique_ptr<pg_result, ResultDeleter>;

  void connect();
  void check_extension();
  bool application_name_chosen() const;
  Result run(const char* statement, int n, const char* const* values);
  Result exec(const char* sql, int n, const char* const* values);
  bool drain_notifications();

  std::string conninfo_;
  pg_conn* conn_ = nullptr;
  bool listening_ = false;
  bool holders_ = true;  // the server's claim takes a holder (0.2.0; 0.1.0 has none)
  std::string application_name_ = "relaybus-cpp";  // libpq's fallback_application_name
  std::string version_, database_, user_;
};

// Opens one PgStore per call, on `conninfo`: the Dispatcher's StoreFactory for PostgreSQL.
// An empty conninfo means libpq's defaults (the PG* environment variables).
StoreFactory pg_store_factory(std::string conninfo);

// The libpq connection of `store`, for a transactional handler's own statements: the
// transaction its completion commits in is open on it. std::invalid_argument when `store`
// is not a PgStore (a Dispatcher over another store).
pg_conn* pg_connection(Store& store);

// The store error for a failed libpq call: core's code for the SQLSTATE
// (error_code_of_sqlstate), the message, and the SQLSTATE itself.
StoreError error_of(pg_conn* conn, pg_result* res);

// Whether libpq parses `conninfo` (a connection string or URI; empty is libpq's defaults).
bool conninfo_parses(const std::string& conninfo);

// The store error for a connection that failed (PQconnectdb's status is not OK): error_of,
// unless `conninfo` does not parse. libpq's parse errors quote the text, a password
// included, so then the message is a fixed one without it.
StoreError connection_error_of(pg_conn* conn, const std::string& conninfo);

// core's error code for a SQLSTATE (the reverse of src/pg/error_codes.cpp, for the codes
// relaybus raises; a connection-class SQLSTATE or none at all is kUnavailable).
core::ErrorCode error_code_of_sqlstate(const std::string& sqlstate);

// The JSON of publish_batch's argument for `events`; a delay travels as "delay_ms".
std::string events_json(const std::vector<Event>& events);

// A PostgreSQL array literal of `items`, every element quoted (tokens and names may hold
// any character).
std::string text_array_literal(const std::vector<std::string>& items);

// "1234 milliseconds": how an interval parameter is sent.
std::string interval_literal(std::chrono::milliseconds ms);

}  // namespace relaybus::client
