// The publish-to-completion histogram's buckets: Prometheus's `le` is inclusive, the
// bounds ascend, and whatever is slower than the last bound lands in the +Inf bucket.
#include "core/latency_histogram.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace relaybus::core {
namespace {

TEST(LatencyHistogramTest, BoundsAscend) {
  for (int i = 1; i < kLatencyBoundCount; ++i)
    EXPECT_LT(kLatencyBoundsUs[i - 1], kLatencyBoundsUs[i]) << i;
  EXPECT_EQ(kLatencyBoundsUs[0], 1'000);
  EXPECT_EQ(kLatencyBoundsUs[kLatencyBoundCount - 1], 3'600'000'000LL);
}

TEST(LatencyHistogramTest, ABoundIsInItsOwnBucket) {
  for (int i = 0; i < kLatencyBoundCount; ++i) {
    EXPECT_EQ(latency_bucket(kLatencyBoundsUs[i]), i);
    EXPECT_EQ(latency_bucket(kLatencyBoundsUs[i] + 1), i + 1);
  }
}

TEST(LatencyHistogramTest, EdgesGoToTheFirstAndLastBuckets) {
  EXPECT_EQ(latency_bucket(0), 0);
  EXPECT_EQ(latency_bucket(-5'000'000), 0);
  EXPECT_EQ(latency_bucket(std::numeric_limits<std::int64_t>::min()), 0);
  EXPECT_EQ(latency_bucket(std::numeric_limits<std::int64_t>::max()), kLatencyBoundCount);
  EXPECT_EQ(kLatencyBucketCount, kLatencyBoundCount + 1);
}

}  // namespace
}  // namespace relaybus::core
