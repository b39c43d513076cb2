// How long a delivery that fails every time takes to become a dead letter, with the
// default retry policy: docs/worker-guide.md ("How long until a failing delivery is dead")
// states the figure and shows the sum; this test computes it with core's retry rule, the
// one every store applies, and fails when the page says another (a default changed, or the
// page was edited). Runs from the repository root (make unit does).
#include "core/retry_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace relaybus::core {
namespace {

constexpr std::int64_t kSecondUs = 1'000'000;

std::string read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path << " (run from the repository root)";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The section of the page that states the figure, up to the next heading of its level or
// above, with each run of white space (line breaks included) as one space.
std::string section(const std::string& page, const std::string& heading) {
  const std::size_t start = page.find(heading);
  if (start == std::string::npos) return "";
  const std::size_t end = std::min(page.find("\n## ", start + heading.size()),
                                   page.find("\n### ", start + heading.size()));
  return std::regex_replace(page.substr(start, end - start), std::regex("\\s+"), " ");
}

// 47295 -> "47,295", as the page writes numbers.
std::string thousands(std::int64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

// 47295 -> "13 h 8 min 15 s", 511 -> "8 min 31 s".
std::string duration(std::int64_t seconds) {
  std::ostringstream s;
  if (seconds >= 3600) s << seconds / 3600 << " h ";
  if (seconds >= 60) s << seconds / 60 % 60 << " min ";
  s << seconds % 60 << " s";
  return s.str();
}

// A delivery that fails every time, under `policy`: its failures until it is dead, and the
// backoffs it waits on the way, those below the cap and those at it apart.
struct Schedule {
  int failures = 0;
  int capped_waits = 0;
  std::int64_t uncapped_us = 0;
  std::int64_t capped_us = 0;
  std::int64_t total_us() const { return uncapped_us + capped_us; }
};

Schedule fail_until_dead(const RetryPolicy& policy) {
  Schedule s;
  std::int32_t attempts = 0;
  for (;;) {
    const FailureOutcome o = after_failed_attempt(policy, attempts);
    ++s.failures;
    attempts = o.attempts;
    if (o.dead) return s;
    if (o.delay_us >= policy.backoff_max_us) {
      ++s.capped_waits;
      s.capped_us += o.delay_us;
    } else {
      s.uncapped_us += o.delay_us;
    }
  }
}

const std::string kPage = "docs/worker-guide.md";
const std::string kHeading = "### How long until a failing delivery is dead";

TEST(DeadLetterTimeTest, TheDefaultsTakeWhatTheWorkerGuideSays) {
  const RetryPolicy defaults;
  const Schedule s = fail_until_dead(defaults);
  EXPECT_EQ(s.failures, defaults.max_attempts);
  // Every wait is whole seconds with the defaults; the page counts in seconds.
  ASSERT_EQ(s.total_us() % kSecondUs, 0);
  const std::int64_t uncapped = s.uncapped_us / kSecondUs;
  const std::int64_t capped_each = defaults.backoff_max_us / kSecondUs;
  const std::int64_t total = s.total_us() / kSecondUs;

  const std::string text = section(read(kPage), kHeading);
  ASSERT_FALSE(text.empty()) << kPage << " has no \"" << kHeading << "\"";
  const std::string expected[] = {
      "runs " + std::to_string(s.failures) + " times",
      "The " + std::to_string(s.failures) + "th failure makes",
      "the " + std::to_string(s.failures - 1) + " failures before it",
      "= " + thousands(uncapped) + " s",
      std::to_string(s.capped_waits) + " x " + thousands(capped_each) + " = " +
          thousands(s.capped_us / kSecondUs) + " s",
      thousands(uncapped) + " + " + thousands(s.capped_us / kSecondUs) + " = " +
          thousands(total) + " s",
      "**" + duration(total) + "**",
      "dead after " + std::to_string(defaults.max_attempts) + " takeovers",
  };
  for (const std::string& figure : expected)
    EXPECT_NE(text.find(figure), std::string::npos)
        << kPage << " should say \"" << figure << "\" (computed with src/core's retry rule)";
}

TEST(DeadLetterTimeTest, TheDefaultsTakeAboutThirteenHours) {
  // The figure the getting-started guide and the clients' READMEs round to.
  const std::int64_t total_s = fail_until_dead(RetryPolicy{}).total_us() / kSecondUs;
  EXPECT_EQ(total_s / 3600, 13);
  EXPECT_EQ(total_s, 47'295);
}

TEST(DeadLetterTimeTest, TheSmallerBudgetTheWorkerGuideSuggests) {
  RetryPolicy ten;
  ten.max_attempts = 10;
  const Schedule s = fail_until_dead(ten);
  EXPECT_EQ(s.capped_waits, 0);
  const std::int64_t total = s.total_us() / kSecondUs;
  const std::string figure = "`max_attempts => 10` (2^" + std::to_string(ten.max_attempts - 1) +
                             " - 1 = " + thousands(total) + " s of backoff, " + duration(total) +
                             ")";
  const std::string text = section(read(kPage), kHeading);
  EXPECT_NE(text.find(figure), std::string::npos) << kPage << " should say \"" << figure << "\"";
}

}  // namespace
}  // namespace relaybus::core
