// The 0.1.0 upgrade's builders and readers (src/mongo/upgrade_commands.hpp): every command
// it sends as canonical extended JSON, the lanes it writes taken from core, and the 0.1.0
// documents it reads (malformed ones are kInternal).
#include "mongo/upgrade_commands.hpp"

#include <gtest/gtest.h>

#include "core/lane.hpp"
#include "mongo/commands.hpp"
#include "unit/expect_core_error.hpp"

namespace relaybus::mongo::upgrade {
namespace {

using core::testing::ThrowsCoreError;

constexpr std::int64_t kNow = 1764547200000;  // 2025-12-01T00:00:00Z

Bson from_json(const char* json) {
  bson_error_t error;
  bson_t* doc = bson_new_from_json(reinterpret_cast<const std::uint8_t*>(json), -1, &error);
  EXPECT_NE(doc, nullptr) << error.message;
  return Bson(doc);
}

std::string lane_json(std::string_view key_or_event_id) {
  return R"("laneId" : { "$numberInt" : ")" + std::to_string(core::lane_of(key_or_event_id)) +
         R"(" })";
}

constexpr char kMajority[] = R"("writeConcern" : { "w" : "majority" })";
constexpr char kUnconverted[] =
    R"("$or" : [ { "leaseToken" : { "$exists" : true } }, { "laneId" : { "$exists" : false } } ])";
constexpr char kById[] = R"("sort" : { "_id" : { "$numberInt" : "1" } }, )"
                         R"("limit" : { "$numberLong" : "1000" } })";

TEST(UpgradeMark, ReadByIdFirst) {
  EXPECT_EQ(find_layout_mark().canonical_json(),
            R"({ "find" : "relaybus_meta", "filter" : { "_id" : "layout" }, )"
            R"("projection" : { "version" : { "$numberInt" : "1" } }, )"
            R"("limit" : { "$numberLong" : "1" }, "singleBatch" : true })");
}

TEST(UpgradeMark, WrittenLastNeverLoweringANewerVersion) {
  EXPECT_EQ(write_layout_mark(kNow).canonical_json(),
            std::string(R"({ "update" : "relaybus_meta", "updates" : [ )"
                        R"({ "q" : { "_id" : "layout" }, )"
                        R"("u" : { "$max" : { "version" : { "$numberInt" : "2" } }, )"
                        R"("$setOnInsert" : { "convertedAt" : )"
                        R"({ "$date" : { "$numberLong" : "1764547200000" } } } }, )"
                        R"("upsert" : true } ], "ordered" : true, )") +
                kMajority + " }");
}

TEST(UpgradeMark, ItsVersionIsAnInteger) {
  EXPECT_EQ(read_layout_version(from_json(R"({"_id": "layout", "version": 2})").get()), 2);
  EXPECT_EQ(
      read_layout_version(from_json(R"({"_id": "layout", "version": {"$numberLong": "3"}})").get()),
      3);
  for (const char* bad : {R"({"_id": "layout"})", R"({"_id": "layout", "version": "2"})",
                          R"({"_id": "layout", "version": 2.0})"})
    EXPECT_TRUE(ThrowsCoreError([&] { read_layout_version(from_json(bad).get()); },
                                core::ErrorCode::kInternal))
        << bad;
}

TEST(UpgradeMarker, TwoLimitOneFindsOfAnId) {
  EXPECT_EQ(find_unconverted_delivery().canonical_json(),
            std::string(R"({ "find" : "deliveries", "filter" : { )") + kUnconverted +
                R"( }, "projection" : { "_id" : { "$numberInt" : "1" } }, )"
                R"("limit" : { "$numberLong" : "1" }, "singleBatch" : true })");
  EXPECT_EQ(find_event_without_handlers().canonical_json(),
            R"({ "find" : "events", "filter" : { "handlers" : { "$exists" : false } }, )"
            R"("projection" : { "_id" : { "$numberInt" : "1" } }, )"
            R"("limit" : { "$numberLong" : "1" }, "singleBatch" : true })");
}

TEST(UpgradeMarker, ALiveLeaseIsOneThatExpiresAfterNow) {
  EXPECT_EQ(
      find_live_lease(kNow).canonical_json(),
      R"({ "find" : "deliveries", "filter" : { "status" : "processing", )"
      R"("leaseExpiresAt" : { "$gt" : { "$date" : { "$numberLong" : "1764547200000" } } } }, )"
      R"("projection" : { "leaseOwner" : { "$numberInt" : "1" }, )"
      R"("leaseExpiresAt" : { "$numberInt" : "1" } }, )"
      R"("limit" : { "$numberLong" : "1" }, "singleBatch" : true })");
}

TEST(UpgradeIndexes, ListedThenTheObsoleteOnesDroppedByName) {
  EXPECT_EQ(list_indexes(kDeliveries).canonical_json(), R"({ "listIndexes" : "deliveries" })");
  EXPECT_EQ(
      drop_index(kDeliveries, "deliveries_status_lease").canonical_json(),
      std::string(R"({ "dropIndexes" : "deliveries", "index" : "deliveries_status_lease", )") +
          kMajority + " }");
  EXPECT_EQ(
      obsolete_among({"_id_", "deliveries_handler_updated", "deliveries_claim",
                      "deliveries_status_available"}),
      (std::vector<std::string>{"deliveries_status_available", "deliveries_handler_updated"}));
  EXPECT_TRUE(
      obsolete_among({"_id_", "deliveries_claim", "deliveries_key_order", "deliveries_dead"})
          .empty());
}

TEST(UpgradeIndexes, NoObsoleteIndexIsOneOfTodays) {
  for (const auto& spec : index_specs())
    for (const char* obsolete : kObsoleteIndexes) EXPECT_STRNE(spec.name, obsolete);
}

TEST(UpgradeLanes, SubscriptionsAndTheLaneCountPerHandler) {
  EXPECT_EQ(find_subscription_ids().canonical_json(),
            R"({ "find" : "subscriptions", "filter" : {  }, )"
            R"("projection" : { "_id" : { "$numberInt" : "1" } }, )"
            R"("sort" : { "_id" : { "$numberInt" : "1" } } })");
  EXPECT_EQ(count_lanes().canonical_json(),
            R"({ "aggregate" : "lanes", "pipeline" : [ { "$group" : { "_id" : "$handler", )"
            R"("n" : { "$sum" : { "$numberInt" : "1" } } } } ], "cursor" : {  } })");
  EXPECT_EQ(read_lane_count(from_json(R"({"_id": "mailer", "n": 256})").get()),
            (std::pair<std::string, std::int64_t>("mailer", 256)));
}

TEST(UpgradeLanes, AHandlerShortOfItsLanesGetsThem) {
  EXPECT_EQ(handlers_without_lanes({"audit", "mailer", "sms"},
                                   {{"mailer", core::kLaneCount}, {"sms", 17}, {"gone", 3}}),
            (std::vector<std::string>{"audit", "sms"}));
  EXPECT_TRUE(handlers_without_lanes({"mailer"}, {{"mailer", core::kLaneCount}}).empty());
}

TEST(UpgradeLanes, SubscribesUpsertsWithAMajority) {
  const std::string subscribe = commands::lane_upserts("mailer").canonical_json();
  const std::string json = lane_upserts("mailer").canonical_json();
  // subscribe's command (its closing brace aside), then the write concern.
  EXPECT_EQ(json, subscribe.substr(0, subscribe.size() - 2) + ", " + kMajority + " }");
}

TEST(UpgradeEvents, EventsWithoutHandlersInBatchesById) {
  EXPECT_EQ(
      find_events_without_handlers(std::nullopt).canonical_json(),
      std::string(R"({ "find" : "events", "filter" : { "handlers" : { "$exists" : false } }, )"
                  R"("projection" : { "_id" : { "$numberInt" : "1" } }, )") +
          kById);
  EXPECT_EQ(find_events_without_handlers(std::string("e4")).canonical_json(),
            std::string(R"({ "find" : "events", "filter" : { "handlers" : { "$exists" : false }, )"
                        R"("_id" : { "$gt" : "e4" } }, )"
                        R"("projection" : { "_id" : { "$numberInt" : "1" } }, )") +
                kById);
}

TEST(UpgradeEvents, TheirDeliveriesAreAnIdRange) {
  EXPECT_EQ(
      find_deliveries_of_events("e1", "e4").canonical_json(),
      R"({ "find" : "deliveries", "filter" : { "_id" : { "$gte" : { "e" : "e1" }, )"
      R"("$lte" : { "e" : "e4", "h" : { "$maxKey" : 1 } } } }, )"
      R"("projection" : { "eventId" : { "$numberInt" : "1" }, )"
      R"("handler" : { "$numberInt" : "1" } }, "sort" : { "_id" : { "$numberInt" : "1" } } })");
}

TEST(UpgradeEvents, EachEventGetsTheSortedHandlersOfItsDeliveries) {
  const auto of = handlers_of({"e1", "e3", "e4"}, {{"e1", "mailer"},
                                                   {"e1", "audit"},
                                                   {"e2", "mailer"},  // not in the batch
                                                   {"e3", "mailer"},
                                                   {"e1", "audit"}});
  using Of = std::vector<std::pair<std::string, std::vector<std::string>>>;
  EXPECT_EQ(of, (Of{{"e1", {"audit", "mailer"}}, {"e3", {"mailer"}}, {"e4", {}}}));
  EXPECT_EQ(set_event_handlers(of).canonical_json(),
            std::string(
                R"({ "update" : "events", "updates" : [ )"
                R"({ "q" : { "_id" : "e1", "handlers" : { "$exists" : false } }, )"
                R"("u" : { "$set" : { "handlers" : [ "audit", "mailer" ] } }, "upsert" : false }, )"
                R"({ "q" : { "_id" : "e3", "handlers" : { "$exists" : false } }, )"
                R"("u" : { "$set" : { "handlers" : [ "mailer" ] } }, "upsert" : false }, )"
                R"({ "q" : { "_id" : "e4", "handlers" : { "$exists" : false } }, )"
                R"("u" : { "$set" : { "handlers" : [  ] } }, "upsert" : false } ], )"
                R"("ordered" : false, )") +
                kMajority + " }");
}

TEST(UpgradeCompleted, FoundInBatchesById) {
  const std::string fields =
      R"("projection" : { "eventId" : { "$numberInt" : "1" }, "handler" : { "$numberInt" : "1" }, )"
      R"("attempts" : { "$numberInt" : "1" }, "updatedAt" : { "$numberInt" : "1" } }, )";
  EXPECT_EQ(find_completed(std::nullopt).canonical_json(),
            R"({ "find" : "deliveries", "filter" : { "status" : "completed" }, )" + fields + kById);
  EXPECT_EQ(find_completed(DeliveryKey{"e3", "mailer"}).canonical_json(),
            R"({ "find" : "deliveries", "filter" : { "status" : "completed", )"
            R"("_id" : { "$gt" : { "e" : "e3", "h" : "mailer" } } }, )" +
                fields + kById);
}

TEST(UpgradeCompleted, TheHistoryDocumentIsUpsertedThenTheDeliveryDeleted) {
  const std::vector<CompletedDelivery> completed{{{"e3", "mailer"}, 2, kNow - 5000}};
  EXPECT_EQ(record_completions(completed).canonical_json(),
            std::string(R"({ "update" : "completions", "updates" : [ )"
                        R"({ "q" : { "_id" : { "e" : "e3", "h" : "mailer" } }, )"
                        R"("u" : { "$setOnInsert" : { "eventId" : "e3", "handler" : "mailer", )"
                        R"("attempts" : { "$numberInt" : "2" }, )"
                        R"("completedAt" : { "$date" : { "$numberLong" : "1764547195000" } } } }, )"
                        R"("upsert" : true } ], "ordered" : false, )") +
                kMajority + " }");
  EXPECT_EQ(
      delete_completed(completed).canonical_json(),
      std::string(R"({ "delete" : "deliveries", "deletes" : [ )"
                  R"({ "q" : { "_id" : { "e" : "e3", "h" : "mailer" }, "status" : "completed" }, )"
                  R"("limit" : { "$numberInt" : "1" } } ], "ordered" : false, )") +
          kMajority + " }");
}

TEST(UpgradeDeliveries, TheOthersFoundInBatchesById) {
  const std::string fields =
      R"("projection" : { "eventId" : { "$numberInt" : "1" }, "handler" : { "$numberInt" : "1" }, )"
      R"("key" : { "$numberInt" : "1" }, "status" : { "$numberInt" : "1" }, )"
      R"("claims" : { "$numberInt" : "1" }, "lastError" : { "$numberInt" : "1" }, )"
      R"("createdAt" : { "$numberInt" : "1" }, "updatedAt" : { "$numberInt" : "1" } }, )";
  EXPECT_EQ(find_unconverted(std::nullopt).canonical_json(),
            std::string(R"({ "find" : "deliveries", "filter" : { )"
                        R"("status" : { "$ne" : "completed" }, )") +
                kUnconverted + " }, " + fields + kById);
  EXPECT_EQ(find_unconverted(DeliveryKey{"e2", "mailer"}).canonical_json(),
            std::string(R"({ "find" : "deliveries", "filter" : { )"
                        R"("status" : { "$ne" : "completed" }, )") +
                kUnconverted + R"(, "_id" : { "$gt" : { "e" : "e2", "h" : "mailer" } } }, )" +
                fields + kById);
}

TEST(UpgradeDeliveries, EachGetsCoresLaneAndLosesItsLease) {
  const std::vector<LegacyDelivery> deliveries{
      {{"e1", "mailer"}, std::string("user-42"), "processing", false, std::nullopt, false, 7000},
      {{"e2", "mailer"}, std::nullopt, "processing", false, std::string("timeout"), false, 7000},
      {{"e3", "audit"}, std::string("k"), "dead", true, std::string("boom"), false, 6000},
      // converted once already, but its claims counter was not set: createdAt is kept
      {{"e5", "mailer"}, std::nullopt, "pending", false, std::nullopt, true, 5000}};
  // Without createdAt, a delivery gets its updatedAt as read (before the upgrade's own).
  const auto created = [](const char* ms) {
    return std::string(R"(, "createdAt" : { "$date" : { "$numberLong" : ")") + ms + "\" } }";
  };
  const std::string unset =
      R"("$unset" : { "leaseOwner" : "", "leaseToken" : "", "leaseExpiresAt" : "" } }, )"
      R"("upsert" : false })";
  const std::string now = R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } })";
  EXPECT_EQ(convert_deliveries(deliveries, kNow).canonical_json(),
            std::string(R"({ "update" : "deliveries", "updates" : [ )") +
                // processing, keyed: pending, its attempts untouched, the upgrade's lastError
                R"({ "q" : { "_id" : { "e" : "e1", "h" : "mailer" }, "status" : "processing" }, )"
                R"("u" : { "$set" : { )" +
                lane_json("user-42") + R"(, "claims" : { "$numberInt" : "0" })" + created("7000") +
                R"(, "status" : "pending", )"
                R"("lastError" : "lease lost: upgraded from 0.1.0 while in flight", )" +
                now + " }, " + unset +
                ", "
                // processing, unkeyed, with a lastError of its own: kept
                R"({ "q" : { "_id" : { "e" : "e2", "h" : "mailer" }, "status" : "processing" }, )"
                R"("u" : { "$set" : { )" +
                lane_json("e2") + R"(, "claims" : { "$numberInt" : "0" })" + created("7000") +
                R"(, "status" : "pending", )" + now + " }, " + unset +
                ", "
                // dead (claims present already): the lane, createdAt and the lease fields
                R"({ "q" : { "_id" : { "e" : "e3", "h" : "audit" }, "status" : "dead" }, )"
                R"("u" : { "$set" : { )" +
                lane_json("k") + created("6000") + " }, " + unset +
                ", "
                // pending, unkeyed
                R"({ "q" : { "_id" : { "e" : "e5", "h" : "mailer" }, "status" : "pending" }, )"
                R"("u" : { "$set" : { )" +
                lane_json("e5") + R"(, "claims" : { "$numberInt" : "0" } }, )" + unset +
                R"( ], "ordered" : false, )" + kMajority + " }");
}

TEST(UpgradeReading, ALegacyDelivery) {
  const LegacyDelivery d = read_legacy_delivery(
      from_json(R"({"_id": {"e": "e1", "h": "mailer"}, "eventId": "e1", "handler": "mailer",
                    "key": "user-42", "status": "processing", "lastError": null,
                    "updatedAt": {"$date": {"$numberLong": "1764547195000"}}})")
          .get());
  EXPECT_EQ(d.id.event_id, "e1");
  EXPECT_EQ(d.id.handler, "mailer");
  EXPECT_EQ(d.key, std::optional<std::string>("user-42"));
  EXPECT_EQ(d.status, "processing");
  EXPECT_FALSE(d.has_claims);
  EXPECT_EQ(d.last_error, std::nullopt);
  EXPECT_FALSE(d.has_created_at);
  EXPECT_EQ(d.updated_at_ms, 1764547195000);
  const LegacyDelivery converted_once = read_legacy_delivery(
      from_json(R"({"eventId": "e2", "handler": "h", "key": null, "status": "dead",
                    "claims": 3, "lastError": "boom",
                    "createdAt": {"$date": {"$numberLong": "1"}},
                    "updatedAt": {"$date": {"$numberLong": "2"}}})")
          .get());
  EXPECT_TRUE(converted_once.has_created_at);
  EXPECT_EQ(converted_once.key, std::nullopt);
  EXPECT_TRUE(converted_once.has_claims);
  EXPECT_EQ(converted_once.last_error, std::optional<std::string>("boom"));
}

TEST(UpgradeReading, ACompletedDelivery) {
  const CompletedDelivery c =
      read_completed_delivery(from_json(R"({"eventId": "e3", "handler": "mailer", "attempts": 2,
                    "updatedAt": {"$date": {"$numberLong": "1764547195000"}}})")
                                  .get());
  EXPECT_EQ(c.id.event_id, "e3");
  EXPECT_EQ(c.id.handler, "mailer");
  EXPECT_EQ(c.attempts, 2);
  EXPECT_EQ(c.updated_at_ms, kNow - 5000);
  EXPECT_EQ(read_index_name(from_json(R"({"v": 2, "key": {"_id": 1}, "name": "_id_"})").get()),
            "_id_");
}

TEST(UpgradeReading, MalformedDocumentsAreInternal) {
  for (const char* bad : {
           R"({"handler": "h", "status": "pending"})",                    // no eventId
           R"({"eventId": "e", "handler": "h", "status": "completed"})",  // not one to convert
           R"({"eventId": "e", "handler": "h", "status": "pending", "key": 7})",
           R"({"eventId": "e", "handler": "h", "status": "pending", "lastError": 1})",
       })
    EXPECT_TRUE(ThrowsCoreError([&] { read_legacy_delivery(from_json(bad).get()); },
                                core::ErrorCode::kInternal))
        << bad;
  for (const char* bad : {
           R"({"eventId": "e", "handler": "h", "attempts": 1})",  // no updatedAt
           R"({"eventId": "e", "handler": "h", "attempts": "1",
               "updatedAt": {"$date": {"$numberLong": "0"}}})",
           R"({"eventId": "e", "handler": "h", "attempts": -1,
               "updatedAt": {"$date": {"$numberLong": "0"}}})",
       })
    EXPECT_TRUE(ThrowsCoreError([&] { read_completed_delivery(from_json(bad).get()); },
                                core::ErrorCode::kInternal))
        << bad;
  EXPECT_TRUE(ThrowsCoreError([&] { read_lane_count(from_json(R"({"_id": "h"})").get()); },
                              core::ErrorCode::kInternal));
}

}  // namespace
}  // namespace relaybus::mongo::upgrade
