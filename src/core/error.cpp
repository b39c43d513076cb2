#include "error.hpp"

namespace relaybus::core {

const char* name_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidParameter:
      return "invalid_parameter";
    case ErrorCode::kNullValue:
      return "null_value";
    case ErrorCode::kUndefinedObject:
      return "undefined_object";
    case ErrorCode::kUndefinedFunction:
      return "undefined_function";
    case ErrorCode::kConflict:
      return "conflict";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kObjectInUse:
      return "object_in_use";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "internal";
}

}  // namespace relaybus::core
