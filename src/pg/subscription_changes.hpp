// Which changes to relaybus.subscriptions are on their way, so that a copy of the table
// (subscription_cache.hpp) is never kept past one.
//
// PostgreSQL makes a commit visible to other transactions before it sends the commit's
// cache invalidations (CommitTransaction: ProcArrayEndTransaction, the transaction
// callbacks, then AtEOXact_Inval). In between, another backend can already see what the
// transaction wrote (an event, say, whose handler publishes in reaction, woken by
// relaybus's own latch at commit) while its copy of the subscriptions has not been told
// that they changed. The relcache invalidation alone would let that publish route by the
// subscriptions from before the commit it reacts to.
//
// So a transaction that changed them announces it in shared memory before its commit
// becomes visible (XACT_EVENT_PRE_COMMIT) and withdraws the announcement once it is
// visible (XACT_EVENT_COMMIT) or aborted. The shared word counts the announcements made
// (high 32 bits) and those not withdrawn yet (low 32 bits). A backend keeps a copy only if
// it read the word with nothing outstanding before reading the table, and only while the
// word is unchanged:
// - a copy read before an announcement is dropped at its next use, and a backend that sees
//   the announcing commit (its snapshot was taken after the commit became visible) also
//   sees the announcement, which came first;
// - a copy read while one is outstanding is used once and not kept;
// - a copy read after the withdrawal was read after the commit became visible.
// The relcache invalidation still follows and is harmless.
//
// The word lives in the shared memory of a preloaded library. Without the preload there is
// no such word, and no copy is kept: every publish reads the table.
#pragma once

#include <cstdint>
#include <optional>

namespace relaybus::pg::subscription_changes {

// From _PG_init: the transaction callback always; the shared word when preloading.
void install(bool preloading);

// The shared word, read before reading the table: nullopt when a copy read now must not be
// kept (no preload, a change is being committed, or this transaction made one).
std::optional<std::uint64_t> stamp_to_keep();

// Whether a copy read under `stamp` is still good (no announcement since).
bool unchanged_since(std::uint64_t stamp);

}  // namespace relaybus::pg::subscription_changes
