#include "named_counters.hpp"

#include <algorithm>
#include <cstring>

#include "database_exists.hpp"
#include "guard.hpp"
#include "shared_memory.hpp"

extern "C" {
#include "mb/pg_wchar.h"
#include "port/atomics.h"
#include "storage/spin.h"
}

namespace relaybus::pg::named_counters {

namespace {

// A slot is free (never used), being written (by the one backend holding the table's
// lock), or ready. Readers use ready slots only; a slot once ready is written again only
// when it is taken back from a dropped database, which no backend of that database can
// be reading any more.
constexpr uint32 kFree = 0;
constexpr uint32 kWriting = 1;
constexpr uint32 kReady = 2;

struct Slot {
  pg_atomic_uint32 state;
  // Written while kWriting, read only once kReady.
  Oid database;
  Kind kind;
  std::uint64_t hash;    // of the whole name
  std::uint32_t length;  // of the whole name
  std::uint32_t kept;    // bytes of it in name
  char name[kMaxNameBytes];
  pg_atomic_uint64 values[counters::kCounterCount];
  pg_atomic_uint64 latency_buckets[core::kLatencyBucketCount];
  pg_atomic_uint64 latency_sum_us;
};

struct SharedTable {
  slock_t lock;  // held only to take a slot: lookups never take it
  Slot slots[kMaxSlots];
};

SharedTable* shared = nullptr;

void attach(void* memory, bool created) {
  shared = static_cast<SharedTable*>(memory);
  if (!created) return;
  SpinLockInit(&shared->lock);
  for (Slot& slot : shared->slots) {
    pg_atomic_init_u32(&slot.state, kFree);
    for (auto& v : slot.values) pg_atomic_init_u64(&v, 0);
    for (auto& b : slot.latency_buckets) pg_atomic_init_u64(&b, 0);
    pg_atomic_init_u64(&slot.latency_sum_us, 0);
  }
}

// FNV-1a, 64 bits, over the kind and the name.
std::uint64_t hash_of(Kind kind, std::string_view name) noexcept {
  std::uint64_t h = 14695981039346656037ULL;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 1099511628211ULL;
  };
  mix(static_cast<unsigned char>(kind));
  for (char c : name) mix(static_cast<unsigned char>(c));
  return h;
}

// The bytes of name kept in a slot: at most kMaxNameBytes, cut at a character boundary of
// the database's encoding.
std::uint32_t kept_length(std::string_view name) noexcept {
  if (name.size() <= static_cast<std::size_t>(kMaxNameBytes))
    return static_cast<std::uint32_t>(name.size());
  int kept = kMaxNameBytes;
  try {
    pg_call(
        [&] { kept = pg_mbcliplen(name.data(), static_cast<int>(name.size()), kMaxNameBytes); });
  } catch (const PgError& e) {
    FreeErrorData(e.data);
  } catch (...) {
  }
  return static_cast<std::uint32_t>(kept);
}

bool is(const Slot& slot, Kind kind, std::uint64_t hash, std::string_view name) noexcept {
  return slot.database == MyDatabaseId && slot.kind == kind && slot.hash == hash &&
         slot.length == name.size() && std::memcmp(slot.name, name.data(), slot.kept) == 0;
}

// The probe sequence of a name starts at its hash and runs through the whole table; a name
// is always in the part of its sequence before the first free slot (a slot is taken only
// there: see take), so a lookup stops at the first free slot.
int find(Kind kind, std::uint64_t hash, std::string_view name) noexcept {
  for (int i = 0; i < kMaxSlots; ++i) {
    Slot& slot = shared->slots[(hash + i) % kMaxSlots];
    const uint32 state = pg_atomic_read_u32(&slot.state);
    if (state == kFree) return -1;
    if (state != kReady) continue;
    pg_read_barrier();  // the fields were written before kReady
    if (is(slot, kind, hash, name)) return static_cast<int>((hash + i) % kMaxSlots);
  }
  return -1;
}

// Takes a slot for the name: the first free slot of its sequence, or, when one comes
// first, a slot of a dropped database. Which databases are gone is read before the lock
// (it reads the catalog); under it the sequence is walked again, so that two backends
// taking a slot for one name at once take one slot.
int take(Kind kind, std::uint64_t hash, std::string_view name) noexcept {
  // This database's share of the kind, counted without the lock: concurrent takers may pass
  // it by a few.
  int mine = 0;
  for (Slot& slot : shared->slots) {
    if (pg_atomic_read_u32(&slot.state) != kReady) continue;
    pg_read_barrier();
    if (slot.database == MyDatabaseId && slot.kind == kind) ++mine;
  }
  if (mine >= (kind == Kind::kHandler ? kMaxHandlersPerDatabase : kMaxUnroutedTypesPerDatabase))
    return -1;
  Oid gone[kMaxSlots];
  int gone_count = 0;
  for (int i = 0; i < kMaxSlots; ++i) {
    Slot& slot = shared->slots[(hash + i) % kMaxSlots];
    const uint32 state = pg_atomic_read_u32(&slot.state);
    if (state == kFree) break;
    if (state != kReady) continue;
    pg_read_barrier();
    const Oid owner = slot.database;
    bool known = owner == MyDatabaseId;
    for (int g = 0; g < gone_count && !known; ++g) known = gone[g] == owner;
    if (!known && !database_exists(owner)) gone[gone_count++] = owner;
  }
  const std::uint32_t kept = kept_length(name);
  int taken = -1;
  SpinLockAcquire(&shared->lock);
  for (int i = 0; i < kMaxSlots && taken < 0; ++i) {
    const int index = static_cast<int>((hash + i) % kMaxSlots);
    Slot& slot = shared->slots[index];
    const uint32 state = pg_atomic_read_u32(&slot.state);
    if (state == kReady && is(slot, kind, hash, name)) {
      taken = index;  // another backend took it meanwhile
      break;
    }
    bool reclaim = false;
    if (state == kReady)
      for (int g = 0; g < gone_count && !reclaim; ++g) reclaim = gone[g] == slot.database;
    if (state != kFree && !reclaim) continue;
    pg_atomic_write_u32(&slot.state, kWriting);
    slot.database = MyDatabaseId;
    slot.kind = kind;
    slot.hash = hash;
    slot.length = static_cast<std::uint32_t>(name.size());
    slot.kept = kept;
    std::memcpy(slot.name, name.data(), kept);
    for (auto& v : slot.values) pg_atomic_write_u64(&v, 0);
    for (auto& b : slot.latency_buckets) pg_atomic_write_u64(&b, 0);
    pg_atomic_write_u64(&slot.latency_sum_us, 0);
    pg_write_barrier();  // the fields before kReady
    pg_atomic_write_u32(&slot.state, kReady);
    taken = index;
  }
  SpinLockRelease(&shared->lock);
  return taken;
}

}  // namespace

void install(bool preloading) {
  if (preloading) shared_memory::reserve("relaybus named counters", sizeof(SharedTable), attach);
}

int slot_of(Kind kind, std::string_view name) noexcept {
  if (shared == nullptr || !OidIsValid(MyDatabaseId) || !IsTransactionState()) return -1;
  const std::uint64_t hash = hash_of(kind, name);
  const int found = find(kind, hash, name);
  if (found >= 0) return found;
  // With no room for a kind (every slot taken, or this database's share of the kind), a new
  // name of it is looked for room again at most once a second per backend: each look walks
  // the table and may read the catalog for its databases.
  static TimestampTz full_since[3] = {0, 0, 0};
  TimestampTz& since = full_since[static_cast<int>(kind)];
  const TimestampTz now = GetCurrentTimestamp();
  if (since != 0 && now - since < USECS_PER_SEC) return -1;
  const int taken = take(kind, hash, name);
  since = taken < 0 ? now : 0;
  return taken;
}

void add(const Delta& delta) noexcept {
  if (shared == nullptr || delta.slot < 0 || delta.slot >= kMaxSlots) return;
  Slot& slot = shared->slots[delta.slot];
  for (int c = 0; c < counters::kCounterCount; ++c)
    if (delta.values[c] != 0)
      pg_atomic_fetch_add_u64(&slot.values[c], static_cast<int64>(delta.values[c]));
  for (int b = 0; b < core::kLatencyBucketCount; ++b)
    if (delta.latency_buckets[b] != 0)
      pg_atomic_fetch_add_u64(&slot.latency_buckets[b],
                              static_cast<int64>(delta.latency_buckets[b]));
  if (delta.latency_sum_us != 0)
    pg_atomic_fetch_add_u64(&slot.latency_sum_us, static_cast<int64>(delta.latency_sum_us));
}

void for_each(Kind kind, const std::function<void(const Reading&)>& visit) {
  if (shared == nullptr) return;
  char name[kMaxNameBytes];
  for (Slot& slot : shared->slots) {
    if (pg_atomic_read_u32(&slot.state) != kReady) continue;
    pg_read_barrier();
    if (slot.database != MyDatabaseId || slot.kind != kind) continue;
    const std::uint32_t kept = std::min<std::uint32_t>(slot.kept, kMaxNameBytes);
    std::memcpy(name, slot.name, kept);
    // A slot taken back for a name of this database while it was read is left out of this
    // reading: its fields may be half written.
    pg_read_barrier();
    if (pg_atomic_read_u32(&slot.state) != kReady) continue;
    Reading r;
    r.name = std::string_view(name, kept);
    for (int c = 0; c < counters::kCounterCount; ++c)
      r.values[c] = pg_atomic_read_u64(&slot.values[c]);
    for (int b = 0; b < core::kLatencyBucketCount; ++b)
      r.latency_buckets[b] = pg_atomic_read_u64(&slot.latency_buckets[b]);
    r.latency_sum_us = pg_atomic_read_u64(&slot.latency_sum_us);
    visit(r);
  }
}

void reset_this_database() noexcept {
  if (shared == nullptr) return;
  for (Slot& slot : shared->slots) {
    if (pg_atomic_read_u32(&slot.state) != kReady) continue;
    pg_read_barrier();
    if (slot.database != MyDatabaseId) continue;
    for (auto& v : slot.values) pg_atomic_write_u64(&v, 0);
    for (auto& b : slot.latency_buckets) pg_atomic_write_u64(&b, 0);
    pg_atomic_write_u64(&slot.latency_sum_us, 0);
  }
}

}  // namespace relaybus::pg::named_counters
