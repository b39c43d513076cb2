// Reading the documents the worker half reads (src/mongo/documents.hpp): lanes, deliveries,
// claimed events, the groups of its aggregations; malformed ones are kInternal.
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

TEST(WorkerReading, AHeldLane) {
  const StoredLane l =
      read_lane(from_json(R"({"_id": {"h": "mailer", "l": 7}, "handler": "mailer", "lane": 7,
                    "epoch": {"$numberLong": "4"}, "owner": "w", "holder": "H",
                    "leaseExpiresAt": {"$date": {"$numberLong": "1764547230000"}},
                    "inFlight": ["e1", "e2"], "lost": ["e0"], "version": 11})")
                    .get());
  EXPECT_EQ(l.handler, "mailer");
  EXPECT_EQ(l.lane, 7);
  EXPECT_EQ(l.epoch, 4);
  EXPECT_EQ(l.owner, std::optional<std::string>("w"));
  EXPECT_EQ(l.holder, std::optional<std::string>("H"));
  EXPECT_EQ(l.lease_expires_at_ms, std::optional<std::int64_t>(1764547230000));
  EXPECT_EQ(l.in_flight, (std::vector<std::string>{"e1", "e2"}));
  EXPECT_EQ(l.lost, (std::vector<std::string>{"e0"}));
  EXPECT_EQ(l.version, std::optional<std::int64_t>(11));
}

TEST(WorkerReading, AFreeLaneAsSubscribeCreatesIt) {
  const StoredLane l = read_lane(new_lane_fields("mailer", 3).get());
  EXPECT_EQ(l.epoch, 0);
  EXPECT_FALSE(l.owner);
  EXPECT_FALSE(l.holder);
  EXPECT_FALSE(l.lease_expires_at_ms);
  EXPECT_TRUE(l.in_flight.empty());
  EXPECT_FALSE(l.version);  // no claim wrote it yet
}

TEST(WorkerReading, ADeliveryAsPublishWritesIt) {
  const WorkDelivery d =
      read_work_delivery(delivery_document({"e1", "mailer", std::string("k"), 7, 5, 6}).get());
  EXPECT_EQ(d.event_id, "e1");
  EXPECT_EQ(d.handler, "mailer");
  EXPECT_EQ(d.key, std::optional<std::string>("k"));
  EXPECT_EQ(d.sequence, 7);
  EXPECT_TRUE(d.pending());
  EXPECT_EQ(d.attempts, 0);
  EXPECT_EQ(d.claims, 0);
  EXPECT_EQ(d.available_at_ms, 5);
}

TEST(WorkerReading, AClaimedEventsPayloadIsJsonText) {
  Bson payload = parse_payload(R"({"id": 42})");
  const ClaimedEvent e = read_claimed_event(
      event_document({"e1", "t", std::nullopt, payload.get(), {"mailer"}, 9}).get());
  EXPECT_EQ(e.id, "e1");
  EXPECT_EQ(e.type, "t");
  EXPECT_FALSE(e.key);
  EXPECT_EQ(e.payload, R"({ "id" : 42 })");
  EXPECT_EQ(e.created_at_ms, 9);
  // An empty payload reads as the other stores return it.
  Bson empty = parse_payload("{}");
  EXPECT_EQ(read_claimed_event(event_document({"e2", "t", {}, empty.get(), {}, 9}).get()).payload,
            "{}");
}

TEST(WorkerReading, AggregationGroups) {
  EXPECT_EQ(read_first_sequence(from_json(R"({"_id": "k", "first": {"$numberLong": "3"}})").get()),
            (std::pair<std::string, std::int64_t>{"k", 3}));
  EXPECT_EQ(
      read_lane_group(from_json(R"({"_id": {"h": "mailer", "l": 9}, "at": {"$date": 1}})").get()),
      (std::pair<std::string, std::int16_t>{"mailer", 9}));
}

TEST(WorkerReading, MalformedDocumentsAreInternalErrors) {
  const auto internal = [](const char* json, auto read) {
    Bson doc = from_json(json);
    return ThrowsCoreError([&] { read(doc.get()); }, core::ErrorCode::kInternal);
  };
  const auto lane = [](const bson_t* d) { read_lane(d); };
  const auto delivery = [](const bson_t* d) { read_work_delivery(d); };
  EXPECT_TRUE(internal(R"({"handler": "h", "lane": 256, "epoch": 0, "owner": null,
                           "holder": null, "leaseExpiresAt": null, "inFlight": [], "lost": []})",
                       lane));  // no such lane
  EXPECT_TRUE(internal(R"({"handler": "h", "lane": 1, "epoch": "0", "owner": null,
                           "holder": null, "leaseExpiresAt": null, "inFlight": [], "lost": []})",
                       lane));
  EXPECT_TRUE(internal(R"({"handler": "h", "lane": 1, "epoch": 0, "owner": null,
                           "holder": null, "leaseExpiresAt": 5, "inFlight": [], "lost": []})",
                       lane));  // not a date
  EXPECT_TRUE(internal(R"({"eventId": "e", "handler": "h", "key": null, "sequence": 0,
                           "status": "running", "attempts": 0, "claims": 0,
                           "availableAt": {"$date": 1}})",
                       delivery));
  EXPECT_TRUE(internal(R"({"eventId": "e", "handler": "h", "key": null, "sequence": 0,
                           "status": "pending", "attempts": 0, "claims": 0})",
                       delivery));  // no due time
}

}  // namespace
}  // namespace relaybus::mongo
