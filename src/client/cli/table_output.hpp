// The human form of a listing: an aligned text table in psql's style, with a row count.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace relaybus::cli {

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // nullopt: shown empty
};

void print_table(const Table& table);

}  // namespace relaybus::cli
