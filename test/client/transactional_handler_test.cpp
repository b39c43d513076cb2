// Transactional handlers: the handler's writes and the delivery's completion commit in one
// transaction, or neither stays.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "client/dispatcher.hpp"
#include "dispatcher_support.hpp"
#include "fake_store.hpp"

using namespace std::chrono_literals;
using relaybus::client::Delivery;
using relaybus::client::Dispatcher;
using relaybus::client::Handler;
using relaybus::client::Store;
using relaybus::client::Transaction;
using relaybus::client::TransactionalHandler;
using relaybus::client::testing::eventually;
using relaybus::client::testing::fake_factory;
using relaybus::client::testing::FakeBackend;
using relaybus::client::testing::FakeStore;
using relaybus::client::testing::FakeTransaction;
using relaybus::client::testing::Gate;
using relaybus::client::testing::quick_config;

namespace {

using Transactional = std::map<std::string, TransactionalHandler>;

// Writes the event id inside the delivery's transaction.
void write_event(const Delivery& d, Transaction& tx, Store& store) {
  ASSERT_NE(dynamic_cast<FakeStore*>(&store), nullptr);
  dynamic_cast<FakeTransaction&>(tx).write(d.event_id);
}

long count(const std::vector<std::string>& calls, const std::string& call) {
  return std::count(calls.begin(), calls.end(), call);
}

}  // namespace

TEST(TransactionalHandler, WritesAndCompletionCommitTogether) {
  FakeBackend backend;
  backend.transactions = true;
  backend.add(20, "tx");
  auto config = quick_config();
  config.concurrency = 4;  // more deliveries than capacity: each commit must free its slot
  config.batch_size = 4;
  Dispatcher d(fake_factory(backend), config, {}, Transactional{{"tx", write_event}});
  d.start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(backend.mutex);
    return backend.committed.size() == 20;
  }));
  ASSERT_TRUE(eventually([&] { return d.in_flight() == 0; }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_EQ(backend.committed_writes.size(), 20u);
  EXPECT_EQ(count(backend.calls, "commit"), 20);
  EXPECT_EQ(count(backend.calls, "rollback"), 1);       // the constructor's check only
  EXPECT_EQ(count(backend.calls, "complete_many"), 0);  // not completed a second time
  EXPECT_EQ(backend.open_transactions, 0);
  EXPECT_EQ(d.counters().succeeded, 20u);
}

TEST(TransactionalHandler, ALostLeaseRollsBackTheHandlersWrites) {
  FakeBackend backend;
  backend.transactions = true;
  backend.add(1, "tx");
  const std::string token = backend.pending.front().token;
  backend.lost_leases.insert(token);
  Dispatcher d(fake_factory(backend), quick_config(), {}, Transactional{{"tx", write_event}});
  d.start();
  ASSERT_TRUE(eventually([&] { return d.counters().lost == 1; }));
  ASSERT_TRUE(eventually([&] { return d.in_flight() == 0; }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_TRUE(backend.committed_writes.empty());
  EXPECT_TRUE(backend.committed.empty());
  EXPECT_EQ(count(backend.calls, "commit"), 0);
  EXPECT_EQ(count(backend.calls, "fail"), 0);  // nothing to charge: it is someone else's now
  EXPECT_EQ(backend.open_transactions, 0);
  EXPECT_EQ(d.counters().succeeded, 0u);
}

TEST(TransactionalHandler, AThrowRollsBackThenFailsOutsideTheTransaction) {
  FakeBackend backend;
  backend.transactions = true;
  backend.add(1, "tx");
  Dispatcher d(fake_factory(backend), quick_config(), {},
               Transactional{{"tx", [](const Delivery& d, Transaction& tx, Store& s) {
                                write_event(d, tx, s);
                                throw std::runtime_error("constraint violated");
                              }}});
  d.start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(backend.mutex);
    return backend.failures.size() == 1;
  }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_EQ(backend.failures[0].second, "constraint violated");
  EXPECT_TRUE(backend.committed_writes.empty());
  EXPECT_EQ(count(backend.calls, "tx_complete"), 0);
  EXPECT_EQ(count(backend.calls, "commit"), 0);
  // The handler's transaction was rolled back before the attempt was charged.
  auto fail = std::find(backend.calls.begin(), backend.calls.end(), "fail");
  auto last_begin = std::find(backend.calls.rbegin(), backend.calls.rend(), "begin").base();
  EXPECT_LT(std::find(last_begin, backend.calls.end(), "rollback"), fail);
  EXPECT_EQ(backend.open_transactions, 0);
  EXPECT_EQ(d.counters().failed, 1u);
}

TEST(TransactionalHandler, AnAbandonedHandlerIsRolledBackNotCompleted) {
  FakeBackend backend;
  backend.transactions = true;
  backend.add(1, "tx");
  Gate gate;
  std::atomic<int> returned{0};
  auto config = quick_config();
  config.shutdown_grace = 50ms;
  {
    Dispatcher d(fake_factory(backend), config, {},
                 Transactional{{"tx", [&](const Delivery& d, Transaction& tx, Store& s) {
                                  write_event(d, tx, s);
                                  gate.pass();
                                  ++returned;
                                }}});
    d.start();
    ASSERT_TRUE(eventually([&] { return gate.waiting.load() == 1; }));
    d.stop();  // released: another worker may run it now
  }
  gate.release();
  ASSERT_TRUE(eventually([&] { return returned.load() == 1; }));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(backend.mutex);
    return backend.open_transactions == 0;
  }));
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_EQ(backend.released.size(), 1u);
  EXPECT_TRUE(backend.committed_writes.empty());
  EXPECT_EQ(count(backend.calls, "tx_complete"), 0);
  EXPECT_EQ(count(backend.calls, "commit"), 0);
}

TEST(TransactionalHandler, AStoreWithoutTransactionsIsRefusedAtConstruction) {
  FakeBackend backend;  // begin() returns nullptr
  EXPECT_THROW(
      Dispatcher(fake_factory(backend), quick_config(), {}, Transactional{{"tx", write_event}}),
      std::invalid_argument);
  // Without transactional handlers such a store is fine.
  EXPECT_NO_THROW(
      Dispatcher(fake_factory(backend), quick_config(), {{"plain", [](const Delivery&) {}}}));
}

TEST(TransactionalHandler, ANameIsEitherPlainOrTransactional) {
  FakeBackend backend;
  backend.transactions = true;
  EXPECT_THROW(Dispatcher(fake_factory(backend), quick_config(), {{"h", [](const Delivery&) {}}},
                          Transactional{{"h", write_event}}),
               std::invalid_argument);
}
