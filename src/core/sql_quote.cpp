#include "sql_quote.hpp"

namespace relaybus::core {

std::string sql_literal(std::string_view text) {
  const bool escaped = text.find('\\') != std::string_view::npos;
  std::string out;
  out.reserve(text.size() + 3);
  if (escaped) out += 'E';
  out += '\'';
  for (const char c : text) {
    if (c == '\'' || (escaped && c == '\\')) out += c;
    out += c;
  }
  out += '\'';
  return out;
}

std::string sql_identifier(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 2);
  out += '"';
  for (const char c : name) {
    if (c == '"') out += c;
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace relaybus::core
