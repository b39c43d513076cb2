// Wake-ups: anyone who can connect may NOTIFY relaybus, so a notification costs a listening
// worker at most one claim per wakeup_interval, however many arrive; and a notification is
// never dropped, so a real publish is still handled long before the poll interval.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "client/dispatcher.hpp"
#include "dispatcher_support.hpp"
#include "fake_store.hpp"

using namespace std::chrono_literals;
using relaybus::client::Delivery;
using relaybus::client::Dispatcher;
using relaybus::client::testing::eventually;
using relaybus::client::testing::fake_factory;
using relaybus::client::testing::FakeBackend;
using relaybus::client::testing::quick_config;

namespace {

constexpr auto kInterval = 10ms;

relaybus::client::DispatcherConfig flood_config() {
  auto config = quick_config();
  config.poll_interval = 10s;  // anything handled sooner was woken by a notification
  config.wakeup_interval = kInterval;
  return config;
}

std::size_t claims(FakeBackend& backend) {
  std::lock_guard<std::mutex> lock(backend.mutex);
  return backend.claim_sizes.size();
}

}  // namespace

TEST(Wakeups, AFloodCostsAtMostOneClaimPerWakeupInterval) {
  FakeBackend backend;
  Dispatcher d(fake_factory(backend), flood_config(), {{"h", [](const Delivery&) {}}});
  d.start();
  ASSERT_TRUE(eventually([&] { return claims(backend) >= 1; }));  // idle, in its poll wait
  const std::size_t before = claims(backend);
  const auto start = std::chrono::steady_clock::now();
  int sent = 0;
  while (std::chrono::steady_clock::now() - start < 300ms) {
    backend.notify();
    ++sent;
    std::this_thread::sleep_for(100us);
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // The last notifications are remembered and answered once the spacing has passed.
  std::this_thread::sleep_for(3 * kInterval);
  const std::size_t made = claims(backend) - before;
  const auto bound = static_cast<std::size_t>(elapsed / kInterval) + 3;
  EXPECT_GT(sent, 500);
  EXPECT_GE(made, 2u);  // the flood was heard
  EXPECT_LE(made, bound) << sent << " notifications in "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                         << " ms";
  d.stop();
}

TEST(Wakeups, ANotificationRightAfterAClaimIsAnsweredOnceTheSpacingHasPassed) {
  FakeBackend backend;
  Dispatcher d(fake_factory(backend), flood_config(), {{"h", [](const Delivery&) {}}});
  d.start();
  ASSERT_TRUE(eventually([&] { return claims(backend) >= 1; }));
  for (int round = 0; round < 5; ++round) {
    // A claim has just been made (the first one, or the previous round's): this publish
    // falls inside the spacing, and must not wait for the 10 s poll.
    backend.add(1);
    backend.notify();
    ASSERT_TRUE(eventually([&] { return backend.completed_count() == std::size_t(round + 1); }, 1s))
        << "round " << round;
  }
  d.stop();
}
