// The constants the SQL scripts repeat (issue 10: constants have one source). The lane
// count, the retry defaults and the in-flight cap live in src/core; the extension scripts
// in sql/parts/ spell some of them out (CHECKs, DEFAULTs, generate_series). This test reads
// the scripts and fails when one of them disagrees with core, so a change of a constant
// cannot leave a script behind. Runs from the repository root (make unit does).
#include "core/claim_request.hpp"
#include "core/lane.hpp"
#include "core/retry_policy.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace relaybus::core {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path << " (run from the repository root)";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every match of `pattern` in `text`, first group.
std::vector<std::string> all(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it)
    out.push_back((*it)[1].str());
  return out;
}

const char* const kParts[] = {"sql/parts/schema-0.2.0.sql", "sql/parts/lanes-and-history-0.2.0.sql",
                              "sql/parts/api-0.2.0.sql",
                              "sql/parts/upgrade-0.1.0-0.2.0-before.sql"};

TEST(SqlConstantsTest, EveryLaneCheckAndSeriesUsesTheLaneCount) {
  int checks = 0;
  int series = 0;
  for (const char* part : kParts) {
    const std::string sql = read(part);
    for (const auto& bound : all(sql, R"(lane >= 0 AND lane < (\d+))")) {
      EXPECT_EQ(std::stoi(bound), kLaneCount) << part;
      ++checks;
    }
    for (const auto& last : all(sql, R"(generate_series\(0, (\d+)\))")) {
      EXPECT_EQ(std::stoi(last), kLaneCount - 1) << part;
      ++series;
    }
  }
  EXPECT_EQ(checks, 3) << "lanes.lane, deliveries.lane (fresh and upgraded)";
  EXPECT_EQ(series, 1) << "create_lanes";
}

TEST(SqlConstantsTest, RetryDefaultsOfTheTableAndOfSubscribeAreCores) {
  const RetryPolicy defaults;
  ASSERT_EQ(defaults.backoff_base_us, 1'000'000) << "update the literals below with core";
  ASSERT_EQ(defaults.backoff_max_us, 3'600'000'000);
  const std::string schema = read("sql/parts/schema-0.2.0.sql");
  const std::string api = read("sql/parts/api-0.2.0.sql");
  EXPECT_EQ(all(schema, R"(max_attempts integer NOT NULL DEFAULT (\d+))"),
            std::vector<std::string>{std::to_string(defaults.max_attempts)});
  EXPECT_EQ(all(api, R"(max_attempts integer DEFAULT (\d+))"),
            std::vector<std::string>{std::to_string(defaults.max_attempts)});
  EXPECT_EQ(all(schema, R"(backoff_base interval NOT NULL DEFAULT '([^']+)')"),
            std::vector<std::string>{"1 second"});
  EXPECT_EQ(all(schema, R"(backoff_max  interval NOT NULL DEFAULT '([^']+)')"),
            std::vector<std::string>{"1 hour"});
  EXPECT_EQ(all(api, R"(backoff_base interval DEFAULT '([^']+)')"),
            std::vector<std::string>{"1 second"});
  EXPECT_EQ(all(api, R"(backoff_max interval DEFAULT '([^']+)')"),
            std::vector<std::string>{"1 hour"});
}

}  // namespace
}  // namespace relaybus::core
