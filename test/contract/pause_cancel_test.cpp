// Pause, resume and cancel: a paused handler keeps its deliveries and no claim hands them
// out, asked for by name or not; its attempts in flight still end; resume hands them out
// again. cancel removes a pending or dead delivery, frees its key for the next one, and
// refuses one in flight.
#include "contract/contract.hpp"

namespace relaybus::contract {
namespace {

TEST_P(Contract, APausedHandlerKeepsItsDeliveriesAndNothingOfItIsClaimed) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string running = unique_name("running");
  s->publish(event(type, running));
  const Worker w = worker("w");
  const auto in_flight = claim(*s, w, {h});
  ASSERT_EQ(in_flight.size(), 1u);

  EXPECT_TRUE(s->pause(h));
  EXPECT_FALSE(s->pause(h)) << "paused already";
  EXPECT_TRUE(statistics_of(*s, h)->paused);
  const std::string waiting = unique_name("waiting");
  s->publish(event(type, waiting));
  EXPECT_TRUE(claim(*s, w, {h}).empty()) << "asked for by name";
  EXPECT_TRUE(claim(*s, worker("other"), {h}).empty()) << "by another worker";
  EXPECT_EQ(s->lookup(waiting, h), (store::DeliveryState{"pending", 0})) << "kept";
  EXPECT_EQ(s->complete_many({in_flight[0].token}), 1) << "an attempt in flight still ends";

  EXPECT_TRUE(s->resume(h));
  EXPECT_FALSE(s->resume(h)) << "not paused";
  EXPECT_FALSE(statistics_of(*s, h)->paused);
  const auto after = claim(*s, w, {h});
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].event_id, waiting);
}

TEST_P(Contract, PauseOfAnUnsubscribedHandlerIsUndefined) {
  auto s = open();
  const std::string nobody = unique_name("nobody");
  EXPECT_STORE_ERROR(s->pause(nobody), core::ErrorCode::kUndefinedObject);
  EXPECT_STORE_ERROR(s->resume(nobody), core::ErrorCode::kUndefinedObject);
}

TEST_P(Contract, AResubscribeKeepsThePause) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  ASSERT_TRUE(s->pause(h));
  s->subscribe({h, {type}, core::RetryPolicy{}});
  EXPECT_TRUE(statistics_of(*s, h)->paused);
  s->publish(event(type, unique_name("e")));
  EXPECT_TRUE(claim(*s, worker("w"), {h}).empty());
}

TEST_P(Contract, CancelRemovesAPendingDeliveryAndFreesItsKey) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string key = unique_name("k");
  const std::string first = unique_name("first");
  const std::string second = unique_name("second");
  s->publish(event(type, first, key));
  s->publish(event(type, second, key));
  EXPECT_TRUE(s->cancel(first, h));
  EXPECT_EQ(s->lookup(first, h), std::nullopt);
  EXPECT_FALSE(s->cancel(first, h)) << "gone already";
  EXPECT_FALSE(s->cancel("", h)) << "a name no delivery has is not found, in every store";
  const auto next = claim(*s, worker("w"), {h});
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].event_id, second) << "the key's next delivery no longer waits";
}

TEST_P(Contract, CancelRemovesADeadLetterAndRefusesOneInFlight) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string poison = unique_name("e");
  s->publish(event(type, poison));
  const Worker w = worker("w");
  auto c = claim(*s, w, {h});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_STORE_ERROR(s->cancel(poison, h), core::ErrorCode::kObjectInUse);
  EXPECT_EQ(s->lookup(poison, h), (store::DeliveryState{"pending", 0})) << "left as it was";
  ASSERT_TRUE(s->bury(c[0].token, "poison"));
  EXPECT_TRUE(s->cancel(poison, h));
  EXPECT_EQ(s->lookup(poison, h), std::nullopt);
  EXPECT_EQ(statistics_of(*s, h)->dead, 0);
}

}  // namespace
}  // namespace relaybus::contract
