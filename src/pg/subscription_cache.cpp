#include "subscription_cache.hpp"

#include "spi.hpp"
#include "subscription_changes.hpp"

#include <cstdint>
#include <cstring>

extern "C" {
#include "access/table.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

namespace relaybus::pg::subscription_cache {

namespace {

// Bumped by every invalidation of relaybus.subscriptions (or of every relation). The copy
// is current while `loaded_at` equals it and the shared stamp it was read under
// (subscription_changes.hpp) has not moved.
std::uint64_t generation = 1;
std::uint64_t loaded_at = 0;
std::uint64_t loaded_stamp = 0;
Oid table = InvalidOid;  // relaybus.subscriptions, looked up before each read
std::vector<Subscription> cached;
std::vector<Subscription> uncached;  // read for one call only
bool warned_triggers = false;        // this backend said the triggers are off (once)

// Called while PostgreSQL processes invalidations, possibly in the middle of a read below
// (an invalidation then marks what is being read stale): must not fail.
void on_relcache_invalidation(Datum, Oid relation) {
  if (relation == InvalidOid || relation == table) ++generation;
}

// Whether the two triggers that mark the copies stale (sql/parts/internal-0.2.0.sql) are on
// `relation` and fire ALWAYS, calling relaybus_internal.subscriptions_changed. Without
// them a kept copy misses changes: all of them while the triggers are disabled, and a
// logical replication apply worker's while they fire only in origin mode, which is what
// ENABLE TRIGGER ALL leaves (a data-only pg_restore with --disable-triggers runs it).
// Read from the table's relcache entry, which ALTER TABLE ... TRIGGER invalidates, so a
// change of their state reaches every backend as a change of the table would.
bool triggers_fire_always(Oid relation) {
  if (relation == InvalidOid) return false;  // the read that follows says what is wrong
  bool row = false;
  bool truncate = false;
  pg_call([&] {
    const Oid internal = get_namespace_oid("relaybus_internal", true);
    Relation rel = table_open(relation, AccessShareLock);
    const TriggerDesc* triggers = rel->trigdesc;
    for (int i = 0; triggers != nullptr && i < triggers->numtriggers; ++i) {
      const Trigger& t = triggers->triggers[i];
      if (t.tgenabled != TRIGGER_FIRES_ALWAYS || get_func_namespace(t.tgfoid) != internal) continue;
      char* function = get_func_name(t.tgfoid);
      const bool marks = function != nullptr && strcmp(function, "subscriptions_changed") == 0;
      if (marks && strcmp(t.tgname, "subscriptions_changed") == 0) row = true;
      if (marks && strcmp(t.tgname, "subscriptions_truncated") == 0) truncate = true;
    }
    table_close(rel, NoLock);  // held to the end of the transaction, as the read holds it
  });
  return row && truncate;
}

// Once per backend until the triggers are back: why every publish now reads the table.
void warn_triggers_off() {
  if (warned_triggers) return;
  warned_triggers = true;
  pg_call([] {
    ereport(WARNING,
            (errmsg("relaybus: the triggers on relaybus.subscriptions do not fire always, so "
                    "publish reads the table for every event"),
             errdetail("publish keeps a copy of the subscriptions only while the triggers "
                       "subscriptions_changed and subscriptions_truncated exist and are "
                       "ENABLE ALWAYS. ENABLE TRIGGER ALL, which a data-only restore with "
                       "--disable-triggers runs, leaves them ENABLE."),
             errhint("ALTER TABLE relaybus.subscriptions ENABLE ALWAYS TRIGGER "
                     "subscriptions_changed, ENABLE ALWAYS TRIGGER subscriptions_truncated;")));
  });
}

std::vector<Subscription> read_subscriptions() {
  static Statement all(
      "SELECT s.handler, s.event_types, s.sql_function IS NOT NULL FROM relaybus.subscriptions s"
      " ORDER BY s.handler COLLATE \"C\"",
      {});
  const std::uint64_t n = all.run();
  std::vector<Subscription> out;
  out.reserve(n);
  for (std::uint64_t r = 0; r < n; ++r)
    out.push_back(Subscription{row::text(r, 1), row::text_array(r, 2), row::boolean(r, 3)});
  return out;
}

}  // namespace

void install() {
  CacheRegisterRelcacheCallback(on_relcache_invalidation, 0);
}

const std::vector<Subscription>& subscriptions() {
  if (IsolationUsesXactSnapshot()) {
    uncached = read_subscriptions();
    return uncached;
  }
  // What other backends committed since this one last looked: a transaction that started
  // earlier has not taken their messages yet.
  pg_call([] { AcceptInvalidationMessages(); });
  if (loaded_at == generation && subscription_changes::unchanged_since(loaded_stamp)) return cached;
  // Before the read, as the invalidations are: what it reads is at least this new.
  const std::optional<std::uint64_t> stamp = subscription_changes::stamp_to_keep();
  if (!stamp) {
    loaded_at = 0;
    uncached = read_subscriptions();
    return uncached;
  }
  // The table first (a new one after DROP and CREATE EXTENSION), so that an invalidation
  // arriving during the read marks what it read stale.
  Oid found = InvalidOid;
  pg_call(
      [&] { found = get_relname_relid("subscriptions", get_namespace_oid("relaybus", false)); });
  table = found;
  const std::uint64_t reading_at = generation;
  if (!triggers_fire_always(found)) {
    warn_triggers_off();
    loaded_at = 0;
    uncached = read_subscriptions();
    return uncached;
  }
  warned_triggers = false;
  std::vector<Subscription> fresh = read_subscriptions();
  cached = std::move(fresh);
  loaded_at = reading_at;
  loaded_stamp = *stamp;
  return cached;
}

}  // namespace relaybus::pg::subscription_cache
