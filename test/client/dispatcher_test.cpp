#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <thread>

#include "client/dispatcher.hpp"
#include "dispatcher_support.hpp"
#include "fake_store.hpp"

using namespace std::chrono_literals;
using relaybus::client::Delivery;
using relaybus::client::Dispatcher;
using relaybus::client::DispatcherConfig;
using relaybus::client::Handler;
using relaybus::client::testing::eventually;
using relaybus::client::testing::fake_factory;
using relaybus::client::testing::FakeBackend;
using relaybus::client::testing::Gate;
using relaybus::client::testing::quick_config;

TEST(Dispatcher, WorkerNameIsPrefixPlusRandomSuffix) {
  FakeBackend backend;
  Dispatcher a(fake_factory(backend), quick_config(), {});
  Dispatcher b(fake_factory(backend), quick_config(), {});
  EXPECT_EQ(a.worker().rfind("test-", 0), 0u);
  EXPECT_NE(a.worker(), b.worker());
}

TEST(Dispatcher, HandlersThatReturnAreCompletedAndThrowersFail) {
  FakeBackend backend;
  backend.add(30, "ok");
  backend.add(3, "bad");
  std::map<std::string, Handler> handlers{
      {"ok", [](const Delivery&) {}},
      {"bad", [](const Delivery&) { throw std::runtime_error("card declined"); }}};
  Dispatcher d(fake_factory(backend), quick_config(), handlers);
  d.start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(backend.mutex);
    return backend.failures.size() == 3;
  }));
  ASSERT_TRUE(eventually([&] { return backend.completed_count() == 30; }));
  d.stop();
  EXPECT_EQ(backend.failures[0].second, "card declined");
  EXPECT_EQ(backend.relinquished, 1);
  // Completions were grouped: far fewer statements than deliveries.
  EXPECT_LT(backend.complete_batches.size(), 30u);
}

TEST(Dispatcher, NeverRunsMoreThanConcurrencyHandlers) {
  FakeBackend backend;
  backend.add(200);
  std::atomic<int> now{0}, peak{0};
  auto config = quick_config();
  config.concurrency = 4;
  config.batch_size = 10;
  Dispatcher d(fake_factory(backend), config,
               {{"h", [&](const Delivery&) {
                   int n = ++now;
                   int p = peak.load();
                   while (n > p && !peak.compare_exchange_weak(p, n)) {
                   }
                   std::this_thread::sleep_for(1ms);
                   --now;
                 }}});
  d.start();
  ASSERT_TRUE(eventually([&] { return backend.completed_count() == 200; }));
  d.stop();
  EXPECT_LE(peak.load(), 4);
  std::lock_guard<std::mutex> lock(backend.mutex);
  for (int size : backend.claim_sizes) EXPECT_LE(size, 10);
}

// A batch larger than concurrency is claimed whole, its surplus waiting in line for the
// handlers: a worker behind on a backlog claims batch_size deliveries a statement, not the
// few places its handlers just freed (at 5,000 events/s a claim of a few deliveries at a
// time could not keep up).
TEST(Dispatcher, ABatchLargerThanConcurrencyIsClaimedWholeAndWaitsForTheHandlers) {
  FakeBackend backend;
  backend.add(60);
  std::atomic<int> now{0}, peak{0};
  auto config = quick_config();
  config.concurrency = 2;
  config.batch_size = 20;
  Dispatcher d(fake_factory(backend), config,
               {{"h", [&](const Delivery&) {
                   int n = ++now;
                   int p = peak.load();
                   while (n > p && !peak.compare_exchange_weak(p, n)) {
                   }
                   std::this_thread::sleep_for(2ms);
                   --now;
                 }}});
  d.start();
  ASSERT_TRUE(eventually([&] { return backend.completed_count() == 60; }));
  d.stop();
  EXPECT_LE(peak.load(), 2);
  std::lock_guard<std::mutex> lock(backend.mutex);
  ASSERT_FALSE(backend.claim_sizes.empty());
  EXPECT_EQ(backend.claim_sizes.front(), 20) << "the first claim asked for the free handlers only";
  for (int size : backend.claim_sizes) EXPECT_LE(size, 20);
}

TEST(Dispatcher, StopLetsRunningHandlersFinishThenRelinquishes) {
  FakeBackend backend;
  backend.add(10);
  Gate gate;
  auto config = quick_config();
  config.concurrency = 10;
  config.batch_size = 10;
  // All ten are claimed at once and held running by the gate until after stop() began.
  Dispatcher d(fake_factory(backend), config, {{"h", [&](const Delivery&) { gate.pass(); }}});
  d.start();
  ASSERT_TRUE(eventually([&] { return gate.waiting.load() == 10; }));
  std::thread opener([&] {
    std::this_thread::sleep_for(100ms);
    gate.release();
  });
  d.stop();  // waits for the gated handlers (within the grace period)
  opener.join();
  std::lock_guard<std::mutex> lock(backend.mutex);
  std::size_t completed = 0;
  for (const auto& b : backend.complete_batches) completed += b.size();
  EXPECT_EQ(completed, 10u);
  EXPECT_TRUE(backend.released.empty());
  ASSERT_FALSE(backend.calls.empty());
  EXPECT_EQ(backend.calls.back(), "relinquish");
  // Every completion went out before the relinquish.
  auto relinquish = std::find(backend.calls.begin(), backend.calls.end(), "relinquish");
  EXPECT_EQ(std::find(relinquish, backend.calls.end(), "complete_many"), backend.calls.end());
}

TEST(Dispatcher, HandlersPastTheGraceAreReleasedAndTheirOutcomeIgnored) {
  FakeBackend backend;
  backend.add(3);
  Gate gate;
  std::atomic<int> returned{0};
  auto config = quick_config();
  config.concurrency = 3;
  config.batch_size = 3;
  config.shutdown_grace = 100ms;
  {
    Dispatcher d(fake_factory(backend), config, {{"h", [&](const Delivery&) {
                                                    gate.pass();
                                                    ++returned;
                                                  }}});
    d.start();
    ASSERT_TRUE(eventually([&] { return gate.waiting.load() == 3; }));
    d.stop();
    {
      std::lock_guard<std::mutex> lock(backend.mutex);
      EXPECT_EQ(backend.released.size(), 3u);
      EXPECT_EQ(backend.relinquished, 1);
      EXPECT_EQ(backend.calls.back(), "relinquish");
    }
  }
  // Their threads were left to them: they return now, after the Dispatcher is gone.
  gate.release();
  ASSERT_TRUE(eventually([&] { return returned.load() == 3; }));
  EXPECT_EQ(backend.completed_count(), 0u);
}

TEST(Dispatcher, ClaimedButNotStartedAreReleasedAtStop) {
  // One handler thread for five in flight: one delivery runs (held by the gate), four
  // wait in line. stop() releases those four at once and lets the running one finish.
  FakeBackend backend;
  backend.add(5);
  Gate gate;
  auto config = quick_config();
  config.concurrency = 5;
  config.batch_size = 5;
  config.handler_threads = 1;
  config.shutdown_grace = 2s;
  Dispatcher d(fake_factory(backend), config, {{"h", [&](const Delivery&) { gate.pass(); }}});
  d.start();
  ASSERT_TRUE(eventually([&] { return gate.waiting.load() == 1; }));
  std::thread opener([&] {
    std::this_thread::sleep_for(100ms);
    gate.release();
  });
  d.stop();
  opener.join();
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_EQ(backend.released.size(), 4u);
  std::size_t completed = 0;
  for (const auto& b : backend.complete_batches) completed += b.size();
  EXPECT_EQ(completed, 1u);
  EXPECT_EQ(backend.calls.back(), "relinquish");
  // The releases come before the running handler's completion and the relinquish.
  auto first_release = std::find(backend.calls.begin(), backend.calls.end(), "release");
  auto complete = std::find(backend.calls.begin(), backend.calls.end(), "complete_many");
  EXPECT_LT(first_release, complete);
  EXPECT_EQ(d.counters().released, 4u);
}

TEST(Dispatcher, DestructionDoesNotWaitForAHandlerThatNeverReturns) {
  // The handler is held until after the Dispatcher is gone. Destroying it must not wait
  // for the handler, and the handler's thread must not touch the Dispatcher when it ends.
  FakeBackend backend;
  backend.add(2);
  Gate gate;
  std::atomic<int> returned{0};
  auto config = quick_config();
  config.concurrency = 2;
  config.batch_size = 2;
  config.shutdown_grace = 50ms;
  auto d = std::make_unique<Dispatcher>(fake_factory(backend), config,
                                        std::map<std::string, Handler>{{"h", [&](const Delivery&) {
                                                                          gate.pass();
                                                                          ++returned;
                                                                        }}});
  d->start();
  ASSERT_TRUE(eventually([&] { return gate.waiting.load() == 2; }));
  std::promise<void> destroyed;
  auto done = destroyed.get_future();
  std::thread destroyer([&] {
    d.reset();
    destroyed.set_value();
  });
  const bool in_time = done.wait_for(2s) == std::future_status::ready;
  gate.release();  // only now may the handlers return (and an old destructor finish)
  destroyer.join();
  EXPECT_TRUE(in_time) << "the destructor waited for an abandoned handler";
  ASSERT_TRUE(eventually([&] { return returned.load() == 2; }));
  std::this_thread::sleep_for(50ms);  // the threads end after their handlers returned
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_EQ(backend.released.size(), 2u);
  EXPECT_EQ(backend.completed_count_locked(), 0u);
}

// The renewer leaves the lanes alone while claims renew them (relaybus 0.3.0: a claim
// renews every held lane that is due): an extend_lease every third of the lease rewrote
// every lease row, a dead version each under a held snapshot, and made the next claim
// find them all due and rewrite them again.
namespace {
int renewals_while_claiming(bool claim_renews) {
  FakeBackend backend;
  backend.add(200);
  backend.claim_renews = claim_renews;
  auto config = quick_config();
  config.lease = 300ms;  // the renewer looks every 100 ms
  config.concurrency = 4;
  config.batch_size = 2;
  Dispatcher d(fake_factory(backend), config,
               {{"h", [](const Delivery&) { std::this_thread::sleep_for(10ms); }}});
  d.start();
  EXPECT_TRUE(eventually([&] { return backend.completed_count() == 200; }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  return backend.renewals;
}
}  // namespace

TEST(Dispatcher, TheRenewerLeavesAloneLanesThatClaimsRenew) {
  const int without = renewals_while_claiming(false);
  const int with = renewals_while_claiming(true);
  EXPECT_GE(without, 2) << "about 500 ms of work, a renewal every 100 ms";
  EXPECT_LE(with, 1) << "claims ran all along and renewed every lane";
}

// ... but still renews while no claim runs: every handler busy, nothing claimed meanwhile.
TEST(Dispatcher, TheRenewerStillRenewsWhileNoClaimRuns) {
  FakeBackend backend;
  backend.add(1);
  backend.claim_renews = true;
  auto config = quick_config();
  config.lease = 300ms;
  config.concurrency = 1;
  config.batch_size = 1;
  std::atomic<bool> ran{false};
  Dispatcher d(fake_factory(backend), config, {{"h", [&](const Delivery&) {
                                                  std::this_thread::sleep_for(550ms);
                                                  ran = true;
                                                }}});
  d.start();
  EXPECT_TRUE(eventually([&] { return ran.load(); }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_GE(backend.renewals, 2) << "a handler ran for almost two leases without a renewal";
}

// A handler that returned no longer takes a place among `concurrency` while its completion
// waits for the settlement connection: a worker whose completions take a few milliseconds
// to settle would otherwise run at most concurrency deliveries per settlement, however
// quick its handlers.
TEST(Dispatcher, AReturnedHandlerFreesItsPlaceBeforeItsCompletionSettles) {
  FakeBackend backend;
  backend.add(12);
  backend.hold_completions = true;
  std::atomic<int> ran{0};
  auto config = quick_config();
  config.concurrency = 2;
  config.batch_size = 2;
  Dispatcher d(fake_factory(backend), config, {{"h", [&](const Delivery&) { ++ran; }}});
  d.start();
  EXPECT_TRUE(eventually([&] { return ran.load() == 12; }))
      << "only " << ran.load() << " ran while the first completion was not settled";
  EXPECT_EQ(backend.completed_count(), 0u);
  backend.release_completions();
  EXPECT_TRUE(eventually([&] { return backend.completed_count() == 12; }));
  d.stop();
}

// ... and max_unsettled bounds what waits for settlement: the worker holds at most
// concurrency + max_unsettled deliveries, and claims nothing more until some settle.
TEST(Dispatcher, ClaimsStopAtMaxUnsettledUntilCompletionsSettle) {
  FakeBackend backend;
  backend.add(20);
  backend.hold_completions = true;
  std::atomic<int> ran{0};
  auto config = quick_config();
  config.concurrency = 2;
  config.batch_size = 2;
  config.max_unsettled = 5;
  Dispatcher d(fake_factory(backend), config, {{"h", [&](const Delivery&) { ++ran; }}});
  d.start();
  EXPECT_TRUE(eventually([&] { return ran.load() == 7; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(ran.load(), 7) << "claimed past concurrency + max_unsettled";
  EXPECT_EQ(d.in_flight(), 7u);
  backend.release_completions();
  EXPECT_TRUE(eventually([&] { return backend.completed_count() == 20; }));
  d.stop();
}

// The completion window groups completions of handlers finishing together; once none is
// left running, waiting for it only slows every claim cycle (the claim loop refills when
// completions are settled).
TEST(Dispatcher, AnIdlePoolSendsItsCompletionsWithoutWaitingForTheWindow) {
  FakeBackend backend;
  backend.add(1);
  auto config = quick_config();
  config.completion_window = 10s;
  Dispatcher d(fake_factory(backend), config, {{"h", [](const Delivery&) {}}});
  d.start();
  EXPECT_TRUE(eventually([&] { return backend.completed_count() == 1; }, 2s))
      << "the completion waited for the window";
  d.stop();
}

TEST(Dispatcher, CompletionsWaitWhileAnotherHandlerStillRuns) {
  FakeBackend backend;
  backend.add(1, "quick");
  backend.add(1, "slow");
  Gate gate;
  auto config = quick_config();
  config.completion_window = 10s;
  std::map<std::string, Handler> handlers{{"quick", [](const Delivery&) {}},
                                          {"slow", [&](const Delivery&) { gate.pass(); }}};
  Dispatcher d(fake_factory(backend), config, handlers);
  d.start();
  ASSERT_TRUE(eventually([&] { return gate.waiting.load() == 1; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(backend.completed_count(), 0u) << "sent while a handler was still running";
  gate.release();
  ASSERT_TRUE(eventually([&] { return backend.completed_count() == 2; }, 2s));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_EQ(backend.complete_batches.size(), 1u) << "the two were not grouped";
}
