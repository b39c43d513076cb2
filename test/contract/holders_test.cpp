// Holders: lanes belong to (worker, holder), whatever store instance (connection) passes
// the pair; another holder under the same name waits for the lease to expire.
#include "contract/contract.hpp"

namespace relaybus::contract {
namespace {

// The same worker and holder on two instances: one incarnation. The second instance sees
// the lanes as held (gets the lane's other delivery, not the first again), renews them,
// and completes the first instance's token; nothing is charged.
TEST_P(Contract, SameHolderOnTwoInstances) {
  auto s1 = open(), s2 = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s1, "h", {type});
  const auto lane_ids = ids_in_lane("e", core::lane_of(unique_name("lane")), 2);
  s1->publish_batch({event(type, lane_ids[0]), event(type, lane_ids[1])});
  const Worker w = worker("pool");

  const auto first = claim(*s1, w, {h}, 1);
  ASSERT_EQ(first.size(), 1u);
  const auto second = claim(*s2, w, {h}, 10);
  ASSERT_EQ(second.size(), 1u) << "the second instance got " << second.size();
  EXPECT_NE(second[0].event_id, first[0].event_id) << "the same delivery was handed out twice";
  EXPECT_EQ(second[0].attempts, 0) << "the lane changed hands";
  EXPECT_GT(s2->extend_lease(w, kLongLease), 0) << "the pair's lanes were not renewed";
  EXPECT_EQ(s2->lookup(first[0].event_id, h), (store::DeliveryState{"pending", 0}));

  EXPECT_EQ(s2->complete_many({first[0].token}), 1) << "the first instance's token is fenced";
  EXPECT_EQ(s1->complete_many({second[0].token}), 1);
  for (const auto& id : lane_ids) EXPECT_EQ(s1->lookup(id, h), std::nullopt);
  EXPECT_EQ(s2->relinquish(w), 1);
}

// Another holder under the same worker name (a restarted process) neither adopts nor
// renews the lanes while their lease lives, and takes them over once it has expired,
// charging the lost attempt and fencing the old token.
TEST_P(Contract, AnotherHolderWaitsForExpiry) {
  auto s1 = open(), s2 = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s1, "h", {type});
  const auto lane_ids = ids_in_lane("e", core::lane_of(unique_name("lane")), 2);
  s1->publish_batch({event(type, lane_ids[0]), event(type, lane_ids[1])});
  const std::string name = unique_name("shared");
  const Worker old_holder{name, unique_name("A")}, new_holder{name, unique_name("B")};

  const auto old = claim(*s1, old_holder, {h}, 1, kShortLease);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_TRUE(claim(*s2, new_holder, {h}).empty())
      << "another holder got work of a lane whose lease lives";
  EXPECT_EQ(s2->extend_lease(new_holder, kLongLease), 0) << "another holder renewed the lanes";
  EXPECT_EQ(s2->relinquish(new_holder), 0) << "another holder relinquished the lanes";

  sleep_past_lease(kShortLease);
  const auto taken = claim(*s2, new_holder, {h});
  ASSERT_EQ(ids(taken), sorted(lane_ids)) << "the expired lane was not taken over";
  for (const auto& d : taken)
    EXPECT_EQ(d.attempts, d.event_id == old[0].event_id ? 1 : 0) << d.event_id;
  EXPECT_EQ(s1->complete_many({old[0].token}), 0) << "the old holder's token is not fenced";
  EXPECT_EQ(s2->complete_many({taken[0].token, taken[1].token}), 2);
}

// Without a holder, lanes are bound to the connection that acquired them, and every live
// connection of the worker name shares them: another one renews them and completes in
// them, and its claims neither take them over nor charge anything.
TEST_P(Contract, WithoutAHolderLiveConnectionsShareTheLanes) {
  auto a = open(), b = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*a, "h", {type});
  const std::string id = a->publish(event(type, unique_name("e")));
  const Worker w{unique_name("bare"), ""};

  const auto got = claim(*a, w, {h});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GT(b->extend_lease(w, kLongLease), 0) << "a live connection's lanes were not renewed";
  EXPECT_TRUE(claim(*b, w, {h}).empty()) << "the delivery in flight was handed out again";
  EXPECT_EQ(b->lookup(id, h), (store::DeliveryState{"pending", 0})) << "an attempt was charged";
  EXPECT_EQ(b->complete_many({got[0].token}), 1);
}

}  // namespace
}  // namespace relaybus::contract
