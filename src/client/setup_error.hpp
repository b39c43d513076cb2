// A store that is not set up for what the program asks of it: the extension is missing or
// lacks functions the runtime calls, the role lacks a relaybus right, a handler has no
// subscription. Each is a newcomer's first mistake, so the message says what is wrong and
// what to run to fix it, in the words the Python and Node.js clients use. Raised by
// PgStore when it connects (the extension) and by Dispatcher::start() (the worker's checks,
// Store::check_worker), before anything is claimed.
//
// A StoreError, so code that catches those catches these too; native_code() keeps the
// SQLSTATE of the server error that revealed the problem, when one did.
#pragma once

#include <string>

#include "seam.hpp"

namespace relaybus::client {

class SetupError : public StoreError {
 public:
  enum class Kind {
    kNotInstalled,   // no relaybus extension in the database
    kOutdated,       // relaybus is installed but lacks functions this runtime calls
    kPermission,     // the role lacks the privileges of a relaybus right
    kNotSubscribed,  // a handler the worker runs has no subscription
  };
  SetupError(Kind kind, const std::string& message, std::string native_code = {})
      : StoreError(code_of(kind), message, std::move(native_code)), kind_(kind) {}
  Kind kind() const noexcept { return kind_; }

 private:
  static core::ErrorCode code_of(Kind kind) {
    switch (kind) {
      case Kind::kPermission:
        return core::ErrorCode::kPermissionDenied;
      case Kind::kOutdated:
        return core::ErrorCode::kUndefinedFunction;
      default:
        return core::ErrorCode::kUndefinedObject;
    }
  }
  Kind kind_;
};

}  // namespace relaybus::client
