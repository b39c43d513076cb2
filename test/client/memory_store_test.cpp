// The runtime against the in-memory store: what a user's handler test looks like. The
// dispatcher runs real lanes, tokens, retries and per-key order here, with no database.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client/dispatcher.hpp"
#include "store/memory_store.hpp"

namespace {

using namespace std::chrono_literals;
using relaybus::client::Delivery;
using relaybus::client::Dispatcher;
using relaybus::client::DispatcherConfig;
using relaybus::store::MemoryBus;
using relaybus::store::MemoryStore;

DispatcherConfig quick_config() {
  DispatcherConfig c;
  c.worker_prefix = "test";
  c.poll_interval = 20ms;
  c.lease = 3000ms;
  c.log = [](const std::string&) {};
  return c;
}

template <typename F>
bool eventually(F&& condition, std::chrono::milliseconds within = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

TEST(MemoryStoreRuntime, RunsEveryEventOnceInKeyOrderAndDeadLettersAPoisonOne) {
  auto bus = std::make_shared<MemoryBus>();
  MemoryStore admin(bus);
  relaybus::store::Subscription s{"mailer", {"user.created"}, {}};
  s.retry.max_attempts = 2;
  s.retry.backoff_base_us = 1000;
  s.retry.backoff_max_us = 1000;
  admin.subscribe(s);
  for (int i = 0; i < 50; ++i) {
    relaybus::store::Event e;
    e.type = "user.created";
    e.payload = "{\"n\": " + std::to_string(i) + "}";
    e.key = "user-" + std::to_string(i % 5);
    e.event_id = "e" + std::to_string(i);
    admin.publish(e);
  }
  std::mutex mutex;
  std::map<std::string, std::vector<std::string>> seen_per_key;
  std::atomic<int> runs{0};
  Dispatcher d([bus] { return std::make_unique<MemoryStore>(bus); }, quick_config(),
               {{"mailer", [&](const Delivery& delivery) {
                   ++runs;
                   if (delivery.event_id == "e7") throw std::runtime_error("bounced");
                   std::lock_guard<std::mutex> lock(mutex);
                   seen_per_key[delivery.key].push_back(delivery.event_id);
                 }}});
  d.start();
  ASSERT_TRUE(eventually([&] {
    for (int i = 0; i < 50; ++i) {
      const auto state = admin.lookup("e" + std::to_string(i), "mailer");
      if (state && state->status != "dead") return false;
    }
    return true;
  }));
  d.stop();
  EXPECT_EQ(admin.lookup("e7", "mailer"), (relaybus::store::DeliveryState{"dead", 2}));
  std::size_t handled = 0;
  for (const auto& [key, ids] : seen_per_key) {
    handled += ids.size();
    // Per key in publish order: e2, e7, e12, ... for key user-2 (e7 never succeeds).
    for (std::size_t i = 1; i < ids.size(); ++i)
      EXPECT_LT(std::stoi(ids[i - 1].substr(1)), std::stoi(ids[i].substr(1))) << key;
  }
  EXPECT_EQ(handled, 49u);
  EXPECT_EQ(runs.load(), 51);  // 49 once, the poison one twice
}

// A transactional handler on a store with transactions: each delivery completes inside
// the transaction the handler was given, and the lease holds, so every one commits.
TEST(MemoryStoreRuntime, TransactionalHandlersCompleteInTheirTransaction) {
  auto bus = std::make_shared<MemoryBus>();
  MemoryStore admin(bus);
  admin.subscribe({"ledger", {"payment"}, {}});
  for (int i = 0; i < 20; ++i) {
    relaybus::store::Event e;
    e.type = "payment";
    e.event_id = "p" + std::to_string(i);
    admin.publish(e);
  }
  std::atomic<int> runs{0};
  Dispatcher d([bus] { return std::make_unique<MemoryStore>(bus); }, quick_config(), {},
               {{"ledger", [&](const Delivery&, relaybus::store::Transaction&,
                               relaybus::store::Store&) { ++runs; }}});
  d.start();
  ASSERT_TRUE(eventually([&] {
    for (int i = 0; i < 20; ++i)
      if (admin.lookup("p" + std::to_string(i), "ledger")) return false;
    return true;
  }));
  d.stop();
  EXPECT_EQ(runs.load(), 20);
  EXPECT_EQ(d.counters().lost, 0u);
  EXPECT_EQ(d.counters().succeeded, 20u);
}

}  // namespace
