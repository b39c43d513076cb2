// Errors raised by the lane logic. They carry a SQLSTATE as five plain characters so the
// stores can report them faithfully without core knowing PostgreSQL or MongoDB.
#pragma once

#include <stdexcept>
#include <string>

namespace relaybus::core {

// SQLSTATE codes core uses; the stores map them to their own error reporting.
namespace sqlstate {
inline constexpr const char* kInvalidParameter = "22023";  // invalid_parameter_value
inline constexpr const char* kNullValue = "22004";         // null_value_not_allowed
inline constexpr const char* kUndefinedObject = "42704";   // undefined_object
inline constexpr const char* kInternal = "XX000";          // internal_error
}  // namespace sqlstate

class Error : public std::runtime_error {
 public:
  Error(const char* sqlstate, const std::string& message)
      : std::runtime_error(message), sqlstate_(sqlstate) {}
  const char* sqlstate() const noexcept { return sqlstate_; }

 private:
  const char* sqlstate_;
};

}  // namespace relaybus::core
