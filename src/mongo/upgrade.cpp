#include "upgrade.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "driver.hpp"
#include "upgrade_commands.hpp"

namespace relaybus::mongo::detail {

namespace {

class Upgrade {
 public:
  Upgrade(mongoc_client_t* client, const std::string& database)
      : client_(client), database_(database), now_(now_ms()) {}

  void run_all(bool marked) {
    if (marked) {  // converted: no marker find (a scan); these two are cheap and idempotent
      drop_obsolete_indexes();
      give_lanes();
      return;
    }
    convert_if_0_1_0();
    mark();
  }

 private:
  void convert_if_0_1_0() {
    // The data steps run only while the marker is set, and a run that stopped anywhere
    // leaves it set while anything is left to do: an event has no handlers until its batch
    // is written, and a 0.1.0 delivery keeps its leaseToken field until it is moved or
    // converted. The events come
    // first, because their handlers are read from the completed deliveries moved next.
    const bool v010 = any(upgrade::find_unconverted_delivery(), "find unconverted delivery") ||
                      any(upgrade::find_event_without_handlers(), "find event without handlers");
    if (v010) refuse_live_leases();
    drop_obsolete_indexes();
    give_lanes();
    if (!v010) return;
    backfill_event_handlers();
    move_completed();
    convert_deliveries();
  }

  // Only after every step has finished: the mark stops the marker finds for good, so a run
  // that stopped before it must leave none.
  void mark() { write(upgrade::write_layout_mark(now_), "write layout mark"); }

  std::vector<Bson> read(const Bson& cmd, const char* what) {
    return find_all(client_, database_, nullptr, cmd, what);
  }
  void write(const Bson& cmd, const char* what) { run(client_, database_, nullptr, cmd, what); }
  bool any(const Bson& find, const char* what) { return !read(find, what).empty(); }

  // A 0.1.0 worker that still runs would claim and complete under the old layout while the
  // new one is written: refused before anything is converted, as the PostgreSQL upgrade
  // refuses.
  void refuse_live_leases() {
    const auto live = read(upgrade::find_live_lease(now_), "find live 0.1.0 lease");
    if (live.empty()) return;
    throw StoreError(core::ErrorCode::kConflict,
                     "relaybus MongoDB store: setup: a 0.1.0 worker still holds a lease (" +
                         live.front().relaxed_json() +
                         "): stop every 0.1.0 worker, wait until its leases expire, and run "
                         "setup() again; the conversion has not started");
  }

  void drop_obsolete_indexes() {
    std::vector<std::string> names;
    for (const auto& index : read(upgrade::list_indexes(kDeliveries), "list indexes"))
      names.push_back(reported([&] { return upgrade::read_index_name(index.get()); }));
    for (const auto& name : upgrade::obsolete_among(names)) {
      try {
        write(upgrade::drop_index(kDeliveries, name), "drop 0.1.0 index");
      } catch (const CommandFailed& e) {
        if (e.error().code != 27) throw;  // IndexNotFound: dropped already
      }
    }
  }

  void give_lanes() {
    const auto subscribed = ids_of(read(upgrade::find_subscription_ids(), "find subscriptions"));
    if (subscribed.empty()) return;
    std::vector<std::pair<std::string, std::int64_t>> counts;
    for (const auto& group : read(upgrade::count_lanes(), "count lanes"))
      counts.push_back(reported([&] { return upgrade::read_lane_count(group.get()); }));
    for (const auto& handler : upgrade::handlers_without_lanes(subscribed, counts))
      write(upgrade::lane_upserts(handler), "upsert lanes");
  }

  void backfill_event_handlers() {
    std::optional<std::string> after;
    for (;;) {
      const auto ids =
          ids_of(read(upgrade::find_events_without_handlers(after), "find events to backfill"));
      if (ids.empty()) return;
      const auto [first, last] = std::minmax_element(ids.begin(), ids.end());
      std::vector<upgrade::DeliveryKey> deliveries;
      for (const auto& d :
           read(upgrade::find_deliveries_of_events(*first, *last), "find deliveries of events"))
        deliveries.push_back(reported([&] { return upgrade::read_delivery_key(d.get()); }));
      write(upgrade::set_event_handlers(upgrade::handlers_of(ids, deliveries)),
            "backfill event handlers");
      after = *last;
    }
  }

  void move_completed() {
    std::optional<upgrade::DeliveryKey> after;
    for (;;) {
      std::vector<upgrade::CompletedDelivery> completed;
      for (const auto& d : read(upgrade::find_completed(after), "find completed deliveries"))
        completed.push_back(reported([&] { return upgrade::read_completed_delivery(d.get()); }));
      if (completed.empty()) return;
      write(upgrade::record_completions(completed), "record completions");
      write(upgrade::delete_completed(completed), "delete completed deliveries");
      after = completed.back().id;
    }
  }

  void convert_deliveries() {
    std::optional<upgrade::DeliveryKey> after;
    for (;;) {
      std::vector<upgrade::LegacyDelivery> deliveries;
      for (const auto& d : read(upgrade::find_unconverted(after), "find deliveries to convert"))
        deliveries.push_back(reported([&] { return upgrade::read_legacy_delivery(d.get()); }));
      if (deliveries.empty()) return;
      write(upgrade::convert_deliveries(deliveries, now_), "convert deliveries");
      after = deliveries.back().id;
    }
  }

  mongoc_client_t* client_;
  const std::string& database_;
  const std::int64_t now_;
};

// Running on it would write this library's layout into a newer one, which nothing here
// knows how to read.
[[noreturn]] void refuse_newer_layout(std::int64_t version) {
  throw StoreError(core::ErrorCode::kInvalidParameter,
                   "relaybus MongoDB store: setup: the database is in layout version " +
                       std::to_string(version) + " (" + kMeta + " \"" + kLayoutMark +
                       "\"), newer than this library's " + std::to_string(kLayoutVersion) +
                       ": a newer relaybus has set it up; upgrade this library (setup has "
                       "changed nothing)");
}

}  // namespace

bool layout_marked(mongoc_client_t* client, const std::string& database) {
  const auto found =
      find_all(client, database, nullptr, upgrade::find_layout_mark(), "find layout mark");
  if (found.empty()) return false;
  const std::int64_t version =
      reported([&] { return upgrade::read_layout_version(found.front().get()); });
  if (version > kLayoutVersion) refuse_newer_layout(version);
  return version == kLayoutVersion;
}

void upgrade_layout(mongoc_client_t* client, const std::string& database, bool marked) {
  Upgrade(client, database).run_all(marked);
}

}  // namespace relaybus::mongo::detail
