// How a version of the store writes the deliveries of a publish: the one part of publishing
// that differs between versions. The rest (checks, routing, the event row, a repeated id,
// wake-ups: publish_one.hpp) is one code path for all of them.
// - 0.2 (sequenced_deliveries.cpp): inserted at once, each keyed delivery with its key's
//   next sequence from key_counters, whose row lock, held to commit, makes a key's order
//   its commit order;
// - 0.3 (staged_deliveries.cpp): kept in backend memory and inserted at commit at its
//   (handler, lane)'s next position (commit_order::stage), so that positions follow commit
//   order without publishers waiting for each other.
#pragma once

#include "publish_one.hpp"

namespace relaybus::pg {

// New events of one publish_batch call, every id new and its event row inserted: the
// elements, their ids and handlers, and each one's key as a text datum (0 without a key).
struct NewEvents {
  const std::vector<PublishInput>& inputs;
  const std::vector<std::string>& ids;
  const std::vector<Targets>& targets;
  const std::vector<Datum>& key_datums;
};

class DeliveryWriter {
 public:
  // The deliveries of one stored event to `handlers` (sorted), in the lane of `key` (of
  // the event id without one), due at `available_at` (checked already; nullopt: now()).
  // Counts them (counters::kDeliveriesPublished). No wake-up.
  virtual void write(const std::string& event_id, const std::optional<std::string>& key,
                     const std::vector<std::string>& handlers,
                     const std::optional<TimestampTz>& available_at) const = 0;

  // The deliveries of a batch of new events: the rows write() would make for each event in
  // input order, possibly fewer statements. No wake-up.
  virtual void write_new(const NewEvents& events) const = 0;

 protected:
  ~DeliveryWriter() = default;
};

// 0.2.x: relaybus.deliveries with status and sequence, relaybus.key_counters.
const DeliveryWriter& sequenced_deliveries();

// 0.3.0: relaybus.deliveries with positions, staged until commit.
const DeliveryWriter& staged_deliveries();

}  // namespace relaybus::pg
