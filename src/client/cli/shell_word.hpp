// A word pasted into a command line that a hint suggests ("relaybus dead list --handler=..."):
// quoted for a POSIX shell, so that what an operator copies passes the name as one argument
// and runs nothing else. (Names pasted into SQL go through core/sql_quote.hpp instead.)
#pragma once

#include <string>
#include <string_view>

namespace relaybus::cli {

// Bare when every character is one a shell takes literally (letters, digits, _@%+=:,./-);
// otherwise in single quotes, each single quote written '\''.
std::string shell_word(std::string_view word);

}  // namespace relaybus::cli
