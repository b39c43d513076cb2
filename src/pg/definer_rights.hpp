// SECURITY DEFINER done in C, for the functions that must know who called them.
//
// Inside a SECURITY DEFINER function PostgreSQL has forgotten the role that called it:
// GetUserId() is the owner, and GetOuterUserId() is the session's role (after SET ROLE),
// which is not the caller when the call comes from another SECURITY DEFINER function, or
// from an in-database handler that a superuser worker runs as the handler's owner. A check
// of the caller's privileges made against either would be made against the wrong role. Such
// a function is therefore declared SECURITY INVOKER (with its search_path pinned all the
// same), and its body runs here: the caller is GetUserId() at entry, then the body runs as
// the function's owner, exactly as SECURITY DEFINER would run it.
#pragma once

#include "postgres.hpp"

namespace relaybus::pg {

using DefinerBody = Datum (*)(FunctionCallInfo, Oid caller);

// Runs body(fcinfo, caller) as the owner of the called function. An error restores the
// caller's identity as it leaves (and the transaction or subtransaction abort would too).
Datum with_definer_rights(FunctionCallInfo fcinfo, DefinerBody body);

}  // namespace relaybus::pg
