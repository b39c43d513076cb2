#include "due_time.hpp"

#include "error.hpp"
#include <string>

namespace relaybus::core {

namespace {

// "30 days", "90 minutes", "1500 ms": the largest whole unit, for a message.
std::string duration_text(std::int64_t us) {
  struct Unit {
    std::int64_t us;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{86'400'000'000LL, "day"},
                                    {3'600'000'000LL, "hour"},
                                    {60'000'000LL, "minute"},
                                    {1'000'000LL, "second"}};
  for (const Unit& unit : kUnits) {
    if (us % unit.us == 0) {
      const std::int64_t n = us / unit.us;
      return std::to_string(n) + " " + unit.name + (n == 1 ? "" : "s");
    }
  }
  if (us % 1000 == 0) return std::to_string(us / 1000) + " ms";
  return std::to_string(us) + " us";
}

}  // namespace

std::int64_t checked_delay_us(std::int64_t delay_us, std::int64_t max_delay_us,
                              const std::string& what, const std::string& setting) {
  if (delay_us <= 0) return 0;
  if (delay_us > max_delay_us)
    throw Error(ErrorCode::kInvalidParameter,
                what + " is more than " + duration_text(max_delay_us) + " from now",
                "Schedule it sooner, or raise " + setting + ".",
                "A keyed delivery holds back the later deliveries of its key until it has run.");
  return delay_us;
}

std::int64_t checked_delay_ms(std::int64_t delay_ms, std::int64_t max_delay_us,
                              const std::string& what, const std::string& setting) {
  // Saturate before converting: anything past the maximum is refused the same way.
  const std::int64_t limit_ms = max_delay_us / 1000 + 1;
  const std::int64_t clamped = delay_ms > limit_ms ? limit_ms : delay_ms < 0 ? 0 : delay_ms;
  return checked_delay_us(clamped * 1000, max_delay_us, what, setting) / 1000;
}

}  // namespace relaybus::core
