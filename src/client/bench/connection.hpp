// A plain libpq connection for the benchmark's own queries (its publishers, its meter); the
// dispatcher and the operator commands use PgStore instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

struct pg_conn;

namespace relaybus::bench {

struct Rows {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> values;
};

class Connection {
 public:
  explicit Connection(const std::string& conninfo);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one statement with text parameters (nullopt = NULL); throws client::StoreError.
  Rows query(const std::string& sql, const std::vector<std::optional<std::string>>& params = {});
  // The first column of the first row, or "" when there is none or it is NULL.
  std::string scalar(const std::string& sql,
                     const std::vector<std::optional<std::string>>& params = {});

 private:
  pg_conn* conn_;
};

}  // namespace relaybus::bench
