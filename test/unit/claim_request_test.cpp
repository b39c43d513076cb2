// Validation of what a worker asks for: every limit is a 22023 error, never a clamp.
#include "core/claim_request.hpp"

#include "expect_core_error.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace relaybus::core {
namespace {

using testing::ThrowsInvalidParameter;

constexpr std::int64_t kOneDayUs = 86'400LL * 1'000'000;

TEST(ClaimRequestTest, WorkerNameMustNotBeEmpty) {
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_worker(""); }));
}

TEST(ClaimRequestTest, WorkerNameLengthLimitIs1000Bytes) {
  EXPECT_NO_THROW(validate_worker("w"));
  EXPECT_NO_THROW(validate_worker("worker-1.host:1234#a1b2c3"));
  EXPECT_NO_THROW(validate_worker(std::string(1000, 'w')));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_worker(std::string(1001, 'w')); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_worker(std::string(100000, 'w')); }));
}

TEST(ClaimRequestTest, NameMustNotBeEmpty) {
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_name("handler", ""); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_name("event id", ""); }));
}

TEST(ClaimRequestTest, NameLengthLimitIs1000Bytes) {
  EXPECT_NO_THROW(validate_name("handler", "h"));
  EXPECT_NO_THROW(validate_name("handler", std::string(1000, 'h')));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_name("handler", std::string(1001, 'h')); }));
  EXPECT_TRUE(ThrowsInvalidParameter([] { validate_name("event type", std::string(5000, 't')); }));
}

TEST(ClaimRequestTest, NameLengthCountsBytesNotCharacters) {
  std::string two_byte_chars;
  for (int i = 0; i < 500; ++i) two_byte_chars += "\xc3\xa4";  // "ä": 2 bytes
  ASSERT_EQ(two_byte_chars.size(), 1000u);
  EXPECT_NO_THROW(validate_name("handler", two_byte_chars));
  two_byte_chars += "\xc3\xa4";  // 501 characters, 1002 bytes
  EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_name("handler", two_byte_chars); }));
}

TEST(ClaimRequestTest, NameErrorSaysWhichName) {
  try {
    validate_name("event type", "");
    FAIL() << "empty name accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("event type"), std::string::npos) << e.what();
  }
  try {
    validate_worker(std::string(1001, 'w'));
    FAIL() << "long worker name accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker"), std::string::npos) << e.what();
  }
}

TEST(ClaimRequestTest, NameWithEmbeddedNulIsMeasuredWhole) {
  EXPECT_NO_THROW(validate_name("handler", std::string("\0", 1)));
  std::string long_with_nul(1001, 'h');
  long_with_nul[0] = '\0';
  EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_name("handler", long_with_nul); }));
}

TEST(ClaimRequestTest, BatchSizeRange) {
  EXPECT_EQ(kMaxBatchSize, 10000);
  for (int ok : {1, 2, 10, 9999, 10000}) EXPECT_NO_THROW(validate_batch_size(ok)) << ok;
  for (int bad : {0, -1, -10000, 10001, 20000, std::numeric_limits<int>::max(),
                  std::numeric_limits<int>::min()})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_batch_size(bad); })) << bad;
}

TEST(ClaimRequestTest, LeaseMustBePositive) {
  for (std::int64_t bad :
       {std::int64_t{0}, std::int64_t{-1}, -kOneDayUs, std::numeric_limits<std::int64_t>::min()})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_lease(bad); })) << bad;
}

TEST(ClaimRequestTest, LeaseAtMostOneDay) {
  EXPECT_EQ(kMaxLeaseUs, kOneDayUs);
  for (std::int64_t ok : {std::int64_t{1}, std::int64_t{30'000'000}, kOneDayUs - 1, kOneDayUs})
    EXPECT_NO_THROW(validate_lease(ok)) << ok;
  for (std::int64_t bad : {kOneDayUs + 1, 2 * kOneDayUs, std::numeric_limits<std::int64_t>::max()})
    EXPECT_TRUE(ThrowsInvalidParameter([&] { validate_lease(bad); })) << bad;
}

}  // namespace
}  // namespace relaybus::core
