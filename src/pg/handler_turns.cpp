#include "handler_turns.hpp"

#include "settings.hpp"
#include "shared_memory.hpp"
#include "wakeup.hpp"
#include "worker_support.hpp"

extern "C" {
#include "port/atomics.h"
}

namespace relaybus::pg::handler_turns {

namespace {

// Each slot's word is written by its own worker only (one at a time: a restart waits for
// the exit), read by its successor. 0: no turn kept yet; otherwise the turn + 1.
struct SharedTurns {
  pg_atomic_uint64 next[settings::kMaxDatabases][wakeup::kMaxSqlWorkers];
};

SharedTurns* shared = nullptr;

void attach(void* memory, bool created) {
  shared = static_cast<SharedTurns*>(memory);
  if (!created) return;
  for (auto& database : shared->next)
    for (auto& word : database) pg_atomic_init_u64(&word, 0);
}

pg_atomic_uint64* word_of(int slot) {
  const int database = worker::database_index();
  if (shared == nullptr || database < 0 || database >= settings::kMaxDatabases || slot < 0 ||
      slot >= wakeup::kMaxSqlWorkers)
    return nullptr;
  return &shared->next[database][slot];
}

}  // namespace

void install(bool preloading) {
  if (preloading) shared_memory::reserve("relaybus handler turns", sizeof(SharedTurns), attach);
}

std::optional<std::uint64_t> load(int slot) {
  pg_atomic_uint64* word = word_of(slot);
  if (word == nullptr) return std::nullopt;
  const std::uint64_t kept = pg_atomic_read_u64(word);
  if (kept == 0) return std::nullopt;
  return kept - 1;
}

void store(int slot, std::uint64_t turn) {
  if (pg_atomic_uint64* word = word_of(slot)) pg_atomic_write_u64(word, turn + 1);
}

}  // namespace relaybus::pg::handler_turns
