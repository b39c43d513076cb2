#include <gtest/gtest.h>

#include <string>

#include "client/prometheus_text.hpp"

using relaybus::client::DispatcherCounters;
using relaybus::client::prometheus_text;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(PrometheusText, EachCounterIsAFamilyWithASamplePerWorker) {
  DispatcherCounters a;
  a.claims = 3;
  a.claimed = 40;
  a.succeeded = 38;
  a.failed = 2;
  a.buried = 1;
  a.wakeups = 5;
  DispatcherCounters b;
  b.claimed = 7;
  const std::string text = prometheus_text({{"mailer-1", a}, {"mailer-2", b}});
  EXPECT_NE(text.find("# TYPE relaybus_worker_claimed_total counter\n"
                      "relaybus_worker_claimed_total{worker=\"mailer-1\"} 40\n"
                      "relaybus_worker_claimed_total{worker=\"mailer-2\"} 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("relaybus_worker_buried_total{worker=\"mailer-1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("relaybus_worker_lost_total{worker=\"mailer-2\"} 0\n"), std::string::npos);
  // Every field of DispatcherCounters, each family once whatever the number of workers.
  for (const char* field :
       {"claims", "claimed", "succeeded", "failed", "buried", "lost", "released", "wakeups"}) {
    const std::string name = std::string("relaybus_worker_") + field + "_total";
    EXPECT_EQ(count(text, "# TYPE " + name + " counter\n"), 1u) << field;
    EXPECT_EQ(count(text, "# HELP " + name + " "), 1u) << field;
    EXPECT_EQ(count(text, "\n" + name + "{"), 2u) << field;
  }
  EXPECT_EQ(text.back(), '\n');
}

TEST(PrometheusText, AWorkerNameIsEscapedAsTheFormatRequires) {
  // A name may hold anything a worker name does: quotes, backslashes, a newline must not
  // end the sample line or the label value early.
  const std::string text = prometheus_text({{"a\"b\\c\nd", DispatcherCounters{}}});
  EXPECT_NE(text.find("relaybus_worker_claims_total{worker=\"a\\\"b\\\\c\\nd\"} 0\n"),
            std::string::npos)
      << text;
  for (std::size_t at = 0, next; at < text.size(); at = next + 1) {
    next = text.find('\n', at);
    const std::string line = text.substr(at, next - at);
    EXPECT_TRUE(line.rfind("# ", 0) == 0 || line.rfind("relaybus_worker_", 0) == 0) << line;
  }
}

TEST(PrometheusText, NoWorkerGivesTheFamiliesWithoutSamples) {
  const std::string text = prometheus_text({});
  EXPECT_EQ(count(text, "# TYPE "), 8u);
  EXPECT_EQ(count(text, "{worker="), 0u);
}
