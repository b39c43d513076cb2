// The command builders (src/mongo/commands.hpp): the exact command each operation sends, as
// canonical extended JSON, the decisions taken through core, and bad input refused before
// any command is built.
#include "mongo/commands.hpp"

#include <gtest/gtest.h>

#include "core/attempt_end.hpp"
#include "core/lane.hpp"
#include "unit/expect_core_error.hpp"

namespace relaybus::mongo::commands {
namespace {

using core::testing::ThrowsCoreError;
using core::testing::ThrowsInvalidParameter;

constexpr std::int64_t kNow = 1764547200000;

TEST(Setup, CreateCollection) {
  EXPECT_EQ(create_collection(kEvents).canonical_json(),
            R"({ "create" : "events", "writeConcern" : { "w" : "majority" } })");
}

TEST(Setup, IndexesOfDeliveries) {
  EXPECT_EQ(
      create_indexes(kDeliveries).canonical_json(),
      R"({ "createIndexes" : "deliveries", "indexes" : [ )"
      R"({ "key" : { "handler" : { "$numberInt" : "1" }, "laneId" : { "$numberInt" : "1" }, )"
      R"("status" : { "$numberInt" : "1" }, "availableAt" : { "$numberInt" : "1" }, )"
      R"("_id" : { "$numberInt" : "1" } }, "name" : "deliveries_claim" }, )"
      R"({ "key" : { "handler" : { "$numberInt" : "1" }, "laneId" : { "$numberInt" : "1" }, )"
      R"("key" : { "$numberInt" : "1" }, "sequence" : { "$numberInt" : "1" } }, )"
      R"("name" : "deliveries_key_order", )"
      R"("partialFilterExpression" : { "status" : "pending", "key" : { "$type" : "string" } } }, )"
      R"({ "key" : { "status" : { "$numberInt" : "1" }, "updatedAt" : { "$numberInt" : "1" } }, )"
      R"("name" : "deliveries_dead", "partialFilterExpression" : { "status" : "dead" } } ], )"
      R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Setup, IndexOfLanes) {
  EXPECT_EQ(create_indexes(kLanes).canonical_json(),
            R"({ "createIndexes" : "lanes", "indexes" : [ )"
            R"({ "key" : { "handler" : { "$numberInt" : "1" }, "lane" : { "$numberInt" : "1" } }, )"
            R"("name" : "lanes_handler_lane", "unique" : true } ], )"
            R"("writeConcern" : { "w" : "majority" } })");
  EXPECT_EQ(indexed_collections(),
            (std::vector<const char*>{kDeliveries, kLanes, kEvents, kCompletions}));
}

TEST(Setup, IndexOfEvents) {
  EXPECT_EQ(
      create_indexes(kEvents).canonical_json(),
      R"({ "createIndexes" : "events", "indexes" : [ )"
      R"({ "key" : { "createdAt" : { "$numberInt" : "1" } }, "name" : "events_created_at" } ], )"
      R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Setup, IndexesOfCompletions) {
  EXPECT_EQ(
      create_indexes(kCompletions).canonical_json(),
      R"({ "createIndexes" : "completions", "indexes" : [ )"
      R"({ "key" : { "completedAt" : { "$numberInt" : "-1" }, "eventId" : { "$numberInt" : "1" }, )"
      R"("handler" : { "$numberInt" : "1" } }, "name" : "completions_completed_at" }, )"
      R"({ "key" : { "handler" : { "$numberInt" : "1" }, "completedAt" : { "$numberInt" : "-1" }, )"
      R"("eventId" : { "$numberInt" : "1" } }, "name" : "completions_handler" } ], )"
      R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Setup, EveryCollectionIsCreated) {
  EXPECT_EQ(std::vector<std::string>(std::begin(kCollections), std::end(kCollections)),
            (std::vector<std::string>{"subscriptions", "events", "deliveries", "lanes",
                                      "key_counters", "completions", "relaybus_meta"}));
}

TEST(Subscribe, SubscriptionUpsert) {
  store::Subscription s{"mailer", {"user.created"}, {}};
  EXPECT_EQ(subscription_upsert(s).canonical_json(),
            R"({ "update" : "subscriptions", "updates" : [ { "q" : { "_id" : "mailer" }, )"
            R"("u" : { "$set" : { "eventTypes" : [ "user.created" ], )"
            R"("maxAttempts" : { "$numberInt" : "25" }, )"
            R"("backoffBaseUs" : { "$numberLong" : "1000000" }, )"
            R"("backoffMaxUs" : { "$numberLong" : "3600000000" } } }, "upsert" : true } ], )"
            R"("ordered" : true })");
}

TEST(Subscribe, EveryLaneUpsertOnlySetsOnInsert) {
  const std::string json = lane_upserts("mailer").canonical_json();
  const std::string lane0 =
      R"({ "q" : { "_id" : { "h" : "mailer", "l" : { "$numberInt" : "0" } } }, )"
      R"("u" : { "$setOnInsert" : { "handler" : "mailer", "lane" : { "$numberInt" : "0" }, )"
      R"("epoch" : { "$numberLong" : "0" }, "owner" : null, "holder" : null, )"
      R"("leaseExpiresAt" : null, "inFlight" : [  ], "lost" : [  ] } }, "upsert" : true })";
  EXPECT_EQ(json.rfind(R"({ "update" : "lanes", "updates" : [ )" + lane0 + ", ", 0), 0u) << json;
  EXPECT_NE(json.find(R"("l" : { "$numberInt" : "255" })"), std::string::npos);
  EXPECT_EQ(json.find(R"("l" : { "$numberInt" : "256" })"), std::string::npos);
  EXPECT_EQ(json.substr(json.size() - 22), R"(], "ordered" : false })");
  std::size_t upserts = 0;
  for (auto at = json.find("$setOnInsert"); at != std::string::npos;
       at = json.find("$setOnInsert", at + 1))
    ++upserts;
  EXPECT_EQ(upserts, static_cast<std::size_t>(core::kLaneCount));
  EXPECT_EQ(json.find("$set\""), std::string::npos);  // nothing but $setOnInsert
}

TEST(Publish, Reads) {
  EXPECT_EQ(find_event("e1").canonical_json(),
            R"({ "find" : "events", "filter" : { "_id" : "e1" }, )"
            R"("projection" : { "type" : { "$numberInt" : "1" }, "key" : { "$numberInt" : "1" }, )"
            R"("handlers" : { "$numberInt" : "1" } }, "limit" : { "$numberLong" : "1" }, )"
            R"("singleBatch" : true })");
  EXPECT_EQ(find_subscribers("user.created").canonical_json(),
            R"({ "find" : "subscriptions", )"
            R"("filter" : { "eventTypes" : { "$in" : [ "user.created", "*" ] } }, )"
            R"("projection" : { "_id" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
  EXPECT_EQ(find_subscriptions({"a", "b"}).canonical_json(),
            R"({ "find" : "subscriptions", "filter" : { "_id" : { "$in" : [ "a", "b" ] } }, )"
            R"("projection" : { "_id" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Publish, KeyCounter) {
  EXPECT_EQ(next_sequence("user-42").canonical_json(),
            R"({ "findAndModify" : "key_counters", "query" : { "_id" : "user-42" }, )"
            R"("update" : { "$inc" : { "last" : { "$numberLong" : "1" } } }, )"
            R"("upsert" : true, "new" : true })");
}

TEST(Publish, InsertEventAndDeliveries) {
  Bson payload = parse_payload(R"({"id": 42})");
  NewEvent e{"e1", "user.created", std::string("user-42"), payload.get(), {"mailer"}, kNow};
  EXPECT_EQ(insert_event(e).canonical_json(),
            R"({ "insert" : "events", "documents" : [ { "_id" : "e1", "type" : "user.created", )"
            R"("key" : "user-42", "payload" : { "id" : { "$numberInt" : "42" } }, )"
            R"("handlers" : [ "mailer" ], )"
            R"("createdAt" : { "$date" : { "$numberLong" : "1764547200000" } } } ] })");
  const std::string deliveries =
      insert_deliveries({{"e1", "audit", std::string("user-42"), 7, kNow, kNow},
                         {"e1", "mailer", std::string("user-42"), 7, kNow, kNow}})
          .canonical_json();
  EXPECT_EQ(deliveries.rfind(R"({ "insert" : "deliveries", "documents" : [ { "_id" : )"
                             R"({ "e" : "e1", "h" : "audit" }, )",
                             0),
            0u)
      << deliveries;
  EXPECT_NE(deliveries.find(R"(}, { "_id" : { "e" : "e1", "h" : "mailer" }, )"), std::string::npos);
}

TEST(Publish, AddHandlersToARepeatedEvent) {
  EXPECT_EQ(add_event_handlers("e1", {"audit", "billing"}).canonical_json(),
            R"({ "update" : "events", "updates" : [ { "q" : { "_id" : "e1" }, )"
            R"("u" : { "$addToSet" : { "handlers" : { "$each" : [ "audit", "billing" ] } } }, )"
            R"("upsert" : false } ], "ordered" : true })");
}

TEST(Publish, ANewEventGoesToEveryTarget) {
  store::Event e;
  e.type = "user.created";
  e.key = "k";
  PublishPlan plan = plan_publish(e, std::nullopt);
  add_targets(plan, {"mailer", "audit", "mailer"});
  EXPECT_TRUE(plan.new_event);
  EXPECT_EQ(plan.type, "user.created");
  EXPECT_EQ(plan.key, std::optional<std::string>("k"));
  EXPECT_EQ(plan.added, (std::vector<std::string>{"audit", "mailer"}));  // handlers_to_add
}

TEST(Publish, ARepeatKeepsTheStoredTypeAndKeyAndAddsOnlyNewHandlers) {
  store::Event e;
  e.type = "other.type";
  e.key = "other-key";
  PublishPlan plan = plan_publish(e, StoredEvent{"user.created", std::nullopt, {"mailer"}});
  EXPECT_FALSE(plan.new_event);
  EXPECT_EQ(plan.type, "user.created");  // whose subscribers are looked up
  EXPECT_EQ(plan.key, std::nullopt);
  add_targets(plan, {"audit", "mailer"});
  EXPECT_EQ(plan.added, (std::vector<std::string>{"audit"}));
  add_targets(plan, {"mailer"});
  EXPECT_TRUE(plan.added.empty());
}

TEST(Requeue, FindAndConditionalUpdate) {
  EXPECT_EQ(find_delivery("e1", "mailer").canonical_json(),
            R"({ "find" : "deliveries", "filter" : { "_id" : { "e" : "e1", "h" : "mailer" } }, )"
            R"("projection" : { "status" : { "$numberInt" : "1" }, )"
            R"("attempts" : { "$numberInt" : "1" }, "claims" : { "$numberInt" : "1" } }, )"
            R"("limit" : { "$numberLong" : "1" }, "singleBatch" : true })");
  const auto update = requeue_update("e1", "mailer", {"dead", 25, 3}, kNow);
  ASSERT_TRUE(update);
  EXPECT_EQ(update->canonical_json(),
            R"({ "update" : "deliveries", "updates" : [ { "q" : { "_id" : )"
            R"({ "e" : "e1", "h" : "mailer" }, "status" : "dead", )"
            R"("claims" : { "$numberInt" : "3" } }, "u" : { "$set" : { "status" : "pending", )"
            R"("attempts" : { "$numberInt" : "0" }, )"
            R"("availableAt" : { "$date" : { "$numberLong" : "1764547200000" } }, )"
            R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
            R"("$inc" : { "claims" : { "$numberInt" : "1" } } }, "upsert" : false } ], )"
            R"("ordered" : true })");
  EXPECT_EQ(core::kRequeuedAttempts, 0);
}

TEST(Requeue, CoreDecidesThatAPendingDeliveryStays) {
  EXPECT_FALSE(requeue_update("e1", "mailer", {"pending", 2, 3}, kNow));
  EXPECT_EQ(requeue_update("e1", "mailer", {"pending", 2, 3}, kNow).has_value(),
            core::requeues(false));
}

TEST(Validation, BadSubscriptions) {
  const auto with = [](auto change) {
    store::Subscription s{"mailer", {"t"}, {}};
    change(s);
    return s;
  };
  EXPECT_NO_THROW(validate_subscription(with([](auto&) {})));
  for (const auto& s : {with([](auto& s) { s.handler = ""; }),
                        with([](auto& s) { s.handler = std::string(1001, 'x'); }),
                        with([](auto& s) { s.event_types.clear(); }), with([](auto& s) {
                          s.event_types = {"t", ""};
                        }),
                        with([](auto& s) { s.retry.max_attempts = 0; }),
                        with([](auto& s) { s.retry.backoff_base_us = -1; }), with([](auto& s) {
                          s.retry.backoff_base_us = 10;
                          s.retry.backoff_max_us = 5;
                        }),
                        with([](auto& s) { s.retry.backoff_max_us = core::kMaxBackoffUs + 1; })})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_subscription(s); })) << s.handler;
}

TEST(Validation, BadEvents) {
  const auto with = [](auto change) {
    store::Event e;
    e.type = "t";
    change(e);
    return e;
  };
  EXPECT_NO_THROW(validate_event(with([](auto&) {})));
  for (const auto& e :
       {with([](auto& e) { e.type = ""; }), with([](auto& e) { e.payload = "[]"; }),
        with([](auto& e) { e.payload = "{} {}"; }), with([](auto& e) { e.key = ""; }),
        with([](auto& e) { e.key = std::string(1001, 'k'); }),
        with([](auto& e) { e.event_id = ""; }), with([](auto& e) {
          e.handlers = std::vector<std::string>{"a", ""};
        }),
        with([](auto& e) { e.delay = std::chrono::milliseconds(-1); })})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_event(e); }));
}

TEST(Validation, BatchMessagesSayWhichEvent) {
  store::Event e;
  try {
    validate_event(e, "events[3]: ");
    FAIL() << "did not throw";
  } catch (const core::Error& error) {
    EXPECT_EQ(std::string(error.what()), "events[3]: type must not be empty");
  }
}

TEST(Validation, GivenHandlersMustBeSubscribed) {
  EXPECT_NO_THROW(check_subscribed({"a", "b"}, {"a", "b"}));
  EXPECT_TRUE(ThrowsCoreError(
      [] {
        check_subscribed({"a", "ghost"}, {"a"});
      },
      core::ErrorCode::kUndefinedObject));
}

}  // namespace
}  // namespace relaybus::mongo::commands
