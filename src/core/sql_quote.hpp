// Names and values pasted into the SQL that hints and details suggest ("Subscribe it first
// with relaybus.subscribe('...')"): quoted as PostgreSQL would quote them, so that what an
// operator copies means that name and nothing more. Every hint and detail that carries a
// name or a value quotes it through these two functions.
#pragma once

#include <string>
#include <string_view>

namespace relaybus::core {

// As PostgreSQL's quote_literal: in single quotes, each single quote doubled; if the text
// holds a backslash, each backslash doubled too and the literal written E'...', so that it
// reads the same whatever standard_conforming_strings is.
std::string sql_literal(std::string_view text);

// An identifier, always in double quotes, each double quote doubled. PostgreSQL's
// quote_ident leaves a lower-case name that is not a keyword bare; telling keywords apart
// would need the server's keyword list, and a quoted name means the same name either way.
std::string sql_identifier(std::string_view name);

}  // namespace relaybus::core
