#include "counters.hpp"
#include "named_counters.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "database_exists.hpp"
#include "guard.hpp"
#include "shared_memory.hpp"

#include "../core/error.hpp"

extern "C" {
#include "access/xact.h"
#include "port/atomics.h"
#include "utils/float.h"
}

namespace relaybus::pg::counters {

namespace {

// One database's counters. database is 0 (InvalidOid) while the slot is free; a backend
// takes one with a compare-and-swap, so no lock is ever needed. since is a TimestampTz:
// when the server started (the shared memory was made), the counters were last reset, or
// the slot was taken back from a dropped database.
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
// the nesting. Beyond kMaxFrames levels a count is dropped: kept in an outer level's frame,
// a rollback of the deeper level would keep it. No real caller nests so.
// A frame's named deltas (per handler, per unrouted type) are few: a transaction touches a
// handful of handlers. The vector keeps its capacity across transactions, so it allocates
// only when a transaction touches more names than any before it in this backend.
struct Frame {
  int level;
  std::uint64_t values[kCounterCount];
  std::vector<named_counters::Delta> named;
};
constexpr int kMaxFrames = 16;
Frame frames[kMaxFrames];
int depth = 0;

// The most names of a kind a frame keeps: a database's share of slots (named_counters.hpp).
// Beyond it a name's counts go to the database's counters only, and no transaction (a
// publish_batch of 50,000 distinct unrouted types) makes a frame, or its lookups, grow
// without bound.
int most_names(named_counters::Kind kind) noexcept {
  return kind == named_counters::Kind::kHandler ? named_counters::kMaxHandlersPerDatabase
                                                : named_counters::kMaxUnroutedTypesPerDatabase;
}

int names_of(const Frame& frame, named_counters::Kind kind) noexcept {
  int n = 0;
  for (const named_counters::Delta& d : frame.named) n += d.kind == kind ? 1 : 0;
  return n;
}

// Adds a committed subtransaction's named delta to its parent's frame. A delta that finds
// no room is dropped (see named_delta).
void merge(Frame& outer, const named_counters::Delta& delta) noexcept {
  named_counters::Delta* into = nullptr;
  for (named_counters::Delta& d : outer.named)
    if (d.kind == delta.kind && d.name == delta.name) into = &d;
  if (into == nullptr) {
    if (names_of(outer, delta.kind) >= most_names(delta.kind)) return;
    try {
      outer.named.push_back(delta);
    } catch (...) {
    }
    return;
  }
  for (int c = 0; c < kCounterCount; ++c) into->values[c] += delta.values[c];
  for (int b = 0; b < core::kLatencyBucketCount; ++b)
    into->latency_buckets[b] += delta.latency_buckets[b];
  into->latency_sum_us += delta.latency_sum_us;
}

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

// A slot being taken back from a dropped database, between the compare-and-swap that
// takes it and the reset of its counters. No database has this OID: template1 is 1,
// template0 4, postgres 5, and the others are at least FirstNormalObjectId.
constexpr uint32 kReclaiming = 2;

// The slot's owner once it is not being reclaimed (the reclaimer resets a few counters).
uint32 settled_owner(DatabaseCounters& db) noexcept {
  uint32 owner = pg_atomic_read_u32(&db.database);
  for (int spins = 0; owner == kReclaiming && spins < 100000; ++spins) {
    pg_spin_delay();
    owner = pg_atomic_read_u32(&db.database);
  }
  return owner;
}

// A slot of a database dropped since it counted, taken for this one with its counters
// reset; nullptr when there is none. Databases come and go (a test suite may create and
// drop hundreds), and without this the 65th of them would have no counters until a
// restart. Two backends of this database reclaiming at once take one slot: the loser of
// the compare-and-swap waits for the winner to finish and finds it this database's.
DatabaseCounters* reclaim() {
  for (auto& db : shared->databases) {
    const uint32 owner = settled_owner(db);
    if (owner == MyDatabaseId) return &db;
    if (owner == InvalidOid || owner == kReclaiming || database_exists(owner)) continue;
    uint32 expected = owner;
    if (!pg_atomic_compare_exchange_u32(&db.database, &expected, kReclaiming)) {
      if (settled_owner(db) == MyDatabaseId) return &db;
      continue;
    }
    pg_atomic_write_u64(&db.since, static_cast<std::uint64_t>(GetCurrentTimestamp()));
    for (auto& value : db.values) pg_atomic_write_u64(&value, 0);
    pg_write_barrier();  // the reset before the slot is seen as this database's
    pg_atomic_write_u32(&db.database, MyDatabaseId);
    return &db;
  }
  return nullptr;
}

// This database's slot, taken if `take` and it has none yet; nullptr when every slot is
// another database's. With `may_reclaim` (inside a transaction, not at its commit: it reads
// the catalog, and may raise), a slot of a database that no longer exists is taken back. A
// backend stays in one database, so the answer is kept.
DatabaseCounters* this_database(bool take, bool may_reclaim = false) {
  static DatabaseCounters* mine = nullptr;
  if (mine != nullptr) return mine;
  if (shared == nullptr || !OidIsValid(MyDatabaseId)) return nullptr;
  for (auto& db : shared->databases)
    if (settled_owner(db) == MyDatabaseId) return mine = &db;
  if (!take) return nullptr;
  for (auto& db : shared->databases) {
    uint32 expected = InvalidOid;
    if (pg_atomic_compare_exchange_u32(&db.database, &expected, MyDatabaseId) ||
        expected == MyDatabaseId)
      return mine = &db;
  }
  if (!may_reclaim) return nullptr;
  return mine = reclaim();
}

// At the commit of the top-level transaction: what is left goes to shared memory. Must
// not fail. Counts of a database with no slot left are dropped (counters() says so).
void flush() noexcept {
  if (depth == 0) return;
  std::uint64_t total[kCounterCount] = {};
  for (int f = 0; f < depth; ++f) {
    for (int c = 0; c < kCounterCount; ++c) total[c] += frames[f].values[c];
    for (named_counters::Delta& delta : frames[f].named) {
      // Counted after resolve (by a transaction callback that runs after it): only a name
      // that has a slot already.
      if (delta.slot < 0) delta.slot = named_counters::existing_slot(delta.kind, delta.name);
      named_counters::add(delta);
    }
  }
  depth = 0;
  DatabaseCounters* db = this_database(/*take=*/true);
  if (db == nullptr) return;
  for (int c = 0; c < kCounterCount; ++c)
    if (total[c] != 0) pg_atomic_fetch_add_u64(&db->values[c], static_cast<int64>(total[c]));
}

// Just before the commit (or PREPARE), inside the transaction still: the catalog can be
// read, and an error (a cancel) aborts the transaction. Finds this database's slot and the
// slot of each name the transaction counted for, so that a transaction that rolls back
// takes none. With every database slot taken, it looks for one of a dropped database at
// most every ten seconds: each look reads the catalog for every slot's database.
void resolve(void*) {
  if (depth == 0) return;
  if (this_database(/*take=*/true) == nullptr) {
    static TimestampTz last_look = 0;
    const TimestampTz now = GetCurrentTimestamp();
    if (last_look == 0 || now - last_look >= 10 * USECS_PER_SEC) {
      last_look = now;
      this_database(/*take=*/true, /*may_reclaim=*/true);
    }
  }
  for (int f = 0; f < depth; ++f)
    for (named_counters::Delta& delta : frames[f].named)
      if (delta.slot < 0) delta.slot = named_counters::slot_of(delta.kind, delta.name);
}

void at_transaction_end(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
    case XACT_EVENT_PARALLEL_PRE_COMMIT:
    case XACT_EVENT_PRE_PREPARE:
      run_guarded_callback(resolve, nullptr);
      break;
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
    Frame& outer = frames[depth - 2];
    for (int c = 0; c < kCounterCount; ++c) outer.values[c] += inner.values[c];
    for (const named_counters::Delta& delta : inner.named) merge(outer, delta);
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
  DatabaseCounters* db = this_database(/*take=*/true, /*may_reclaim=*/true);
  if (db != nullptr) return *db;
  const int most = kMaxDatabases;
  pg_call([&] {
    ereport(ERROR, (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                    errmsg("relaybus counters are kept for at most %d databases", most),
                    errdetail("Every slot belongs to another database that still exists; "
                              "nothing done in this database is counted."),
                    errhint("Dropping a database frees its slot; so does restarting the "
                            "server, for databases where relaybus is no longer used.")));
  });
  throw core::Error(core::ErrorCode::kInternal, "relaybus: unreachable");  // ereport raised
}

}  // namespace

void install(bool preloading) {
  named_counters::install(preloading);
  if (!preloading) return;
  shared_memory::reserve("relaybus counters", sizeof(SharedState), attach_shared_memory);
  RegisterXactCallback(at_transaction_end, nullptr);
  RegisterSubXactCallback(at_subtransaction_end, nullptr);
}

namespace {

// The innermost frame, for a count at the current nesting level: pushed (empty) when the
// innermost one is an outer level's. nullptr when nothing is counted (no shared memory).
Frame* current_frame() noexcept {
  if (shared == nullptr) return nullptr;
  const int level = GetCurrentTransactionNestLevel();
  if (depth == 0 || frames[depth - 1].level < level) {
    if (depth == kMaxFrames) return nullptr;  // dropped: see Frame
    Frame& frame = frames[depth++];
    frame.level = level;
    for (auto& value : frame.values) value = 0;
    frame.named.clear();
  }
  return &frames[depth - 1];
}

// The frame's delta of a name, added if new; nullptr when there is no memory for one more
// (that count is dropped). Its slot is found at the commit (resolve).
named_counters::Delta* named_delta(Frame& frame, named_counters::Kind kind,
                                   std::string_view name) noexcept {
  int same_kind = 0;
  for (named_counters::Delta& delta : frame.named) {
    if (delta.kind != kind) continue;
    if (delta.name == name) return &delta;
    ++same_kind;
  }
  if (same_kind >= most_names(kind)) return nullptr;
  try {
    named_counters::Delta delta;
    delta.kind = kind;
    delta.name = std::string(name);
    frame.named.push_back(std::move(delta));
  } catch (...) {
    return nullptr;
  }
  return &frame.named.back();
}

}  // namespace

void add(Counter c, std::uint64_t n) noexcept {
  if (n == 0) return;
  if (Frame* frame = current_frame()) frame->values[c] += n;
}

void add(Counter c, std::string_view handler, std::uint64_t n) noexcept {
  if (n == 0) return;
  Frame* frame = current_frame();
  if (frame == nullptr) return;
  frame->values[c] += n;
  if (named_counters::Delta* delta = named_delta(*frame, named_counters::Kind::kHandler, handler))
    delta->values[c] += n;
}

void add_unrouted(std::string_view type) noexcept {
  Frame* frame = current_frame();
  if (frame == nullptr) return;
  frame->values[kUnrouted] += 1;
  if (named_counters::Delta* delta = named_delta(*frame, named_counters::Kind::kUnroutedType, type))
    delta->values[kUnrouted] += 1;
}

void add_completion(std::string_view handler, std::int64_t latency_us) noexcept {
  Frame* frame = current_frame();
  if (frame == nullptr) return;
  named_counters::Delta* delta = named_delta(*frame, named_counters::Kind::kHandler, handler);
  if (delta == nullptr) return;
  delta->latency_buckets[core::latency_bucket(latency_us)] += 1;
  delta->latency_sum_us += static_cast<std::uint64_t>(latency_us > 0 ? latency_us : 0);
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
  named_counters::reset_this_database();
  pg_atomic_write_u64(&db.since, static_cast<std::uint64_t>(now));
  return TimestampTzGetDatum(now);
}

// This database's slots of kind, sorted by name (byte order), so that a scrape lists them
// in a stable order.
std::vector<std::pair<std::string, named_counters::Reading>> readings(named_counters::Kind kind) {
  std::vector<std::pair<std::string, named_counters::Reading>> out;
  named_counters::for_each(
      kind, [&](const named_counters::Reading& r) { out.emplace_back(std::string(r.name), r); });
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;  // each reading's name is the pair's first: its own name points into the slot
}

// What handler_counters() reports for a handler: the database counters that count per
// handler, under the names they have there ("published": deliveries it was given).
struct HandlerCounterName {
  Counter counter;
  const char* name;
};
constexpr HandlerCounterName kHandlerCounters[] = {{kDeliveriesPublished, "published"},
                                                   {kClaimed, "claimed"},
                                                   {kCompleted, "completed"},
                                                   {kFailed, "failed"},
                                                   {kDeadLettered, "dead_lettered"},
                                                   {kTakenOver, "taken_over"},
                                                   {kAttemptsCharged, "attempts_charged"},
                                                   {kHandlerWorkerErrors, "handler_worker_errors"}};

// The result of one of the per-name functions: for each slot of kind, in name order,
// rows(name, reading, since, put) hands put() the values and nulls of each row it makes
// (name and since as datums).
template <typename Rows>
Datum named_rows(FunctionCallInfo fcinfo, named_counters::Kind kind, const Rows& rows) {
  DatabaseCounters& db = require_slot();
  const Datum since = TimestampTzGetDatum(static_cast<TimestampTz>(pg_atomic_read_u64(&db.since)));
  const auto slots = readings(kind);
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg_call([&] {
    InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
    auto put = [&](Datum* values, bool* nulls) {
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    };
    for (const auto& [name, reading] : slots)
      rows(PointerGetDatum(cstring_to_text_with_len(name.data(), static_cast<int>(name.size()))),
           reading, since, put);
  });
  return (Datum)0;
}

Datum handler_counters_body(FunctionCallInfo fcinfo) {
  return named_rows(fcinfo, named_counters::Kind::kHandler,
                    [](Datum name, const named_counters::Reading& r, Datum since, auto& put) {
                      for (const HandlerCounterName& c : kHandlerCounters) {
                        Datum values[4] = {name, CStringGetTextDatum(c.name),
                                           Int64GetDatum(static_cast<int64>(r.values[c.counter])),
                                           since};
                        bool nulls[4] = {false, false, false, false};
                        put(values, nulls);
                      }
                    });
}

// One row per handler: the bucket bounds in seconds (the last +Infinity), the cumulative
// count of completions at or under each, the total count and the sum of the latencies.
Datum completion_latency_body(FunctionCallInfo fcinfo) {
  Datum bounds[core::kLatencyBucketCount];
  for (int b = 0; b < core::kLatencyBoundCount; ++b)
    bounds[b] = Float8GetDatum(static_cast<double>(core::kLatencyBoundsUs[b]) / 1e6);
  bounds[core::kLatencyBoundCount] = Float8GetDatum(get_float8_infinity());
  return named_rows(
      fcinfo, named_counters::Kind::kHandler,
      [&bounds](Datum name, const named_counters::Reading& r, Datum since, auto& put) {
        Datum cumulative[core::kLatencyBucketCount];
        std::uint64_t total = 0;
        for (int b = 0; b < core::kLatencyBucketCount; ++b) {
          total += r.latency_buckets[b];
          cumulative[b] = Int64GetDatum(static_cast<int64>(total));
        }
        Datum values[6] = {
            name,
            PointerGetDatum(construct_array(bounds, core::kLatencyBucketCount, FLOAT8OID, 8,
                                            FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
            PointerGetDatum(construct_array(cumulative, core::kLatencyBucketCount, INT8OID, 8,
                                            FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
            Int64GetDatum(static_cast<int64>(total)),
            Float8GetDatum(static_cast<double>(r.latency_sum_us) / 1e6),
            since};
        bool nulls[6] = {false, false, false, false, false, false};
        put(values, nulls);
      });
}

Datum unrouted_counters_body(FunctionCallInfo fcinfo) {
  return named_rows(
      fcinfo, named_counters::Kind::kUnroutedType,
      [](Datum name, const named_counters::Reading& r, Datum since, auto& put) {
        Datum values[3] = {name, Int64GetDatum(static_cast<int64>(r.values[kUnrouted])), since};
        bool nulls[3] = {false, false, false};
        put(values, nulls);
      });
}

}  // namespace

}  // namespace relaybus::pg::counters

RELAYBUS_SQL_FUNCTION(relaybus_counters, relaybus::pg::counters::counters_body)
RELAYBUS_SQL_FUNCTION(relaybus_reset_counters, relaybus::pg::counters::reset_counters_body)
RELAYBUS_SQL_FUNCTION(relaybus_handler_counters, relaybus::pg::counters::handler_counters_body)
RELAYBUS_SQL_FUNCTION(relaybus_completion_latency, relaybus::pg::counters::completion_latency_body)
RELAYBUS_SQL_FUNCTION(relaybus_unrouted_counters, relaybus::pg::counters::unrouted_counters_body)
