// The buckets of relaybus's publish-to-completion latency histogram (per handler, kept by
// the PostgreSQL store in shared memory and reported by relaybus.completion_latency()).
// Fixed bounds, as Prometheus histograms have them: from a millisecond, where a worker
// that keeps up completes, to an hour, beyond which a delivery is stuck or was delayed on
// purpose; the last bucket takes everything slower.
#pragma once

#include <cstdint>

namespace relaybus::core {

// Upper bounds in microseconds, inclusive (a latency equal to a bound falls in its
// bucket, as Prometheus's `le` means), ascending; the bucket after the last bound is +Inf.
inline constexpr std::int64_t kLatencyBoundsUs[] = {
    1'000,      2'000,      5'000,      10'000,      20'000,        50'000,
    100'000,    200'000,    500'000,    1'000'000,   2'000'000,     5'000'000,
    10'000'000, 30'000'000, 60'000'000, 300'000'000, 1'800'000'000, 3'600'000'000LL};
inline constexpr int kLatencyBoundCount =
    static_cast<int>(sizeof(kLatencyBoundsUs) / sizeof(kLatencyBoundsUs[0]));
// Bounds plus the +Inf bucket.
inline constexpr int kLatencyBucketCount = kLatencyBoundCount + 1;

// The bucket of a latency: the first whose bound is at least it, or the +Inf bucket
// (kLatencyBoundCount). A negative latency (a clock step back, a token's publish time
// ahead of the completing server's clock) counts as 0, in the first bucket.
int latency_bucket(std::int64_t latency_us) noexcept;

}  // namespace relaybus::core
