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

// `value` on one line with nothing a terminal would act on: newline, tab and carriage return
// as \n, \t, \r, other control bytes and invalid UTF-8 as \xNN, C1 controls and U+2028/9 as
// \uNNNN, a backslash as \\. Publishers and handlers choose these texts.
std::string one_line(const std::optional<std::string>& value);

}  // namespace relaybus::cli
