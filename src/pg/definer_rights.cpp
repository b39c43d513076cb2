#include "definer_rights.hpp"

#include "guard.hpp"

#include "../core/error.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "utils/syscache.h"
}

namespace relaybus::pg {

namespace {

Oid owner_of_function(Oid function) {
  Oid owner = InvalidOid;
  pg_call([&] {
    HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
    if (HeapTupleIsValid(tuple)) {
      owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple))->proowner;
      ReleaseSysCache(tuple);
    }
  });
  if (owner == InvalidOid)
    throw core::Error(core::ErrorCode::kInternal, "relaybus: cannot find the called function");
  return owner;
}

}  // namespace

Datum with_definer_rights(FunctionCallInfo fcinfo, DefinerBody body) {
  Oid caller = InvalidOid;
  int context = 0;
  GetUserIdAndSecContext(&caller, &context);
  const Oid owner = owner_of_function(fcinfo->flinfo->fn_oid);
  // As fmgr_security_definer does: a local user id change, keeping every restriction the
  // caller runs under (a handler's security-restricted operation stays one).
  SetUserIdAndSecContext(owner, context | SECURITY_LOCAL_USERID_CHANGE);
  Datum result = 0;
  try {
    result = body(fcinfo, caller);
  } catch (...) {
    SetUserIdAndSecContext(caller, context);
    throw;
  }
  SetUserIdAndSecContext(caller, context);
  return result;
}

}  // namespace relaybus::pg
