#include "shell_word.hpp"

#include <algorithm>

namespace relaybus::cli {

namespace {

bool literal_in_shell(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
}

}  // namespace

std::string shell_word(std::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), literal_in_shell))
    return std::string(word);
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

}  // namespace relaybus::cli
