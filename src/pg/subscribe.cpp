// subscribe: a handler, its event types and its retry policy; creates its core::kLaneCount
// lanes.
#include "definer_rights.hpp"
#include "settings.hpp"
#include "spi.hpp"

extern "C" {
#include "commands/dbcommands.h"
#include "utils/acl.h"
}

#include "../core/claim_request.hpp"
#include "../core/error.hpp"
#include "../core/lane.hpp"
#include "../core/retry_policy.hpp"
#include "../core/sql_quote.hpp"
#include "../core/sql_timeout.hpp"

namespace relaybus::pg {

namespace {

// An in-database handler takes the event as one jsonb argument. The workers run it as its
// owner, so the role calling subscribe must hold that owner's privileges already; otherwise
// an admin could have any (say, a superuser's) function run with its owner's rights. Inside
// a handler the role calling is the handler's owner, never the worker's superuser session.
void validate_sql_function(Oid function, Oid caller) {
  static Statement signature(
      "SELECT p.pronargs = 1 AND p.proargtypes[0] = 'jsonb'::regtype,"
      " p.prokind = 'f' AND NOT p.proretset, p.proowner"
      " FROM pg_catalog.pg_proc p WHERE p.oid = $1",
      {OIDOID});
  Params params;
  params.datum(ObjectIdGetDatum(function), false);
  if (signature.run(params) != 1)
    throw core::Error(core::ErrorCode::kUndefinedObject, "sql_function does not exist");
  if (!row::boolean(0, 1) || !row::boolean(0, 2))
    throw core::Error(core::ErrorCode::kUndefinedFunction,
                      "sql_function must be a function (not a procedure or set-returning) "
                      "taking exactly one jsonb argument");
  bool null = false;
  const Oid owner = DatumGetObjectId(row::datum(0, 3, &null));
  bool allowed = false;
  pg_call([&] { allowed = has_privs_of_role(caller, owner); });
  if (!allowed)
    throw core::Error(core::ErrorCode::kPermissionDenied,
                      "sql_function runs as its owner: only a role with the privileges of "
                      "that owner may subscribe it");
}

// An in-database handler runs only where relaybus's background workers run: say so when
// none will serve this one (the subscription is still made: an external worker may claim
// it by name, and the settings may be changed).
// Whether the library was preloaded is read from settings::preloaded(), not from whether
// relaybus.database is defined: without the preload that setting does not exist here (and
// settings of context postmaster cannot be defined after startup), while a placeholder of
// the same name could; the preload is what starts workers.
void notice_if_no_worker_serves() {
  const std::string served = core::sql_literal(settings::database_setting());
  pg_call([&] {
    const char* here = get_database_name(MyDatabaseId);
    if (!settings::preloaded()) {
      ereport(NOTICE, (errmsg("no background worker runs in-database handlers: relaybus is not "
                              "in shared_preload_libraries"),
                       errhint("Add relaybus to shared_preload_libraries and this database to "
                               "relaybus.database, and restart the server; or claim this "
                               "handler by name from an external worker.")));
    } else if (here == nullptr || !settings::serves_database(here)) {
      ereport(NOTICE, (errmsg("no background worker runs in-database handlers in database \"%s\"",
                              here != nullptr ? here : "?"),
                       settings::database_count() == 0
                           ? errdetail("relaybus.database is empty.")
                           : errdetail("The workers serve relaybus.database = %s.", served.c_str()),
                       errhint("Add this database to relaybus.database and restart the server.")));
    } else if (settings::sql_handler_workers() == 0) {
      ereport(NOTICE, (errmsg("no background worker runs in-database handlers: "
                              "relaybus.sql_handler_workers is 0"),
                       errhint("Set relaybus.sql_handler_workers and restart the server.")));
    }
  });
}

Datum subscribe_body(FunctionCallInfo fcinfo, Oid caller) {
  const char* names[] = {"handler", "event_types", "max_attempts", "backoff_base", "backoff_max"};
  for (int i = 0; i < 5; ++i)
    if (PG_ARGISNULL(i))
      throw core::Error(core::ErrorCode::kNullValue, std::string(names[i]) + " must not be NULL");
  const std::string handler = text_of(PG_GETARG_DATUM(0));
  core::validate_name("handler", handler);
  const std::vector<std::string> types = text_array_of(PG_GETARG_DATUM(1), "event_types");
  if (types.empty())
    throw core::Error(core::ErrorCode::kInvalidParameter, "event_types must not be empty");
  for (const auto& t : types) core::validate_name("event type", t);
  core::RetryPolicy policy;
  policy.max_attempts = PG_GETARG_INT32(2);
  policy.backoff_base_us = interval_us_of(PG_GETARG_DATUM(3), "backoff_base");
  policy.backoff_max_us = interval_us_of(PG_GETARG_DATUM(4), "backoff_max");
  core::validate(policy);
  const bool in_database = !PG_ARGISNULL(5);
  const bool has_timeout = !PG_ARGISNULL(6);
  const std::int64_t timeout_us =
      has_timeout ? interval_us_of(PG_GETARG_DATUM(6), "sql_timeout") : 0;
  if (has_timeout) core::validate_sql_timeout(timeout_us);
  if (has_timeout && !in_database)
    throw core::Error(core::ErrorCode::kInvalidParameter,
                      "sql_timeout applies to in-database handlers: give sql_function too");

  static Statement upsert(
      "INSERT INTO relaybus.subscriptions AS s"
      " (handler, event_types, max_attempts, backoff_base, backoff_max, sql_function,"
      "  sql_timeout) VALUES ($1, $2, $3, $4, $5, $6, $7)"
      " ON CONFLICT (handler) DO UPDATE SET event_types = excluded.event_types,"
      " max_attempts = excluded.max_attempts, backoff_base = excluded.backoff_base,"
      " backoff_max = excluded.backoff_max, sql_function = excluded.sql_function,"
      " sql_timeout = excluded.sql_timeout,"
      " updated_at = now()",
      {TEXTOID, TEXTARRAYOID, INT4OID, INTERVALOID, INTERVALOID, REGPROCEDUREOID, INTERVALOID});
  static Statement lanes("SELECT relaybus_internal.create_lanes($1)", {TEXTOID});

  SpiConnection spi;
  if (in_database) validate_sql_function(PG_GETARG_OID(5), caller);
  Params params;
  params.text(handler);
  params.text_array(types);
  params.int4(policy.max_attempts);
  // Stored as the microseconds validated above (no months or days), so what is stored is
  // exactly what was checked, whatever calendar reads it back.
  params.interval_us(policy.backoff_base_us);
  params.interval_us(policy.backoff_max_us);
  params.datum(in_database ? PG_GETARG_DATUM(5) : 0, !in_database);
  if (has_timeout) {
    params.interval_us(timeout_us);
  } else {
    params.datum(0, true);
  }
  upsert.run(params);
  Params lane_params;
  lane_params.text(handler);
  lanes.run(lane_params);
  spi.finish();
  if (in_database) notice_if_no_worker_serves();
  PG_RETURN_VOID();
}

// subscribe is SECURITY INVOKER in SQL: it must know the role calling it (definer_rights.hpp).
Datum subscribe_entry(FunctionCallInfo fcinfo) {
  return with_definer_rights(fcinfo, subscribe_body);
}

Datum lane_of_body(FunctionCallInfo fcinfo) {
  return Int16GetDatum(core::lane_of(text_of(PG_GETARG_DATUM(0))));
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_subscribe, relaybus::pg::subscribe_entry)
RELAYBUS_SQL_FUNCTION(relaybus_lane_of, relaybus::pg::lane_of_body)
