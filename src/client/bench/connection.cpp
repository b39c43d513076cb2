#include "connection.hpp"

#include <memory>

#include <libpq-fe.h>

#include "client/pg_store.hpp"

namespace relaybus::bench {

using client::error_of;

Connection::Connection(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {
  if (PQstatus(conn_) != CONNECTION_OK) {
    auto error = client::connection_error_of(conn_, conninfo);
    PQfinish(conn_);
    throw error;
  }
}

Connection::~Connection() {
  PQfinish(conn_);
}

Rows Connection::query(const std::string& sql,
                       const std::vector<std::optional<std::string>>& params) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  std::unique_ptr<PGresult, void (*)(PGresult*)> res(
      PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                   nullptr, nullptr, 0),
      PQclear);
  const auto status = PQresultStatus(res.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) throw error_of(conn_, res.get());
  Rows rows;
  for (int c = 0; c < PQnfields(res.get()); ++c) rows.columns.push_back(PQfname(res.get(), c));
  for (int r = 0; r < PQntuples(res.get()); ++r) {
    std::vector<std::optional<std::string>> row;
    for (int c = 0; c < PQnfields(res.get()); ++c) {
      if (PQgetisnull(res.get(), r, c)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(PQgetvalue(res.get(), r, c));
      }
    }
    rows.values.push_back(std::move(row));
  }
  return rows;
}

std::string Connection::scalar(const std::string& sql,
                               const std::vector<std::optional<std::string>>& params) {
  Rows rows = query(sql, params);
  if (rows.values.empty() || rows.values[0].empty() || !rows.values[0][0]) return "";
  return *rows.values[0][0];
}

}  // namespace relaybus::bench
