// Validation of what a worker asks for, shared by every store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace relaybus::core {

// claim's batch_size bound. No 0.2.0 SQL repeats it (claim is C++); the 0.1.0 baseline
// spells out its own 10000, dropped by the upgrade, so not tied to this.
inline constexpr int kMaxBatchSize = 10'000;
// Longest lease of claim and extend_lease. One source: scripts/build-sql writes it into
// the 0.2.0 scripts as @LEASE_MAX@ (as interval text, '1 day': their comments). The 0.1.0
// baseline's own '1 day' is dropped by the upgrade, so not tied to this.
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

// Names (handlers, event types, event ids, keys, workers, holders) must be non-empty and
// at most this many bytes. No 0.2.0 SQL repeats it (every entry point taking a name is
// C++ and calls validate_name); the 0.1.0 baseline's own 1000 (_check_name) is dropped by
// the upgrade, so not tied to this.
inline constexpr std::size_t kMaxNameLength = 1000;

// Names must be non-empty and at most kMaxNameLength bytes.
void validate_name(std::string_view what, std::string_view value);

}  // namespace relaybus::core
