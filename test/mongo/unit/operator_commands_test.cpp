// The operator half's command builders (src/mongo/operator_commands.hpp): unsubscribe,
// requeue_dead, statistics and the listing, each command as canonical extended JSON pinned
// against text written here, and bad input refused before any command is built.
#include "mongo/operator_commands.hpp"

#include <gtest/gtest.h>

#include "core/attempt_end.hpp"
#include "unit/expect_core_error.hpp"

namespace relaybus::mongo::commands {
namespace {

using core::testing::ThrowsInvalidParameter;

constexpr std::int64_t kNow = 1764547200000;

// The projection of lane_fields(), as every lane find sends it.
constexpr char kLaneProjection[] =
    R"("projection" : { "handler" : { "$numberInt" : "1" }, "lane" : { "$numberInt" : "1" }, )"
    R"("epoch" : { "$numberInt" : "1" }, "owner" : { "$numberInt" : "1" }, )"
    R"("holder" : { "$numberInt" : "1" }, "leaseExpiresAt" : { "$numberInt" : "1" }, )"
    R"("inFlight" : { "$numberInt" : "1" }, "lost" : { "$numberInt" : "1" }, )"
    R"("version" : { "$numberInt" : "1" } })";
// The sort and projection of every listing of deliveries.
constexpr char kListedSortAndProjection[] =
    R"("sort" : { "createdAt" : { "$numberInt" : "-1" }, "eventId" : { "$numberInt" : "1" }, )"
    R"("handler" : { "$numberInt" : "1" } }, )"
    R"("projection" : { "eventId" : { "$numberInt" : "1" }, "handler" : { "$numberInt" : "1" }, )"
    R"("key" : { "$numberInt" : "1" }, "status" : { "$numberInt" : "1" }, )"
    R"("attempts" : { "$numberInt" : "1" }, "availableAt" : { "$numberInt" : "1" }, )"
    R"("lastError" : { "$numberInt" : "1" }, "createdAt" : { "$numberInt" : "1" } }, )";

TEST(Unsubscribe, DeletesTheSubscriptionOnly) {
  EXPECT_EQ(delete_subscription("mailer").canonical_json(),
            R"({ "delete" : "subscriptions", "deletes" : [ { "q" : { "_id" : "mailer" }, )"
            R"("limit" : { "$numberInt" : "1" } } ], "ordered" : true, )"
            R"("writeConcern" : { "w" : "majority" } })");
}

TEST(RequeueDead, AHandlerIsKnownByADelivery) {
  EXPECT_EQ(find_any_delivery("mailer").canonical_json(),
            R"({ "find" : "deliveries", "filter" : { "handler" : "mailer" }, )"
            R"("projection" : { "_id" : { "$numberInt" : "1" } }, )"
            R"("limit" : { "$numberLong" : "1" }, "singleBatch" : true })");
}

TEST(RequeueDead, OneMultiUpdateWritingWhatARequeueWrites) {
  EXPECT_EQ(requeue_dead_update(std::string("mailer"), kNow).canonical_json(),
            R"({ "update" : "deliveries", "updates" : [ { "q" : { "status" : "dead", )"
            R"("handler" : "mailer" }, "u" : { "$set" : { "status" : "pending", )"
            R"("attempts" : { "$numberInt" : "0" }, )"
            R"("availableAt" : { "$date" : { "$numberLong" : "1764547200000" } }, )"
            R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
            R"("$inc" : { "claims" : { "$numberInt" : "1" } } }, "upsert" : false, )"
            R"("multi" : true } ], "ordered" : true, "writeConcern" : { "w" : "majority" } })");
  EXPECT_EQ(core::kRequeuedAttempts, 0);  // the attempts written are core's
  EXPECT_TRUE(core::requeues(true));      // the filter's copy: dead ones move
  EXPECT_FALSE(core::requeues(false));
}

TEST(RequeueDead, EveryHandler) {
  const std::string json = requeue_dead_update(std::nullopt, kNow).canonical_json();
  EXPECT_NE(json.find(R"("q" : { "status" : "dead" }, )"), std::string::npos) << json;
}

TEST(Statistics, SubscriptionNames) {
  EXPECT_EQ(
      find_subscription_names().canonical_json(),
      R"({ "find" : "subscriptions", "filter" : {  }, )"
      R"("projection" : { "_id" : { "$numberInt" : "1" }, "paused" : { "$numberInt" : "1" } }, )"
      R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Pause, SetsPausedOnlyWhereItIsNot) {
  EXPECT_EQ(set_paused("h", true).canonical_json(),
            R"({ "update" : "subscriptions", "updates" : [ { "q" : { "_id" : "h", "paused" : )"
            R"({ "$ne" : true } }, "u" : { "$set" : { "paused" : true } }, "upsert" : false } ], )"
            R"("ordered" : true, "writeConcern" : { "w" : "majority" } })");
  EXPECT_EQ(set_paused("h", false).canonical_json(),
            R"({ "update" : "subscriptions", "updates" : [ { "q" : { "_id" : "h", "paused" : )"
            R"({ "$ne" : false } }, "u" : { "$unset" : { "paused" : "" } }, "upsert" : false } ], )"
            R"("ordered" : true, "writeConcern" : { "w" : "majority" } })");
}

TEST(Cancel, FencesTheLaneAtTheVersionRead) {
  const std::string json = fence_lane("h", 7, 41).canonical_json();
  EXPECT_NE(json.find(R"("version" : { "$numberLong" : "41" } })"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("$inc" : { "version" : { "$numberLong" : "1" } })"), std::string::npos)
      << json;
  const std::string never = fence_lane("h", 7, std::nullopt).canonical_json();
  EXPECT_NE(never.find(R"("version" : { "$exists" : false })"), std::string::npos) << never;
}

TEST(Statistics, HeldLanesWithSomethingInFlight) {
  EXPECT_EQ(find_in_flight_lanes(std::nullopt).canonical_json(),
            std::string(R"({ "find" : "lanes", "filter" : { "owner" : { "$ne" : null }, )"
                        R"("inFlight.0" : { "$exists" : true } }, )") +
                kLaneProjection + R"(, "sort" : { "_id" : { "$numberInt" : "1" } } })");
  EXPECT_EQ(find_in_flight_lanes(std::string("mailer")).canonical_json(),
            std::string(R"({ "find" : "lanes", "filter" : { "handler" : "mailer", )"
                        R"("owner" : { "$ne" : null }, "inFlight.0" : { "$exists" : true } }, )") +
                kLaneProjection + R"(, "sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Statistics, CountsLeaveTheDeliveriesInFlightOut) {
  EXPECT_EQ(count_deliveries({{"mailer", "e1"}}).canonical_json(),
            R"({ "aggregate" : "deliveries", "pipeline" : [ { "$match" : { "_id" : { "$nin" : [ )"
            R"({ "e" : "e1", "h" : "mailer" } ] } } }, { "$group" : { "_id" : "$handler", )"
            R"("pending" : { "$sum" : { "$cond" : [ { "$eq" : [ "$status", "pending" ] }, )"
            R"({ "$numberInt" : "1" }, { "$numberInt" : "0" } ] } }, )"
            R"("dead" : { "$sum" : { "$cond" : [ { "$eq" : [ "$status", "dead" ] }, )"
            R"({ "$numberInt" : "1" }, { "$numberInt" : "0" } ] } }, )"
            R"("oldest" : { "$min" : { "$cond" : [ { "$eq" : [ "$status", "pending" ] }, )"
            R"("$createdAt", null ] } } } } ], "cursor" : {  } })");
}

TEST(Statistics, CompletionsPerHandler) {
  EXPECT_EQ(count_completions().canonical_json(),
            R"({ "aggregate" : "completions", "pipeline" : [ { "$sort" : { )"
            R"("handler" : { "$numberInt" : "1" } } }, { "$group" : { "_id" : "$handler", )"
            R"("completed" : { "$sum" : { "$numberInt" : "1" } } } } ], "cursor" : {  } })");
}

TEST(Listing, EveryStatusNewestFirst) {
  store::DeliveryFilter f;
  EXPECT_EQ(find_listed_deliveries(f, {{"mailer", "e1"}}).canonical_json(),
            std::string(R"({ "find" : "deliveries", "filter" : {  }, )") +
                kListedSortAndProjection + R"("limit" : { "$numberLong" : "100" } })");
}

TEST(Listing, PendingLeavesTheDeliveriesInFlightOut) {
  store::DeliveryFilter f{std::string("pending"), std::string("mailer"), 5};
  EXPECT_EQ(find_listed_deliveries(f, {{"mailer", "e1"}}).canonical_json(),
            std::string(R"({ "find" : "deliveries", "filter" : { "handler" : "mailer", )"
                        R"("status" : "pending", "_id" : { "$nin" : [ { "e" : "e1", )"
                        R"("h" : "mailer" } ] } }, )") +
                kListedSortAndProjection + R"("limit" : { "$numberLong" : "5" } })");
}

TEST(Listing, ProcessingIsTheDeliveriesInFlight) {
  store::DeliveryFilter f{std::string("processing"), std::nullopt, 5};
  EXPECT_EQ(find_listed_deliveries(f, {{"mailer", "e1"}}).canonical_json(),
            std::string(R"({ "find" : "deliveries", "filter" : { "_id" : { "$in" : [ )"
                        R"({ "e" : "e1", "h" : "mailer" } ] } }, )") +
                kListedSortAndProjection + R"("limit" : { "$numberLong" : "5" } })");
}

TEST(Listing, Dead) {
  store::DeliveryFilter f{std::string("dead"), std::nullopt, 5};
  EXPECT_EQ(find_listed_deliveries(f, {{"mailer", "e1"}}).canonical_json(),
            std::string(R"({ "find" : "deliveries", "filter" : { "status" : "dead" }, )") +
                kListedSortAndProjection + R"("limit" : { "$numberLong" : "5" } })");
}

TEST(Listing, TheHistoryNewestFirst) {
  EXPECT_EQ(find_completions(std::nullopt, 100).canonical_json(),
            R"({ "find" : "completions", "filter" : {  }, "sort" : { )"
            R"("completedAt" : { "$numberInt" : "-1" }, "eventId" : { "$numberInt" : "1" }, )"
            R"("handler" : { "$numberInt" : "1" } }, "projection" : { )"
            R"("eventId" : { "$numberInt" : "1" }, "handler" : { "$numberInt" : "1" }, )"
            R"("attempts" : { "$numberInt" : "1" }, "completedAt" : { "$numberInt" : "1" } }, )"
            R"("limit" : { "$numberLong" : "100" } })");
  // Of one handler, in the order of completions_handler.
  EXPECT_EQ(find_completions(std::string("mailer"), 3).canonical_json(),
            R"({ "find" : "completions", "filter" : { "handler" : "mailer" }, "sort" : { )"
            R"("completedAt" : { "$numberInt" : "-1" }, "eventId" : { "$numberInt" : "1" } }, )"
            R"("projection" : { "eventId" : { "$numberInt" : "1" }, )"
            R"("handler" : { "$numberInt" : "1" }, "attempts" : { "$numberInt" : "1" }, )"
            R"("completedAt" : { "$numberInt" : "1" } }, "limit" : { "$numberLong" : "3" } })");
}

TEST(Listing, EventTypesAndKeys) {
  EXPECT_EQ(
      find_event_summaries({"e1", "e2"}).canonical_json(),
      R"({ "find" : "events", "filter" : { "_id" : { "$in" : [ "e1", "e2" ] } }, )"
      R"("projection" : { "type" : { "$numberInt" : "1" }, "key" : { "$numberInt" : "1" } }, )"
      R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Validation, HandlerNames) {
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_handler(""); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_handler(std::string(1001, 'x')); }));
  EXPECT_NO_THROW(validate_handler("mailer"));
}

TEST(Validation, Filters) {
  for (const char* s : store::kListableStatuses)
    EXPECT_NO_THROW(validate_filter({std::string(s), std::nullopt, 0})) << s;
  EXPECT_NO_THROW(validate_filter({}));
  // The statuses and the row limit are the seam's rule (store::validate): a StoreError.
  auto seam_refuses = [](const store::DeliveryFilter& f, const std::string& message) {
    try {
      validate_filter(f);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const store::StoreError& e) {
      EXPECT_EQ(e.code(), core::ErrorCode::kInvalidParameter);
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  seam_refuses({std::string("running"), {}, 1},
               "unknown status \"running\": use pending, processing, dead, completed or none");
  seam_refuses({std::nullopt, std::nullopt, -1}, "max_rows must be zero or more");
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_filter({std::nullopt, std::string(), 1}); }));
}

}  // namespace
}  // namespace relaybus::mongo::commands
