// Internal to src/mongo (not installed): the worker half's reading of lane and delivery
// documents (by id, and how a lane is bound), and the holder a Worker's lanes are bound to.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/claim_protocol.hpp"
#include "core/lane_lease.hpp"
#include "documents.hpp"
#include "store/store.hpp"

namespace relaybus::mongo::detail {

using HandlerEvents = std::vector<std::pair<std::string, std::string>>;  // (handler, event id)
using LaneIds = std::vector<std::pair<std::string, std::int16_t>>;

// The holder of a Worker that passes none. MongoDB has no backends to bind lanes to, so
// the store binds them to a holder of its own: one random holder per process, shared by
// every MongoStore of the process (a dispatcher's threads, each with its instance, share
// their lanes, as connections without a holder do in PostgreSQL). A restarted process has
// another, so it waits for its predecessor's leases to expire (PostgreSQL takes over the
// lanes of a dead backend at once).
const std::string& process_holder();
const std::string& holder_of(const store::Worker& worker);
std::vector<StoredLane> lanes_of(const std::vector<Bson>& docs);
std::map<std::pair<std::string, std::string>, WorkDelivery> deliveries_of(
    const std::vector<Bson>& docs);
std::map<std::pair<std::string, std::int16_t>, StoredLane> lanes_by_id(
    const std::vector<Bson>& docs);
bool lease_expired(const StoredLane& lane, std::int64_t now);
core::LaneBinding binding_of(const StoredLane& lane, const std::string& holder, std::int64_t now);

}  // namespace relaybus::mongo::detail
