// MongoStore's maintenance (mongo_store.hpp): what PostgreSQL's background worker runs on its
// own, take_over_expired and purge_expired. Outside any transaction, each write on a
// condition of what was read.
#include <algorithm>
#include <set>

#include "core/expired_takeover.hpp"
#include "documents.hpp"
#include "driver.hpp"
#include "lanes.hpp"
#include "maintenance_commands.hpp"
#include "mongo_claim_store.hpp"
#include "mongo_store.hpp"
#include "operator_commands.hpp"

namespace relaybus::mongo {

using namespace detail;

namespace {

HandlerEvents delivery_ids_of(const std::vector<Bson>& docs) {
  HandlerEvents out;
  for (const auto& d : docs) out.push_back(reported([&] { return read_delivery_id(d.get()); }));
  return out;
}

}  // namespace

int MongoStore::take_over_expired() {
  // The takeover hands lanes back (no owner, no holder): it binds nothing to a worker.
  const std::string nobody;
  MongoClaimStore lanes(client_, database_, nobody, nobody, 0);
  const std::vector<core::LaneSnapshot> expired = lanes.expired_lanes(commands::kTakeoverBatch);
  return reported([&] { return core::take_over_expired_lanes(lanes, expired); });
}

std::int64_t MongoStore::purge_expired() {
  const std::int64_t now = now_ms();
  const std::int64_t dead_cutoff = now - options_.retention_dead.count() * 1000;
  const std::int64_t completed_cutoff = now - options_.retention_completed.count() * 1000;
  auto found = [&](const Bson& find, const char* what) {
    return find_all(client_, database_, nullptr, find, what);
  };
  auto deleted = [&](const Bson& remove, const char* what) {
    return count_of(run(client_, database_, nullptr, remove, what), "n");
  };
  std::int64_t n = 0;

  // Dead deliveries, by when they died.
  HandlerEvents ids = delivery_ids_of(
      found(commands::find_expired_dead(dead_cutoff, commands::kPurgeSlice), "find dead"));
  if (!ids.empty()) n += deleted(commands::delete_expired_dead(ids, dead_cutoff), "purge dead");

  // Pending deliveries of handlers unsubscribed, by when they were created: a re-subscribe
  // before then resumes them.
  const std::vector<std::string> subscribed =
      ids_of(found(commands::find_subscription_names(), "find subscriptions"));
  const std::vector<std::string> gone =
      ids_of(found(commands::find_unsubscribed_handlers(subscribed), "find unsubscribed"));
  if (!gone.empty()) {
    ids = delivery_ids_of(
        found(commands::find_expired_unsubscribed(gone, dead_cutoff, commands::kPurgeSlice),
              "find unsubscribed deliveries"));
    if (!ids.empty()) {
      n += deleted(commands::delete_expired_unsubscribed(ids, dead_cutoff),
                   "purge unsubscribed deliveries");
      // Then their ids off their handlers' lanes, every lane's version bumped: a claim that
      // read one of them before the delete and writes its lane after this is refused (its
      // write is conditional on the version it read); one that wrote before is pruned here.
      std::vector<commands::ReadEvent> listed;
      for (const auto& [handler, event] : ids) listed.push_back({event, {handler}});
      run(client_, database_, nullptr, commands::prune_purged(listed, /*every_lane=*/true),
          "prune purged deliveries");
    }
  }

  // Completion history (0.1.0's completed deliveries included).
  ids = delivery_ids_of(found(
      commands::find_expired_completions(completed_cutoff, commands::kPurgeSlice), "find history"));
  if (!ids.empty())
    n += deleted(commands::delete_expired_completions(ids, completed_cutoff), "purge history");

  // Events without deliveries. Their possible deliveries are looked up by _id, in slices of
  // kPurgeSlice ids too.
  std::vector<commands::ReadEvent> events;
  for (const auto& d : found(commands::find_expired_events(completed_cutoff, commands::kPurgeSlice),
                             "find old events")) {
    auto [id, handlers] = reported([&] { return read_event_handlers(d.get()); });
    events.push_back({std::move(id), std::move(handlers)});
  }
  std::set<std::string> kept;  // events with a delivery left
  HandlerEvents possible;
  auto look_up = [&] {
    if (possible.empty()) return;
    for (const auto& [handler, event] :
         delivery_ids_of(found(commands::find_delivery_ids(possible), "find deliveries")))
      kept.insert(event);
    possible.clear();
  };
  for (const auto& e : events) {
    for (const auto& h : e.handlers) {
      possible.push_back({h, e.id});
      if (possible.size() == static_cast<std::size_t>(commands::kPurgeSlice)) look_up();
    }
  }
  look_up();
  events.erase(std::remove_if(events.begin(), events.end(),
                              [&](const commands::ReadEvent& e) { return kept.count(e.id) > 0; }),
               events.end());
  if (events.empty()) return n;
  // Their ids off the lanes' lists first (commands::prune_purged says why before).
  if (std::any_of(events.begin(), events.end(),
                  [](const commands::ReadEvent& e) { return !e.handlers.empty(); }))
    run(client_, database_, nullptr, commands::prune_purged(events, /*every_lane=*/false),
        "prune purged events");
  n += deleted(commands::delete_events(events), "purge events");
  return n;
}

}  // namespace relaybus::mongo
