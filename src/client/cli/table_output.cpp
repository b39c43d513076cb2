#include "table_output.hpp"

#include <algorithm>
#include <cstdio>

namespace relaybus::cli {

namespace {

// One line per row: a newline or tab in a value (an error message often has them) is shown
// escaped, as \n and \t, instead of breaking the table.
std::string one_line(const std::optional<std::string>& value) {
  std::string out;
  for (char c : value.value_or("")) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void print_table(const Table& table) {
  std::vector<std::vector<std::string>> cells;
  for (const auto& row : table.rows) {
    cells.emplace_back();
    for (const auto& value : row) cells.back().push_back(one_line(value));
  }
  std::vector<std::size_t> width;
  for (const auto& c : table.columns) width.push_back(c.size());
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](auto cell) {
    for (std::size_t c = 0; c < width.size(); ++c) {
      std::string text = cell(c);
      std::printf("%s%-*s", c ? " | " : "", static_cast<int>(width[c]), text.c_str());
    }
    std::printf("\n");
  };
  line([&](std::size_t c) { return table.columns[c]; });
  line([&](std::size_t c) { return std::string(width[c], '-'); });
  for (const auto& row : cells) line([&](std::size_t c) { return row[c]; });
  std::printf("(%zu rows)\n", table.rows.size());
}

}  // namespace relaybus::cli
