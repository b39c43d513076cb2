#include "table_output.hpp"

#include <algorithm>
#include <cstdio>

#include "client/tool/json_text.hpp"

namespace relaybus::cli {

// One line per row, and nothing a terminal would act on: the values come from publishers
// (type, key, event id) and handlers (last_error). A newline, tab or carriage return is shown
// as \n, \t or \r; any other control byte (below 0x20, DEL) and a byte that is not part of
// valid UTF-8 as \xNN; a C1 control (U+0080-U+009F) and the line and paragraph separators
// (U+2028, U+2029) as \uNNNN; a backslash as \\, so that every escape reads one way.
std::string one_line(const std::optional<std::string>& value) {
  const std::string text = value.value_or("");
  std::string out;
  char buf[8];
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::size_t n = tool::utf8_length(text, i);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F || n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned char>(text[i + 1]));
      out += buf;
    } else if (n == 3 && text.compare(i, 2, "\xE2\x80") == 0 &&
               (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
    } else {
      out.append(text, i, n);
    }
    i += n ? n : 1;
  }
  return out;
}

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
