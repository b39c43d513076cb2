// lane_of is stored with every delivery: its values are part of the on-disk format.
#include "core/lane.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace relaybus::core {
namespace {

// FNV-1a 32-bit written out independently of src/core: offset basis 2166136261, prime
// 16777619, over the bytes, then modulo 256.
int ReferenceLane(std::string_view bytes) {
  std::uint32_t hash = 2166136261u;
  for (char c : bytes) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 16777619u;
  }
  return static_cast<int>(hash % 256u);
}

TEST(LaneTest, LaneCountIs256) {
  EXPECT_EQ(kLaneCount, 256);
}

TEST(LaneTest, ReferenceImplementationMatchesPublishedFnv1aVectors) {
  // FNV-1a 32-bit of "" is 0x811c9dc5, of "a" 0xe40c292c, of "foobar" 0xbf9cf968.
  EXPECT_EQ(ReferenceLane(""), 0xc5);
  EXPECT_EQ(ReferenceLane("a"), 0x2c);
  EXPECT_EQ(ReferenceLane("foobar"), 0x68);
}

TEST(LaneTest, PinnedValues) {
  // Literal values as well as the reference: changing lane_of needs a data migration.
  EXPECT_EQ(lane_of(""), 197);
  EXPECT_EQ(lane_of("a"), 44);
  EXPECT_EQ(lane_of("foobar"), 104);
  EXPECT_EQ(lane_of("order-42"), 244);
  EXPECT_EQ(lane_of("customer:17"), 221);
  // "Zürich-€-😀" in UTF-8
  EXPECT_EQ(lane_of("Z\xc3\xbcrich-\xe2\x82\xac-\xf0\x9f\x98\x80"), 9);
  // "キー" in UTF-8
  EXPECT_EQ(lane_of("\xe3\x82\xad\xe3\x83\xbc"), 51);
}

TEST(LaneTest, MatchesReferenceImplementation) {
  const std::string_view samples[] = {
      "",
      "a",
      "order-42",
      "order-43",
      "customer:17",
      "Z\xc3\xbcrich-\xe2\x82\xac-\xf0\x9f\x98\x80",
      "\xe3\x82\xad\xe3\x83\xbc",
      "550e8400-e29b-41d4-a716-446655440000",
      std::string_view("nul\0inside", 10),
      "\xff\xfe\x80\x7f",
  };
  for (std::string_view s : samples) EXPECT_EQ(lane_of(s), ReferenceLane(s)) << "key: " << s;
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "key-" + std::to_string(i * 7919);
    ASSERT_EQ(lane_of(key), ReferenceLane(key)) << "key: " << key;
  }
}

TEST(LaneTest, HashesBytesNotCharacters) {
  // Bytes >= 0x80 (every non-ASCII UTF-8 byte) are hashed like any other byte.
  const std::string high = "\x80\x81\xfe\xff";
  EXPECT_EQ(lane_of(high), ReferenceLane(high));
  EXPECT_NE(lane_of("\xc3\xa4"), lane_of("\xc3\xa5"));  // "ä" vs "å"
  // An embedded NUL is part of the key, not its end.
  EXPECT_NE(lane_of(std::string_view("a\0b", 3)), lane_of("a"));
}

TEST(LaneTest, AlwaysInRange) {
  for (int i = 0; i < 20000; ++i) {
    std::string key = "k" + std::to_string(i);
    key.push_back(static_cast<char>(i & 0xff));
    const int lane = lane_of(key);
    ASSERT_GE(lane, 0) << "key #" << i;
    ASSERT_LT(lane, 256) << "key #" << i;
  }
  const std::string long_key(1 << 20, '\xff');
  EXPECT_GE(lane_of(long_key), 0);
  EXPECT_LT(lane_of(long_key), 256);
}

TEST(LaneTest, Deterministic) {
  for (int i = 0; i < 1000; ++i) {
    const std::string key = "order-" + std::to_string(i);
    const std::string copy = key;  // a different buffer with the same bytes
    ASSERT_EQ(lane_of(key), lane_of(copy));
    ASSERT_EQ(lane_of(key), lane_of(key));
  }
}

TEST(LaneTest, SpreadsKeysOverNearlyAllLanes) {
  std::set<int> lanes;
  int per_lane[256] = {};
  for (int i = 0; i < 10000; ++i) {
    const int lane = lane_of("order-" + std::to_string(i));
    lanes.insert(lane);
    ++per_lane[lane];
  }
  EXPECT_GE(lanes.size(), 250u);
  // About 39 keys a lane on average; no lane should take a large share.
  for (int lane = 0; lane < 256; ++lane) EXPECT_LT(per_lane[lane], 120) << "lane " << lane;
}

}  // namespace
}  // namespace relaybus::core
