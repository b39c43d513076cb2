// Renews the worker's lanes every third of the lease while it holds deliveries, on its own
// store instance, so a slow claim or settlement statement never lets a lease lapse. An
// idle worker renews nothing: its lanes may lapse, which frees them for others. Nor does
// one whose claims renewed every lane it holds within that third (Store::
// claim_renews_held_lanes): an extend_lease then would only rewrite every lease row again.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "seam.hpp"

namespace relaybus::client {

class LeaseRenewer {
 public:
  using HoldingFn = std::function<bool()>;  // true while the worker has deliveries in flight
  // When a claim last renewed every lane the worker holds (ClaimLoop::lanes_renewed_at).
  using RenewedAtFn = std::function<std::chrono::steady_clock::time_point()>;
  using LogFn = std::function<void(const std::string&)>;

  LeaseRenewer(StoreFactory stores, Worker worker, std::chrono::milliseconds lease,
               HoldingFn holding, RenewedAtFn renewed_at, LogFn log);
  ~LeaseRenewer();  // stop()
  LeaseRenewer(const LeaseRenewer&) = delete;
  LeaseRenewer& operator=(const LeaseRenewer&) = delete;

  void start();
  // Ends the thread (an extend_lease under way finishes first). Idempotent.
  void stop();

 private:
  void run();

  const StoreFactory stores_;
  const Worker worker_;
  const std::chrono::milliseconds lease_;
  const HoldingFn holding_;
  const RenewedAtFn renewed_at_;
  const LogFn log_;

  std::mutex mutex_;
  std::condition_variable stopping_changed_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace relaybus::client
