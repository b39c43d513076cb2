// What a newcomer's mistakes do to the runtime (issue 34): start() reports a store that is
// not set up before anything runs; a handler that is not subscribed never starves the
// others; Bury dead-letters at once; every connection is named; the stop-signal helper and
// the payload's typed access work as docs/cpp-runtime.md shows them.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

#include "client/dispatcher.hpp"
#include "client/payload.hpp"
#include "client/setup_error.hpp"
#include "client/stop_signals.hpp"
#include "dispatcher_support.hpp"
#include "fake_store.hpp"

using namespace std::chrono_literals;
using relaybus::client::Bury;
using relaybus::client::Delivery;
using relaybus::client::Dispatcher;
using relaybus::client::Handler;
using relaybus::client::SetupError;
using relaybus::client::StopSignals;
using relaybus::client::Store;
using relaybus::client::Transaction;
using relaybus::client::TransactionalHandler;
using relaybus::client::testing::eventually;
using relaybus::client::testing::fake_factory;
using relaybus::client::testing::FakeBackend;
using relaybus::client::testing::quick_config;

namespace {

long count(FakeBackend& backend, const std::string& call) {
  std::lock_guard<std::mutex> lock(backend.mutex);
  return std::count(backend.calls.begin(), backend.calls.end(), call);
}

}  // namespace

// The bug of issue 34: one claim names every handler and the store refuses the whole claim
// when one is not subscribed, so one bad name starved the correctly named handler too.
// start() now refuses such a name (the fake's check_worker passes here); this is the same
// name found unsubscribed once the worker runs (an admin unsubscribed it meanwhile).
TEST(FailFast, AnUnsubscribedHandlerDoesNotStarveTheOthers) {
  FakeBackend backend;
  backend.add(5, "mailer");
  backend.unsubscribed = {"mialer"};  // every claim naming it fails
  std::vector<std::string> logged;
  std::mutex log_mutex;
  auto config = quick_config();
  config.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mutex);
    logged.push_back(line);
  };
  Dispatcher d(fake_factory(backend), config,
               {{"mailer", [](const Delivery&) {}}, {"mialer", [](const Delivery&) {}}});
  d.start();
  EXPECT_TRUE(eventually([&] { return backend.completed_count() == 5; }));
  // Said once, with what to run, not at every poll.
  std::this_thread::sleep_for(100ms);  // five poll intervals
  d.stop();
  std::lock_guard<std::mutex> lock(log_mutex);
  auto is_notice = [](const std::string& line) {
    return line.find("handler mialer is not subscribed") != std::string::npos;
  };
  EXPECT_EQ(std::count_if(logged.begin(), logged.end(), is_notice), 1);
  const auto notice = std::find_if(logged.begin(), logged.end(), is_notice);
  ASSERT_NE(notice, logged.end());
  EXPECT_NE(notice->find("SELECT relaybus.subscribe('mialer'"), std::string::npos) << *notice;
  EXPECT_NE(notice->find("claiming for the other handlers without it"), std::string::npos)
      << *notice;
}

// The only handler left out: the notice does not speak of other handlers there are none of.
TEST(FailFast, TheOnlyHandlerLeftOutSaysNothingIsClaimed) {
  FakeBackend backend;
  backend.unsubscribed = {"late"};
  std::vector<std::string> logged;
  std::mutex log_mutex;
  auto config = quick_config();
  config.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mutex);
    logged.push_back(line);
  };
  Dispatcher d(fake_factory(backend), config, {{"late", [](const Delivery&) {}}});
  d.start();
  auto noticed = [&] {
    std::lock_guard<std::mutex> lock(log_mutex);
    return std::any_of(logged.begin(), logged.end(), [](const std::string& line) {
      return line.find("handler late is not subscribed") != std::string::npos;
    });
  };
  ASSERT_TRUE(eventually(noticed));
  d.stop();
  std::lock_guard<std::mutex> lock(log_mutex);
  const auto notice = std::find_if(logged.begin(), logged.end(), [](const std::string& line) {
    return line.find("handler late is not subscribed") != std::string::npos;
  });
  EXPECT_NE(notice->find("claiming nothing for now"), std::string::npos) << *notice;
  EXPECT_EQ(notice->find("other handlers"), std::string::npos) << *notice;
}

TEST(FailFast, ALeftOutHandlerIsTriedAgainAndRunsOnceSubscribed) {
  FakeBackend backend;
  backend.unsubscribed = {"late"};
  backend.add(1, "someone-else");  // a claim naming no handler would take this one
  auto config = quick_config();
  config.recheck_unsubscribed = 50ms;
  Dispatcher d(fake_factory(backend), config, {{"late", [](const Delivery&) {}}});
  d.start();
  ASSERT_TRUE(eventually([&] { return count(backend, "claim") >= 2; }));
  {
    std::lock_guard<std::mutex> lock(backend.mutex);
    backend.unsubscribed.clear();
  }
  backend.add(2, "late");
  EXPECT_TRUE(eventually([&] { return backend.completed_count() == 2; }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  ASSERT_EQ(backend.pending.size(), 1u);
  EXPECT_EQ(backend.pending.front().handler, "someone-else");
}

TEST(FailFast, StartThrowsTheSetupProblemAndStartsNothing) {
  FakeBackend backend;
  backend.add(3, "mailer");
  backend.setup_problem = "handler \"mailer\" is not subscribed in database \"app\"";
  Dispatcher d(fake_factory(backend), quick_config(), {{"mailer", [](const Delivery&) {}}});
  try {
    d.start();
    FAIL() << "start() did not throw";
  } catch (const SetupError& e) {
    EXPECT_EQ(e.kind(), SetupError::Kind::kNotSubscribed);
    EXPECT_EQ(std::string(e.what()), *backend.setup_problem);
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(count(backend, "claim"), 0);
  d.stop();  // a no-op: nothing started
  EXPECT_EQ(count(backend, "relinquish"), 0);
}

TEST(FailFast, StartWithoutAnyHandlerThrows) {
  FakeBackend backend;
  Dispatcher d(fake_factory(backend), quick_config(), {});
  EXPECT_THROW(d.start(), std::invalid_argument);
  EXPECT_EQ(count(backend, "claim"), 0);
}

TEST(FailFast, StartChecksOnTheClaimConnectionAndOpensNoOtherForIt) {
  FakeBackend backend;
  backend.add(1, "h");
  auto config = quick_config();
  config.lease = 60s;  // the renewer would open its own after lease / 3: not within this test
  Dispatcher d(fake_factory(backend), config, {{"h", [](const Delivery&) {}}});
  d.start();
  ASSERT_TRUE(eventually([&] { return backend.completed_count() == 1; }));
  d.stop();
  EXPECT_EQ(count(backend, "check_worker"), 1);
  std::lock_guard<std::mutex> lock(backend.mutex);
  // The claim thread's, which the check ran on, and the settlement thread's: a check on a
  // connection of its own would make three.
  EXPECT_EQ(backend.opened, 2);
}

TEST(FailFast, BuryDeadLettersAtOnce) {
  FakeBackend backend;
  backend.add(1, "h");
  Dispatcher d(fake_factory(backend), quick_config(),
               {{"h", [](const Delivery&) { throw Bury("no order_id in the payload"); }}});
  d.start();
  ASSERT_TRUE(eventually([&] { return count(backend, "bury") == 1; }));
  d.stop();
  EXPECT_EQ(count(backend, "fail"), 0);
  EXPECT_EQ(backend.failures.at(0).second, "no order_id in the payload");
  EXPECT_EQ(d.counters().buried, 1u);
  EXPECT_EQ(d.counters().failed, 1u);
}

TEST(FailFast, BuryFromATransactionalHandlerRollsBackThenBuries) {
  FakeBackend backend;
  backend.transactions = true;
  backend.add(1, "tx");
  std::map<std::string, TransactionalHandler> transactional{
      {"tx", [](const Delivery&, Transaction&, Store&) { throw Bury("malformed"); }}};
  Dispatcher d(fake_factory(backend), quick_config(), {}, transactional);
  d.start();
  ASSERT_TRUE(eventually([&] { return count(backend, "bury") == 1; }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  auto bury = std::find(backend.calls.begin(), backend.calls.end(), "bury");
  auto last_begin = std::find(backend.calls.rbegin(), backend.calls.rend(), "begin").base();
  EXPECT_LT(std::find(last_begin, backend.calls.end(), "rollback"), bury);
  EXPECT_TRUE(backend.committed.empty());
}

TEST(FailFast, EveryConnectionIsNamedAfterTheWorker) {
  FakeBackend backend;
  backend.add(1, "h");
  Dispatcher d(fake_factory(backend), quick_config(), {{"h", [](const Delivery&) {}}});
  d.start();
  ASSERT_TRUE(eventually([&] { return backend.completed_count() == 1; }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  ASSERT_GE(backend.names.size(), 2u);
  for (const auto& name : backend.names) EXPECT_EQ(name, "relaybus-cpp " + d.worker());
}

TEST(FailFast, TheConnectionsNameCanBeChosen) {
  FakeBackend backend;
  backend.add(1, "h");
  auto config = quick_config();
  config.application_name = "billing worker";
  Dispatcher d(fake_factory(backend), config, {{"h", [](const Delivery&) {}}});
  d.start();
  ASSERT_TRUE(eventually([&] { return backend.completed_count() == 1; }));
  d.stop();
  std::lock_guard<std::mutex> lock(backend.mutex);
  ASSERT_FALSE(backend.names.empty());
  for (const auto& name : backend.names) EXPECT_EQ(name, "billing worker");
}

TEST(Payload, TypedAccessThroughNlohmannJson) {
  Delivery d;
  d.payload = R"({"order_id": 42, "lines": [{"sku": "a"}, {"sku": "b"}]})";
  const auto order = relaybus::client::payload(d);
  EXPECT_EQ(order.at("order_id").get<int>(), 42);
  EXPECT_EQ(order.at("lines").size(), 2u);
  using Fields = std::map<std::string, nlohmann::json>;
  EXPECT_EQ(relaybus::client::payload_as<Fields>(d).size(), 2u);
  EXPECT_THROW(order.at("customer"), nlohmann::json::exception);
}

TEST(StopSignals, SigtermEndsTheWait) {
  StopSignals signals;
  EXPECT_FALSE(signals.wait_for(10ms).has_value());
  EXPECT_FALSE(signals.received().has_value());
  std::thread sender([] { kill(getpid(), SIGTERM); });  // to the process, any thread may get it
  EXPECT_EQ(signals.wait(), SIGTERM);
  sender.join();
  EXPECT_EQ(signals.wait_for(0ms), SIGTERM);  // it stays received
}

TEST(StopSignals, SigintToo) {
  StopSignals signals;
  raise(SIGINT);
  EXPECT_EQ(signals.wait_for(1000ms), SIGINT);
}

TEST(StopSignals, OneAtATime) {
  StopSignals signals;
  EXPECT_THROW(StopSignals(), std::logic_error);
}
