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

// An error with, where the user can act on it, a hint (what to do) and a detail (what was
// found); the stores report them as PostgreSQL's errhint and errdetail.
class Error : public std::runtime_error {
 public:
  Error(const char* sqlstate, const std::string& message)
      : std::runtime_error(message), sqlstate_(sqlstate) {}
  Error(const char* sqlstate, const std::string& message, std::string hint, std::string detail = {})
      : std::runtime_error(message),
        sqlstate_(sqlstate),
        hint_(std::move(hint)),
        detail_(std::move(detail)) {}
  const char* sqlstate() const noexcept { return sqlstate_; }
  const std::string& hint() const noexcept { return hint_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  const char* sqlstate_;
  std::string hint_;
  std::string detail_;
};

}  // namespace relaybus::core
