// Counters kept per name within a database: per handler (what relaybus.handler_counters()
// and relaybus.completion_latency() report) and per event type published to no handler
// (relaybus.unrouted_counters()). One table of slots in shared memory for the whole server,
// each slot a (database, kind, name) with the counters of counters.hpp and a latency
// histogram. counters.cpp keeps the deltas of a transaction and adds them here at commit;
// this file only finds slots and reads and writes their values.
//
// A slot is taken at the first count of its name and kept until the server stops (a
// handler unsubscribed keeps its counts, as a Prometheus counter does). A slot of a
// database that has been dropped is taken back by the next name that needs room.
#pragma once

#include "counters.hpp"

#include "../core/latency_histogram.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace relaybus::pg::named_counters {

enum class Kind : std::uint8_t { kHandler = 1, kUnroutedType = 2 };

// Slots for the whole server, every database's names together.
inline constexpr int kMaxSlots = 1024;
// The most one database takes of each kind, so that no database (nor a publisher in it,
// whose event types are its to choose) can take every slot from the others.
inline constexpr int kMaxHandlersPerDatabase = 256;
inline constexpr int kMaxUnroutedTypesPerDatabase = 32;
// Longer names are counted under their first kMaxNameBytes bytes (cut at a character
// boundary): names alike in those bytes are one name here.
inline constexpr int kMaxNameBytes = 128;

// What a transaction adds to one name at its commit. The slot is found just before the
// commit (slot_of): a transaction that rolls back takes none.
struct Delta {
  Kind kind = Kind::kHandler;
  std::string name;
  int slot = -1;  // -1: not found yet, or none to be had
  std::uint64_t values[counters::kCounterCount] = {};
  std::uint64_t latency_buckets[core::kLatencyBucketCount] = {};
  std::uint64_t latency_sum_us = 0;
};

// From _PG_init: the shared memory, when preloading.
void install(bool preloading);

// The slot of (this database, kind, name), taken if the name has none yet; -1 without
// shared memory, when this database has its share of the kind, or when every slot is taken
// by a database that still exists. Names are kept cut to kMaxNameBytes: names alike in
// those share a slot. Only inside a transaction: taking back a slot of a dropped database
// reads the catalog, whose errors (a cancel) come out as PgError.
int slot_of(Kind kind, std::string_view name);

// The slot of (this database, kind, name) if it has one; -1 otherwise. Takes none, reads
// no catalog: for the commit itself. Never fails.
int existing_slot(Kind kind, std::string_view name) noexcept;

// Adds a delta to its slot with one atomic add per value that moved. Never fails.
void add(const Delta& delta) noexcept;

// One slot as read: its name (cut to kMaxNameBytes; valid during the visit only), its values.
struct Reading {
  std::string_view name;
  std::uint64_t values[counters::kCounterCount] = {};
  std::uint64_t latency_buckets[core::kLatencyBucketCount] = {};
  std::uint64_t latency_sum_us = 0;
};

// Calls visit for each slot of this database of kind, in slot order.
void for_each(Kind kind, const std::function<void(const Reading&)>& visit);

// Zeroes every value of this database's slots (the slots stay its own).
void reset_this_database() noexcept;

}  // namespace relaybus::pg::named_counters
