#include "bench_meter.hpp"

#include "bench_processes.hpp"
#include "connection.hpp"
#include "store/store.hpp"
#include "client/tool/store_uri.hpp"

namespace relaybus::bench {

using tool::is_mongodb_uri;
using tool::open_store;

namespace {

// Deliveries not finished yet (pending, in flight, waiting for a retry): by their status
// up to 0.2, where a delivery row lives until it is finished; from statistics() from 0.3.0
// on, where delivery rows stay and cursors finish them.
const std::string kUnfinished = std::string("SELECT ") + kHarness +
                                " count(*) FROM relaybus.deliveries "
                                "WHERE status NOT IN ('dead', 'completed')";
const std::string kUnfinishedFromPositions = std::string("SELECT ") + kHarness +
                                             " coalesce(sum(pending + processing), 0)"
                                             " FROM relaybus.statistics()";
const std::string kHasPositions =
    std::string("SELECT ") + kHarness + " to_regclass('relaybus.exceptions') IS NOT NULL";
const std::string kLsn = std::string("SELECT ") + kHarness + " pg_current_wal_insert_lsn()::text";
const std::string kLsnDiff =
    std::string("SELECT ") + kHarness + " pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint";

class PgMeter final : public BenchMeter {
 public:
  explicit PgMeter(const std::string& conninfo)
      : db_(conninfo),
        unfinished_(db_.scalar(kHasPositions) == "t" ? kUnfinishedFromPositions : kUnfinished) {}
  long long unfinished() override { return std::stoll(db_.scalar(unfinished_)); }
  void mark() override { lsn_ = db_.scalar(kLsn); }
  LogUse since_mark() override {
    LogUse use;
    use.bytes = std::stoll(db_.scalar(kLsnDiff, {db_.scalar(kLsn), lsn_}));
    return use;
  }
  const char* log_name() const override { return "wal"; }

 private:
  Connection db_;
  std::string unfinished_;
  std::string lsn_;
};

}  // namespace

std::unique_ptr<BenchMeter> bench_meter(const std::string& db) {
  if (!is_mongodb_uri(db)) return std::make_unique<PgMeter>(db);
#ifdef RELAYBUS_WITH_MONGO
  return mongo_meter(db);
#else
  open_store(db);  // throws: built without the MongoDB store
  return nullptr;
#endif
}

}  // namespace relaybus::bench
