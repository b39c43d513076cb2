#include "contract/backend.hpp"

#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include <gtest/gtest.h>

namespace relaybus::contract {

std::vector<BackendInfo>& backends() {
  static std::vector<BackendInfo> all;
  return all;
}

const BackendInfo& backend_named(const std::string& name) {
  for (const auto& b : backends())
    if (b.name == name) return b;
  throw std::logic_error("no contract backend named " + name);
}

RegisterBackend::RegisterBackend(BackendInfo info) {
  backends().push_back(std::move(info));
}

namespace {
std::string base36(unsigned long long n) {
  std::string out;
  do {
    out.insert(out.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[n % 36]);
    n /= 36;
  } while (n);
  return out;
}

// The run: the process id and the start time, so a rerun against the same database
// never meets the names of an earlier one.
const std::string& run_id() {
  static const std::string id = base36(static_cast<unsigned long long>(
                                    std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count())) +
                                base36(static_cast<unsigned long long>(::getpid()));
  return id;
}
unsigned long long serial = 0;
}  // namespace

void next_test() {
  ++serial;
}

std::string unique_name(const std::string& stem) {
  std::string test = "none";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    // "AtLeastOnce/pg": the case and the backend, which keeps a backend's runs apart too.
    test = std::string(info->name());
  }
  for (char& c : test)
    if (c == '/') c = '.';
  return "c" + run_id() + "." + base36(serial) + "-" + test + "-" + stem;
}

}  // namespace relaybus::contract
