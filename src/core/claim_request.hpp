// Validation of what a worker asks for, shared by every store.
#pragma once

#include <cstdint>
#include <string_view>

namespace relaybus::core {

inline constexpr int kMaxBatchSize = 10'000;
inline constexpr std::int64_t kMaxLeaseUs = 24LL * 3600 * 1'000'000;  // one day

// Throws core::Error: empty worker name, batch size outside 1..kMaxBatchSize, lease not
// positive or longer than a day.
void validate_worker(std::string_view worker);
void validate_batch_size(int batch_size);
void validate_lease(std::int64_t lease_us);

// The in-database handler workers claim as kSqlHandlerWorkerPrefix + their slot number.
// Nobody else may use such a name (the stores enforce who "nobody else" is).
inline constexpr std::string_view kSqlHandlerWorkerPrefix = "relaybus-sql-";
inline bool is_sql_handler_worker_name(std::string_view worker) {
  return worker.substr(0, kSqlHandlerWorkerPrefix.size()) == kSqlHandlerWorkerPrefix;
}

// Names (handlers, event types, event ids) must be non-empty and of sane length.
void validate_name(std::string_view what, std::string_view value);

}  // namespace relaybus::core
