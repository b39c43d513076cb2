#include "subscription_changes.hpp"

#include "guard.hpp"
#include "shared_memory.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/trigger.h"
#include "port/atomics.h"
#include "utils/inval.h"
}

namespace relaybus::pg::subscription_changes {

namespace {

constexpr std::uint64_t kOutstanding = 0xFFFFFFFFu;  // the low half: not withdrawn yet
constexpr std::uint64_t kAnnouncement = (std::uint64_t{1} << 32) + 1;

struct SharedState {
  pg_atomic_uint64 word;
};

SharedState* shared = nullptr;

bool changed_in_transaction = false;  // the trigger fired in this transaction
bool announced = false;               // and this transaction's commit announced it

void attach_shared_memory(void* memory, bool created) {
  shared = static_cast<SharedState*>(memory);
  if (created) pg_atomic_init_u64(&shared->word, 0);
}

void withdraw() {
  // fetch_sub is a full barrier: the commit's visibility came first.
  if (announced) pg_atomic_fetch_sub_u64(&shared->word, 1);
  announced = false;
  changed_in_transaction = false;
}

// Plain PostgreSQL code, entered from PostgreSQL: nothing here throws a C++ exception, and
// the one ereport leaves no C++ object behind (see guard.hpp).
void at_transaction_event(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
      // Before the commit record and ProcArrayEndTransaction; fetch_add is a full barrier,
      // so whoever sees the commit sees this first.
      if (changed_in_transaction && shared != nullptr) {
        pg_atomic_fetch_add_u64(&shared->word, kAnnouncement);
        announced = true;
      }
      break;
    case XACT_EVENT_PRE_PREPARE:
      // COMMIT PREPARED, possibly from another backend, runs no callback of this one, so
      // nothing could announce it. PostgreSQL refuses NOTIFY in a prepared transaction
      // the same way.
      if (changed_in_transaction)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("cannot PREPARE a transaction that changed relaybus.subscriptions"),
                        errdetail("subscribe, unsubscribe, pause, resume and every other change "
                                  "to relaybus.subscriptions must commit directly."),
                        errhint("Change the subscriptions in a transaction of their own.")));
      break;
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      withdraw();
      break;
    default:
      break;
  }
}

// The triggers: BEFORE each row that changes in relaybus.subscriptions, and BEFORE each
// TRUNCATE of it. Before, so that a row trigger of the same statement, or anything after it
// in the transaction, that publishes does not keep a copy holding rows this transaction may
// still roll back.
Datum subscriptions_changed_body(FunctionCallInfo fcinfo) {
  if (!CALLED_AS_TRIGGER(fcinfo)) {
    // PostgreSQL's own code for a trigger function called some other way.
    pg_call([] {
      ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                      errmsg("subscriptions_changed() may only run as the trigger of "
                             "relaybus.subscriptions")));
    });
  }
  const auto* data = reinterpret_cast<TriggerData*>(fcinfo->context);
  changed_in_transaction = true;
  // Marks every other backend's copy stale once this transaction commits, and this
  // backend's at the end of the statement (or a rollback's undoing of it). PostgreSQL
  // keeps one message per relation and command, however many rows call this.
  Relation relation = data->tg_relation;
  pg_call([&] { CacheInvalidateRelcache(relation); });
  // A BEFORE ROW trigger's result is the row to write: the one given, unchanged.
  if (!TRIGGER_FIRED_FOR_ROW(data->tg_event)) return PointerGetDatum(nullptr);
  return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(data->tg_event) ? data->tg_newtuple
                                                                 : data->tg_trigtuple);
}

}  // namespace

void install(bool preloading) {
  RegisterXactCallback(at_transaction_event, nullptr);
  if (preloading)
    shared_memory::reserve("relaybus subscription changes", sizeof(SharedState),
                           attach_shared_memory);
}

std::optional<std::uint64_t> stamp_to_keep() {
  if (shared == nullptr || changed_in_transaction) return std::nullopt;
  const std::uint64_t word = pg_atomic_read_u64(&shared->word);
  // The table is read after the word, never before (the snapshot is taken later).
  pg_read_barrier();
  if ((word & kOutstanding) != 0) return std::nullopt;
  return word;
}

bool unchanged_since(std::uint64_t stamp) {
  if (shared == nullptr || changed_in_transaction) return false;
  // After whatever this backend read before (the claim whose snapshot saw a commit).
  pg_read_barrier();
  return pg_atomic_read_u64(&shared->word) == stamp;
}

}  // namespace relaybus::pg::subscription_changes

RELAYBUS_SQL_FUNCTION(relaybus_subscriptions_changed,
                      relaybus::pg::subscription_changes::subscriptions_changed_body)
