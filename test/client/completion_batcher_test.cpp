#include <gtest/gtest.h>

#include <thread>

#include "client/completion_batcher.hpp"
#include "fake_store.hpp"

using namespace std::chrono_literals;
using relaybus::client::CompletionBatcher;
using relaybus::client::testing::FakeBackend;
using relaybus::client::testing::FakeStore;

namespace {

struct Running {
  FakeBackend backend;
  FakeStore store{backend};
  std::atomic<std::size_t> settled{0};
  CompletionBatcher batcher;
  std::thread thread;
  Running(std::chrono::microseconds window, std::size_t max_batch)
      : batcher(
            window, max_batch, [this](std::size_t n) { settled += n; }, nullptr),
        thread([this] { batcher.run(store); }) {}
  ~Running() {
    batcher.stop();
    thread.join();
  }
};

}  // namespace

TEST(CompletionBatcher, CompletionsWithinOneWindowBecomeOneStatement) {
  Running r(50ms, 1000);
  for (int i = 0; i < 20; ++i) r.batcher.complete("t" + std::to_string(i));
  std::this_thread::sleep_for(150ms);
  std::lock_guard<std::mutex> lock(r.backend.mutex);
  ASSERT_EQ(r.backend.complete_batches.size(), 1u);
  EXPECT_EQ(r.backend.complete_batches[0].size(), 20u);
  EXPECT_EQ(r.settled, 20u);
}

TEST(CompletionBatcher, WaitsForTheWindowBeforeSending) {
  Running r(200ms, 1000);
  r.batcher.complete("a");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(r.backend.completed_count(), 0u);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(r.backend.completed_count(), 1u);
}

TEST(CompletionBatcher, AFullBatchGoesOutWithoutWaiting) {
  Running r(10s, 5);
  for (int i = 0; i < 12; ++i) r.batcher.complete("t" + std::to_string(i));
  std::this_thread::sleep_for(100ms);
  std::lock_guard<std::mutex> lock(r.backend.mutex);
  ASSERT_GE(r.backend.complete_batches.size(), 2u);
  for (const auto& b : r.backend.complete_batches) EXPECT_LE(b.size(), 5u);
}

TEST(CompletionBatcher, StopFlushesEverythingQueued) {
  FakeBackend backend;
  FakeStore store(backend);
  CompletionBatcher batcher(10s, 1000, nullptr, nullptr);
  std::thread t([&] { batcher.run(store); });
  batcher.complete("a");
  batcher.complete("b");
  batcher.fail("c", "boom");
  batcher.stop();
  t.join();
  EXPECT_EQ(backend.completed_count(), 2u);
  ASSERT_EQ(backend.failures.size(), 1u);
  EXPECT_EQ(backend.failures[0].second, "boom");
}

TEST(CompletionBatcher, FailuresAreSentOneByOne) {
  Running r(1ms, 1000);
  r.batcher.fail("x", "e1");
  r.batcher.fail("y", "e2");
  std::this_thread::sleep_for(50ms);
  std::lock_guard<std::mutex> lock(r.backend.mutex);
  EXPECT_EQ(r.backend.failures.size(), 2u);
  EXPECT_TRUE(r.backend.complete_batches.empty());
}

TEST(CompletionBatcher, FlushNowSendsWhatIsQueuedWithoutWaitingForTheWindow) {
  Running r(10s, 1000);
  r.batcher.complete("a");
  r.batcher.complete("b");
  r.batcher.flush_now();
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (r.backend.completed_count() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  std::lock_guard<std::mutex> lock(r.backend.mutex);
  ASSERT_EQ(r.backend.complete_batches.size(), 1u) << "not sent before the 10 s window";
  EXPECT_EQ(r.backend.complete_batches[0].size(), 2u);
}

TEST(CompletionBatcher, FlushNowWithNothingQueuedDoesNotSkipTheNextWindow) {
  Running r(300ms, 1000);
  r.batcher.flush_now();
  r.batcher.complete("a");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(r.backend.completed_count(), 0u) << "a stale flush_now sent it before its window";
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(r.backend.completed_count(), 1u);
}
