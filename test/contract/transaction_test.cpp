// Effectively-once for transactional handlers: a completion inside the caller's
// transaction and a takeover of its lane cannot both win.
#include "contract/contract.hpp"

#include <future>
#include <thread>

namespace relaybus::contract {
namespace {

// While the completing transaction is open, no other worker gets the delivery, even with
// the lease expired; once it commits, the delivery is gone.
TEST_P(Contract, TransactionalCompleteCommit) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string id = a->publish(event(type, unique_name("e")));

  const auto got = claim(*a, worker("a"), {h}, 10, kShortLease);
  ASSERT_EQ(got.size(), 1u);
  auto tx = a->begin();
  if (!tx) GTEST_SKIP() << "contract backend " << GetParam() << " has no transactions (begin())";
  EXPECT_TRUE(tx->complete(got[0].token));

  sleep_past_lease(kShortLease);
  EXPECT_TRUE(claim(*b, worker("b"), {h}).empty())
      << "another worker took the delivery over while its completion was in progress";
  tx->commit();
  EXPECT_EQ(b->lookup(id, h), std::nullopt);
  EXPECT_TRUE(claim(*b, worker("b"), {h}).empty()) << "a committed completion ran again";
}

// Rolled back, the completion never happened: after the lease, another worker gets the
// delivery, charged the lost attempt. A completion whose lease is gone returns false.
TEST_P(Contract, TransactionalCompleteRollback) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string id = a->publish(event(type, unique_name("e")));

  const auto got = claim(*a, worker("a"), {h}, 10, kShortLease);
  ASSERT_EQ(got.size(), 1u);
  auto tx = a->begin();
  if (!tx) GTEST_SKIP() << "contract backend " << GetParam() << " has no transactions (begin())";
  EXPECT_TRUE(tx->complete(got[0].token));
  tx->rollback();
  tx.reset();

  sleep_past_lease(kShortLease);
  const auto again = claim(*b, worker("b"), {h});
  ASSERT_EQ(ids(again), std::vector<std::string>{id}) << "a rolled-back completion was kept";
  EXPECT_EQ(again[0].attempts, 1);

  auto stale = a->begin();
  EXPECT_FALSE(stale->complete(got[0].token)) << "a taken-over token completed in a transaction";
  stale->commit();
  EXPECT_EQ(b->lookup(id, h), (store::DeliveryState{"pending", 1}));
  EXPECT_EQ(b->complete_many({again[0].token}), 1);
}

// A completion in progress holds its delivery: a fail of the same token from another
// connection waits for that transaction, and after the commit finds the lease gone.
TEST_P(Contract, AFailWaitsForACompletionInProgress) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string id = a->publish(event(type, unique_name("e")));
  const auto got = claim(*a, worker("a"), {h});
  ASSERT_EQ(got.size(), 1u);
  auto tx = a->begin();
  if (!tx) GTEST_SKIP() << "contract backend " << GetParam() << " has no transactions (begin())";
  ASSERT_TRUE(tx->complete(got[0].token));

  std::promise<FailOutcome> outcome;
  auto result = outcome.get_future();
  std::thread late([&] {
    try {
      outcome.set_value(b->fail(got[0].token, "late"));
    } catch (...) {
      outcome.set_exception(std::current_exception());
    }
  });
  const bool waited = result.wait_for(300ms) == std::future_status::timeout;
  tx->commit();
  const bool ended = result.wait_for(10s) == std::future_status::ready;
  if (!ended) {
    late.detach();
    FAIL() << "the fail still waits after the commit";
  }
  late.join();
  EXPECT_TRUE(waited) << "the fail did not wait for the completion in progress";
  EXPECT_EQ(result.get(), FailOutcome::kLost);
  EXPECT_EQ(b->lookup(id, h), std::nullopt) << "the committed completion was undone";
}

}  // namespace
}  // namespace relaybus::contract
