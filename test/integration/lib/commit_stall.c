/*
 * Test fixture, not part of relaybus: holds a committing transaction in the window between
 * the moment its commit becomes visible to other transactions and the moment its cache
 * invalidation messages are sent. In PostgreSQL 15's CommitTransaction, the top-level
 * resource owner's BEFORE_LOCKS release runs after the COMMIT transaction callbacks and
 * before AtEOXact_Inval, so a sleep there is a sleep inside that window.
 *
 * LOAD it by path (superuser), then SET LOCAL commit_stall.ms = N in a transaction: its
 * commit sleeps N ms there (a plain SET would hold every later commit of the session,
 * its own included). Built by the test that uses it (subscription_commit.sh).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/resowner.h"

PG_MODULE_MAGIC;

void _PG_init(void);

static int stall_ms = 0;

static void
stall(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase == RESOURCE_RELEASE_BEFORE_LOCKS && isCommit && isTopLevel && stall_ms > 0)
		pg_usleep((long) stall_ms * 1000L);
}

void
_PG_init(void)
{
	DefineCustomIntVariable("commit_stall.ms",
							"Sleep this long in each commit, after it is visible.",
							NULL, &stall_ms, 0, 0, 60000, PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	RegisterResourceReleaseCallback(stall, NULL);
}
