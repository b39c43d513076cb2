// Maintenance's command builders (src/mongo/maintenance_commands.hpp): the takeover's read
// and every purge command, as canonical extended JSON pinned against text written here.
#include "mongo/maintenance_commands.hpp"

#include <gtest/gtest.h>

#include "core/lane_lease.hpp"

namespace relaybus::mongo::commands {
namespace {

constexpr std::int64_t kNow = 1764547200000;
constexpr std::int64_t kCutoff = kNow - 3600 * 1000;

TEST(TakeOver, ExpiredLanesTheLongestExpiredFirst) {
  EXPECT_EQ(
      find_expired_lanes(kNow, kTakeoverBatch).canonical_json(),
      R"({ "find" : "lanes", "filter" : { "owner" : { "$ne" : null }, )"
      R"("leaseExpiresAt" : { "$lte" : { "$date" : { "$numberLong" : "1764547200000" } } } }, )"
      R"("sort" : { "leaseExpiresAt" : { "$numberInt" : "1" } }, )"
      R"("projection" : { "handler" : { "$numberInt" : "1" }, "lane" : { "$numberInt" : "1" }, )"
      R"("epoch" : { "$numberInt" : "1" }, "owner" : { "$numberInt" : "1" }, )"
      R"("holder" : { "$numberInt" : "1" }, "leaseExpiresAt" : { "$numberInt" : "1" }, )"
      R"("inFlight" : { "$numberInt" : "1" }, "lost" : { "$numberInt" : "1" }, )"
      R"("version" : { "$numberInt" : "1" } }, "limit" : { "$numberLong" : "1000" } })");
  // The filter's rule is core's: held, and the lease expired.
  EXPECT_TRUE(core::due_for_takeover(true, true));
  EXPECT_FALSE(core::due_for_takeover(true, false));
  EXPECT_FALSE(core::due_for_takeover(false, true));
}

TEST(Purge, DeadLettersByWhenTheyDied) {
  EXPECT_EQ(
      find_expired_dead(kCutoff, kPurgeSlice).canonical_json(),
      R"({ "find" : "deliveries", "filter" : { "status" : "dead", )"
      R"("updatedAt" : { "$lt" : { "$date" : { "$numberLong" : "1764543600000" } } } }, )"
      R"("sort" : { "updatedAt" : { "$numberInt" : "1" } }, )"
      R"("projection" : { "_id" : { "$numberInt" : "1" } }, "limit" : { "$numberLong" : "10000" } })");
  // The delete repeats the condition: a delivery requeued meanwhile stays.
  EXPECT_EQ(delete_expired_dead({{"mailer", "e1"}}, kCutoff).canonical_json(),
            R"({ "delete" : "deliveries", "deletes" : [ { "q" : { "_id" : { "$in" : [ )"
            R"({ "e" : "e1", "h" : "mailer" } ] }, "status" : "dead", )"
            R"("updatedAt" : { "$lt" : { "$date" : { "$numberLong" : "1764543600000" } } } }, )"
            R"("limit" : { "$numberInt" : "0" } } ], "ordered" : true, )"
            R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Purge, UnsubscribedHandlersAreTheOnesWithLanesOnly) {
  EXPECT_EQ(find_unsubscribed_handlers({"mailer"}).canonical_json(),
            R"({ "aggregate" : "lanes", "pipeline" : [ { "$match" : { "handler" : { )"
            R"("$nin" : [ "mailer" ] } } }, { "$sort" : { "handler" : { "$numberInt" : "1" } } }, )"
            R"({ "$group" : { "_id" : "$handler" } } ], "cursor" : {  } })");
}

TEST(Purge, PendingDeliveriesOfUnsubscribedHandlersByWhenTheyWereCreated) {
  EXPECT_EQ(
      find_expired_unsubscribed({"gone"}, kCutoff, kPurgeSlice).canonical_json(),
      R"({ "find" : "deliveries", "filter" : { "handler" : { "$in" : [ "gone" ] }, )"
      R"("status" : "pending", )"
      R"("createdAt" : { "$lt" : { "$date" : { "$numberLong" : "1764543600000" } } } }, )"
      R"("projection" : { "_id" : { "$numberInt" : "1" } }, "limit" : { "$numberLong" : "10000" } })");
  EXPECT_EQ(delete_expired_unsubscribed({{"gone", "e1"}}, kCutoff).canonical_json(),
            R"({ "delete" : "deliveries", "deletes" : [ { "q" : { "_id" : { "$in" : [ )"
            R"({ "e" : "e1", "h" : "gone" } ] }, "status" : "pending", )"
            R"("createdAt" : { "$lt" : { "$date" : { "$numberLong" : "1764543600000" } } } }, )"
            R"("limit" : { "$numberInt" : "0" } } ], "ordered" : true, )"
            R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Purge, HistoryByWhenItCompleted) {
  EXPECT_EQ(
      find_expired_completions(kCutoff, kPurgeSlice).canonical_json(),
      R"({ "find" : "completions", "filter" : { )"
      R"("completedAt" : { "$lt" : { "$date" : { "$numberLong" : "1764543600000" } } } }, )"
      R"("sort" : { "completedAt" : { "$numberInt" : "1" } }, )"
      R"("projection" : { "_id" : { "$numberInt" : "1" } }, "limit" : { "$numberLong" : "10000" } })");
  EXPECT_EQ(delete_expired_completions({{"mailer", "e1"}}, kCutoff).canonical_json(),
            R"({ "delete" : "completions", "deletes" : [ { "q" : { "_id" : { "$in" : [ )"
            R"({ "e" : "e1", "h" : "mailer" } ] }, )"
            R"("completedAt" : { "$lt" : { "$date" : { "$numberLong" : "1764543600000" } } } }, )"
            R"("limit" : { "$numberInt" : "0" } } ], "ordered" : true, )"
            R"("writeConcern" : { "w" : "majority" } })");
}

TEST(Purge, EventsWithoutDeliveries) {
  EXPECT_EQ(find_expired_events(kCutoff, kPurgeSlice).canonical_json(),
            R"({ "find" : "events", "filter" : { )"
            R"("createdAt" : { "$lt" : { "$date" : { "$numberLong" : "1764543600000" } } } }, )"
            R"("sort" : { "createdAt" : { "$numberInt" : "1" } }, )"
            R"("projection" : { "handlers" : { "$numberInt" : "1" } }, )"
            R"("limit" : { "$numberLong" : "10000" } })");
  // Their possible deliveries, by _id.
  EXPECT_EQ(find_delivery_ids({{"mailer", "e1"}, {"audit", "e1"}}).canonical_json(),
            R"({ "find" : "deliveries", "filter" : { "_id" : { "$in" : [ )"
            R"({ "e" : "e1", "h" : "mailer" }, { "e" : "e1", "h" : "audit" } ] } }, )"
            R"("projection" : { "_id" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
  // Each on condition that its handlers are as read.
  EXPECT_EQ(delete_events({{"e1", {"mailer", "audit"}}, {"e2", {}}}).canonical_json(),
            R"({ "delete" : "events", "deletes" : [ { "q" : { "_id" : "e1", )"
            R"("handlers" : [ "mailer", "audit" ] }, "limit" : { "$numberInt" : "1" } }, )"
            R"({ "q" : { "_id" : "e2", "handlers" : [  ] }, "limit" : { "$numberInt" : "1" } } ], )"
            R"("ordered" : false, "writeConcern" : { "w" : "majority" } })");
}

}  // namespace
}  // namespace relaybus::mongo::commands
