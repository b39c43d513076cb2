#include "commit_order.hpp"

#include "lane_changes.hpp"

#include "guard.hpp"
#include "spi.hpp"

#include "../core/error.hpp"

#include <algorithm>
#include <map>
#include <tuple>

extern "C" {
#include "access/genam.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_am.h"
#include "executor/tuptable.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
}

namespace relaybus::pg::commit_order {

namespace {

// (log table, lane, handler): the order locks are taken in and rows written in.
using Key = std::tuple<Oid, std::int16_t, std::string>;

// A delivery kept in backend memory until commit (stage()), with the subtransaction that
// staged it: it goes if that subtransaction rolls back.
struct StagedRow {
  std::string handler;
  std::int16_t lane;
  std::string event_id;
  std::optional<std::string> key;
  TimestampTz available_at;
  SubTransactionId subtransaction;
};

struct Noted {
  std::map<Key, std::int32_t> deliveries;        // how many each (log, lane, handler) took
  std::map<Oid, Oid> writer;                     // log table -> the role its row is inserted as
  std::map<Oid, std::vector<StagedRow>> staged;  // deliveries table -> its staged rows
  bool writing = false;                          // in PRE_COMMIT, writing them
};

Noted noted;

struct LogStatement {
  std::string table;  // the qualified name the statement was written with
  std::string sql;
  SPIPlanPtr plan = nullptr;
};

// One insert per log table, kept for the backend's life and remade when the table's name
// changes. Every name is qualified, the table by the name its OID has at commit, and the
// statement is prepared and run under a pinned search_path (execute_as_writer).
std::map<Oid, LogStatement> statements;

std::map<Oid, LogStatement> staged_statements;

// The qualified name `table` has now; nullopt when it no longer exists: dropped by this
// transaction after its publish (DROP EXTENSION), together with the events its staged rows
// belonged to, so they have nowhere to go and nothing to point at.
std::optional<std::string> current_name(Oid table) {
  char* name = nullptr;
  pg_call([&] {
    const char* relname = get_rel_name(table);
    if (relname != nullptr)
      name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(table)), relname);
  });
  if (name == nullptr) return std::nullopt;
  return std::string(name);
}

// The kept statement of `table`, remade when the table's name is not the one it was written
// with: its text names the table, so a statement kept from before a rename, or from a table
// dropped and made again under the name (DROP and CREATE EXTENSION in one transaction),
// would write to whatever bears the name now.
LogStatement& statement_of(std::map<Oid, LogStatement>& kept, Oid table, const std::string& name) {
  LogStatement& statement = kept[table];
  if (statement.plan != nullptr && statement.table != name) {
    SPIPlanPtr old = statement.plan;
    statement.plan = nullptr;
    pg_call([&] { (void)SPI_freeplan(old); });
  }
  statement.table = name;
  return statement;
}

SPIPlanPtr prepare_kept(LogStatement& statement, std::vector<Oid> types) {
  SPIPlanPtr prepared = nullptr;
  pg_call([&] {
    prepared = SPI_prepare_cursor(statement.sql.c_str(), static_cast<int>(types.size()),
                                  types.data(), CURSOR_OPT_GENERIC_PLAN);
    if (prepared != nullptr) SPI_keepplan(prepared);
  });
  if (prepared == nullptr)
    throw core::Error(core::ErrorCode::kInternal, "relaybus: could not prepare the commit order");
  statement.plan = prepared;
  return prepared;
}

bool has_column(Oid table, const char* column) {
  AttrNumber number = InvalidAttrNumber;
  pg_call([&] { number = get_attnum(table, column); });
  return number != InvalidAttrNumber;
}

// The staged deliveries of one table at the positions write_staged computed. available_at
// and created_at only where the table has them: relaybus 0.3.0's deliveries have both,
// test/integration/commit_order_check.py's table neither, bench/ab/commit_order.py's only
// available_at. The statement reads no table, so its plan has nothing for the planner to choose.
SPIPlanPtr staged_plan_for(Oid table, const std::string& name) {
  LogStatement& statement = statement_of(staged_statements, table, name);
  if (statement.plan != nullptr) return statement.plan;
  std::string columns = "handler, lane, position, event_id, key";
  std::string values = "u.h, u.l, u.p, u.e, u.k";
  if (has_column(table, "available_at")) {
    columns += ", available_at";
    values += ", u.a";
  }
  if (has_column(table, "created_at")) {
    columns += ", created_at";
    values += ", pg_catalog.now()";
  }
  statement.sql = "INSERT INTO " + name + " (" + columns + ") SELECT " + values +
                  " FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]),"
                  " pg_catalog.unnest($2::pg_catalog.int2[]),"
                  " pg_catalog.unnest($3::pg_catalog.int8[]),"
                  " pg_catalog.unnest($4::pg_catalog.text[]),"
                  " pg_catalog.unnest($5::pg_catalog.text[]),"
                  " pg_catalog.unnest($6::pg_catalog.timestamptz[]))"
                  " AS u(h, l, p, e, k, a)";
  return prepare_kept(statement, {TEXTARRAYOID, INT2ARRAYOID, INT8ARRAYOID, TEXTARRAYOID,
                                  TEXTARRAYOID, TIMESTAMPTZARRAYOID});
}

using Lanes = std::vector<std::pair<std::string, std::int16_t>>;

// The last position of each of `lanes` in `table` (0: none), each one backward step along the
// table's btree index on (handler, lane, position, ...), under the latest snapshot: taken
// after the lane locks, it sees every transaction that held one of them before.
//
// Read here, not by a statement: a statement's plan is the planner's choice, and a caller
// sets the planner's costs (random_page_cost, cpu_index_tuple_cost, ... are anyone's to SET)
// before the first commit of its backend, whose plan is then kept. Costs that make the index
// look dearer than a disabled sequential scan gave a plan that read the whole table for each
// delivery, at every commit of that backend, while it held its lanes' locks: every other
// publisher of those lanes waited (14 s for one publish, against 1M deliveries and 256
// events committed at once).
std::vector<std::int64_t> last_positions(Oid table, const Lanes& lanes) {
  std::vector<std::int64_t> last(lanes.size(), 0);
  bool found_index = false;
  pg_call([&] {
    const AttrNumber handler_column = get_attnum(table, "handler");
    const AttrNumber lane_column = get_attnum(table, "lane");
    const AttrNumber position_column = get_attnum(table, "position");
    Relation heap = table_open(table, AccessShareLock);
    // Scanned here as a plain table through a plain index: a partitioned table (storage
    // changed by hand) has neither heap nor index pages to scan, and is refused below.
    if (heap->rd_rel->relkind != RELKIND_RELATION) {
      table_close(heap, AccessShareLock);
      return;
    }
    Relation index = nullptr;
    List* indexes = RelationGetIndexList(heap);
    ListCell* cell = nullptr;
    foreach (cell, indexes) {
      Relation candidate = index_open(lfirst_oid(cell), AccessShareLock);
      const Form_pg_index form = candidate->rd_index;
      const TupleDesc columns = RelationGetDescr(candidate);
      if (candidate->rd_rel->relkind == RELKIND_INDEX && candidate->rd_rel->relam == BTREE_AM_OID &&
          form->indisvalid && form->indnkeyatts >= 3 && form->indkey.values[0] == handler_column &&
          form->indkey.values[1] == lane_column && form->indkey.values[2] == position_column &&
          TupleDescAttr(columns, 0)->atttypid == TEXTOID &&
          TupleDescAttr(columns, 1)->atttypid == INT2OID &&
          TupleDescAttr(columns, 2)->atttypid == INT8OID &&
          RelationGetIndexPredicate(candidate) == NIL) {
        index = candidate;
        break;
      }
      index_close(candidate, AccessShareLock);
    }
    list_free(indexes);
    if (index == nullptr) {
      table_close(heap, AccessShareLock);
      return;
    }
    found_index = true;
    Snapshot snapshot = RegisterSnapshot(GetLatestSnapshot());
    TupleTableSlot* slot = table_slot_create(heap, nullptr);
    IndexScanDesc scan = index_beginscan(heap, index, snapshot, 2, 0);
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      ScanKeyData keys[2];
      ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
                             index->rd_indcollation[0], F_TEXTEQ,
                             PointerGetDatum(cstring_to_text_with_len(
                                 lanes[i].first.data(), static_cast<int>(lanes[i].first.size()))));
      ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
                             index->rd_indcollation[1], F_INT2EQ, Int16GetDatum(lanes[i].second));
      index_rescan(scan, keys, 2, nullptr, 0);
      if (index_getnext_slot(scan, BackwardScanDirection, slot)) {
        bool is_null = false;
        const Datum position = slot_getattr(slot, position_column, &is_null);
        if (!is_null) last[i] = DatumGetInt64(position);
      }
    }
    index_endscan(scan);
    ExecDropSingleTupleTableSlot(slot);
    UnregisterSnapshot(snapshot);
    index_close(index, AccessShareLock);
    table_close(heap, AccessShareLock);
  });
  if (!found_index)
    throw core::Error(core::ErrorCode::kInternal,
                      "relaybus: the commit order's table is not a plain table with a btree "
                      "index led by (handler, lane, position)");
  return last;
}

SPIPlanPtr plan_for(Oid log, const std::string& table) {
  LogStatement& statement = statement_of(statements, log, table);
  if (statement.plan != nullptr) return statement.plan;
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
  return prepare_kept(statement, {TEXTARRAYOID, INT2ARRAYOID, INT4ARRAYOID});
}

void lock_lane(Oid log, std::int16_t lane) {
  LOCKTAG tag;
  SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, log, static_cast<std::uint32_t>(lane), kLockSpace);
  pg_call([&] { (void)LockAcquire(&tag, ExclusiveLock, false, false); });
}

// The planner settings of the delivery path's functions (sql/parts/api-0.3.0.sql): the
// statement runs at commit, outside the publishing function and its SET clauses, and its
// kept plan is remade after every ANALYZE. The log's statement (note()) finds a lane's last
// range by a subquery: remade while the table was small, its plan would be a sequential
// scan and a sort, kept at every commit once the table is deep again. (These settings do not
// stop a caller's cost settings from preferring such a plan anyway; staged deliveries,
// which relaybus publishes with, read their lanes' last positions without a plan:
// last_positions.) jit: a statement of one small insert never pays for compiling.
constexpr const char* kIndexPlansOnly[] = {"enable_seqscan", "enable_bitmapscan", "enable_hashjoin",
                                           "enable_mergejoin", "jit"};

using PlanOf = SPIPlanPtr (*)(Oid, const std::string&);

// Prepares (the first time) and runs the table's statement as the role that staged its first
// row (publish's owner: publish is SECURITY DEFINER), never as whoever is the current role
// at commit, and with search_path pinned as the publishing function pins it. The statement
// is parsed as that role too: parse analysis checks USAGE on the table's schema as the
// current role, so a caller whose role has no right on schema relaybus (it published through
// a SECURITY DEFINER function of a publisher, or SET ROLE after publishing) would otherwise
// fail every commit of its backend with 42501. The search_path: every name in the statement
// is qualified, and with the path pinned a caller's search_path neither shadows anything
// nor makes the kept statement be parsed again at each commit.
void execute_as_writer(Oid table, const std::string& name, PlanOf plan_of, Params& params) {
  Oid saved_user = InvalidOid;
  int saved_context = 0;
  int settings = 0;
  // An error from here on aborts the transaction, which restores the user and unwinds the
  // settings' nest level.
  pg_call([&] {
    GetUserIdAndSecContext(&saved_user, &saved_context);
    SetUserIdAndSecContext(noted.writer[table], saved_context | SECURITY_LOCAL_USERID_CHANGE);
    settings = NewGUCNestLevel();
    (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
                            GUC_ACTION_SAVE, true, 0, false);
    for (const char* setting : kIndexPlansOnly)
      (void)set_config_option(setting, "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
                              false);
  });
  SPIPlanPtr plan = plan_of(table, name);
  int rc = 0;
  pg_call([&] {
    rc = SPI_execute_snapshot(plan, params.values(), params.nulls(), GetLatestSnapshot(),
                              InvalidSnapshot, false, true, 0);
    AtEOXact_GUC(true, settings);
    SetUserIdAndSecContext(saved_user, saved_context);
  });
  if (rc != SPI_OK_INSERT)
    throw core::Error(core::ErrorCode::kInternal, "relaybus: could not write the commit order");
}

// The rows that survived their subtransactions, at their (handler, lane)'s last position
// plus 1, 2, ... in the order they were staged: no position is left absent.
void write_staged(Oid table, const std::string& name, const std::vector<StagedRow>& rows) {
  std::map<std::pair<std::string, std::int16_t>, std::int64_t> next;
  for (const StagedRow& row : rows) next.emplace(std::make_pair(row.handler, row.lane), 0);
  Lanes lanes_touched;
  for (const auto& entry : next) lanes_touched.push_back(entry.first);
  const std::vector<std::int64_t> last = last_positions(table, lanes_touched);
  std::size_t i = 0;
  for (auto& entry : next) entry.second = last[i++];
  std::vector<std::string> handlers, event_ids;
  std::vector<std::int16_t> lanes;
  std::vector<std::int64_t> positions;
  std::vector<Datum> keys, available;
  std::vector<bool> key_nulls;
  for (const StagedRow& row : rows) {
    handlers.push_back(row.handler);
    lanes.push_back(row.lane);
    positions.push_back(++next[{row.handler, row.lane}]);
    event_ids.push_back(row.event_id);
    Datum key = 0;
    if (row.key) pg_call([&] { key = PointerGetDatum(cstring_to_text(row.key->c_str())); });
    keys.push_back(key);
    key_nulls.push_back(!row.key.has_value());
    available.push_back(TimestampTzGetDatum(row.available_at));
  }
  Params params;
  params.text_array(handlers);
  params.int2_array(lanes);
  params.int8_array(positions);
  params.text_array(event_ids);
  params.datum_array(keys, key_nulls, TEXTOID);
  params.datum_array(available, std::vector<bool>(available.size(), false), TIMESTAMPTZOID);
  execute_as_writer(table, name, staged_plan_for, params);
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
    const Oid table = std::get<0>(next->first);
    Params params;
    std::vector<std::string> handlers;
    std::vector<std::int16_t> lanes;
    std::vector<std::int32_t> counts;
    for (; next != noted.deliveries.end() && std::get<0>(next->first) == table; ++next) {
      lanes.push_back(std::get<1>(next->first));
      handlers.push_back(std::get<2>(next->first));
      counts.push_back(next->second);
    }
    const std::optional<std::string> name = current_name(table);
    if (!name) continue;  // dropped after the publish, with what its rows belonged to
    const auto staged = noted.staged.find(table);
    if (staged == noted.staged.end()) {
      params.text_array(handlers);
      params.int2_array(lanes);
      params.int4_array(counts);
      execute_as_writer(table, *name, plan_for, params);
    } else if (!staged->second.empty()) {
      write_staged(table, *name, staged->second);
    }
  }
  spi.finish();
}

void forget() {
  noted.deliveries.clear();
  noted.writer.clear();
  noted.staged.clear();
  noted.writing = false;
}

// A staged row belongs to the subtransaction that staged it until that one commits into
// its parent; it goes with a rollback.
void at_subtransaction_event(SubXactEvent event, SubTransactionId mine, SubTransactionId parent,
                             void*) {
  if (noted.staged.empty()) return;
  for (auto& [table, rows] : noted.staged) {
    if (event == SUBXACT_EVENT_ABORT_SUB) {
      rows.erase(std::remove_if(rows.begin(), rows.end(),
                                [&](const StagedRow& r) { return r.subtransaction == mine; }),
                 rows.end());
    } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
      for (StagedRow& r : rows)
        if (r.subtransaction == mine) r.subtransaction = parent;
    }
  }
}

void run_write_log(void*) {
  noted.writing = true;
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
      forget();
      break;
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
  RegisterSubXactCallback(at_subtransaction_event, nullptr);
}

namespace {

// A publish from code that the write at commit runs (a trigger someone put on relaybus's
// deliveries): its rows would come after their lanes were locked and written, and be
// forgotten with the commit, leaving its events without deliveries. Refused, so the commit
// fails whole.
void refuse_while_writing() {
  if (!noted.writing) return;
  pg_call([&] {
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("cannot publish to relaybus while a commit writes its deliveries"),
                    errdetail("A trigger or rule on relaybus's tables published during the write "
                              "of the transaction's staged deliveries."),
                    errhint("Do not publish from triggers on relaybus's tables.")));
  });
}

}  // namespace

void stage(Oid table, const std::string& handler, std::int16_t lane, const std::string& event_id,
           const std::optional<std::string>& key, TimestampTz available_at) {
  if (lane < 0) throw core::Error(core::ErrorCode::kInvalidParameter, "relaybus: lane is negative");
  refuse_while_writing();
  noted.writer.emplace(table, GetUserId());
  if (noted.deliveries[Key{table, lane, handler}]++ == 0)
    lane_changes::changed_at_commit(handler, lane);
  noted.staged[table].push_back(
      StagedRow{handler, lane, event_id, key, available_at, GetCurrentSubTransactionId()});
}

std::int32_t note(Oid log, const std::string& handler, std::int16_t lane) {
  if (lane < 0) throw core::Error(core::ErrorCode::kInvalidParameter, "relaybus: lane is negative");
  refuse_while_writing();
  noted.writer.emplace(log, GetUserId());
  const std::int32_t ordinal = noted.deliveries[Key{log, lane, handler}]++;
  if (ordinal == 0) lane_changes::changed_at_commit(handler, lane);
  return ordinal;
}

}  // namespace relaybus::pg::commit_order

namespace {

// For checks and measurements of the commit order beside the extension
// (test/integration/commit_order_check.py, bench/ab/commit_order.py):
// no version of the extension's SQL declares it. A superuser who declares it gets nothing
// a caller could not do itself: the row is inserted as the caller, under its privileges.
Datum commit_order_note_body(FunctionCallInfo fcinfo) {
  const std::int32_t ordinal = relaybus::pg::commit_order::note(
      PG_GETARG_OID(0), relaybus::pg::text_of(PG_GETARG_DATUM(1)), PG_GETARG_INT16(2));
  PG_RETURN_INT32(ordinal);
}

}  // namespace

RELAYBUS_SQL_FUNCTION(relaybus_commit_order_note, commit_order_note_body)

namespace {

// The same for staged deliveries: (table regclass, handler text, lane int2, event_id text,
// key text), key may be NULL; due at now() where the table has available_at.
Datum commit_order_stage_body(FunctionCallInfo fcinfo) {
  for (int i = 0; i < 4; ++i)
    if (PG_ARGISNULL(i))
      throw relaybus::core::Error(relaybus::core::ErrorCode::kNullValue,
                                  "relaybus: only the key may be NULL");
  std::optional<std::string> key;
  if (!PG_ARGISNULL(4)) key = relaybus::pg::text_of(PG_GETARG_DATUM(4));
  relaybus::pg::commit_order::stage(PG_GETARG_OID(0), relaybus::pg::text_of(PG_GETARG_DATUM(1)),
                                    PG_GETARG_INT16(2), relaybus::pg::text_of(PG_GETARG_DATUM(3)),
                                    key, GetCurrentTransactionStartTimestamp());
  PG_RETURN_VOID();
}

}  // namespace

RELAYBUS_SQL_FUNCTION(relaybus_commit_order_stage, commit_order_stage_body)
