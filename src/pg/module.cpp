// The shared library's entry: PostgreSQL's magic block and _PG_init.
#include "background.hpp"
#include "commit_order.hpp"
#include "lane_changes.hpp"
#include "counters.hpp"
#include "drop_warning.hpp"
#include "handler_turns.hpp"
#include "postgres.hpp"
#include "settings.hpp"
#include "subscription_cache.hpp"
#include "subscription_changes.hpp"
#include "wakeup.hpp"

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
void _PG_init(void) {
  const bool preloading = process_shared_preload_libraries_in_progress;
  relaybus::pg::settings::define();
  relaybus::pg::wakeup::install(preloading);
  relaybus::pg::drop_warning::install();
  relaybus::pg::handler_turns::install(preloading);
  relaybus::pg::subscription_cache::install();
  relaybus::pg::subscription_changes::install(preloading);
  relaybus::pg::commit_order::install();
  relaybus::pg::lane_changes::install(preloading);
  // Last: PostgreSQL calls the newest transaction callback first, so that the counters find
  // their slots before commit_order's pre-commit step takes the lanes' locks, never under
  // them.
  relaybus::pg::counters::install(preloading);
  if (preloading) relaybus::pg::background::register_workers();
}
}
