// The contract over the in-memory reference store: one MemoryBus per test, shared by every
// instance the test opens. Twice: "memory" claims in one atomic step, as PostgreSQL's row
// locks make a claim; "memory-conditional" runs each step of a claim on its own with
// conditional lane writes, the way a store without row locks (MongoDB) must.
#include "contract/backend.hpp"
#include "store/memory_store.hpp"

namespace relaybus::contract {
namespace {

class MemoryBackend final : public Backend {
 public:
  explicit MemoryBackend(core::LaneConcurrency concurrency)
      : bus_(std::make_shared<store::MemoryBus>(concurrency)) {}
  std::unique_ptr<store::Store> open() override {
    return std::make_unique<store::MemoryStore>(bus_);
  }
  std::unique_ptr<store::Store> open_expiring() override {
    auto s = std::make_unique<store::MemoryStore>(bus_);
    s->set_retention(std::chrono::milliseconds(0), std::chrono::milliseconds(0));
    return s;
  }

 private:
  std::shared_ptr<store::MemoryBus> bus_;
};

const RegisterBackend registered{{
    "memory",
    [] { return std::string(); },
    [] { return std::make_unique<MemoryBackend>(core::LaneConcurrency::kLocks); },
}};

const RegisterBackend registered_conditional{{
    "memory_conditional",
    [] { return std::string(); },
    [] { return std::make_unique<MemoryBackend>(core::LaneConcurrency::kConditionalWrites); },
}};

}  // namespace
}  // namespace relaybus::contract
