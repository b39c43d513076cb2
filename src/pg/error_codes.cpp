#include "error_codes.hpp"

#include "postgres.hpp"

namespace relaybus::pg {

int sqlerrcode_of(core::ErrorCode code) noexcept {
  switch (code) {
    case core::ErrorCode::kInvalidParameter:
      return ERRCODE_INVALID_PARAMETER_VALUE;  // 22023
    case core::ErrorCode::kNullValue:
      return ERRCODE_NULL_VALUE_NOT_ALLOWED;  // 22004
    case core::ErrorCode::kUndefinedObject:
      return ERRCODE_UNDEFINED_OBJECT;  // 42704
    case core::ErrorCode::kUndefinedFunction:
      return ERRCODE_UNDEFINED_FUNCTION;  // 42883
    case core::ErrorCode::kConflict:
      return ERRCODE_T_R_SERIALIZATION_FAILURE;  // 40001
    case core::ErrorCode::kObjectInUse:
      return ERRCODE_OBJECT_IN_USE;  // 55006
    case core::ErrorCode::kPermissionDenied:
      return ERRCODE_INSUFFICIENT_PRIVILEGE;  // 42501
    case core::ErrorCode::kUnavailable:
      return ERRCODE_CONNECTION_FAILURE;  // 08006
    case core::ErrorCode::kInternal:
      return ERRCODE_INTERNAL_ERROR;  // XX000
  }
  return ERRCODE_INTERNAL_ERROR;
}

}  // namespace relaybus::pg
