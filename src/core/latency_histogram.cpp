#include "latency_histogram.hpp"

namespace relaybus::core {

int latency_bucket(std::int64_t latency_us) noexcept {
  int bucket = 0;
  while (bucket < kLatencyBoundCount && latency_us > kLatencyBoundsUs[bucket]) ++bucket;
  return bucket;
}

}  // namespace relaybus::core
