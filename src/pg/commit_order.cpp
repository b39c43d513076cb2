#include "commit_order.hpp"

#include "guard.hpp"
#include "spi.hpp"

#include "../core/error.hpp"

#include <map>
#include <tuple>

extern "C" {
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/snapmgr.h"
}

namespace relaybus::pg::commit_order {

namespace {

// (log table, lane, handler): the order locks are taken in and rows written in.
using Key = std::tuple<Oid, std::int16_t, std::string>;

struct Noted {
  std::map<Key, std::int32_t> deliveries;  // how many each (log, lane, handler) took
  std::map<Oid, Oid> writer;               // log table -> the role its row is inserted as
};

Noted noted;

struct LogStatement {
  std::string sql;
  SPIPlanPtr plan = nullptr;
};

// One insert per log table, kept for the backend's life. Every name is qualified, the
// table by OID at preparation: the statement runs at commit, under whatever search_path
// the session has by then.
std::map<Oid, LogStatement> statements;

SPIPlanPtr plan_for(Oid log) {
  LogStatement& statement = statements[log];
  if (statement.plan != nullptr) return statement.plan;
  char* name = nullptr;
  pg_call([&] {
    const char* relname = get_rel_name(log);
    if (relname == nullptr)
      ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                      errmsg("relaybus: the commit log table %u does not exist", log)));
    name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(log)), relname);
  });
  const std::string table(name);
  statement.sql =
      "INSERT INTO " + table +
      " (handler, lane, first_position, span, txn)"
      " SELECT u.h, u.l,"
      " COALESCE((SELECT c.first_position OPERATOR(pg_catalog.+) c.span FROM " +
      table +
      " c WHERE c.handler OPERATOR(pg_catalog.=) u.h AND c.lane OPERATOR(pg_catalog.=) u.l"
      " ORDER BY c.first_position DESC LIMIT 1), 1),"
      " u.n, pg_catalog.pg_current_xact_id()"
      " FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]),"
      " pg_catalog.unnest($2::pg_catalog.int2[]), pg_catalog.unnest($3::pg_catalog.int4[]))"
      " AS u(h, l, n)";
  Oid types[3] = {TEXTARRAYOID, INT2ARRAYOID, INT4ARRAYOID};
  SPIPlanPtr prepared = nullptr;
  pg_call([&] {
    prepared = SPI_prepare_cursor(statement.sql.c_str(), 3, types, CURSOR_OPT_GENERIC_PLAN);
    if (prepared != nullptr) SPI_keepplan(prepared);
  });
  if (prepared == nullptr)
    throw core::Error(core::ErrorCode::kInternal, "relaybus: could not prepare the commit log");
  statement.plan = prepared;
  return prepared;
}

void lock_lane(Oid log, std::int16_t lane) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, log, static_cast<std::uint32_t>(lane), kLockSpace);
  pg_call([&] { (void)LockAcquire(&tag, ExclusiveLock, false, false); });
}

// Every lane lock first, in key order; then, with a snapshot that sees every transaction
// that held one of them before, one insert per log table.
void write_log() {
  Oid locked_log = InvalidOid;
  std::int16_t locked_lane = -1;
  for (const auto& [key, count] : noted.deliveries) {
    const auto& [log, lane, handler] = key;
    if (log == locked_log && lane == locked_lane) continue;
    lock_lane(log, lane);
    locked_log = log;
    locked_lane = lane;
  }
  SpiConnection spi;
  auto next = noted.deliveries.begin();
  while (next != noted.deliveries.end()) {
    const Oid log = std::get<0>(next->first);
    Params params;
    std::vector<std::string> handlers;
    std::vector<std::int16_t> lanes;
    std::vector<std::int32_t> counts;
    for (; next != noted.deliveries.end() && std::get<0>(next->first) == log; ++next) {
      lanes.push_back(std::get<1>(next->first));
      handlers.push_back(std::get<2>(next->first));
      counts.push_back(next->second);
    }
    params.text_array(handlers);
    params.int2_array(lanes);
    params.int4_array(counts);
    SPIPlanPtr plan = plan_for(log);
    Oid saved_user = InvalidOid;
    int saved_context = 0;
    int rc = 0;
    pg_call([&] {
      GetUserIdAndSecContext(&saved_user, &saved_context);
      SetUserIdAndSecContext(noted.writer[log], saved_context | SECURITY_LOCAL_USERID_CHANGE);
      rc = SPI_execute_snapshot(plan, params.values(), params.nulls(), GetLatestSnapshot(),
                                InvalidSnapshot, false, true, 0);
      SetUserIdAndSecContext(saved_user, saved_context);
    });
    if (rc != SPI_OK_INSERT)
      throw core::Error(core::ErrorCode::kInternal, "relaybus: could not write the commit log");
  }
  spi.finish();
}

void forget() {
  noted.deliveries.clear();
  noted.writer.clear();
}

void run_write_log(void*) {
  write_log();
}

// Plain PostgreSQL code, entered from PostgreSQL: the C++ part runs inside the guard, which
// raises any error only after its catch blocks have ended.
void at_transaction_event(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
      if (!noted.deliveries.empty()) run_guarded_callback(run_write_log, nullptr);
      break;
    case XACT_EVENT_PRE_PREPARE:
      if (!noted.deliveries.empty())
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("cannot PREPARE a transaction that published to relaybus"),
                        errdetail("Positions are handed out at commit, and a prepared transaction "
                                  "would hold its lanes until COMMIT PREPARED."),
                        errhint("Publish in a transaction that commits directly.")));
      break;
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      forget();
      break;
    default:
      break;
  }
}

}  // namespace

void install() {
  RegisterXactCallback(at_transaction_event, nullptr);
}

std::int32_t note(Oid log, const std::string& handler, std::int16_t lane) {
  if (lane < 0) throw core::Error(core::ErrorCode::kInvalidParameter, "relaybus: lane is negative");
  noted.writer.emplace(log, GetUserId());
  return noted.deliveries[Key{log, lane, handler}]++;
}

}  // namespace relaybus::pg::commit_order

namespace {

// For measurements of the commit order beside the extension (bench/peers/positions.py):
// no version of the extension's SQL declares it. A superuser who declares it gets nothing
// a caller could not do itself: the row is inserted as the caller, under its privileges.
Datum commit_order_note_body(FunctionCallInfo fcinfo) {
  const std::int32_t ordinal = relaybus::pg::commit_order::note(
      PG_GETARG_OID(0), relaybus::pg::text_of(PG_GETARG_DATUM(1)), PG_GETARG_INT16(2));
  PG_RETURN_INT32(ordinal);
}

}  // namespace

RELAYBUS_SQL_FUNCTION(relaybus_commit_order_note, commit_order_note_body)
