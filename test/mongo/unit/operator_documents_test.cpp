// Reading what the operator half and maintenance read (src/mongo/documents.hpp): listed
// deliveries, the history, event summaries, the groups of the statistics; malformed ones
// are kInternal.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "mongo/documents.hpp"
#include "unit/expect_core_error.hpp"

namespace relaybus::mongo {
namespace {

using core::testing::ThrowsCoreError;

Bson from_json(const char* json) {
  bson_error_t error;
  bson_t* doc = bson_new_from_json(reinterpret_cast<const std::uint8_t*>(json), -1, &error);
  EXPECT_NE(doc, nullptr) << error.message;
  return Bson(doc);
}

TEST(OperatorReading, ADeliveryAsPublishWritesIt) {
  const ListedDeliveryDocument d = read_listed_delivery(
      delivery_document({"e1", "mailer", std::string("k"), 7, 1000, 900}).get());
  EXPECT_EQ(d.event_id, "e1");
  EXPECT_EQ(d.handler, "mailer");
  EXPECT_EQ(d.key, std::optional<std::string>("k"));
  EXPECT_TRUE(d.pending());
  EXPECT_EQ(d.attempts, 0);
  EXPECT_EQ(d.available_at_ms, 1000);
  EXPECT_FALSE(d.last_error);
  EXPECT_EQ(d.created_at_ms, 900);
  EXPECT_EQ(read_delivery_id(delivery_document({"e1", "mailer", {}, 0, 1, 1}).get()),
            (std::pair<std::string, std::string>{"mailer", "e1"}));
}

TEST(OperatorReading, TheHistoryAsACompletionWritesIt) {
  Bson doc = completion_fields({"e1", "mailer", 3, 1764547200000});
  EXPECT_EQ(doc.canonical_json(),
            R"({ "eventId" : "e1", "handler" : "mailer", "attempts" : { "$numberInt" : "3" }, )"
            R"("completedAt" : { "$date" : { "$numberLong" : "1764547200000" } } })");
  const StoredCompletion c = read_completion(doc.get());
  EXPECT_EQ(c.event_id, "e1");
  EXPECT_EQ(c.handler, "mailer");
  EXPECT_EQ(c.attempts, 3);
  EXPECT_EQ(c.completed_at_ms, 1764547200000);
}

TEST(OperatorReading, EventsAndGroups) {
  const EventSummary e =
      read_event_summary(from_json(R"({"_id": "e1", "type": "t", "key": null})").get());
  EXPECT_EQ(e.id, "e1");
  EXPECT_EQ(e.type, "t");
  EXPECT_FALSE(e.key);
  EXPECT_EQ(read_event_handlers(from_json(R"({"_id": "e1", "handlers": ["a"]})").get()),
            (std::pair<std::string, std::vector<std::string>>{"e1", {"a"}}));
  const DeliveryCounts c = read_delivery_counts(
      from_json(R"({"_id": "mailer", "pending": 3, "dead": {"$numberLong": "2"},
                    "oldest": {"$date": {"$numberLong": "1764547200000"}}})")
          .get());
  EXPECT_EQ(c.handler, "mailer");
  EXPECT_EQ(c.pending, 3);
  EXPECT_EQ(c.dead, 2);
  EXPECT_EQ(c.oldest_pending_ms, std::optional<std::int64_t>(1764547200000));
  // Only dead ones: no oldest pending.
  EXPECT_FALSE(read_delivery_counts(
                   from_json(R"({"_id": "m", "pending": 0, "dead": 1, "oldest": null})").get())
                   .oldest_pending_ms);
  EXPECT_EQ(read_completion_count(from_json(R"({"_id": "mailer", "completed": 7})").get()),
            (std::pair<std::string, std::int64_t>{"mailer", 7}));
}

TEST(OperatorReading, MalformedDocumentsAreInternalErrors) {
  const auto internal = [](const char* json, auto read) {
    Bson doc = from_json(json);
    return ThrowsCoreError([&] { read(doc.get()); }, core::ErrorCode::kInternal);
  };
  const auto listed = [](const bson_t* d) { read_listed_delivery(d); };
  // No createdAt: written before deliveries had one.
  EXPECT_TRUE(internal(R"({"eventId": "e", "handler": "h", "key": null, "status": "pending",
                           "attempts": 0, "availableAt": {"$date": 1}, "lastError": null})",
                       listed));
  EXPECT_TRUE(internal(R"({"eventId": "e", "handler": "h", "key": null, "status": "completed",
                           "attempts": 0, "availableAt": {"$date": 1}, "lastError": null,
                           "createdAt": {"$date": 1}})",
                       listed));
  EXPECT_TRUE(internal(R"({"eventId": "e", "handler": "h", "attempts": 1})",
                       [](const bson_t* d) { read_completion(d); }));
  EXPECT_TRUE(internal(R"({"_id": "e1"})", [](const bson_t* d) { read_delivery_id(d); }));
  EXPECT_TRUE(internal(R"({"_id": "m", "pending": "3", "dead": 0})",
                       [](const bson_t* d) { read_delivery_counts(d); }));
}

}  // namespace
}  // namespace relaybus::mongo
