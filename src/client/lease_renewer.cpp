#include "lease_renewer.hpp"

#include <algorithm>
#include <memory>

namespace relaybus::client {

LeaseRenewer::LeaseRenewer(StoreFactory stores, Worker worker, std::chrono::milliseconds lease,
                           HoldingFn holding, RenewedAtFn renewed_at, LogFn log)
    : stores_(std::move(stores)),
      worker_(std::move(worker)),
      lease_(lease),
      holding_(std::move(holding)),
      renewed_at_(std::move(renewed_at)),
      log_(std::move(log)) {}

LeaseRenewer::~LeaseRenewer() {
  stop();
}

void LeaseRenewer::start() {
  thread_ = std::thread([this] { run(); });
}

void LeaseRenewer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    stopping_changed_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void LeaseRenewer::run() {
  std::unique_ptr<Store> store;  // opened at the first renewal, reopened after an error
  const auto every = std::max(std::chrono::milliseconds(1), lease_ / 3);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (stopping_changed_.wait_for(lock, every, [this] { return stopping_; })) return;
    lock.unlock();
    // A claim that began within the last third left every lane leased for at least two
    // thirds of the lease from now, as an extend_lease now would (for one lease).
    const bool renewed = std::chrono::steady_clock::now() - renewed_at_() < every;
    if (holding_() && !renewed) {
      try {
        if (!store) store = stores_();
        store->extend_lease(worker_, lease_);
      } catch (const std::exception& e) {
        log_(std::string("extend_lease failed: ") + e.what());
        store.reset();
      }
    }
    lock.lock();
  }
}

}  // namespace relaybus::client
