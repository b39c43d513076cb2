// 0.3.0's deliveries (delivery_writer.hpp): staged in backend memory, inserted at commit at
// their (handler, lane)'s next position, under the lane locks (commit_order::stage). No
// key counter and no lock taken at publish: a lane's positions follow the order in which
// the publishing transactions commit, and publishers of different keys, or of one key to
// different handlers, never wait for each other's work.
#include "commit_order.hpp"
#include "counters.hpp"
#include "delivery_writer.hpp"

#include "../core/lane.hpp"

extern "C" {
#include "catalog/namespace.h"
}

namespace relaybus::pg {

namespace {

// relaybus.deliveries, looked up by name each time: DROP and CREATE EXTENSION within one
// backend's life gives it another OID.
Oid deliveries_table() {
  Oid table = InvalidOid;
  pg_call([&] {
    table = get_relname_relid("deliveries", get_namespace_oid("relaybus", false));
    if (table == InvalidOid)
      ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                      errmsg("relaybus: the table relaybus.deliveries does not exist")));
  });
  return table;
}

void stage_event(Oid table, const std::string& event_id, const std::optional<std::string>& key,
                 const std::vector<std::string>& handlers,
                 const std::optional<TimestampTz>& available_at) {
  const std::int16_t lane = core::lane_of(key ? *key : event_id);
  // As 0.2's coalesce(available_at, now()): the transaction's start.
  const TimestampTz due = available_at ? *available_at : GetCurrentTransactionStartTimestamp();
  // Counted now, kept only if the transaction commits (counters.hpp): a subtransaction
  // that rolls back drops these counts as commit_order drops its staged rows.
  for (const std::string& handler : handlers) {
    commit_order::stage(table, handler, lane, event_id, key, due);
    counters::add(counters::kDeliveriesPublished, handler);
  }
}

class StagedDeliveries final : public DeliveryWriter {
 public:
  void write(const std::string& event_id, const std::optional<std::string>& key,
             const std::vector<std::string>& handlers,
             const std::optional<TimestampTz>& available_at) const override {
    if (handlers.empty()) return;
    stage_event(deliveries_table(), event_id, key, handlers, available_at);
  }

  // Staging writes nothing yet, so a batch is its events one by one, in input order (the
  // order of their positions within each lane).
  void write_new(const NewEvents& events) const override {
    const Oid table = deliveries_table();
    for (std::size_t i = 0; i < events.inputs.size(); ++i) {
      if (events.targets[i].handlers.empty()) continue;
      stage_event(table, events.ids[i], events.inputs[i].key, events.targets[i].handlers,
                  events.inputs[i].available_at);
    }
  }
};

}  // namespace

const DeliveryWriter& staged_deliveries() {
  static const StagedDeliveries writer{};
  return writer;
}

}  // namespace relaybus::pg
