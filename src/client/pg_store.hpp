// The Store on PostgreSQL through libpq: one connection, its statements prepared once.
#pragma once

#include <memory>
#include <string>

#include "store.hpp"

struct pg_conn;
struct pg_result;

namespace relaybus::client {

class PgStore final : public Store {
 public:
  // Connects (a libpq connection string or URI) and prepares the worker statements.
  explicit PgStore(const std::string& conninfo);
  ~PgStore() override;
  PgStore(const PgStore&) = delete;
  PgStore& operator=(const PgStore&) = delete;

  std::vector<Delivery> claim(const Worker& worker, int batch, std::chrono::milliseconds lease,
                              const std::vector<std::string>& handlers) override;
  int complete_many(const std::vector<std::string>& tokens) override;
  std::string fail(const std::string& token, const std::string& error) override;
  bool release(const std::string& token) override;
  int relinquish(const Worker& worker) override;
  int extend_lease(const Worker& worker, std::chrono::milliseconds lease) override;
  void listen() override;
  bool wait_for_wakeup(std::chrono::milliseconds timeout) override;

 private:
  struct ResultDeleter {
    void operator()(pg_result* r) const;
  };
  using Result = std::unique_ptr<pg_result, ResultDeleter>;

  void connect();
  Result run(const char* statement, int n, const char* const* values);
  bool drain_notifications();

  std::string conninfo_;
  pg_conn* conn_ = nullptr;
  bool listening_ = false;
  bool holders_ = true;  // the server's claim takes a holder (0.2.0; 0.1.0 has none)
};

// A PostgreSQL array literal of `items`, every element quoted (tokens and names may hold
// any character).
std::string text_array_literal(const std::vector<std::string>& items);

// "1234 milliseconds": how an interval parameter is sent.
std::string interval_literal(std::chrono::milliseconds ms);

}  // namespace relaybus::client
