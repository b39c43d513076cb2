// JSON string literals for the programs' output (the operator tool's --json, the benchmark's
// summary files).
#pragma once

#include <cstddef>
#include <string>

namespace relaybus::tool {

// `text` as a JSON string, quotes included. Control characters, quotes and backslashes are
// escaped; a byte that is not part of valid UTF-8 (a SQL_ASCII database can hold any) becomes
// U+FFFD, so the output is always a JSON document a strict parser accepts.
std::string json_string(const std::string& text);

// The length of the valid UTF-8 sequence at text[i] (RFC 3629: no overlong forms, no
// surrogates, at most U+10FFFF), or 0 when there is none. i < text.size().
std::size_t utf8_length(const std::string& text, std::size_t i);

}  // namespace relaybus::tool
