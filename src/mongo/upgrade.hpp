// Internal to src/mongo (not installed): what setup() does besides creating the collections
// and the indexes. It converts a database in the 0.1.0 layout (upgrade_commands.hpp) in
// place, and makes sure of two things every time: no 0.1.0 index is left on deliveries, and
// every subscribed handler has its core::kLaneCount lanes.
#pragma once

#include <mongoc/mongoc.h>

#include <string>

namespace relaybus::mongo::detail {

// Reads the layout mark (documents.hpp, kLayoutMark): whether the database is marked as in
// this library's layout. setup() reads it before anything else, so that a layout a newer
// relaybus wrote is refused untouched: StoreError kInvalidParameter, upgrade the library.
bool layout_marked(mongoc_client_t* client, const std::string& database);

// Each step reads in bounded batches (upgrade::kBatch) in _id order until a read finds
// nothing, and each write is idempotent, so a run that stopped anywhere (a crash, a lost
// connection) is finished by the next one.
//
// Unmarked, it looks for 0.1.0 documents with two limit-1 finds (the marker: a delivery with
// a lease field or without laneId, an event without handlers). When nothing matches, no
// index answers them and the server reads each collection through, so once every step has
// finished it writes the mark, and a marked database is not looked at again: marked, it only
// lists the indexes of deliveries and reads the subscriptions and the lane count per
// handler. A run that stopped before the mark leaves none, and the next one checks again.
// Throws StoreError kConflict, before converting anything, while a 0.1.0 lease is live:
// every 0.1.0 worker must be stopped first.
void upgrade_layout(mongoc_client_t* client, const std::string& database, bool marked);

}  // namespace relaybus::mongo::detail
