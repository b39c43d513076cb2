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

// A slot's state word: a generation, moved each time the slot is (re)written, and a status.
// A slot is free (never used), being written (by the one backend holding the table's lock)
// or ready. A slot once ready is written again only when it is taken back from a dropped
// database. A reader reads the word, then the fields, then the word again: the same word
// twice (same generation, ready) means the fields it read are one slot's.
constexpr uint32 kFree = 0;
constexpr uint32 kWriting = 1;
constexpr uint32 kReady = 2;
constexpr uint32 kStatusMask = 3;
constexpr uint32 kGenerationStep = 4;

uint32 status_of(uint32 word) noexcept {
  return word & kStatusMask;
}

struct Slot {
  pg_atomic_uint32 state;
  // Written while being written, read only between two equal ready state words.
  Oid database;
  Kind kind;
  std::uint64_t hash;  // of the name as kept
  std::uint32_t kept;  // bytes of the name
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

// The name as a slot keeps it: at most kMaxNameBytes, cut at a character boundary of the
// database's encoding. Names alike in those bytes share a slot, so that no two rows of a
// listing carry the same name.
std::string_view kept_name(std::string_view name) {
  if (name.size() <= static_cast<std::size_t>(kMaxNameBytes)) return name;
  int kept = kMaxNameBytes;
  pg_call([&] { kept = pg_mbcliplen(name.data(), static_cast<int>(name.size()), kMaxNameBytes); });
  return name.substr(0, static_cast<std::size_t>(kept));
}

// Whether the slot, as its state word `word` says it is, is (this database, kind, name),
// read consistently: the word is read again after the fields.
bool holds(Slot& slot, uint32 word, Kind kind, std::uint64_t hash, std::string_view name) noexcept {
  if (status_of(word) != kReady) return false;
  pg_read_barrier();  // the fields were written before the word said ready
  const bool same = slot.database == MyDatabaseId && slot.kind == kind && slot.hash == hash &&
                    slot.kept == name.size() &&
                    std::memcmp(slot.name, name.data(), name.size()) == 0;
  pg_read_barrier();
  return same && pg_atomic_read_u32(&slot.state) == word;
}

// The probe sequence of a name starts at its hash and runs through the whole table; a name
// is always in the part of its sequence before the first free slot (a slot is taken only
// there: see take), so a lookup stops at the first free slot.
int find(Kind kind, std::uint64_t hash, std::string_view name) noexcept {
  for (int i = 0; i < kMaxSlots; ++i) {
    const int index = static_cast<int>((hash + i) % kMaxSlots);
    Slot& slot = shared->slots[index];
    const uint32 word = pg_atomic_read_u32(&slot.state);
    if (status_of(word) == kFree) return -1;
    if (holds(slot, word, kind, hash, name)) return index;
  }
  return -1;
}

// Takes a slot for the name: the first free slot of its sequence, or, when one comes
// first, a slot of a dropped database. Which databases are gone is read before the lock
// (it reads the catalog, and may raise); under it the sequence is walked again, first to
// the first free slot for a slot of the name (two backends taking one name take one
// slot), then for the slot to take. -1 when this database has its share of the kind, or
// there is no slot to take.
int take(Kind kind, std::uint64_t hash, std::string_view name) {
  Oid gone[kMaxSlots];
  int gone_count = 0;
  for (int i = 0; i < kMaxSlots; ++i) {
    Slot& slot = shared->slots[(hash + i) % kMaxSlots];
    const uint32 word = pg_atomic_read_u32(&slot.state);
    if (status_of(word) == kFree) break;
    if (status_of(word) != kReady) continue;
    pg_read_barrier();
    const Oid owner = slot.database;
    bool known = owner == MyDatabaseId;
    for (int g = 0; g < gone_count && !known; ++g) known = gone[g] == owner;
    if (!known && !database_exists(owner)) gone[gone_count++] = owner;
  }
  // This database's share of the kind, counted before the lock (the lock is held for the
  // walk of one chain only): backends taking names at once may pass it by a few.
  const int share = kind == Kind::kHandler ? kMaxHandlersPerDatabase : kMaxUnroutedTypesPerDatabase;
  int mine = 0;
  for (Slot& slot : shared->slots) {
    if (status_of(pg_atomic_read_u32(&slot.state)) != kReady) continue;
    pg_read_barrier();
    if (slot.database == MyDatabaseId && slot.kind == kind) ++mine;
  }
  int taken = -1;
  SpinLockAcquire(&shared->lock);
  // Nobody else writes slots while the lock is held: the fields read here are stable.
  int candidate = -1;
  for (int i = 0; i < kMaxSlots; ++i) {
    const int index = static_cast<int>((hash + i) % kMaxSlots);
    Slot& slot = shared->slots[index];
    const uint32 word = pg_atomic_read_u32(&slot.state);
    if (status_of(word) == kFree) {
      if (candidate < 0) candidate = index;
      break;
    }
    if (slot.database == MyDatabaseId && slot.kind == kind && slot.hash == hash &&
        slot.kept == name.size() && std::memcmp(slot.name, name.data(), name.size()) == 0) {
      taken = index;  // another backend took it meanwhile
      break;
    }
    if (candidate >= 0) continue;
    for (int g = 0; g < gone_count && candidate < 0; ++g)
      if (gone[g] == slot.database) candidate = index;
  }
  if (taken < 0 && candidate >= 0 && mine < share) {
    Slot& slot = shared->slots[candidate];
    const uint32 generation = (pg_atomic_read_u32(&slot.state) & ~kStatusMask) + kGenerationStep;
    pg_atomic_write_u32(&slot.state, generation | kWriting);
    pg_write_barrier();  // readers see the slot being written before any field changes
    slot.database = MyDatabaseId;
    slot.kind = kind;
    slot.hash = hash;
    slot.kept = static_cast<std::uint32_t>(name.size());
    std::memcpy(slot.name, name.data(), name.size());
    for (auto& v : slot.values) pg_atomic_write_u64(&v, 0);
    for (auto& b : slot.latency_buckets) pg_atomic_write_u64(&b, 0);
    pg_atomic_write_u64(&slot.latency_sum_us, 0);
    pg_write_barrier();  // the fields before the word that says ready
    pg_atomic_write_u32(&slot.state, generation | kReady);
    taken = candidate;
  }
  SpinLockRelease(&shared->lock);
  return taken;
}

}  // namespace

void install(bool preloading) {
  if (preloading) shared_memory::reserve("relaybus named counters", sizeof(SharedTable), attach);
}

int slot_of(Kind kind, std::string_view whole_name) {
  if (shared == nullptr || !OidIsValid(MyDatabaseId) || !IsTransactionState()) return -1;
  const std::string_view name = kept_name(whole_name);
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

int existing_slot(Kind kind, std::string_view whole_name) noexcept {
  if (shared == nullptr || !OidIsValid(MyDatabaseId)) return -1;
  try {
    const std::string_view name = kept_name(whole_name);
    return find(kind, hash_of(kind, name), name);
  } catch (const PgError& e) {
    FreeErrorData(e.data);  // pg_mbcliplen on a name the database stored: not expected
    return -1;
  } catch (...) {
    return -1;
  }
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
    const uint32 word = pg_atomic_read_u32(&slot.state);
    if (status_of(word) != kReady) continue;
    pg_read_barrier();
    if (slot.database != MyDatabaseId || slot.kind != kind) continue;
    const std::uint32_t kept = std::min<std::uint32_t>(slot.kept, kMaxNameBytes);
    std::memcpy(name, slot.name, kept);
    Reading r;
    for (int c = 0; c < counters::kCounterCount; ++c)
      r.values[c] = pg_atomic_read_u64(&slot.values[c]);
    for (int b = 0; b < core::kLatencyBucketCount; ++b)
      r.latency_buckets[b] = pg_atomic_read_u64(&slot.latency_buckets[b]);
    r.latency_sum_us = pg_atomic_read_u64(&slot.latency_sum_us);
    // A slot rewritten while it was read (taken back for another name) is left out.
    pg_read_barrier();
    if (pg_atomic_read_u32(&slot.state) != word) continue;
    r.name = std::string_view(name, kept);
    visit(r);
  }
}

void reset_this_database() noexcept {
  if (shared == nullptr) return;
  for (Slot& slot : shared->slots) {
    if (status_of(pg_atomic_read_u32(&slot.state)) != kReady) continue;
    pg_read_barrier();
    if (slot.database != MyDatabaseId) continue;
    for (auto& v : slot.values) pg_atomic_write_u64(&v, 0);
    for (auto& b : slot.latency_buckets) pg_atomic_write_u64(&b, 0);
    pg_atomic_write_u64(&slot.latency_sum_us, 0);
  }
}

}  // namespace relaybus::pg::named_counters
