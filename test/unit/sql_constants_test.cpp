// The constants the SQL scripts repeat (issue 10: constants have one source). The lane
// count, the in-flight cap, the lease and backoff bounds, the sql_timeout bounds and the
// retry defaults live in src/core; scripts/build-sql writes them into the 0.2.0 scripts
// from the core headers (@NAME@ placeholders in sql/parts/). This test checks the three
// things build-sql cannot: that the 0.2.0 parts use the placeholders rather than spelling a
// value out, that the committed generated scripts agree with core (a header changed
// without scripts/build-sql), and that what the verbatim 0.1.0 baseline leaves behind after
// the upgrade (the subscriptions DEFAULTs) agrees with core. Runs from the repository root
// (make unit does).
#include "core/claim_request.hpp"
#include "core/lane.hpp"
#include "core/lane_lease.hpp"
#include "core/retry_policy.hpp"
#include "core/sql_timeout.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
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

// Interval text as scripts/build-sql writes it ("1 second", "365 days", "1 ms"), in
// microseconds; -1 when it is not of that form.
std::int64_t interval_us(const std::string& text) {
  static const std::map<std::string, std::int64_t> kUnits = {
      {"us", 1},
      {"ms", 1'000},
      {"second", 1'000'000},
      {"seconds", 1'000'000},
      {"minute", 60'000'000},
      {"minutes", 60'000'000},
      {"hour", 3'600'000'000},
      {"hours", 3'600'000'000},
      {"day", 86'400'000'000},
      {"days", 86'400'000'000}};
  std::smatch m;
  if (!std::regex_match(text, m, std::regex(R"((\d+) ([a-z]+))"))) return -1;
  const auto unit = kUnits.find(m[2].str());
  return unit == kUnits.end() ? -1 : std::stoll(m[1].str()) * unit->second;
}

std::vector<std::int64_t> intervals(const std::vector<std::string>& texts) {
  std::vector<std::int64_t> out;
  for (const auto& t : texts) out.push_back(interval_us(t));
  return out;
}

using Ints = std::vector<std::int64_t>;

// `values` as expected when each is `value` and there is at least one: a bound stated in a
// header comment appears twice in a generated script, in the header and in the COMMENT ON
// made from it (scripts/sql-comments.awk), and both must hold core's value.
template <typename T>
std::vector<T> each(const std::vector<T>& values, const T& value) {
  return std::vector<T>(values.empty() ? 1 : values.size(), value);
}

const char* const kParts02[] = {"sql/parts/schema-0.2.0.sql",
                                "sql/parts/lanes-and-history-0.2.0.sql",
                                "sql/parts/internal-0.2.0.sql",
                                "sql/parts/api-0.2.0.sql",
                                "sql/parts/upgrade-0.1.0-0.2.0-before.sql",
                                "sql/parts/upgrade-0.1.0-0.2.0-after.sql",
                                "sql/parts/upgrade-0.1.0-0.2.0-lanes.sql",
                                "sql/parts/delivery-indexes-0.2.0.sql"};

// A value written out in a 0.2.0 part would not follow core: each of these must be a
// placeholder there.
TEST(SqlConstantsTest, The020PartsTakeTheConstantsFromTheBuild) {
  const std::string literal_lane_check = R"(lane < (\d+))";
  const std::string literal_series = R"(generate_series\(0, (\d+)\))";
  const std::string literal_max_attempts = R"(max_attempts integer (?:NOT NULL )?DEFAULT (\d+))";
  const std::string literal_backoff = R"(backoff_(?:base|max) +interval (?:NOT NULL )?DEFAULT '(\d+))";
  for (const char* part : kParts02) {
    const std::string sql = read(part);
    for (const auto& p : {literal_lane_check, literal_series, literal_max_attempts, literal_backoff})
      EXPECT_EQ(all(sql, p), std::vector<std::string>{}) << part << ": use the placeholder";
  }
  const std::string schema = read("sql/parts/schema-0.2.0.sql");
  const std::string internal = read("sql/parts/internal-0.2.0.sql");
  EXPECT_EQ(all(schema + read("sql/parts/lanes-and-history-0.2.0.sql") +
                    read("sql/parts/upgrade-0.1.0-0.2.0-before.sql"),
                R"(CHECK \(lane >= 0 AND lane < (@LANE_COUNT@)\))")
                .size(),
            3u)
      << "lanes.lane, deliveries.lane (fresh and upgraded)";
  EXPECT_EQ(all(internal, R"(generate_series\(0, (@LANE_MAX@)\))").size(), 1u) << "create_lanes";
}

// The committed scripts, as scripts/build-sql wrote them: each must hold core's values
// (else the headers changed and scripts/build-sql was not run).
TEST(SqlConstantsTest, TheGeneratedScriptsHoldCoresValues) {
  const RetryPolicy defaults;
  for (const char* script : {"sql/relaybus--0.2.0.sql", "sql/relaybus--0.1.0--0.2.0.sql"}) {
    SCOPED_TRACE(script);
    const std::string sql = read(script);
    EXPECT_EQ(all(sql, R"(CHECK \(lane >= 0 AND lane < (\d+)\))"),
              std::vector<std::string>(2, std::to_string(kLaneCount)))
        << "lanes.lane and deliveries.lane";
    EXPECT_EQ(all(sql, R"(generate_series\(0, (\d+)\) n)"),
              std::vector<std::string>{std::to_string(kLaneCount - 1)})
        << "create_lanes";
    EXPECT_EQ(all(sql, R"(max_attempts integer DEFAULT (\d+))"),
              std::vector<std::string>{std::to_string(defaults.max_attempts)})
        << "subscribe";
    EXPECT_EQ(intervals(all(sql, R"(backoff_base interval DEFAULT '([^']+)')")),
              Ints{defaults.backoff_base_us})
        << "subscribe";
    EXPECT_EQ(intervals(all(sql, R"(backoff_max interval DEFAULT '([^']+)')")),
              Ints{defaults.backoff_max_us})
        << "subscribe";
    const auto in_flight = all(sql, R"(in-flight event ids \(at most (\d+):)");
    EXPECT_EQ(in_flight, each(in_flight, std::to_string(kMaxInFlightPerLane)));
    const auto lease = intervals(all(sql, R"(lease: more than 0, at most ([^(]+) \(22023)"));
    EXPECT_EQ(lease, each(lease, kMaxLeaseUs));
    const auto timeout_min = intervals(all(sql, R"(sql_timeout \(([^.]+)\.\.)"));
    EXPECT_EQ(timeout_min, each(timeout_min, kMinSqlTimeoutUs));
    const auto timeout_max = intervals(all(sql, R"(sql_timeout \([^.]+\.\.([^;]+);)"));
    EXPECT_EQ(timeout_max, each(timeout_max, kMaxSqlTimeoutUs));
    const auto backoff = intervals(all(sql, R"(backoff_max: 0\.\.([^,]+),)"));
    EXPECT_EQ(backoff, each(backoff, kMaxBackoffUs));
  }
  const std::string fresh = read("sql/relaybus--0.2.0.sql");
  EXPECT_EQ(all(fresh, R"(max_attempts integer NOT NULL DEFAULT (\d+))"),
            std::vector<std::string>{std::to_string(defaults.max_attempts)});
  EXPECT_EQ(intervals(all(fresh, R"(backoff_base interval NOT NULL DEFAULT '([^']+)')")),
            Ints{defaults.backoff_base_us});
  EXPECT_EQ(intervals(all(fresh, R"(backoff_max  interval NOT NULL DEFAULT '([^']+)')")),
            Ints{defaults.backoff_max_us});
}

// The 0.1.0 baseline is the script 0.1.0 shipped, byte for byte, so build-sql does not
// substitute it. The upgrade drops its functions (their own 1000-byte names, batch sizes
// up to 10000, leases up to 1 day and retry fallbacks are 0.1.0's, not core's), but its
// subscriptions table stays, DEFAULTs included: an upgraded database subscribes with them
// unless the upgrade sets them again. So they must be core's, or the upgrade must ALTER them.
TEST(SqlConstantsTest, TheSubscriptionDefaultsOutliveTheUpgradeOnlyWhenTheyAreCores) {
  const RetryPolicy defaults;
  const std::string baseline = read("sql/parts/baseline-0.1.0.sql");
  std::string upgrade;
  for (const char* part : kParts02)
    if (std::string(part).find("upgrade-") != std::string::npos) upgrade += read(part);
  const auto reset = [&](const std::string& column) {
    return std::regex_search(upgrade, std::regex("ALTER COLUMN " + column + " SET DEFAULT"));
  };
  const auto max_attempts = all(baseline, R"(max_attempts integer NOT NULL DEFAULT (\d+))");
  ASSERT_EQ(max_attempts.size(), 1u);
  if (!reset("max_attempts"))
    EXPECT_EQ(std::stoi(max_attempts[0]), defaults.max_attempts)
        << "0.1.0's DEFAULT survives the upgrade: set it in upgrade-0.1.0-0.2.0-after.sql";
  const auto base = all(baseline, R"(backoff_base interval NOT NULL DEFAULT '([^']+)')");
  ASSERT_EQ(base.size(), 1u);
  if (!reset("backoff_base"))
    EXPECT_EQ(interval_us(base[0]), defaults.backoff_base_us)
        << "0.1.0's DEFAULT survives the upgrade: set it in upgrade-0.1.0-0.2.0-after.sql";
  const auto max = all(baseline, R"(backoff_max  interval NOT NULL DEFAULT '([^']+)')");
  ASSERT_EQ(max.size(), 1u);
  if (!reset("backoff_max"))
    EXPECT_EQ(interval_us(max[0]), defaults.backoff_max_us)
        << "0.1.0's DEFAULT survives the upgrade: set it in upgrade-0.1.0-0.2.0-after.sql";
}

TEST(SqlConstantsTest, IntervalTextIsReadAsBuildSqlWritesIt) {
  EXPECT_EQ(interval_us("1 ms"), 1'000);
  EXPECT_EQ(interval_us("1 second"), 1'000'000);
  EXPECT_EQ(interval_us("2 hours"), 7'200'000'000);
  EXPECT_EQ(interval_us("365 days"), kMaxBackoffUs);
  EXPECT_EQ(interval_us("1 fortnight"), -1);
}

}  // namespace
}  // namespace relaybus::core
