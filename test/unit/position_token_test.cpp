// 0.3.0's lease tokens: "r3.<lane>.<epoch>.<position>.<claims>.<handler length>.<handler>".
// They come back from untrusted callers, so the parser must refuse everything it did not
// produce, including a 0.2 token (a worker that claimed before the update).
#include "core/lease_token.hpp"

#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace relaybus::core {
namespace {

using testing::ThrowsInvalidParameter;

PositionToken Make(std::int16_t lane, std::int64_t epoch, std::int64_t position,
                   std::int32_t claims, std::string handler) {
  PositionToken t;
  t.lane = lane;
  t.epoch = epoch;
  t.position = position;
  t.claims = claims;
  t.handler = std::move(handler);
  return t;
}

void ExpectSame(const PositionToken& a, const PositionToken& b) {
  EXPECT_EQ(a.lane, b.lane);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.claims, b.claims);
  EXPECT_EQ(a.handler, b.handler);
}

TEST(PositionTokenTest, EncodesTheDocumentedFormat) {
  EXPECT_EQ(encode(Make(7, 42, 1001, 3, "billing")), "r3.7.42.1001.3.7.billing");
  EXPECT_EQ(encode(Make(0, 0, 1, 0, "h")), "r3.0.0.1.0.1.h");
}

TEST(PositionTokenTest, RoundTripsBoundaryNumbersAndAwkwardHandlers) {
  const std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
  const std::int32_t max32 = std::numeric_limits<std::int32_t>::max();
  for (const std::string& handler :
       {std::string("h"), std::string("a.b.c"), std::string("12.3"), std::string("r3.0.0.1.0.1.h"),
        std::string("ünï cödé ☃"), std::string(5000, 'x')}) {
    for (const auto& t : {Make(255, max64, max64, max32, handler), Make(0, 0, 1, 0, handler)}) {
      const std::string text = encode(t);
      PositionToken parsed;
      ASSERT_NO_THROW(parsed = parse_position_token(text)) << text.substr(0, 80);
      ExpectSame(t, parsed);
      EXPECT_EQ(encode(parsed), text);
    }
  }
}

TEST(PositionTokenTest, CarriesThePublishTimeAfterTheHandler) {
  PositionToken t = Make(7, 42, 1001, 3, "billing");
  t.published_us = 1796601600123456;
  EXPECT_EQ(encode(t), "r3.7.42.1001.3.7.billing.1796601600123456");
  const PositionToken parsed = parse_position_token(encode(t));
  ExpectSame(t, parsed);
  EXPECT_EQ(parsed.published_us, t.published_us);
  // A handler that looks like a publish time stays the handler: its length says where it ends.
  t.handler = "h.12";
  const PositionToken awkward = parse_position_token(encode(t));
  EXPECT_EQ(awkward.handler, "h.12");
  EXPECT_EQ(awkward.published_us, t.published_us);
  // Without one (a token made before publish times were carried, or by hand): 0.
  EXPECT_EQ(parse_position_token("r3.7.42.1001.3.7.billing").published_us, 0);
}

TEST(PositionTokenTest, RefusesA02TokenSayingSo) {
  EXPECT_TRUE(ThrowsInvalidParameter([] { parse_position_token("r1.7.42.3.7.billingevt-1"); }));
  try {
    parse_position_token("r1.7.42.3.7.billingevt-1");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("relaybus 0.2"), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(PositionTokenTest, RefusesMalformedTokens) {
  for (const char* bad :
       {"", "r3.", "r3.7.42.1001.3.7.billin", "r3.7.42.1001.3.7.billingx", "r3.256.1.1.0.1.h",
        "r3.-1.1.1.0.1.h", "r3.7.1.0.0.1.h", "r3.07.1.1.0.1.h", "r3.7.1.1.0.0.",
        "r3.7.1.1.2147483648.1.h", "r3.7.9223372036854775808.1.0.1.h", "r3.7.1.1.0.1",
        "r3.7.1.1.0.h", "r3.7.1.1 .0.1.h", "R3.7.1.1.0.1.h", "r2.7.1.1.0.1.h",
        // a publish time after the handler: digits only, positive, nothing after it
        "r3.7.1.1.0.1.h.", "r3.7.1.1.0.1.h.0", "r3.7.1.1.0.1.h.-5", "r3.7.1.1.0.1.h.05",
        "r3.7.1.1.0.1.h.5.6", "r3.7.1.1.0.1.h.5x", "r3.7.1.1.0.1.hx5",
        "r3.7.1.1.0.1.h.9223372036854775808"}) {
    EXPECT_TRUE(ThrowsInvalidParameter([&] { parse_position_token(bad); })) << "token: " << bad;
  }
}

}  // namespace
}  // namespace relaybus::core
