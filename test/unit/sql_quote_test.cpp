// Issue 32, finding 4: the names and values hints paste into SQL are quoted as PostgreSQL
// quotes them. Every expected text below is what PostgreSQL 15's quote_literal and
// quote_ident return for the same input.
#include "core/sql_quote.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace relaybus::core {
namespace {

using Cases = std::vector<std::pair<std::string, std::string>>;

TEST(SqlQuoteTest, LiteralIsQuoteLiteral) {
  const Cases cases = {
      {"", "''"},
      {"plain", "'plain'"},
      {"it's", "'it''s'"},
      {"''", "''''''"},
      {"y'); DROP TABLE accounts; --", "'y''); DROP TABLE accounts; --'"},
      {"a\\b", "E'a\\\\b'"},
      {"\\", "E'\\\\'"},
      {"it's a\\b", "E'it''s a\\\\b'"},
      {"\\\\'", "E'\\\\\\\\'''"},
      {"Grüße'ü", "'Grüße''ü'"},
      {"a\"b", "'a\"b'"},
      {"NULL", "'NULL'"},
  };
  for (const auto& [input, quoted] : cases) EXPECT_EQ(sql_literal(input), quoted) << input;
}

// quote_ident quotes these: the same text.
TEST(SqlQuoteTest, IdentifierIsQuoteIdentWhereThatQuotes) {
  const Cases cases = {
      {"", "\"\""},
      {"it's", "\"it's\""},
      {"a\\b", "\"a\\b\""},
      {"y'); DROP TABLE accounts; --", "\"y'); DROP TABLE accounts; --\""},
      {"Grüße'ü", "\"Grüße'ü\""},
      {"ü", "\"ü\""},
      {"Foo", "\"Foo\""},
      {"1a", "\"1a\""},
      {"a\"b", "\"a\"\"b\""},
      {"\"", "\"\"\"\""},
      {"x\";DROP TABLE t;--", "\"x\"\";DROP TABLE t;--\""},
      {"select", "\"select\""},  // a reserved keyword
      {"user", "\"user\""},
      {"NULL", "\"NULL\""},
  };
  for (const auto& [input, quoted] : cases) EXPECT_EQ(sql_identifier(input), quoted) << input;
}

// quote_ident leaves these bare; quoted they name the same thing.
TEST(SqlQuoteTest, IdentifierQuotesWhatQuoteIdentLeavesBare) {
  EXPECT_EQ(sql_identifier("plain"), "\"plain\"");
  EXPECT_EQ(sql_identifier("abc_1"), "\"abc_1\"");
  EXPECT_EQ(sql_identifier("_x"), "\"_x\"");
}

// Multibyte UTF-8 passes through byte for byte (no byte of a multibyte character is a quote
// or a backslash).
TEST(SqlQuoteTest, MultibyteTextIsKept) {
  const std::string name = "\xE6\x97\xA5\xE6\x9C\xAC'\xF0\x9F\x98\x80";  // 日本'😀
  EXPECT_EQ(sql_literal(name), "'\xE6\x97\xA5\xE6\x9C\xAC''\xF0\x9F\x98\x80'");
  EXPECT_EQ(sql_identifier(name), "\"\xE6\x97\xA5\xE6\x9C\xAC'\xF0\x9F\x98\x80\"");
}

}  // namespace
}  // namespace relaybus::core
