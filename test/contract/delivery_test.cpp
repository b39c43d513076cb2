// The worker half over time: at-least-once after a lost worker, fencing of stale tokens,
// attempts (a release charges nothing, a crash loop ends dead), graceful shutdown.
#include "contract/contract.hpp"

namespace relaybus::contract {
namespace {

// Never lose / at-least-once: a delivery whose worker never completes is claimed again by
// another worker once the lease has expired, charged exactly the one lost attempt; only
// completion removes it.
TEST_P(Contract, AtLeastOnceAfterLeaseExpiry) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string id = a->publish(event(type, unique_name("e")));
  const Worker wa = worker("a"), wb = worker("b");

  const auto first = claim(*a, wa, {h}, 10, kShortLease);
  ASSERT_EQ(ids(first), std::vector<std::string>{id});
  EXPECT_EQ(first[0].attempts, 0);
  EXPECT_TRUE(claim(*b, wb, {h}).empty()) << "another worker got it while the lease lived";

  sleep_past_lease(kShortLease);
  const auto second = claim(*b, wb, {h});
  ASSERT_EQ(ids(second), std::vector<std::string>{id}) << "the lost delivery was not redelivered";
  EXPECT_EQ(second[0].attempts, 1) << "the lost attempt is charged exactly once";
  EXPECT_EQ(b->lookup(id, h), (store::DeliveryState{"pending", 1}));

  EXPECT_EQ(b->complete_many({second[0].token}), 1);
  EXPECT_EQ(b->lookup(id, h), std::nullopt);
  sleep_past_lease(kShortLease);
  EXPECT_TRUE(claim(*a, wa, {h}).empty());
  EXPECT_TRUE(claim(*b, wb, {h}).empty());
  EXPECT_TRUE(claim(*b, worker("c"), {h}).empty()) << "a completed delivery came back";
}

// A store whose claims renew the lanes its worker holds (Store::claim_renews_held_lanes: a
// runtime then leaves the renewals to its claims while they go on) renews one whose
// delivery outlives the lease though the claims pick nothing from it: no rival takes it
// over, and the delivery completes with the token it was claimed with.
TEST_P(Contract, ClaimsThatRenewHeldLanesKeepARunningOne) {
  auto a = open(), b = open();
  if (!a->claim_renews_held_lanes()) GTEST_SKIP() << "this store's claims do not renew lanes";
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string id = a->publish(event(type, unique_name("e"), "k"));
  const Worker wa = worker("a"), wb = worker("b");
  const auto first = claim(*a, wa, {h}, 10, kShortLease);
  ASSERT_EQ(ids(first), std::vector<std::string>{id});
  // The handler runs for three leases while the worker keeps claiming, as a runtime with
  // free places does.
  const auto until = std::chrono::steady_clock::now() + kShortLease * 3;
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_TRUE(claim(*a, wa, {h}, 10, kShortLease).empty());
    std::this_thread::sleep_for(kShortLease / 8);
  }
  EXPECT_TRUE(claim(*b, wb, {h}, 10, kShortLease).empty()) << "the running lane was taken over";
  EXPECT_EQ(a->complete_many({first[0].token}), 1);
  EXPECT_EQ(a->lookup(id, h), std::nullopt);
}

// Fencing: after a takeover, every write with the old token is refused and changes
// nothing; the new token works. A token spent by release or complete is fenced too.
TEST_P(Contract, Fencing) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string id = a->publish(event(type, unique_name("e")));
  const Worker wa = worker("a"), wb = worker("b");

  const auto old = claim(*a, wa, {h}, 10, kShortLease);
  ASSERT_EQ(old.size(), 1u);
  sleep_past_lease(kShortLease);
  const auto now = claim(*b, wb, {h});
  ASSERT_EQ(now.size(), 1u);
  ASSERT_EQ(now[0].event_id, id);

  EXPECT_EQ(a->complete_many({old[0].token}), 0);
  EXPECT_EQ(a->fail(old[0].token, "stale"), FailOutcome::kLost);
  EXPECT_FALSE(a->release(old[0].token));
  EXPECT_FALSE(a->bury(old[0].token, "stale"));
  EXPECT_EQ(a->lookup(id, h), (store::DeliveryState{"pending", 1}))
      << "a stale token changed the delivery";

  // The new token: released (spent), claimed again, completed; each spent token is fenced.
  EXPECT_TRUE(b->release(now[0].token));
  EXPECT_EQ(b->fail(now[0].token, "spent"), FailOutcome::kLost);
  const auto again = claim(*b, wb, {h});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(b->complete_many({now[0].token}), 0) << "a released token completed";
  EXPECT_EQ(b->complete_many({again[0].token}), 1);
  EXPECT_EQ(b->complete_many({again[0].token}), 0) << "a token completed twice";
  EXPECT_FALSE(b->bury(again[0].token, "spent"));
  EXPECT_EQ(b->lookup(id, h), std::nullopt);
}

// Release gives the delivery back at once, to any claim, and charges nothing.
TEST_P(Contract, ReleaseChargesNothing) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string id = s->publish(event(type, unique_name("e")));
  const Worker w = worker("w");

  for (int round = 0; round < 3; ++round) {
    const auto got = claim(*s, w, {h});
    ASSERT_EQ(ids(got), std::vector<std::string>{id}) << "round " << round;
    EXPECT_EQ(got[0].attempts, 0) << "round " << round;
    EXPECT_TRUE(s->release(got[0].token));
    EXPECT_EQ(s->lookup(id, h), (store::DeliveryState{"pending", 0}));
  }
}

// Attempts and poison: a delivery whose workers keep crashing (their leases expire and the
// next worker takes the lane over) is charged once per takeover and ends dead after
// max_attempts of them, never to be claimed again.
TEST_P(Contract, PoisonDeliveryEndsDead) {
  auto s = open();
  const std::string type = unique_name("type");
  core::RetryPolicy retry;
  retry.max_attempts = 3;
  const std::string h = subscribe(*s, "h", {type}, retry);
  const std::string id = s->publish(event(type, unique_name("e")));

  for (int crash = 0; crash < retry.max_attempts; ++crash) {
    const auto got = claim(*s, worker("w" + std::to_string(crash)), {h}, 10, kShortLease);
    ASSERT_EQ(ids(got), std::vector<std::string>{id}) << "takeover " << crash;
    EXPECT_EQ(got[0].attempts, crash) << "takeover " << crash;
    sleep_past_lease(kShortLease);  // and the worker "crashes": never completes
  }
  EXPECT_TRUE(claim(*s, worker("last"), {h}).empty()) << "claimed past max_attempts";
  EXPECT_EQ(s->lookup(id, h), (store::DeliveryState{"dead", retry.max_attempts}));
  EXPECT_TRUE(claim(*s, worker("after"), {h}).empty()) << "a dead delivery was claimed";
}

// Graceful shutdown: relinquish hands back the lanes that run nothing, so another worker
// claims from them at once, without waiting for the lease; a lane that still runs
// something stays with its worker.
TEST_P(Contract, RelinquishHandsBackIdleLanes) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string idle_id = unique_name("idle");
  const int idle_lane = core::lane_of(idle_id);
  const std::string busy_id = id_outside_lanes("busy", {idle_lane});
  const int busy_lane = core::lane_of(busy_id);
  const std::string waiting_id = ids_in_lane("waiting", busy_lane, 1)[0];
  const Worker wa = worker("a"), wb = worker("b");

  a->publish_batch({event(type, idle_id), event(type, busy_id)});
  const auto got = claim(*a, wa, {h});
  ASSERT_EQ(ids(got), sorted({idle_id, busy_id}));
  a->publish(event(type, waiting_id));  // in the busy lane, behind nothing (unkeyed)

  const Delivery& idle = got[0].event_id == idle_id ? got[0] : got[1];
  const Delivery& busy = got[0].event_id == idle_id ? got[1] : got[0];
  EXPECT_TRUE(a->release(idle.token));  // shutting down: give back what did not start
  EXPECT_EQ(a->relinquish(wa), 1) << "exactly the idle lane is handed back";

  const auto taken = claim(*b, wb, {h});
  EXPECT_EQ(ids(taken), std::vector<std::string>{idle_id})
      << "another worker claims the relinquished lane at once, and nothing of the busy one";
  if (!taken.empty()) {
    EXPECT_EQ(taken[0].attempts, 0) << "a relinquished lane charges nothing";
  }

  // The busy lane is still A's: its token works, and A claims the work waiting there.
  EXPECT_EQ(a->complete_many({busy.token}), 1);
  const auto rest = claim(*a, wa, {h});
  EXPECT_EQ(ids(rest), std::vector<std::string>{waiting_id});
}

}  // namespace
}  // namespace relaybus::contract
