/*
 * Test fixture, not part of relaybus: holds a committing transaction after its commit has
 * become visible to other transactions and before its cache invalidation messages are
 * sent (PostgreSQL 15's CommitTransaction: ProcArrayEndTransaction, the COMMIT transaction
 * callbacks, the top-level resource owner's BEFORE_LOCKS release, then AtEOXact_Inval).
 *
 * LOAD it by path (superuser), then, inside a transaction:
 *   SET LOCAL commit_stall.ms = N                   sleeps N ms in the resource owner
 *                                                   release: after every COMMIT callback
 *   SET LOCAL commit_stall.before_callbacks_ms = N  sleeps N ms in a COMMIT callback of
 *                                                   its own, which PostgreSQL runs before
 *                                                   those of libraries loaded earlier
 *                                                   (relaybus's, when it is preloaded)
 * (a plain SET would hold every later commit of the session, its own included). Built by
 * the test that uses it (subscription_commit.sh).
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/resowner.h"

PG_MODULE_MAGIC;

void _PG_init(void);

static int stall_ms = 0;
static int before_callbacks_ms = 0;

static void stall_in_release(ResourceReleasePhase phase, bool isCommit, bool isTopLevel,
                             void* arg) {
  if (phase == RESOURCE_RELEASE_BEFORE_LOCKS && isCommit && isTopLevel && stall_ms > 0)
    pg_usleep((long)stall_ms * 1000L);
}

static void stall_in_callback(XactEvent event, void* arg) {
  if (event == XACT_EVENT_COMMIT && before_callbacks_ms > 0)
    pg_usleep((long)before_callbacks_ms * 1000L);
}

void _PG_init(void) {
  DefineCustomIntVariable("commit_stall.ms", "Sleep this long in each commit, after its callbacks.",
                          NULL, &stall_ms, 0, 0, 60000, PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
  DefineCustomIntVariable("commit_stall.before_callbacks_ms",
                          "Sleep this long in each commit, before earlier libraries' callbacks.",
                          NULL, &before_callbacks_ms, 0, 0, 60000, PGC_USERSET, GUC_UNIT_MS, NULL,
                          NULL, NULL);
  /* Callbacks run newest first: this one before every callback registered earlier. */
  RegisterXactCallback(stall_in_callback, NULL);
  RegisterResourceReleaseCallback(stall_in_release, NULL);
}
