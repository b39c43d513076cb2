// The subscriptions publish routes events by, kept per backend: reading them was one SPI
// statement in every publish, about a tenth of its time in the server (issue 12).
//
// The copy is valid until relaybus.subscriptions changes. Triggers on the table (before
// each row, and before a TRUNCATE: relaybus_internal.subscriptions_changed,
// sql/parts/internal-0.2.0.sql) invalidate the table's relcache entry, and PostgreSQL
// delivers that as it does for its own catalog caches: to the writer's backend at the end
// of the writing statement, to every other backend once the writer commits (before the
// commit returns to its client, so a publish that starts after a subscribe returned sees
// the subscription), and a rolled-back change's to the writer again at the rollback, so
// that it forgets what it read.
//
// That alone leaves a window: a commit is visible before its invalidations are sent, and
// whoever reacts to what it wrote inside the window must route by it too. So the copy is
// also kept only while no change was committing when it was read or has since begun
// (subscription_changes.hpp), which needs the library preloaded. Without the preload,
// and inside a transaction that changed the subscriptions itself, nothing is kept: every
// publish reads the table.
//
// READ COMMITTED only: there a publish reads the newest committed subscriptions anyway.
// Under REPEATABLE READ and SERIALIZABLE, publish reads them from the transaction's
// snapshot, uncached, as before (a copy made from an old snapshot must not be kept).
#pragma once

#include <string>
#include <vector>

namespace relaybus::pg::subscription_cache {

struct Subscription {
  std::string handler;
  std::vector<std::string> event_types;
  bool in_database = false;  // has an sql_function
};

// Registers the relcache callback; from _PG_init.
void install();

// Every subscription, sorted by handler in byte order (COLLATE "C"): the cached copy, read
// again first if it is out of date, or a read of the table that is not kept. Inside an SPI
// connection. The reference is good until the next call.
const std::vector<Subscription>& subscriptions();

}  // namespace relaybus::pg::subscription_cache
