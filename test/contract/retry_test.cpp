// Per-handler retry and dead letters: fail reschedules after the backoff (or after
// retry_after), the budget ends in the dead letters, bury dead-letters at once, requeue
// brings a dead delivery back with a fresh budget.
#include "contract/contract.hpp"

namespace relaybus::contract {
namespace {

// fail -> retry after the handler's backoff; at max_attempts -> dead, never claimed again;
// requeue -> pending with a fresh budget; requeue of anything not dead -> false.
TEST_P(Contract, FailRetriesThenDeadLetters) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  core::RetryPolicy retry;
  retry.max_attempts = 2;
  retry.backoff_base_us = 400'000;  // 400 ms, the first backoff
  retry.backoff_max_us = 400'000;
  const std::string h = subscribe(*a, "h", {type}, retry);
  const std::string other = subscribe(*a, "other", {type});
  const std::string id = a->publish(event(type, unique_name("e")));
  const Worker wa = worker("a"), wb = worker("b");

  auto got = claim(*a, wa, {h});
  ASSERT_EQ(ids(got), std::vector<std::string>{id});
  EXPECT_EQ(a->fail(got[0].token, "boom"), FailOutcome::kRetry);
  EXPECT_EQ(a->lookup(id, h), (store::DeliveryState{"pending", 1}));
  EXPECT_EQ(a->lookup(id, other), (store::DeliveryState{"pending", 0}))
      << "another handler's delivery of the event was charged";
  EXPECT_TRUE(claim(*a, wa, {h}).empty()) << "claimable before its backoff";
  EXPECT_TRUE(claim(*b, wb, {h}).empty()) << "claimable before its backoff";

  sleep_past(std::chrono::milliseconds(retry.backoff_base_us / 1000));
  got = claim(*a, wa, {h});
  ASSERT_EQ(ids(got), std::vector<std::string>{id}) << "not claimable after its backoff";
  EXPECT_EQ(got[0].attempts, 1);
  EXPECT_EQ(a->fail(got[0].token, "boom again"), FailOutcome::kDead);
  EXPECT_EQ(a->lookup(id, h), (store::DeliveryState{"dead", 2}));

  sleep_past(std::chrono::milliseconds(retry.backoff_max_us / 1000));
  EXPECT_TRUE(claim(*a, wa, {h}).empty()) << "a dead delivery was claimed";
  EXPECT_TRUE(claim(*b, wb, {h}).empty()) << "a dead delivery was claimed";

  EXPECT_TRUE(a->requeue(id, h));
  EXPECT_EQ(a->lookup(id, h), (store::DeliveryState{"pending", 0}));
  EXPECT_FALSE(a->requeue(id, h)) << "requeue of a pending delivery";
  EXPECT_FALSE(a->requeue(id, other)) << "requeue of another handler's pending delivery";
  EXPECT_FALSE(a->requeue(unique_name("never-published"), h));
  got = claim(*a, wa, {h});
  ASSERT_EQ(ids(got), std::vector<std::string>{id}) << "a requeued delivery is claimable";
  EXPECT_EQ(got[0].attempts, 0);
  EXPECT_FALSE(a->requeue(id, h)) << "requeue of a delivery in flight";
  EXPECT_EQ(a->complete_many({got[0].token}), 1);
  EXPECT_FALSE(a->requeue(id, h)) << "requeue of a completed delivery";
}

// fail with retry_after: due after that delay, not after the handler's backoff (1 s here).
TEST_P(Contract, FailWithRetryAfter) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});  // default backoff: 1 s
  const std::string id = s->publish(event(type, unique_name("e")));
  const Worker w = worker("w");

  auto got = claim(*s, w, {h});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(s->fail(got[0].token, "later", 300ms), FailOutcome::kRetry);
  EXPECT_TRUE(claim(*s, w, {h}).empty()) << "claimable before retry_after";
  sleep_past(300ms);
  got = claim(*s, w, {h});
  ASSERT_EQ(ids(got), std::vector<std::string>{id}) << "not claimable after retry_after";
  EXPECT_EQ(got[0].attempts, 1);
}

// bury dead-letters at once, whatever the budget left, and charges the attempt.
TEST_P(Contract, BuryDeadLettersAtOnce) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});  // 25 attempts
  const std::string id = s->publish(event(type, unique_name("e")));
  const Worker w = worker("w");

  auto got = claim(*s, w, {h});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(s->bury(got[0].token, "poison"));
  EXPECT_EQ(s->lookup(id, h), (store::DeliveryState{"dead", 1}));
  EXPECT_TRUE(claim(*s, w, {h}).empty()) << "a buried delivery was claimed";
  EXPECT_TRUE(claim(*s, worker("other"), {h}).empty()) << "a buried delivery was claimed";
  EXPECT_TRUE(s->requeue(id, h));
  got = claim(*s, w, {h});
  ASSERT_EQ(ids(got), std::vector<std::string>{id});
  EXPECT_EQ(got[0].attempts, 0);
}

}  // namespace
}  // namespace relaybus::contract
