#include "setup_hints.hpp"

#include <cstdlib>
#include <sstream>

#include "../core/sql_quote.hpp"

namespace relaybus::client {

bool rights_by_name(const std::string& version) {
  std::istringstream in(version);
  std::string part;
  for (int wanted : {0, 2, 1}) {
    if (!std::getline(in, part, '.')) return wanted == 0;
    char* end = nullptr;
    const long got = std::strtol(part.c_str(), &end, 10);
    if (end == part.c_str() || *end != '\0') return true;  // unfamiliar: assume newer
    if (got != wanted) return got > wanted;
  }
  return true;
}

std::string role_literal(const std::string& role) {
  bool plain = !role.empty() && (role[0] == '_' || (role[0] >= 'a' && role[0] <= 'z'));
  for (char c : role)
    plain = plain && (c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
  return core::sql_literal(plain ? role : core::sql_identifier(role));
}

std::string grant_statement(const std::string& right, const std::string& role,
                            const std::string& version) {
  if (rights_by_name(version))
    return "SELECT relaybus.grant_rights(" + role_literal(role) + ", " + core::sql_literal(right) +
           ")";
  return "GRANT relaybus_" + right + " TO " + core::sql_identifier(role);
}

std::string subscribe_statement(const std::string& handler) {
  return "SELECT relaybus.subscribe(" + core::sql_literal(handler) + ", ARRAY['<event type>'])";
}

}  // namespace relaybus::client
