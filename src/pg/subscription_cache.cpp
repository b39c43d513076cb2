#include "subscription_cache.hpp"

#include "spi.hpp"
#include "subscription_changes.hpp"

#include <cstdint>

extern "C" {
#include "catalog/namespace.h"
#include "utils/inval.h"
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

// Called while PostgreSQL processes invalidations, possibly in the middle of a read below
// (an invalidation then marks what is being read stale): must not fail.
void on_relcache_invalidation(Datum, Oid relation) {
  if (relation == InvalidOid || relation == table) ++generation;
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
  std::vector<Subscription> fresh = read_subscriptions();
  cached = std::move(fresh);
  loaded_at = reading_at;
  loaded_stamp = *stamp;
  return cached;
}

}  // namespace relaybus::pg::subscription_cache
