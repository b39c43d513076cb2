#include "time_text.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace relaybus::cli {

namespace {

// Whole seconds, floored (a time before 1970 has a negative count), and the microseconds
// after them.
std::string format(std::int64_t us, const char* date_time, const char* fraction, int digits) {
  std::int64_t seconds = us / 1000000, micros = us % 1000000;
  if (micros < 0) {
    micros += 1000000;
    seconds -= 1;
  }
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[64];
  const std::size_t n = std::strftime(text, sizeof text, date_time, &tm);
  const long shown = static_cast<long>(digits == 3 ? micros / 1000 : micros);
  std::snprintf(text + n, sizeof text - n, fraction, shown);
  return text;
}

}  // namespace

std::string human_time(std::int64_t us) {
  return format(us, "%Y-%m-%d %H:%M:%S", ".%03ld+00", 3);
}

std::string json_time(std::int64_t us) {
  return format(us, "%Y-%m-%dT%H:%M:%S", ".%06ldZ", 6);
}

std::string human_age(std::int64_t us) {
  const long long s = us > 0 ? us / 1000000 : 0;
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof text, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  } else {
    std::snprintf(text, sizeof text, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
  }
  return text;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace relaybus::cli
