#include "worker_name.hpp"

#include <random>

namespace relaybus::client {

namespace {
std::string random_hex(std::size_t length) {
  static const char kHex[] = "0123456789abcdef";
  std::random_device device;
  std::mt19937_64 bits((static_cast<std::uint64_t>(device()) << 32) ^ device());
  std::string out(length, '0');
  for (char& c : out) c = kHex[bits() & 15];
  return out;
}
}  // namespace

std::string make_worker_name(const std::string& prefix) {
  return (prefix.empty() ? std::string("relaybus") : prefix) + "-" + random_hex(12);
}

std::string make_holder() {
  return random_hex(32);
}

}  // namespace relaybus::client
