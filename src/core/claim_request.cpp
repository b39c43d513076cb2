#include "claim_request.hpp"

#include "error.hpp"

#include <string>

namespace relaybus::core {

void validate_name(std::string_view what, std::string_view value) {
  if (value.empty())
    throw Error(ErrorCode::kInvalidParameter, std::string(what) + " must not be empty");
  if (value.size() > kMaxNameLength)
    throw Error(ErrorCode::kInvalidParameter,
                std::string(what) + " is longer than " + std::to_string(kMaxNameLength) + " bytes");
}

void validate_worker(std::string_view worker) {
  validate_name("worker", worker);
}

void validate_batch_size(int batch_size) {
  if (batch_size < 1 || batch_size > kMaxBatchSize)
    throw Error(ErrorCode::kInvalidParameter, "batch_size must be between 1 and " +
                                                 std::to_string(kMaxBatchSize) + ", got " +
                                                 std::to_string(batch_size));
}

void validate_lease(std::int64_t lease_us) {
  if (lease_us <= 0) throw Error(ErrorCode::kInvalidParameter, "lease must be positive");
  if (lease_us > kMaxLeaseUs)
    throw Error(ErrorCode::kInvalidParameter, "lease must be at most 1 day");
}

}  // namespace relaybus::core
