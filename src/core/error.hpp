// Errors raised by the lane logic. They carry a core error code, not a SQLSTATE: each
// store maps the code to its own reporting once (the PostgreSQL store to ERRCODE macros in
// src/pg/error_codes.cpp, the libpq runtime back from SQLSTATEs in src/client/pg_store.cpp),
// so core knows neither PostgreSQL nor MongoDB.
#pragma once

#include <stdexcept>
#include <string>

namespace relaybus::core {

enum class ErrorCode {
  kInvalidParameter,   // a value outside what the API accepts
  kNullValue,          // a required value is missing
  kUndefinedObject,    // a name that does not exist (an unsubscribed handler)
  kUndefinedFunction,  // a handler function that does not exist
  kPermissionDenied,   // the caller may not do this
  kConflict,           // raced with a concurrent change; retrying the call is safe
  kObjectInUse,        // the object is busy (a delivery in flight): try again once it is not
  kUnavailable,        // the store cannot be reached (connection lost, server gone)
  kInternal,           // a broken invariant: a bug, or storage edited by hand
};

// "invalid_parameter", ...: for logs and messages of stores without codes of their own.
const char* name_of(ErrorCode code) noexcept;

// An error with, where the user can act on it, a hint (what to do) and a detail (what was
// found); the PostgreSQL store reports them as errhint and errdetail.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Error(ErrorCode code, const std::string& message, std::string hint, std::string detail = {})
      : std::runtime_error(message),
        code_(code),
        hint_(std::move(hint)),
        detail_(std::move(detail)) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& hint() const noexcept { return hint_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  ErrorCode code_;
  std::string hint_;
  std::string detail_;
};

}  // namespace relaybus::core
