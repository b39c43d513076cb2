// The tool's listings in both forms: the human table (the default) and --json, one document
// on stdout. The JSON field names are part of the tool's interface (docs/cli.md documents
// them): add fields, never rename or remove one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "store/store.hpp"

namespace relaybus::cli {

enum class Format { kHuman, kJson };

// Events stored for no handler, of one type (relaybus.unrouted_counters()).
struct UnroutedType {
  std::string type;
  std::int64_t events = 0;
};

// relaybus stats:
//   {"handlers": [{"handler", "pending", "processing", "dead", "completed",
//                  "oldest_pending": RFC 3339 time or null}],
//    "unrouted": [{"type", "events"}] (only where the store counts them)}
void print_statistics(const std::vector<store::HandlerStatistics>& stats,
                      const std::optional<std::vector<UnroutedType>>& unrouted, Format format);

// relaybus dead list:
//   {"deliveries": [{"event_id", "handler", "type", "key": string or null, "status",
//                    "attempts", "last_error": string or null, "created_at",
//                    "available_at": RFC 3339 time or null}]}
void print_deliveries(const std::vector<store::ListedDelivery>& deliveries, Format format);

// relaybus dead requeue: "requeued N", or {"requeued": N}.
void print_requeued(std::int64_t count, Format format);

}  // namespace relaybus::cli
