// The contract over the in-memory reference store: one MemoryBus per test, shared by every
// instance the test opens. Built only once src/store/memory_store.hpp exists.
#if __has_include("store/memory_store.hpp")

#include "contract/backend.hpp"
#include "store/memory_store.hpp"

namespace relaybus::contract {
namespace {

class MemoryBackend final : public Backend {
 public:
  std::unique_ptr<store::Store> open() override {
    return std::make_unique<store::MemoryStore>(bus_);
  }

 private:
  std::shared_ptr<store::MemoryBus> bus_ = std::make_shared<store::MemoryBus>();
};

const RegisterBackend registered{{
    "memory",
    [] { return std::string(); },
    [] { return std::make_unique<MemoryBackend>(); },
}};

}  // namespace
}  // namespace relaybus::contract

#endif
