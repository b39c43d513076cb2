// The per-key ordering rule within one batch.
#include "core/batch_planner.hpp"

#include "core/lane_lease.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace relaybus::core {
namespace {

// Owns the strings a Candidate points at.
struct Delivery {
  std::string handler;
  std::optional<std::string> key;
  bool in_flight = false;
  bool has_pending_predecessor = false;

  Candidate candidate() const {
    Candidate c;
    c.handler = &handler;
    c.key = &key;
    c.in_flight = in_flight;
    c.has_pending_predecessor = has_pending_predecessor;
    return c;
  }
};

Delivery Keyed(std::string handler, std::string key) {
  Delivery d;
  d.handler = std::move(handler);
  d.key = std::move(key);
  return d;
}

Delivery Unkeyed(std::string handler) {
  Delivery d;
  d.handler = std::move(handler);
  return d;
}

// Offers the deliveries in order and returns which were taken.
std::vector<bool> Offer(BatchPlanner& planner, const std::vector<Delivery>& deliveries) {
  std::vector<bool> taken;
  for (const Delivery& d : deliveries) taken.push_back(planner.offer(d.candidate()));
  return taken;
}

TEST(BatchPlannerTest, StartsWithItsCapacity) {
  BatchPlanner planner(10);
  EXPECT_EQ(planner.remaining(), 10);
  EXPECT_FALSE(planner.full());
}

TEST(BatchPlannerTest, TakesNoMoreThanTheBatchSize) {
  BatchPlanner planner(3);
  const std::vector<Delivery> ds = {Keyed("h", "k1"), Keyed("h", "k2"), Unkeyed("h"),
                                    Keyed("h", "k3"), Unkeyed("h")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, true, true, false, false}));
  EXPECT_EQ(planner.remaining(), 0);
  EXPECT_TRUE(planner.full());
}

TEST(BatchPlannerTest, RemainingCountsTakenDeliveries) {
  BatchPlanner planner(5);
  const Delivery a = Keyed("h", "a");
  const Delivery b = Unkeyed("h");
  ASSERT_TRUE(planner.offer(a.candidate()));
  EXPECT_EQ(planner.remaining(), 4);
  ASSERT_TRUE(planner.offer(b.candidate()));
  EXPECT_EQ(planner.remaining(), 3);
  ASSERT_FALSE(planner.offer(a.candidate()));  // refused: does not use a place
  EXPECT_EQ(planner.remaining(), 3);
  EXPECT_FALSE(planner.full());
}

TEST(BatchPlannerTest, ZeroCapacityTakesNothing) {
  BatchPlanner planner(0);
  EXPECT_TRUE(planner.full());
  const Delivery d = Unkeyed("h");
  EXPECT_FALSE(planner.offer(d.candidate()));
  EXPECT_EQ(planner.remaining(), 0);
}

TEST(BatchPlannerTest, RefusesKeyInFlight) {
  BatchPlanner planner(10);
  Delivery d = Keyed("h", "k");
  d.in_flight = true;
  EXPECT_FALSE(planner.offer(d.candidate()));
  EXPECT_EQ(planner.remaining(), 10);
}

TEST(BatchPlannerTest, RefusesDeliveryWithPendingPredecessor) {
  BatchPlanner planner(10);
  Delivery d = Keyed("h", "k");
  d.has_pending_predecessor = true;
  EXPECT_FALSE(planner.offer(d.candidate()));
  EXPECT_EQ(planner.remaining(), 10);
}

TEST(BatchPlannerTest, RefusesCandidateWithBothFlags) {
  BatchPlanner planner(10);
  Delivery d = Keyed("h", "k");
  d.in_flight = true;
  d.has_pending_predecessor = true;
  EXPECT_FALSE(planner.offer(d.candidate()));
}

TEST(BatchPlannerTest, RefusesFlaggedUnkeyedCandidates) {
  // Whatever the store reports as breaking the rule is refused, keyed or not.
  BatchPlanner planner(10);
  Delivery in_flight = Unkeyed("h");
  in_flight.in_flight = true;
  Delivery behind = Unkeyed("h");
  behind.has_pending_predecessor = true;
  EXPECT_FALSE(planner.offer(in_flight.candidate()));
  EXPECT_FALSE(planner.offer(behind.candidate()));
  EXPECT_EQ(planner.remaining(), 10);
}

TEST(BatchPlannerTest, RefusedCandidatesDoNotBlockOthers) {
  BatchPlanner planner(10);
  Delivery stuck = Keyed("h", "busy");
  stuck.in_flight = true;
  const std::vector<Delivery> ds = {stuck, Keyed("h", "free"), Unkeyed("h")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{false, true, true}));
}

TEST(BatchPlannerTest, UnkeyedDeliveriesAreUnlimitedUpToCapacity) {
  BatchPlanner planner(100);
  std::vector<Delivery> ds(150, Unkeyed("h"));
  const std::vector<bool> taken = Offer(planner, ds);
  for (int i = 0; i < 150; ++i) EXPECT_EQ(taken[i], i < 100) << "delivery " << i;
  EXPECT_TRUE(planner.full());
}

TEST(BatchPlannerTest, NullKeyPointerIsUnkeyed) {
  BatchPlanner planner(3);
  const std::string handler = "h";
  Candidate c;
  c.handler = &handler;
  c.key = nullptr;
  EXPECT_TRUE(planner.offer(c));
  EXPECT_TRUE(planner.offer(c));
  EXPECT_TRUE(planner.offer(c));
  EXPECT_FALSE(planner.offer(c));  // only capacity stops them
}

TEST(BatchPlannerTest, OneDeliveryPerHandlerAndKey) {
  BatchPlanner planner(10);
  const std::vector<Delivery> ds = {Keyed("h", "k"), Keyed("h", "k"), Keyed("h", "k")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(planner.remaining(), 9);
}

TEST(BatchPlannerTest, DuplicateKeyIsRefusedEvenAfterOtherKeys) {
  BatchPlanner planner(10);
  const std::vector<Delivery> ds = {Keyed("h", "a"), Keyed("h", "b"), Unkeyed("h"),
                                    Keyed("h", "a"), Keyed("h", "c"), Keyed("h", "b")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, true, true, false, true, false}));
}

TEST(BatchPlannerTest, DuplicateDoesNotUseAPlace) {
  BatchPlanner planner(2);
  const std::vector<Delivery> ds = {Keyed("h", "k"), Keyed("h", "k"), Keyed("h", "k2")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(planner.full());
}

TEST(BatchPlannerTest, SameKeyForDifferentHandlersIsTakenForEach) {
  BatchPlanner planner(10);
  const std::vector<Delivery> ds = {Keyed("billing", "order-42"), Keyed("shipping", "order-42"),
                                    Keyed("billing", "order-42"), Keyed("audit", "order-42")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, true, false, true}));
}

TEST(BatchPlannerTest, DifferentKeysOfOneHandlerAreTaken) {
  BatchPlanner planner(10);
  const std::vector<Delivery> ds = {Keyed("h", "k1"), Keyed("h", "k2"), Keyed("h", "K1"),
                                    Keyed("h", "k1 ")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, true, true, true}));
}

TEST(BatchPlannerTest, HandlerAndKeyAreNotConcatenated) {
  // ("a", "b:c") and ("a:b", "c") are different pairs even though they join alike.
  BatchPlanner planner(10);
  const std::vector<Delivery> ds = {Keyed("a", "b:c"), Keyed("a:b", "c"), Keyed("ab", "c"),
                                    Keyed("a", "bc"), Keyed("a", "b:c")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, true, true, true, false}));
}

TEST(BatchPlannerTest, EmptyKeyIsAKeyNotAbsence) {
  BatchPlanner planner(10);
  const std::vector<Delivery> ds = {Keyed("h", ""), Keyed("h", ""), Unkeyed("h"), Unkeyed("h")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, false, true, true}));
}

TEST(BatchPlannerTest, ComparesKeyContentsNotAddresses) {
  // Each candidate's strings live at a different address; equal contents are one key.
  BatchPlanner planner(10);
  std::deque<Delivery> ds;
  ds.push_back(Keyed(std::string("h"), std::string("order-") + "7"));
  ds.push_back(Keyed(std::string(1, 'h'), "order-7"));
  EXPECT_TRUE(planner.offer(ds[0].candidate()));
  EXPECT_FALSE(planner.offer(ds[1].candidate()));
}

TEST(BatchPlannerTest, KeyWithEmbeddedNulIsDistinct) {
  BatchPlanner planner(10);
  const std::vector<Delivery> ds = {Keyed("h", std::string("k\0a", 3)),
                                    Keyed("h", std::string("k\0b", 3)), Keyed("h", "k")};
  EXPECT_EQ(Offer(planner, ds), (std::vector<bool>{true, true, true}));
}

TEST(BatchPlannerTest, RefusesALaneWithNoRoomLeft) {
  BatchPlanner planner(100);
  Delivery d = Unkeyed("h");
  Candidate c = d.candidate();
  c.lane_in_flight = kMaxInFlightPerLane - 1;
  EXPECT_TRUE(planner.offer(c)) << "the last place in the lane";
  c.lane_in_flight = kMaxInFlightPerLane;
  EXPECT_FALSE(planner.offer(c)) << "the lane is full";
  c.lane_in_flight = kMaxInFlightPerLane + 5;
  EXPECT_FALSE(planner.offer(c)) << "over full (a lane written before the limit)";
  EXPECT_EQ(planner.remaining(), 99) << "a refused candidate takes no place";
}

TEST(BatchPlannerTest, AFullLaneDoesNotBlockAKeyElsewhere) {
  // Refused for lack of room, the key is not marked taken: its delivery in another claim
  // (or its next offer once there is room) is still allowed.
  BatchPlanner planner(10);
  Delivery d = Keyed("h", "k");
  Candidate c = d.candidate();
  c.lane_in_flight = kMaxInFlightPerLane;
  EXPECT_FALSE(planner.offer(c));
  c.lane_in_flight = 0;
  EXPECT_TRUE(planner.offer(c));
}

}  // namespace
}  // namespace relaybus::core
