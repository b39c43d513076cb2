#include "worker_name.hpp"

#include <random>

namespace relaybus::client {

std::string make_worker_name(const std::string& prefix) {
  static const char kHex[] = "0123456789abcdef";
  std::random_device device;
  std::mt19937_64 bits((static_cast<std::uint64_t>(device()) << 32) ^ device());
  std::string suffix(12, '0');
  for (char& c : suffix) c = kHex[bits() & 15];
  return (prefix.empty() ? std::string("relaybus") : prefix) + "-" + suffix;
}

}  // namespace relaybus::client
