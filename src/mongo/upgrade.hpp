// Internal to src/mongo (not installed): what setup() does between creating the collections
// and creating the indexes. It converts a database in the 0.1.0 layout
// (upgrade_commands.hpp) in place, and makes sure of two things every time: no 0.1.0 index
// is left on deliveries, and every subscribed handler has its core::kLaneCount lanes.
#pragma once

#include <mongoc/mongoc.h>

#include <string>

namespace relaybus::mongo::detail {

// Each step reads in bounded batches (upgrade::kBatch) in _id order until a read finds
// nothing, and each write is idempotent, so a run that stopped anywhere (a crash, a lost
// connection) is finished by the next one. On a database in the 0.2.0 layout it only reads:
// two limit-1 finds (the marker: a delivery with a lease field or without laneId, an event
// without handlers), listIndexes of deliveries, the subscriptions and the lane count per
// handler. Throws StoreError kConflict, before converting anything, while a 0.1.0 lease is
// live: every 0.1.0 worker must be stopped first.
void upgrade_layout(mongoc_client_t* client, const std::string& database);

}  // namespace relaybus::mongo::detail
