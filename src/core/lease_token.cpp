#include "lease_token.hpp"

#include "error.hpp"
#include "lane.hpp"

#include <limits>

namespace relaybus::core {

namespace {

constexpr std::string_view kPrefix = "r1.";
constexpr std::string_view kPositionPrefix = "r3.";

[[noreturn]] void malformed(std::string_view why) {
  throw Error(ErrorCode::kInvalidParameter, "malformed lease token: " + std::string(why));
}

// Reads a decimal number up to the next '.', strictly: digits only, no sign, no leading
// zeros, within max. Advances text past the dot.
std::int64_t read_field(std::string_view& text, std::int64_t max, const char* name) {
  const auto dot = text.find('.');
  if (dot == std::string_view::npos) malformed(std::string(name) + " is missing");
  const std::string_view digits = text.substr(0, dot);
  if (digits.empty() || digits.size() > 19) malformed(std::string(name) + " is not a number");
  if (digits.size() > 1 && digits[0] == '0') malformed(std::string(name) + " has leading zeros");
  std::int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') malformed(std::string(name) + " is not a number");
    const int d = c - '0';
    if (value > max / 10 || (value == max / 10 && d > max % 10))
      malformed(std::string(name) + " is out of range");
    value = value * 10 + d;
  }
  text.remove_prefix(dot + 1);
  return value;
}

}  // namespace

std::string encode(const LeaseToken& token) {
  std::string out(kPrefix);
  out += std::to_string(token.lane);
  out += '.';
  out += std::to_string(token.epoch);
  out += '.';
  out += std::to_string(token.claims);
  out += '.';
  out += std::to_string(token.handler.size());
  out += '.';
  out += token.handler;
  out += token.event_id;
  return out;
}

LeaseToken parse_lease_token(std::string_view text) {
  if (text.substr(0, kPrefix.size()) != kPrefix) malformed("unknown format");
  text.remove_prefix(kPrefix.size());
  LeaseToken token;
  token.lane = static_cast<std::int16_t>(read_field(text, kLaneCount - 1, "lane"));
  token.epoch = read_field(text, std::numeric_limits<std::int64_t>::max(), "epoch");
  token.claims = static_cast<std::int32_t>(
      read_field(text, std::numeric_limits<std::int32_t>::max(), "claims"));
  const auto handler_length = static_cast<std::size_t>(
      read_field(text, static_cast<std::int64_t>(text.size()), "handler length"));
  if (handler_length == 0) malformed("handler is empty");
  if (handler_length >= text.size()) malformed("event id is missing");
  token.handler = std::string(text.substr(0, handler_length));
  token.event_id = std::string(text.substr(handler_length));
  return token;
}

std::string encode(const PositionToken& token) {
  std::string out(kPositionPrefix);
  out += std::to_string(token.lane);
  out += '.';
  out += std::to_string(token.epoch);
  out += '.';
  out += std::to_string(token.position);
  out += '.';
  out += std::to_string(token.claims);
  out += '.';
  out += std::to_string(token.handler.size());
  out += '.';
  out += token.handler;
  if (token.published_us > 0) {
    out += '.';
    out += std::to_string(token.published_us);
  }
  return out;
}

PositionToken parse_position_token(std::string_view text) {
  if (text.substr(0, kPrefix.size()) == kPrefix)
    throw Error(
        ErrorCode::kInvalidParameter,
        "malformed lease token: a token of relaybus 0.2, claimed before the update to 0.3.0",
        "Claim again: the update ended every attempt in flight.");
  if (text.substr(0, kPositionPrefix.size()) != kPositionPrefix) malformed("unknown format");
  text.remove_prefix(kPositionPrefix.size());
  PositionToken token;
  token.lane = static_cast<std::int16_t>(read_field(text, kLaneCount - 1, "lane"));
  token.epoch = read_field(text, std::numeric_limits<std::int64_t>::max(), "epoch");
  token.position = read_field(text, std::numeric_limits<std::int64_t>::max(), "position");
  if (token.position == 0) malformed("position is 0");
  token.claims = static_cast<std::int32_t>(
      read_field(text, std::numeric_limits<std::int32_t>::max(), "claims"));
  const auto handler_length = static_cast<std::size_t>(
      read_field(text, static_cast<std::int64_t>(text.size()), "handler length"));
  if (handler_length == 0) malformed("handler is empty");
  if (handler_length > text.size()) malformed("handler length does not match");
  token.handler = std::string(text.substr(0, handler_length));
  text.remove_prefix(handler_length);
  if (!text.empty()) {
    if (text[0] != '.') malformed("handler length does not match");
    text.remove_prefix(1);
    std::string field(text);
    field += '.';  // read_field reads up to a dot
    std::string_view rest(field);
    token.published_us = read_field(rest, std::numeric_limits<std::int64_t>::max(), "publish time");
    if (!rest.empty()) malformed("publish time is not a number");
    if (token.published_us == 0) malformed("publish time is 0");
  }
  return token;
}

}  // namespace relaybus::core
