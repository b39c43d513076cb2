// What a benchmark run measures in the store while it runs, for either store: how much work
// is left, and how much log (PostgreSQL's WAL, MongoDB's oplog) the window wrote.
#pragma once

#include <memory>
#include <string>

namespace relaybus::bench {

struct LogUse {
  long long bytes = 0;
  long long entries = -1;  // -1: not measured (PostgreSQL)
};

class BenchMeter {
 public:
  virtual ~BenchMeter() = default;
  // Deliveries not finished yet: pending, in flight or waiting for a retry (not dead).
  virtual long long unfinished() = 0;
  // Starts the measurement window.
  virtual void mark() = 0;
  // The log written since mark(). The whole server's: run nothing else meanwhile.
  virtual LogUse since_mark() = 0;
  // "wal" or "oplog": the summary's keys are <name>_bytes and <name>_entries.
  virtual const char* log_name() const = 0;
};

// For the store `db` names (see store_uri.hpp).
std::unique_ptr<BenchMeter> bench_meter(const std::string& db);

#ifdef RELAYBUS_WITH_MONGO
// The MongoDB meter (mongo_meter.cpp): deliveries with status "pending", and the entries
// of local.oplog.rs after the mark with their BSON size ($bsonSize: MongoDB 4.4 or later;
// reading the oplog needs a role that may read the local database, e.g. clusterMonitor).
std::unique_ptr<BenchMeter> mongo_meter(const std::string& uri);
#endif

}  // namespace relaybus::bench
