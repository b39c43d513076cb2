#include "drop_warning.hpp"

#include "postgres.hpp"

extern "C" {
#include "commands/extension.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/resowner.h"
}

// Plain PostgreSQL code, entered from PostgreSQL and calling only PostgreSQL: nothing here
// throws a C++ exception, so no guard is needed (see guard.hpp).
namespace relaybus::pg::drop_warning {

namespace {

ProcessUtility_hook_type previous_hook = nullptr;

bool names_relaybus(const DropStmt* stmt) {
  if (stmt->removeType != OBJECT_EXTENSION) return false;
  ListCell* cell;
  foreach (cell, stmt->objects) {
    if (strcmp(strVal(lfirst(cell)), "relaybus") == 0) return true;
  }
  return false;
}

// The deliveries left, read as the role dropping, in a subtransaction: whatever goes wrong
// here (a role that may not read them, a damaged schema) loses only the warning, never the
// DROP's own outcome. A cancel is passed on, not swallowed.
void warn_about_deliveries() {
  if (!OidIsValid(get_extension_oid("relaybus", true))) return;
  MemoryContext context = CurrentMemoryContext;
  ResourceOwner owner = CurrentResourceOwner;
  volatile int64 waiting = 0;
  volatile int64 dead = 0;
  BeginInternalSubTransaction(nullptr);
  MemoryContextSwitchTo(context);
  PG_TRY();
  {
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "SPI_connect failed");
    bool null_flag = false;
    // Every function and operator is pg_catalog's by name: this runs as the role dropping,
    // a superuser, under its search_path, where a schema another role may create in could
    // come before pg_catalog and hand it a planted count(*) or <>.
    //
    // 0.3.0 (relaybus.exceptions exists) keeps finished deliveries: what is left is read
    // through its own count (relaybus_internal.delivery_counts, every handler's, subscribed
    // or not). 0.1.0 and 0.2 keep only unfinished ones, with a status; 0.1.0's 'processing'
    // counts with the waiting ones: both are work not done.
    const bool positions =
        SPI_execute("SELECT pg_catalog.to_regclass('relaybus.exceptions') IS NOT NULL", true, 0) ==
            SPI_OK_SELECT &&
        SPI_processed == 1 &&
        DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &null_flag));
    const char* count =
        positions
            ? "SELECT pg_catalog.sum(c.pending OPERATOR(pg_catalog.+) "
              "c.in_flight)::pg_catalog.int8,"
              " pg_catalog.sum(c.dead)::pg_catalog.int8 FROM relaybus_internal.delivery_counts() c"
            : "SELECT pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.<>) 'dead'),"
              " pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'dead')"
              " FROM relaybus.deliveries";
    if (SPI_execute(count, true, 0) == SPI_OK_SELECT && SPI_processed == 1) {
      bool null = false;
      HeapTuple row = SPI_tuptable->vals[0];
      const Datum w = SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &null);
      if (!null) waiting = DatumGetInt64(w);  // a sum over no handler is NULL
      const Datum d = SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &null);
      if (!null) dead = DatumGetInt64(d);
    }
    SPI_finish();
    ReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(context);
    ErrorData* error = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
    if (error->sqlerrcode == ERRCODE_QUERY_CANCELED) ReThrowError(error);
    FreeErrorData(error);
    return;
  }
  PG_END_TRY();
  if (waiting == 0 && dead == 0) return;
  ereport(WARNING,
          (errmsg("relaybus: dropping the extension deletes %lld pending and %lld dead deliveries",
                  static_cast<long long>(waiting), static_cast<long long>(dead)),
           errdetail("Their events, subscriptions and lanes go too; nothing of them is kept."),
           errhint("To keep them, roll back and drain the handlers, or take a pg_dump of the "
                   "database first.")));
}

void process_utility(PlannedStmt* pstmt, const char* query, bool read_only_tree,
                     ProcessUtilityContext context, ParamListInfo params,
                     QueryEnvironment* environment, DestReceiver* dest, QueryCompletion* qc) {
  Node* statement = pstmt->utilityStmt;
  if (IsA(statement, DropStmt) && names_relaybus(castNode(DropStmt, statement)))
    warn_about_deliveries();
  if (previous_hook != nullptr)
    previous_hook(pstmt, query, read_only_tree, context, params, environment, dest, qc);
  else
    standard_ProcessUtility(pstmt, query, read_only_tree, context, params, environment, dest, qc);
}

}  // namespace

void install() {
  previous_hook = ProcessUtility_hook;
  ProcessUtility_hook = process_utility;
}

}  // namespace relaybus::pg::drop_warning
