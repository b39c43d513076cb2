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
    // 0.1.0's 'processing' counts with the waiting ones: both are work not done. Every
    // function and operator is pg_catalog's by name: this runs as the role dropping, a
    // superuser, under its search_path, where a schema another role may create in could
    // come before pg_catalog and hand it a planted count(*) or <>.
    if (SPI_execute("SELECT pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.<>) "
                    "'dead'), pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) "
                    "'dead') FROM relaybus.deliveries",
                    true, 0) == SPI_OK_SELECT &&
        SPI_processed == 1) {
      bool null = false;
      HeapTuple row = SPI_tuptable->vals[0];
      waiting = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &null));
      dead = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &null));
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
           errhint("To keep them, roll back, drain the handlers or copy relaybus.deliveries "
                   "and relaybus.events first.")));
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
