// Republishing an event id that exists: only the handlers it never had get a delivery.
#include "core/republish.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace relaybus::core {
namespace {

using Names = std::vector<std::string>;

TEST(RepublishTest, AddsOnlyTheTargetsTheEventNeverHad) {
  EXPECT_EQ(handlers_to_add({"a", "b", "c"}, {"b"}), (Names{"a", "c"}));
}

TEST(RepublishTest, AnEventWithNoHandlersYetGetsEveryTarget) {
  EXPECT_EQ(handlers_to_add({"b", "a"}, {}), (Names{"a", "b"}));
}

TEST(RepublishTest, TheResultIsSortedWhateverOrderTheTargetsCameIn) {
  EXPECT_EQ(handlers_to_add({"zeta", "alpha", "mid"}, {"other"}), (Names{"alpha", "mid", "zeta"}));
}

TEST(RepublishTest, ARepeatedTargetGetsOneDelivery) {
  EXPECT_EQ(handlers_to_add({"a", "b", "a", "b", "a"}, {}), (Names{"a", "b"}));
}

TEST(RepublishTest, AHandlerThatHadTheEventIsNeverAddedAgain) {
  // Pending, dead or long completed: `had` says it had it, which is all that counts.
  EXPECT_EQ(handlers_to_add({"a"}, {"a"}), Names{});
  EXPECT_EQ(handlers_to_add({"a", "a"}, {"a"}), Names{});
  // `had` unsorted and with repeats must not let a handler through.
  EXPECT_EQ(handlers_to_add({"c", "a", "b"}, {"c", "a", "c"}), (Names{"b"}));
}

TEST(RepublishTest, HandlersTheEventHadButNoLongerTargetedAreNotInTheResult) {
  EXPECT_EQ(handlers_to_add({"b"}, {"a", "c"}), (Names{"b"}));
}

TEST(RepublishTest, NoTargetsAddsNothing) {
  EXPECT_EQ(handlers_to_add({}, {}), Names{});
  EXPECT_EQ(handlers_to_add({}, {"a", "b"}), Names{});
}

TEST(RepublishTest, NamesDifferingOnlyInCaseAreDistinctHandlers) {
  EXPECT_EQ(handlers_to_add({"A", "a"}, {"a"}), (Names{"A"}));
}

TEST(SubscribesToTest, TheTypeItselfOrEveryType) {
  EXPECT_TRUE(subscribes_to({"order.created"}, "order.created"));
  EXPECT_TRUE(subscribes_to({"x", "*"}, "order.created"));
  EXPECT_FALSE(subscribes_to({"order.created"}, "order.paid"));
  EXPECT_FALSE(subscribes_to({"order.*"}, "order.paid")) << "no patterns, only \"*\"";
  EXPECT_FALSE(subscribes_to({}, "order.created"));
}

}  // namespace
}  // namespace relaybus::core
