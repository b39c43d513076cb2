#include "counters.hpp"

#include "guard.hpp"
#include "shared_memory.hpp"

#include "../core/error.hpp"

extern "C" {
#include "port/atomics.h"
}

namespace relaybus::pg::counters {

namespace {

// One database's counters. database is 0 (InvalidOid) while the slot is free; a backend
// takes one with a compare-and-swap, so no lock is ever needed. since is a TimestampTz:
// when the server started (the shared memory was made) or the counters were last reset.
struct DatabaseCounters {
  pg_atomic_uint32 database;
  pg_atomic_uint64 since;
  pg_atomic_uint64 values[kCounterCount];
};

struct SharedState {
  DatabaseCounters databases[kMaxDatabases];
};

SharedState* shared = nullptr;

// The deltas not yet in shared memory, one frame per subtransaction nesting level that
// counted something, innermost last. A frame is pushed only by a count at a deeper level
// than the innermost frame's, so the stack is as deep as the levels that counted at once
// (a claim inside an in-database handler's batch and a savepoint: three), not as deep as
// the nesting. Beyond kMaxFrames levels, a count goes to the innermost frame there is (an
// outer level's): a rollback of the deeper level then keeps it. No real caller nests so.
struct Frame {
  int level;
  std::uint64_t values[kCounterCount];
};
constexpr int kMaxFrames = 16;
Frame frames[kMaxFrames];
int depth = 0;

void attach_shared_memory(void* memory, bool created) {
  shared = static_cast<SharedState*>(memory);
  if (!created) return;
  const TimestampTz now = GetCurrentTimestamp();
  for (auto& db : shared->databases) {
    pg_atomic_init_u32(&db.database, InvalidOid);
    pg_atomic_init_u64(&db.since, static_cast<std::uint64_t>(now));
    for (auto& value : db.values) pg_atomic_init_u64(&value, 0);
  }
}

// This database's slot, taken if `take` and it has none yet; nullptr when every slot is
// another database's. A backend stays in one database, so the answer is kept.
DatabaseCounters* this_database(bool take) noexcept {
  static DatabaseCounters* mine = nullptr;
  if (mine != nullptr) return mine;
  if (shared == nullptr || !OidIsValid(MyDatabaseId)) return nullptr;
  for (auto& db : shared->databases)
    if (pg_atomic_read_u32(&db.database) == MyDatabaseId) return mine = &db;
  if (!take) return nullptr;
  for (auto& db : shared->databases) {
    uint32 expected = InvalidOid;
    if (pg_atomic_compare_exchange_u32(&db.database, &expected, MyDatabaseId) ||
        expected == MyDatabaseId)
      return mine = &db;
  }
  return nullptr;
}

// At the commit of the top-level transaction: what is left goes to shared memory. Must
// not fail. Counts of a database with no slot left are dropped (counters() says so).
void flush() noexcept {
  if (depth == 0) return;
  std::uint64_t total[kCounterCount] = {};
  for (int f = 0; f < depth; ++f)
    for (int c = 0; c < kCounterCount; ++c) total[c] += frames[f].values[c];
  depth = 0;
  DatabaseCounters* db = this_database(/*take=*/true);
  if (db == nullptr) return;
  for (int c = 0; c < kCounterCount; ++c)
    if (total[c] != 0) pg_atomic_fetch_add_u64(&db->values[c], static_cast<int64>(total[c]));
}

void at_transaction_end(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    // A prepared transaction is counted when it is prepared: its COMMIT PREPARED may come
    // from any backend, which cannot know this one's deltas.
    case XACT_EVENT_PREPARE:
      flush();
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
      depth = 0;
      break;
    default:
      break;
  }
}

// Called while the ending subtransaction is still the current one, so the nesting level
// is its own.
void at_subtransaction_end(SubXactEvent event, SubTransactionId, SubTransactionId, void*) {
  if (depth == 0) return;
  if (event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB) return;
  const int level = GetCurrentTransactionNestLevel();
  if (event == SUBXACT_EVENT_ABORT_SUB) {
    while (depth > 0 && frames[depth - 1].level >= level) --depth;
    return;
  }
  Frame& inner = frames[depth - 1];
  if (inner.level < level) return;  // this subtransaction counted nothing
  if (depth >= 2 && frames[depth - 2].level == level - 1) {
    for (int c = 0; c < kCounterCount; ++c) frames[depth - 2].values[c] += inner.values[c];
    --depth;
  } else {
    inner.level = level - 1;
  }
}

// Raises 55000 unless the library was preloaded.
void require_shared_memory() {
  if (shared != nullptr) return;
  pg_call([] {
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("relaybus counters are not available"),
                    errdetail("The counters live in shared memory, which only a library loaded "
                              "through shared_preload_libraries can have."),
                    errhint("Add relaybus to shared_preload_libraries in postgresql.conf and "
                            "restart the server.")));
  });
}

DatabaseCounters& require_slot() {
  require_shared_memory();
  DatabaseCounters* db = this_database(/*take=*/true);
  if (db != nullptr) return *db;
  const int most = kMaxDatabases;
  pg_call([&] {
    ereport(ERROR, (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                    errmsg("relaybus counters are kept for at most %d databases", most),
                    errdetail("Every slot belongs to another database since the server started; "
                              "nothing done in this database is counted."),
                    errhint("Restarting the server frees the slots of databases no longer used.")));
  });
  throw core::Error(core::ErrorCode::kInternal, "relaybus: unreachable");  // ereport raised
}

}  // namespace

void install(bool preloading) {
  if (!preloading) return;
  shared_memory::reserve("relaybus counters", sizeof(SharedState), attach_shared_memory);
  RegisterXactCallback(at_transaction_end, nullptr);
  RegisterSubXactCallback(at_subtransaction_end, nullptr);
}

void add(Counter c, std::uint64_t n) noexcept {
  if (shared == nullptr || n == 0) return;
  const int level = GetCurrentTransactionNestLevel();
  if ((depth == 0 || frames[depth - 1].level < level) && depth < kMaxFrames) {
    Frame& frame = frames[depth++];
    frame.level = level;
    for (auto& value : frame.values) value = 0;
  }
  frames[depth - 1].values[c] += n;
}

namespace {

Datum counters_body(FunctionCallInfo fcinfo) {
  DatabaseCounters& db = require_slot();
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg_call([&] {
    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    const TimestampTz since = static_cast<TimestampTz>(pg_atomic_read_u64(&db.since));
    for (int c = 0; c < kCounterCount; ++c) {
      Datum values[3] = {CStringGetTextDatum(kNames[c]),
                         Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&db.values[c]))),
                         TimestampTzGetDatum(since)};
      bool nulls[3] = {false, false, false};
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
  });
  return (Datum)0;
}

// Not transactional: the counters are zeroed at once, and a rollback does not bring them
// back. A count that commits concurrently lands before or after the reset, never lost in
// between.
Datum reset_counters_body(FunctionCallInfo) {
  DatabaseCounters& db = require_slot();
  const TimestampTz now = GetCurrentTimestamp();
  for (auto& value : db.values) pg_atomic_write_u64(&value, 0);
  pg_atomic_write_u64(&db.since, static_cast<std::uint64_t>(now));
  return TimestampTzGetDatum(now);
}

}  // namespace

}  // namespace relaybus::pg::counters

RELAYBUS_SQL_FUNCTION(relaybus_counters, relaybus::pg::counters::counters_body)
RELAYBUS_SQL_FUNCTION(relaybus_reset_counters, relaybus::pg::counters::reset_counters_body)
