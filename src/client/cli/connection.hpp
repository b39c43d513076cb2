// A plain libpq connection for the tool's own queries (administration and benchmark
// bookkeeping); the dispatcher uses PgStore instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

struct pg_conn;

namespace relaybus::cli {

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

// Prints rows as an aligned text table.
void print_table(const Rows& rows);

}  // namespace relaybus::cli
