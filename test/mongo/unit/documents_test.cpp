// The document model (src/mongo/documents.hpp): golden documents as canonical extended
// JSON, and reading documents back, malformed ones included.
#include "mongo/documents.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/lane.hpp"
#include "core/retry_policy.hpp"
#include "unit/expect_core_error.hpp"

namespace relaybus::mongo {
namespace {

using core::testing::ThrowsCoreError;
using core::testing::ThrowsInvalidParameter;

Bson from_json(const char* json) {
  bson_error_t error;
  bson_t* doc = bson_new_from_json(reinterpret_cast<const std::uint8_t*>(json), -1, &error);
  EXPECT_NE(doc, nullptr) << error.message;
  return Bson(doc);
}

constexpr std::int64_t kNow = 1764547200000;  // 2025-12-01T00:00:00Z

TEST(Payload, AnObjectIsParsedWithItsTypes) {
  EXPECT_EQ(parse_payload(R"( {"id": 42, "big": 12345678901234, "name": "x", "ok": true} )")
                .canonical_json(),
            R"({ "id" : { "$numberInt" : "42" }, "big" : { "$numberLong" : "12345678901234" }, )"
            R"("name" : "x", "ok" : true })");
  EXPECT_EQ(parse_payload("{}").canonical_json(), "{ }");
}

TEST(Payload, AnythingButOneObjectIsRefused) {
  for (const char* bad : {"", "   ", "[1, 2]", "42", "\"text\"", "null", "{", "{\"a\": 1} x",
                          "{\"a\": 1} {\"b\": 2}", "not json"})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { parse_payload(bad); })) << bad;
}

TEST(Payload, TheMessageSaysWhere) {
  try {
    parse_payload("[]", "events[3]: ");
    FAIL() << "did not throw";
  } catch (const core::Error& e) {
    EXPECT_EQ(std::string(e.what()), "events[3]: payload must be a JSON object");
  }
}

TEST(Documents, DeliveryOfAKeyedEvent) {
  NewDelivery d{"e1", "mailer", std::string("user-42"), 7, kNow + 1000, kNow};
  EXPECT_EQ(
      delivery_document(d).canonical_json(),
      R"({ "_id" : { "e" : "e1", "h" : "mailer" }, "eventId" : "e1", "handler" : "mailer", )"
      R"("laneId" : { "$numberInt" : "171" }, "key" : "user-42", )"
      R"("sequence" : { "$numberLong" : "7" }, "status" : "pending", )"
      R"("attempts" : { "$numberInt" : "0" }, "claims" : { "$numberInt" : "0" }, )"
      R"("availableAt" : { "$date" : { "$numberLong" : "1764547201000" } }, )"
      R"("lastError" : null, "createdAt" : { "$date" : { "$numberLong" : "1764547200000" } }, )"
      R"("updatedAt" : { "$date" : { "$numberLong" : "1764547200000" } } })");
  EXPECT_EQ(core::lane_of("user-42"), 171);  // the lane is core's
}

TEST(Documents, AnUnkeyedDeliveryLivesInTheLaneOfItsEventId) {
  NewDelivery d{"e2", "mailer", std::nullopt, 0, kNow, kNow};
  const std::string json = delivery_document(d).canonical_json();
  EXPECT_NE(json.find(R"("laneId" : { "$numberInt" : ")" + std::to_string(core::lane_of("e2")) +
                      R"(" }, "key" : null, "sequence" : { "$numberLong" : "0" })"),
            std::string::npos)
      << json;
}

TEST(Documents, TheLaneOfADeliveryIsCoresLaneOfItsKeyElseItsEventId) {
  EXPECT_EQ(delivery_lane("e1", std::string("user-42")), core::lane_of("user-42"));
  EXPECT_EQ(delivery_lane("e2", std::nullopt), core::lane_of("e2"));
}

TEST(Documents, Event) {
  Bson payload = parse_payload(R"({"id": 42})");
  NewEvent e{"e1", "user.created", std::nullopt, payload.get(), {"audit", "mailer"}, kNow};
  EXPECT_EQ(
      event_document(e).canonical_json(),
      R"({ "_id" : "e1", "type" : "user.created", "key" : null, )"
      R"("payload" : { "id" : { "$numberInt" : "42" } }, "handlers" : [ "audit", "mailer" ], )"
      R"("createdAt" : { "$date" : { "$numberLong" : "1764547200000" } } })");
}

TEST(Documents, NewLaneAndIds) {
  EXPECT_EQ(new_lane_fields("mailer", 17).canonical_json(),
            R"({ "handler" : "mailer", "lane" : { "$numberInt" : "17" }, )"
            R"("epoch" : { "$numberLong" : "0" }, "owner" : null, "holder" : null, )"
            R"("leaseExpiresAt" : null, "inFlight" : [  ], "lost" : [  ] })");
  EXPECT_EQ(lane_id("mailer", 255).canonical_json(),
            R"({ "h" : "mailer", "l" : { "$numberInt" : "255" } })");
  EXPECT_EQ(delivery_id("e1", "mailer").canonical_json(), R"({ "e" : "e1", "h" : "mailer" })");
}

TEST(Documents, Subscription) {
  store::Subscription s{"mailer", {"user.created", "*"}, {5, 2'000'000, 60'000'000}};
  EXPECT_EQ(subscription_fields(s).canonical_json(),
            R"({ "eventTypes" : [ "user.created", "*" ], "maxAttempts" : { "$numberInt" : "5" }, )"
            R"("backoffBaseUs" : { "$numberLong" : "2000000" }, )"
            R"("backoffMaxUs" : { "$numberLong" : "60000000" } })");
}

TEST(Documents, IndexesEachHaveAReason) {
  const auto specs = index_specs();
  ASSERT_EQ(specs.size(), 7u);
  std::vector<std::string> names;
  for (const auto& s : specs) {
    names.push_back(s.name);
    EXPECT_GT(std::string(s.reason).size(), 10u) << s.name;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"deliveries_claim", "deliveries_key_order", "deliveries_dead",
                                      "lanes_handler_lane", "events_created_at",
                                      "completions_completed_at", "completions_handler"}));
  EXPECT_TRUE(specs[3].unique);
  // Deliveries keep their three: a new one would be written by every publish and completion.
  EXPECT_EQ(
      std::count_if(specs.begin(), specs.end(),
                    [](const IndexSpec& s) { return std::string(s.collection) == kDeliveries; }),
      3);
}

TEST(Reading, EventDeliveryCounter) {
  const StoredEvent e = read_event(
      from_json(R"({"_id": "e1", "type": "t", "key": "k", "handlers": ["a", "b"]})").get());
  EXPECT_EQ(e.type, "t");
  EXPECT_EQ(e.key, std::optional<std::string>("k"));
  EXPECT_EQ(e.handlers, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(read_event(from_json(R"({"type": "t", "key": null, "handlers": []})").get()).key,
            std::nullopt);

  const StoredDelivery d = read_delivery(
      from_json(R"({"status": "dead", "attempts": 25, "claims": {"$numberLong": "3"}})").get());
  EXPECT_TRUE(d.dead());
  EXPECT_EQ(d.attempts, 25);
  EXPECT_EQ(d.claims, 3);

  EXPECT_EQ(read_counter(from_json(R"({"_id": "k", "last": {"$numberLong": "9000000000"}})").get()),
            9'000'000'000);
  EXPECT_EQ(read_counter(from_json(R"({"_id": "k", "last": 1})").get()), 1);
}

TEST(Reading, ASubscriptionIsClampedIntoCoresBounds) {
  const store::Subscription s = read_subscription(
      from_json(R"({"_id": "h", "eventTypes": ["t"], "maxAttempts": 0, "backoffBaseUs": -5,
                   "backoffMaxUs": {"$numberLong": "1"}})")
          .get());
  EXPECT_EQ(s.handler, "h");
  core::RetryPolicy raw{0, -5, 1};
  const core::RetryPolicy want = core::clamped(raw);
  EXPECT_EQ(s.retry.max_attempts, want.max_attempts);
  EXPECT_EQ(s.retry.backoff_base_us, want.backoff_base_us);
  EXPECT_EQ(s.retry.backoff_max_us, want.backoff_max_us);
}

TEST(Reading, MalformedDocumentsAreInternalErrors) {
  const auto internal = core::ErrorCode::kInternal;
  EXPECT_TRUE(ThrowsCoreError(
      [] { read_event(from_json(R"({"key": null, "handlers": []})").get()); }, internal));
  EXPECT_TRUE(ThrowsCoreError(
      [] { read_event(from_json(R"({"type": "t", "handlers": [1]})").get()); }, internal));
  EXPECT_TRUE(ThrowsCoreError(
      [] { read_delivery(from_json(R"({"status": "gone", "attempts": 1, "claims": 0})").get()); },
      internal));
  EXPECT_TRUE(ThrowsCoreError(
      [] {
        read_delivery(
            from_json(
                R"({"status": "dead", "attempts": {"$numberLong": "9999999999"}, "claims": 0})")
                .get());
      },
      internal));
  EXPECT_TRUE(ThrowsCoreError([] { read_counter(from_json(R"({"last": "1"})").get()); }, internal));
  EXPECT_TRUE(ThrowsCoreError([] { read_string_id(from_json(R"({"_id": 1})").get()); }, internal));
}

}  // namespace
}  // namespace relaybus::mongo
