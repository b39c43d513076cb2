// The worker half's command builders (src/mongo/commands.hpp): each command, as canonical
// extended JSON, pinned against text written here. The decisions behind them are core's;
// these pin what the store sends for them.
#include <gtest/gtest.h>

#include "core/attempt_end.hpp"
#include "core/claim_protocol.hpp"
#include "mongo/commands.hpp"

namespace relaybus::mongo::commands {
namespace {

constexpr std::int64_t kNow = 1764547200000;

TEST(Claim, FindSubscribedEvery) {
  EXPECT_EQ(find_subscribed(std::nullopt).canonical_json(),
            R"({ "find" : "subscriptions", "filter" : {  }, )"
            R"("projection" : { "eventTypes" : { "$numberInt" : "1" }, )"
            R"("maxAttempts" : { "$numberInt" : "1" }, "backoffBaseUs" : { "$numberInt" : "1" }, )"
            R"("backoffMaxUs" : { "$numberInt" : "1" }, "paused" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Claim, FindSubscribedGiven) {
  EXPECT_EQ(find_subscribed(std::vector<std::string>{"mailer"}).canonical_json(),
            R"({ "find" : "subscriptions", "filter" : { "_id" : { "$in" : [ "mailer" ] } }, )"
            R"("projection" : { "eventTypes" : { "$numberInt" : "1" }, )"
            R"("maxAttempts" : { "$numberInt" : "1" }, "backoffBaseUs" : { "$numberInt" : "1" }, )"
            R"("backoffMaxUs" : { "$numberInt" : "1" }, "paused" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Claim, FindHeldLanes) {
  EXPECT_EQ(find_held_lanes({"audit", "mailer"}, "w").canonical_json(),
            R"({ "find" : "lanes", "filter" : { "handler" : { "$in" : [ "audit", "mailer" ] }, )"
            R"("owner" : "w" }, "projection" : { "handler" : { "$numberInt" : "1" }, )"
            R"("lane" : { "$numberInt" : "1" }, "epoch" : { "$numberInt" : "1" }, )"
            R"("owner" : { "$numberInt" : "1" }, "holder" : { "$numberInt" : "1" }, )"
            R"("leaseExpiresAt" : { "$numberInt" : "1" }, "inFlight" : { "$numberInt" : "1" }, )"
            R"("lost" : { "$numberInt" : "1" }, "version" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Claim, FindLanesById) {
  EXPECT_EQ(
      find_lanes({{"mailer", 7}}).canonical_json(),
      R"({ "find" : "lanes", "filter" : { "_id" : { "$in" : [ { "h" : "mailer", )"
      R"("l" : { "$numberInt" : "7" } } ] } }, )"
      R"("projection" : { "handler" : { "$numberInt" : "1" }, "lane" : { "$numberInt" : "1" }, )"
      R"("epoch" : { "$numberInt" : "1" }, "owner" : { "$numberInt" : "1" }, )"
      R"("holder" : { "$numberInt" : "1" }, "leaseExpiresAt" : { "$numberInt" : "1" }, )"
      R"("inFlight" : { "$numberInt" : "1" }, "lost" : { "$numberInt" : "1" }, )"
      R"("version" : { "$numberInt" : "1" } }, "sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Lanes, FindOwnedLanes) {
  EXPECT_EQ(
      find_owned_lanes("w").canonical_json(),
      R"({ "find" : "lanes", "filter" : { "owner" : "w" }, )"
      R"("projection" : { "handler" : { "$numberInt" : "1" }, "lane" : { "$numberInt" : "1" }, )"
      R"("epoch" : { "$numberInt" : "1" }, "owner" : { "$numberInt" : "1" }, )"
      R"("holder" : { "$numberInt" : "1" }, "leaseExpiresAt" : { "$numberInt" : "1" }, )"
      R"("inFlight" : { "$numberInt" : "1" }, "lost" : { "$numberInt" : "1" }, )"
      R"("version" : { "$numberInt" : "1" } }, "sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Claim, FindPendingDeliveries) {
  EXPECT_EQ(
      find_deliveries({{"mailer", "e1"}}, true).canonical_json(),
      R"({ "find" : "deliveries", "filter" : { "_id" : { "$in" : [ { "e" : "e1", )"
      R"("h" : "mailer" } ] }, "status" : "pending" }, )"
      R"("projection" : { "eventId" : { "$numberInt" : "1" }, "handler" : { "$numberInt" : "1" }, )"
      R"("key" : { "$numberInt" : "1" }, "sequence" : { "$numberInt" : "1" }, )"
      R"("status" : { "$numberInt" : "1" }, "attempts" : { "$numberInt" : "1" }, )"
      R"("claims" : { "$numberInt" : "1" }, "availableAt" : { "$numberInt" : "1" } }, )"
      R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Claim, LanesWithWork) {
  EXPECT_EQ(
      lanes_with_work({"mailer"}, kNow).canonical_json(),
      R"({ "aggregate" : "deliveries", )"
      R"("pipeline" : [ { "$match" : { "handler" : { "$in" : [ "mailer" ] }, "status" : "pending", )"
      R"("availableAt" : { "$lte" : { "$date" : { "$numberLong" : "1764547200000" } } } } }, )"
      R"({ "$sort" : { "handler" : { "$numberInt" : "1" }, "laneId" : { "$numberInt" : "1" }, )"
      R"("status" : { "$numberInt" : "1" }, "availableAt" : { "$numberInt" : "1" } } }, )"
      R"({ "$group" : { "_id" : { "h" : "$handler", "l" : "$laneId" }, )"
      R"("at" : { "$first" : "$availableAt" } } }, { "$sort" : { "at" : { "$numberInt" : "1" }, )"
      R"("_id" : { "$numberInt" : "1" } } } ], "cursor" : {  } })");
}

TEST(Claim, CandidatesOfALane) {
  EXPECT_EQ(
      find_candidates("mailer", 7, {"e1", "e2"}, kNow, 0, 32).canonical_json(),
      R"({ "find" : "deliveries", "filter" : { "handler" : "mailer", )"
      R"("laneId" : { "$numberInt" : "7" }, "status" : "pending", )"
      R"("availableAt" : { "$lte" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
      R"("eventId" : { "$nin" : [ "e1", "e2" ] } }, )"
      R"("sort" : { "availableAt" : { "$numberInt" : "1" }, "_id" : { "$numberInt" : "1" } }, )"
      R"("projection" : { "eventId" : { "$numberInt" : "1" }, "handler" : { "$numberInt" : "1" }, )"
      R"("key" : { "$numberInt" : "1" }, "sequence" : { "$numberInt" : "1" }, )"
      R"("status" : { "$numberInt" : "1" }, "attempts" : { "$numberInt" : "1" }, )"
      R"("claims" : { "$numberInt" : "1" }, "availableAt" : { "$numberInt" : "1" } }, )"
      R"("limit" : { "$numberLong" : "32" } })");
}

TEST(Claim, CandidatesNextPage) {
  EXPECT_EQ(
      find_candidates("mailer", 7, {}, kNow, 32, 64).canonical_json(),
      R"({ "find" : "deliveries", "filter" : { "handler" : "mailer", )"
      R"("laneId" : { "$numberInt" : "7" }, "status" : "pending", )"
      R"("availableAt" : { "$lte" : { "$date" : { "$numberLong" : "1764547200000" } } } }, )"
      R"("sort" : { "availableAt" : { "$numberInt" : "1" }, "_id" : { "$numberInt" : "1" } }, )"
      R"("projection" : { "eventId" : { "$numberInt" : "1" }, "handler" : { "$numberInt" : "1" }, )"
      R"("key" : { "$numberInt" : "1" }, "sequence" : { "$numberInt" : "1" }, )"
      R"("status" : { "$numberInt" : "1" }, "attempts" : { "$numberInt" : "1" }, )"
      R"("claims" : { "$numberInt" : "1" }, "availableAt" : { "$numberInt" : "1" } }, )"
      R"("skip" : { "$numberLong" : "32" }, "limit" : { "$numberLong" : "64" } })");
}

TEST(Claim, FirstPendingSequences) {
  EXPECT_EQ(first_pending_sequences("mailer", 7, {"k1"}).canonical_json(),
            R"({ "aggregate" : "deliveries", "pipeline" : [ { "$match" : { "handler" : "mailer", )"
            R"("laneId" : { "$numberInt" : "7" }, "key" : { "$in" : [ "k1" ] }, )"
            R"("status" : "pending" } }, { "$group" : { "_id" : "$key", )"
            R"("first" : { "$min" : "$sequence" } } } ], "cursor" : {  } })");
}

TEST(Claim, Charges) {
  EXPECT_EQ(charge_updates({{"mailer", "e1", 3, false}, {"mailer", "e2", 25, true}}, {4, 9}, kNow)
                .canonical_json(),
            R"({ "update" : "deliveries", "updates" : [ { "q" : { "_id" : { "e" : "e1", )"
            R"("h" : "mailer" }, "status" : "pending", "claims" : { "$numberInt" : "4" } }, )"
            R"("u" : { "$set" : { "attempts" : { "$numberInt" : "3" }, "status" : "pending", )"
            R"("lastError" : "lease lost: lane taken over while the delivery was in flight", )"
            R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
            R"("$inc" : { "claims" : { "$numberInt" : "1" } } }, "upsert" : false }, )"
            R"({ "q" : { "_id" : { "e" : "e2", "h" : "mailer" }, "status" : "pending", )"
            R"("claims" : { "$numberInt" : "9" } }, )"
            R"("u" : { "$set" : { "attempts" : { "$numberInt" : "25" }, "status" : "dead", )"
            R"("lastError" : "lease lost: lane taken over while the delivery was in flight", )"
            R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
            R"("$inc" : { "claims" : { "$numberInt" : "1" } } }, "upsert" : false } ], )"
            R"("ordered" : false, "writeConcern" : { "w" : "majority" } })");
}

TEST(Claim, LaneWritesTakeAndHandBack) {
  // A lane taken over (epoch 3 -> 4, a new binding, its in-flight recorded as lost) and
  // one handed back (nothing held): each conditional on the epoch read, each an upsert so
  // that a failed condition is a DuplicateKey write error at its index.
  const core::LaneUpdate taken{"mailer", 7, {true, true, true, 4}, {"e1", "e2"}, 3, {"e0"}};
  const core::LaneUpdate back{"mailer", 8, {true, false, false, 6}, {}, 5, {}};
  EXPECT_EQ(
      lane_writes({taken, back}, {std::nullopt, std::int64_t{7}}, "w", "H", kNow + 30000)
          .canonical_json(),
      R"({ "update" : "lanes", "updates" : [ { "q" : { "_id" : { "h" : "mailer", )"
      R"("l" : { "$numberInt" : "7" } }, "epoch" : { "$numberLong" : "3" }, )"
      R"("version" : { "$exists" : false } }, )"
      R"("u" : { "$set" : { "epoch" : { "$numberLong" : "4" }, "owner" : "w", "holder" : "H", )"
      R"("leaseExpiresAt" : { "$date" : { "$numberLong" : "1764547230000" } }, )"
      R"("inFlight" : [ "e1", "e2" ], "lost" : [ "e0" ] }, )"
      R"("$inc" : { "version" : { "$numberLong" : "1" } }, )"
      R"("$setOnInsert" : { "handler" : "mailer", "lane" : { "$numberInt" : "7" } } }, )"
      R"("upsert" : true }, { "q" : { "_id" : { "h" : "mailer", "l" : { "$numberInt" : "8" } }, )"
      R"("epoch" : { "$numberLong" : "5" }, "version" : { "$numberLong" : "7" } }, )"
      R"("u" : { "$set" : { "epoch" : { "$numberLong" : "6" }, "owner" : null, "holder" : null, )"
      R"("leaseExpiresAt" : null, "inFlight" : [  ], "lost" : [  ] }, )"
      R"("$inc" : { "version" : { "$numberLong" : "1" } }, )"
      R"("$setOnInsert" : { "handler" : "mailer", "lane" : { "$numberInt" : "8" } } }, )"
      R"("upsert" : true } ], "ordered" : false, "writeConcern" : { "w" : "majority" } })");
}

TEST(Claim, LaneWriteOfAKeptLaneKeepsItsHolder) {
  const core::LaneUpdate kept{"mailer", 9, {true, true, false, 2}, {"e5"}, 2, {}};
  EXPECT_EQ(
      lane_writes({kept}, {std::int64_t{3}}, "w", "H", kNow + 30000).canonical_json(),
      R"({ "update" : "lanes", "updates" : [ { "q" : { "_id" : { "h" : "mailer", )"
      R"("l" : { "$numberInt" : "9" } }, "epoch" : { "$numberLong" : "2" }, )"
      R"("version" : { "$numberLong" : "3" } }, )"
      R"("u" : { "$set" : { "epoch" : { "$numberLong" : "2" }, "owner" : "w", )"
      R"("leaseExpiresAt" : { "$date" : { "$numberLong" : "1764547230000" } }, )"
      R"("inFlight" : [ "e5" ], "lost" : [  ] }, "$inc" : { "version" : { "$numberLong" : "1" } }, )"
      R"("$setOnInsert" : { "handler" : "mailer", "lane" : { "$numberInt" : "9" } } }, )"
      R"("upsert" : true } ], "ordered" : false, "writeConcern" : { "w" : "majority" } })");
}

TEST(Claim, ClearLost) {
  EXPECT_EQ(clear_lost({{"mailer", 7}}, {4}).canonical_json(),
            R"({ "update" : "lanes", "updates" : [ { "q" : { "_id" : { "h" : "mailer", )"
            R"("l" : { "$numberInt" : "7" } }, "epoch" : { "$numberLong" : "4" } }, )"
            R"("u" : { "$set" : { "lost" : [  ] } }, "upsert" : false } ], "ordered" : false, )"
            R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Completion, HistoryUpsertedByTheDeliverysId) {
  EXPECT_EQ(
      record_completions({{"e1", "mailer", 3, kNow}, {"e2", "mailer", 1, kNow}}).canonical_json(),
      R"({ "update" : "completions", "updates" : [ { "q" : { "_id" : { "e" : "e1", )"
      R"("h" : "mailer" } }, "u" : { "eventId" : "e1", "handler" : "mailer", )"
      R"("attempts" : { "$numberInt" : "3" }, )"
      R"("completedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
      R"("upsert" : true }, { "q" : { "_id" : { "e" : "e2", "h" : "mailer" } }, )"
      R"("u" : { "eventId" : "e2", "handler" : "mailer", )"
      R"("attempts" : { "$numberInt" : "1" }, )"
      R"("completedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
      R"("upsert" : true } ], "ordered" : true })");
}

TEST(Claim, FindEvents) {
  EXPECT_EQ(find_events({"e1", "e2"}).canonical_json(),
            R"({ "find" : "events", "filter" : { "_id" : { "$in" : [ "e1", "e2" ] } }, )"
            R"("projection" : { "type" : { "$numberInt" : "1" }, "key" : { "$numberInt" : "1" }, )"
            R"("payload" : { "$numberInt" : "1" }, "createdAt" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(Complete, DeleteDeliveries) {
  EXPECT_EQ(
      delete_deliveries({{"mailer", "e1"}, {"audit", "e2"}}).canonical_json(),
      R"({ "delete" : "deliveries", "deletes" : [ { "q" : { "_id" : { "e" : "e1", )"
      R"("h" : "mailer" } }, "limit" : { "$numberInt" : "1" } }, { "q" : { "_id" : { "e" : "e2", )"
      R"("h" : "audit" } }, "limit" : { "$numberInt" : "1" } } ], "ordered" : true })");
}

TEST(End, RetryUpdate) {
  const core::AttemptEnd retry{core::AttemptResult::kRetry, 2, false, 1000000, true};
  EXPECT_EQ(
      end_update("mailer", "e1", 4, retry, kNow + 1000, "boom", kNow).canonical_json(),
      R"({ "update" : "deliveries", "updates" : [ { "q" : { "_id" : { "e" : "e1", )"
      R"("h" : "mailer" }, "status" : "pending", "claims" : { "$numberInt" : "4" } }, )"
      R"("u" : { "$set" : { "status" : "pending", "attempts" : { "$numberInt" : "2" }, )"
      R"("availableAt" : { "$date" : { "$numberLong" : "1764547201000" } }, "lastError" : "boom", )"
      R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
      R"("$inc" : { "claims" : { "$numberInt" : "1" } } }, "upsert" : false } ], )"
      R"("ordered" : true })");
}

TEST(End, ReleaseKeepsDueTimeAndError) {
  const core::AttemptEnd released{core::AttemptResult::kReleased, 1, false, 0, false};
  EXPECT_EQ(end_update("mailer", "e1", 4, released, std::nullopt, "", kNow).canonical_json(),
            R"({ "update" : "deliveries", "updates" : [ { "q" : { "_id" : { "e" : "e1", )"
            R"("h" : "mailer" }, "status" : "pending", "claims" : { "$numberInt" : "4" } }, )"
            R"("u" : { "$set" : { "status" : "pending", "attempts" : { "$numberInt" : "1" }, )"
            R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } } }, )"
            R"("$inc" : { "claims" : { "$numberInt" : "1" } } }, "upsert" : false } ], )"
            R"("ordered" : true })");
}

TEST(End, PullInFlight) {
  EXPECT_EQ(pull_in_flight("mailer", 7, "e1").canonical_json(),
            R"({ "update" : "lanes", "updates" : [ { "q" : { "_id" : { "h" : "mailer", )"
            R"("l" : { "$numberInt" : "7" } } }, "u" : { "$pull" : { "inFlight" : "e1" }, )"
            R"("$inc" : { "version" : { "$numberLong" : "1" } } }, "upsert" : false } ], )"
            R"("ordered" : true })");
}

TEST(Lanes, HandBack) {
  const StoredLane lane{"mailer", 7, 4, std::string("w"), std::string("H"), kNow, {"e1"}, {}};
  EXPECT_EQ(hand_back({lane}).canonical_json(),
            R"({ "update" : "lanes", "updates" : [ { "q" : { "_id" : { "h" : "mailer", )"
            R"("l" : { "$numberInt" : "7" } }, "epoch" : { "$numberLong" : "4" }, "owner" : "w", )"
            R"("holder" : "H", "inFlight" : [ "e1" ] }, "u" : { "$set" : { "owner" : null, )"
            R"("holder" : null, "leaseExpiresAt" : null, "inFlight" : [  ] }, )"
            R"("$inc" : { "version" : { "$numberLong" : "1" } } }, "upsert" : false } ], )"
            R"("ordered" : false, "writeConcern" : { "w" : "majority" } })");
}

TEST(Lanes, Renew) {
  const StoredLane lane{"mailer", 7, 4, std::string("w"), std::string("H"), kNow, {"e1"}, {}};
  EXPECT_EQ(
      renew({lane}, "w", "H", kNow + 30000).canonical_json(),
      R"({ "update" : "lanes", "updates" : [ { "q" : { "_id" : { "$in" : [ { "h" : "mailer", )"
      R"("l" : { "$numberInt" : "7" } } ] }, "owner" : "w", "holder" : "H" }, )"
      R"("u" : { "$set" : { "leaseExpiresAt" : { "$date" : { "$numberLong" : "1764547230000" } } } }, )"
      R"("upsert" : false, "multi" : true } ], "ordered" : false, )"
      R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Claim, ChargesWriteCoresLeaseLostError) {
  const std::string json = charge_updates({{"h", "e", 1, false}}, {0}, kNow).canonical_json();
  EXPECT_NE(json.find(std::string("\"lastError\" : \"") + core::kLeaseLostError + "\""),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace relaybus::mongo::commands
