// Lease tokens: "r1.<lane>.<epoch>.<claims>.<handler length>.<handler><event id>". They come
// back from untrusted callers, so the parser must refuse everything it did not produce.
#include "core/lease_token.hpp"

#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace relaybus::core {
namespace {

using testing::ThrowsInvalidParameter;

LeaseToken MakeToken(std::int16_t lane, std::int64_t epoch, std::int32_t claims,
                     std::string handler, std::string event_id) {
  LeaseToken t;
  t.lane = lane;
  t.epoch = epoch;
  t.claims = claims;
  t.handler = std::move(handler);
  t.event_id = std::move(event_id);
  return t;
}

void ExpectSameToken(const LeaseToken& expected, const LeaseToken& actual) {
  EXPECT_EQ(actual.lane, expected.lane);
  EXPECT_EQ(actual.epoch, expected.epoch);
  EXPECT_EQ(actual.claims, expected.claims);
  EXPECT_EQ(actual.handler, expected.handler);
  EXPECT_EQ(actual.event_id, expected.event_id);
}

void ExpectRoundTrip(const LeaseToken& token) {
  const std::string text = encode(token);
  SCOPED_TRACE("token: " + text.substr(0, 200));
  LeaseToken parsed;
  ASSERT_NO_THROW(parsed = parse_lease_token(text));
  ExpectSameToken(token, parsed);
  EXPECT_EQ(encode(parsed), text);
}

TEST(LeaseTokenTest, EncodesTheDocumentedFormat) {
  EXPECT_EQ(encode(MakeToken(7, 42, 3, "billing", "evt-1")), "r1.7.42.3.7.billingevt-1");
  EXPECT_EQ(encode(MakeToken(0, 0, 0, "h", "e")), "r1.0.0.0.1.he");
}

TEST(LeaseTokenTest, ParsesAHandWrittenToken) {
  ExpectSameToken(MakeToken(7, 42, 3, "billing", "evt-1"),
                  parse_lease_token("r1.7.42.3.7.billingevt-1"));
}

TEST(LeaseTokenTest, RoundTripsPlainToken) {
  ExpectRoundTrip(MakeToken(17, 5, 2, "send-email", "550e8400-e29b-41d4-a716-446655440000"));
}

TEST(LeaseTokenTest, RoundTripsBoundaryNumbers) {
  ExpectRoundTrip(MakeToken(0, 0, 0, "h", "e"));
  ExpectRoundTrip(MakeToken(255, std::numeric_limits<std::int64_t>::max(),
                            std::numeric_limits<std::int32_t>::max(), "h", "e"));
  ExpectRoundTrip(MakeToken(128, 1, 1, "h", "e"));
  ExpectRoundTrip(MakeToken(10, 10, 10, "h", "e"));  // zeros inside numbers are not leading
}

TEST(LeaseTokenTest, RoundTripsAwkwardHandlersAndEventIds) {
  const std::pair<std::string, std::string> cases[] = {
      {"a.b.c", "x.y.z"},
      {"svc:handler", "stream:partition:offset"},
      {"123", "456"},
      {"1.", ".1"},
      {".", "."},
      {"5.", "abcde"},               // handler that looks like a length field
      {"h", "r1.0.0.0.1.he"},        // event id that looks like a token
      {"r1.0.0.0.1.", "he"},         // handler that looks like a token prefix
      {"h", "0"},                    // event id that is a bare zero
      {"00", "007"},                 // leading zeros inside names are just characters
      {"-1", "+1"},                  // signs inside names are just characters
      {"h", " "},                    // whitespace
      {"tab\there", "line\nbreak"},  // control characters
      {std::string("nul\0h", 5), std::string("nul\0e", 5)},
      {"Z\xc3\xbcrich", "\xe2\x82\xac-\xf0\x9f\x98\x80"},  // UTF-8: "Zürich", "€-😀"
      {"\xe3\x82\xad\xe3\x83\xbc", "\xe3\x82\xad"},        // UTF-8: "キー", "キ"
  };
  for (const auto& [handler, event_id] : cases)
    ExpectRoundTrip(MakeToken(3, 9, 1, handler, event_id));
}

TEST(LeaseTokenTest, RoundTripsVeryLongNames) {
  ExpectRoundTrip(MakeToken(1, 2, 3, std::string(100000, 'h'), std::string(100000, 'e')));
  ExpectRoundTrip(MakeToken(1, 2, 3, std::string(12345, '.'), std::string(1, '.')));
  ExpectRoundTrip(MakeToken(1, 2, 3, "h", std::string(200000, '9')));
}

TEST(LeaseTokenTest, DistinctDeliveriesGiveDistinctTokens) {
  // Moving the boundary between handler and event id must change the token.
  EXPECT_NE(encode(MakeToken(0, 1, 1, "ab", "c")), encode(MakeToken(0, 1, 1, "a", "bc")));

  // Every split of a few strings into (handler, event id), crossed with a few fence values.
  std::set<std::string> seen;
  int made = 0;
  for (const std::string joined : {"abc", "a.b", "1.2.3", "r1.0"}) {
    for (std::size_t cut = 1; cut < joined.size(); ++cut) {
      for (std::int16_t lane : {0, 1, 10}) {
        for (std::int64_t epoch : {1, 11}) {
          for (std::int32_t claims : {1, 11}) {
            const LeaseToken t =
                MakeToken(lane, epoch, claims, joined.substr(0, cut), joined.substr(cut));
            const std::string text = encode(t);
            EXPECT_TRUE(seen.insert(text).second) << "collision: " << text;
            ExpectSameToken(t, parse_lease_token(text));
            ++made;
          }
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(made));
}

TEST(LeaseTokenTest, FenceValuesChangeTheToken) {
  const std::string base = encode(MakeToken(4, 7, 2, "h", "e"));
  EXPECT_NE(base, encode(MakeToken(5, 7, 2, "h", "e")));
  EXPECT_NE(base, encode(MakeToken(4, 8, 2, "h", "e")));
  EXPECT_NE(base, encode(MakeToken(4, 7, 3, "h", "e")));
}

void ExpectMalformed(const std::string& text) {
  EXPECT_TRUE(ThrowsInvalidParameter([&] { parse_lease_token(text); })) << "token: " << text;
}

TEST(LeaseTokenTest, RejectsEmptyAndWrongPrefix) {
  for (const std::string text :
       {"", "r", "r1", "r1.", "r2.0.0.0.1.he", "R1.0.0.0.1.he", "x1.0.0.0.1.he", " r1.0.0.0.1.he",
        "r1,0.0.0.1.he", "r10.0.0.0.1.he", ".r1.0.0.0.1.he", "0.0.0.1.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsMissingFields) {
  for (const std::string text :
       {"r1.0", "r1.0.", "r1.0.0", "r1.0.0.", "r1.0.0.0", "r1.0.0.0.", "r1.0.0.0.1", "r1.0.0.0.1he",
        "r1..0.0.1.he", "r1.0..0.1.he", "r1.0.0..1.he", "r1.0.0.0..he", "r1.0.0.1.he", "r1.0.0.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsNonDigits) {
  for (const std::string text :
       {"r1.a.0.0.1.he", "r1.0.x.0.1.he", "r1.0.0.y.1.he", "r1.0.0.0.z.he", "r1.0x1.0.0.1.he",
        "r1.1e2.0.0.1.he", "r1.0.1 .0.1.he", "r1. 1.0.0.1.he", "r1.0.0.0.1 .he",
        "r1.0.0.0.\xd9\xa1.he" /* ARABIC-INDIC DIGIT ONE */, "r1.0.1_000.0.1.he",
        "r1.0.1,5.0.1.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsSigns) {
  for (const std::string text :
       {"r1.-1.0.0.1.he", "r1.+1.0.0.1.he", "r1.0.-1.0.1.he", "r1.0.+1.0.1.he", "r1.0.0.-1.1.he",
        "r1.0.0.+1.1.he", "r1.0.0.0.-1.he", "r1.0.0.0.+1.he", "r1.-0.0.0.1.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsLeadingZeros) {
  for (const std::string text :
       {"r1.00.0.0.1.he", "r1.01.0.0.1.he", "r1.0.00.0.1.he", "r1.0.007.0.1.he", "r1.0.0.00.1.he",
        "r1.0.0.01.1.he", "r1.0.0.0.01.he", "r1.0.0.0.00.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsLaneOutOfRange) {
  ASSERT_NO_THROW(parse_lease_token("r1.255.0.0.1.he"));
  // 65536 and 65791 would wrap to 0 and 255 in a 16-bit lane.
  for (const std::string text :
       {"r1.256.0.0.1.he", "r1.1000.0.0.1.he", "r1.65536.0.0.1.he", "r1.65791.0.0.1.he",
        "r1.4294967296.0.0.1.he", "r1.9223372036854775807.0.0.1.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsEpochOverflow) {
  EXPECT_EQ(parse_lease_token("r1.0.9223372036854775807.0.1.he").epoch,
            std::numeric_limits<std::int64_t>::max());
  // int64 max + 1, 2^64 (wraps to 0), 2^64 + 1, and a 20-digit and a 40-digit number.
  for (const std::string text :
       {"r1.0.9223372036854775808.0.1.he", "r1.0.9999999999999999999.0.1.he",
        "r1.0.18446744073709551616.0.1.he", "r1.0.18446744073709551617.0.1.he",
        "r1.0.99999999999999999999.0.1.he", "r1.0.1000000000000000000000000000000000000000.0.1.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsClaimsOverflow) {
  EXPECT_EQ(parse_lease_token("r1.0.0.2147483647.1.he").claims,
            std::numeric_limits<std::int32_t>::max());
  // int32 max + 1 (would wrap negative), 2^32 (wraps to 0), 2^32 + 5, int64 max, 2^64.
  for (const std::string text :
       {"r1.0.0.2147483648.1.he", "r1.0.0.4294967296.1.he", "r1.0.0.4294967301.1.he",
        "r1.0.0.9223372036854775807.1.he", "r1.0.0.18446744073709551616.1.he"})
    ExpectMalformed(text);
}

TEST(LeaseTokenTest, RejectsEmptyHandler) {
  ExpectMalformed("r1.0.0.0.0.he");
  ExpectMalformed("r1.0.0.0.0.");
}

TEST(LeaseTokenTest, RejectsHandlerThatLeavesNoEventId) {
  ExpectMalformed("r1.0.0.0.2.he");
  ExpectMalformed("r1.0.0.0.1.h");
  ExpectMalformed("r1.0.0.0.1.");
  ExpectMalformed("r1.0.0.0.12." + std::string(12, 'h'));
  ExpectMalformed("r1.0.0.0.100000." + std::string(100000, 'h'));
}

TEST(LeaseTokenTest, RejectsHandlerLengthBeyondTheEnd) {
  for (const std::string text :
       {"r1.0.0.0.3.he", "r1.0.0.0.4.he", "r1.0.0.0.9.he", "r1.0.0.0.10.he", "r1.0.0.0.99.he",
        "r1.0.0.0.9223372036854775807.he", "r1.0.0.0.9223372036854775808.he",
        "r1.0.0.0.18446744073709551617.he", "r1.0.0.0.99999999999999999999.he"})
    ExpectMalformed(text);
  ExpectMalformed("r1.0.0.0.1001." + std::string(1000, 'h'));
}

TEST(LeaseTokenTest, TruncatedTokensAreRejected) {
  // Every proper prefix of a valid token that cuts into the header or leaves no event id.
  const std::string token = encode(MakeToken(200, 123456, 789, "handler", "e"));
  for (std::size_t n = 0; n < token.size(); ++n) ExpectMalformed(token.substr(0, n));
  EXPECT_NO_THROW(parse_lease_token(token));
}

}  // namespace
}  // namespace relaybus::core
