// core's error codes as PostgreSQL reports them: the one mapping to ERRCODE macros.
#pragma once

#include "../core/error.hpp"

namespace relaybus::pg {

// The sqlerrcode (an ERRCODE_* value) for a core error code.
int sqlerrcode_of(core::ErrorCode code) noexcept;

}  // namespace relaybus::pg
