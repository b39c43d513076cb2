// Publishing: atomic batches, one delivery per subscribed handler, idempotence by event
// id (inbox deduplication), and refused input.
#include "contract/contract.hpp"

namespace relaybus::contract {
namespace {

using core::ErrorCode;

// Atomic publish: a batch with one bad event publishes none of it; a published event is
// claimable by each handler subscribed to its type, and by no other.
TEST_P(Contract, AtomicPublish) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h1 = subscribe(*s, "h1", {type});
  const std::string h2 = subscribe(*s, "h2", {type});
  const std::string other = subscribe(*s, "other", {unique_name("other-type")});
  const std::string e1 = unique_name("e1"), e2 = unique_name("e2"), e3 = unique_name("e3");

  Event bad_payload = event(type, e2);
  bad_payload.payload = "[1]";  // not a JSON object
  EXPECT_STORE_ERROR(s->publish_batch({event(type, e1), bad_payload, event(type, e3)}),
                     ErrorCode::kInvalidParameter);
  EXPECT_STORE_ERROR(s->publish_batch({event(type, e1), event("", e2)}),
                     ErrorCode::kInvalidParameter);
  for (const auto& id : {e1, e2, e3})
    for (const auto& h : {h1, h2}) EXPECT_EQ(s->lookup(id, h), std::nullopt) << id << " " << h;
  EXPECT_TRUE(claim(*s, worker("w"), {h1, h2}).empty()) << "a refused batch published something";

  EXPECT_EQ(s->publish_batch({event(type, e1), event(type, e3)}),
            (std::vector<std::string>{e1, e3}));
  Event without_id;
  without_id.type = type;
  const std::string generated = s->publish(without_id);
  EXPECT_FALSE(generated.empty());
  const auto expected = sorted({e1, e3, generated});
  for (const auto& h : {h1, h2}) {
    const auto got = claim(*s, worker("w-" + h), {h});
    EXPECT_EQ(ids(got), expected) << h;
    for (const auto& d : got) {
      EXPECT_EQ(d.handler, h);
      EXPECT_EQ(d.type, type);
      EXPECT_FALSE(d.has_key);
      EXPECT_EQ(d.payload, "{}");
      EXPECT_EQ(d.attempts, 0);
      EXPECT_FALSE(d.token.empty());
    }
    EXPECT_EQ(s->lookup(e1, h), (store::DeliveryState{"pending", 0})) << h;
  }
  EXPECT_TRUE(claim(*s, worker("w-other"), {other}).empty())
      << "a handler of another type got a delivery";
}

// Inbox deduplication: publishing an event id again adds deliveries only for handlers
// the event never had. A handler subscribed in between gets it once; a handler that
// completed it, or still has it pending, does not get it again.
TEST_P(Contract, RepeatedPublishAddsOnlyNewHandlers) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string done = subscribe(*s, "done", {type});
  const std::string waiting = subscribe(*s, "waiting", {type});
  const std::string id = unique_name("e");
  const Worker w = worker("w");

  EXPECT_EQ(s->publish(event(type, id)), id);
  auto first = claim(*s, w, {done});
  ASSERT_EQ(ids(first), std::vector<std::string>{id});
  EXPECT_EQ(s->complete_many({first[0].token}), 1);

  const std::string late = subscribe(*s, "late", {type});
  EXPECT_EQ(s->publish(event(type, id)), id);
  EXPECT_EQ(s->publish_batch({event(type, id)}), std::vector<std::string>{id});

  EXPECT_TRUE(claim(*s, w, {done}).empty()) << "a completed handler got the event again";
  EXPECT_EQ(s->lookup(id, done), std::nullopt);
  const auto again = claim(*s, w, {waiting, late});
  ASSERT_EQ(again.size(), 2u) << "one delivery each for the pending and the new handler";
  std::vector<std::string> handlers{again[0].handler, again[1].handler};
  EXPECT_EQ(sorted(handlers), sorted({waiting, late}));
  EXPECT_EQ(s->complete_many({again[0].token, again[1].token}), 2);

  EXPECT_EQ(s->publish(event(type, id)), id);
  EXPECT_TRUE(claim(*s, worker("w2"), {done, waiting, late}).empty())
      << "a repeat after every handler completed added a delivery";
}

// Bad input is refused with its error code and writes nothing.
TEST_P(Contract, BadInput) {
  auto s = open();
  const std::string type = unique_name("type");
  const std::string h = subscribe(*s, "h", {type});
  const std::string unknown = unique_name("never-subscribed");
  const Worker w = worker("w");

  EXPECT_STORE_ERROR(s->claim(w, 0, kLongLease, {h}), ErrorCode::kInvalidParameter);
  EXPECT_STORE_ERROR(s->claim(w, 10, kLongLease, {h, unknown}), ErrorCode::kUndefinedObject);
  EXPECT_STORE_ERROR(s->complete_many({"not a token"}), ErrorCode::kInvalidParameter);
  EXPECT_STORE_ERROR(s->fail("not a token", "boom"), ErrorCode::kInvalidParameter);
  EXPECT_STORE_ERROR(s->bury("not a token", "boom"), ErrorCode::kInvalidParameter);
  EXPECT_STORE_ERROR(s->release("not a token"), ErrorCode::kInvalidParameter);

  const std::string id = unique_name("e");
  Event to_unknown = event(type, id);
  to_unknown.handlers = std::vector<std::string>{h, unknown};
  EXPECT_STORE_ERROR(s->publish(to_unknown), ErrorCode::kUndefinedObject);
  EXPECT_EQ(s->lookup(id, h), std::nullopt) << "a refused publish wrote a delivery";

  core::RetryPolicy no_budget;
  no_budget.max_attempts = 0;
  EXPECT_STORE_ERROR(s->subscribe({unique_name("h0"), {type}, no_budget}),
                     ErrorCode::kInvalidParameter);

  EXPECT_TRUE(claim(*s, w, {h}).empty());
}

}  // namespace
}  // namespace relaybus::contract
