// The contract fixture: every case is a TEST_P(Contract, ...) and runs once per available
// backend (see backend.hpp). Cases use names made by unique_name() and claim with explicit
// handler lists, so they never see another test's work on a shared database.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "contract/backend.hpp"
#include "core/error.hpp"
#include "core/lane.hpp"
#include "store/store.hpp"

namespace relaybus::store {
// Readable gtest output for the seam's values.
inline void PrintTo(FailOutcome o, std::ostream* os) {
  *os << (o == FailOutcome::kRetry ? "kRetry" : o == FailOutcome::kDead ? "kDead" : "kLost");
}
inline void PrintTo(const DeliveryState& s, std::ostream* os) {
  *os << "{" << s.status << ", attempts " << s.attempts << "}";
}
}  // namespace relaybus::store

namespace relaybus::contract {

using namespace std::chrono_literals;
using store::Delivery;
using store::Event;
using store::FailOutcome;
using store::Store;
using store::Worker;

// Leases: short ones for expiry cases, long ones for everything that must not expire.
inline constexpr std::chrono::milliseconds kShortLease = 400ms;
inline constexpr std::chrono::milliseconds kLongLease = 30s;

// Sleeps until a delay of `d` taken now has certainly passed.
inline void sleep_past(std::chrono::milliseconds d) {
  std::this_thread::sleep_for(d + 150ms);
}

// Sleeps until a lease of `d` taken now has certainly expired. A claim holds its lanes for at
// least the lease and, on 0.3.0's PostgreSQL store, at most 1.5 x the lease: a kept lane's
// lease is rewritten only once less than the lease is left (core::lease_renewal).
inline void sleep_past_lease(std::chrono::milliseconds d) {
  std::this_thread::sleep_for(d * 3 / 2 + 150ms);
}

class Contract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    next_test();
    backend_ = backend_named(GetParam()).make();
  }

  // A new store instance (connection) on this test's bus.
  std::unique_ptr<Store> open() { return backend_->open(); }
  Backend& backend() { return *backend_; }

  // Subscribes a handler named after `stem` to `types`; returns its name.
  static std::string subscribe(Store& s, const std::string& stem,
                               const std::vector<std::string>& types,
                               core::RetryPolicy retry = {}) {
    const std::string handler = unique_name(stem);
    s.subscribe({handler, types, retry});
    return handler;
  }

  static Worker worker(const std::string& stem) {
    return {unique_name(stem), unique_name(stem + ".holder")};
  }

  static Event event(const std::string& type, const std::string& id,
                     std::optional<std::string> key = std::nullopt) {
    Event e;
    e.type = type;
    e.event_id = id;
    e.key = std::move(key);
    return e;
  }

  static std::vector<Delivery> claim(Store& s, const Worker& w,
                                     const std::vector<std::string>& handlers, int batch = 10,
                                     std::chrono::milliseconds lease = kLongLease) {
    return s.claim(w, batch, lease, handlers);
  }

  // The statistics row of `handler`, if the store lists it.
  static std::optional<store::HandlerStatistics> statistics_of(Store& s,
                                                               const std::string& handler) {
    for (auto& row : s.statistics())
      if (row.handler == handler) return row;
    return std::nullopt;
  }

  // The event ids of a claim, sorted (a batch has no order).
  static std::vector<std::string> ids(const std::vector<Delivery>& ds) {
    std::vector<std::string> out;
    for (const auto& d : ds) out.push_back(d.event_id);
    std::sort(out.begin(), out.end());
    return out;
  }

  static std::vector<std::string> sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  // `n` event ids (stem + number, made unique) whose lane (for an unkeyed event: the lane
  // of its id) is `lane`.
  static std::vector<std::string> ids_in_lane(const std::string& stem, int lane, int n) {
    std::vector<std::string> out;
    for (int i = 0; static_cast<int>(out.size()) < n; ++i) {
      std::string id = unique_name(stem + std::to_string(i));
      if (core::lane_of(id) == lane) out.push_back(std::move(id));
    }
    return out;
  }

  // A unique id whose lane is none of `taken`.
  static std::string id_outside_lanes(const std::string& stem, const std::vector<int>& taken) {
    for (int i = 0;; ++i) {
      std::string id = unique_name(stem + std::to_string(i));
      if (std::find(taken.begin(), taken.end(), core::lane_of(id)) == taken.end()) return id;
    }
  }

 private:
  std::unique_ptr<Backend> backend_;
};

}  // namespace relaybus::contract

// Expects `statement` to throw a StoreError with core error code `expected`.
#define EXPECT_STORE_ERROR(statement, expected)                                              \
  do {                                                                                       \
    try {                                                                                    \
      statement;                                                                             \
      ADD_FAILURE() << #statement " did not throw";                                          \
    } catch (const ::relaybus::store::StoreError& e) {                                       \
      EXPECT_STREQ(::relaybus::core::name_of(e.code()), ::relaybus::core::name_of(expected)) \
          << #statement ": " << e.what();                                                    \
    } catch (const std::exception& e) {                                                      \
      ADD_FAILURE() << #statement " threw something else than a StoreError: " << e.what();   \
    }                                                                                        \
  } while (0)
