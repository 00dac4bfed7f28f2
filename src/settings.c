/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  The inbox.* settings, and the values derived from them.
 *
 * The per-claim defaults (lease, attempts, retention) apply to a consumer
 * that inbox_configure gave none; the others govern the maintenance
 * worker.  The variables are read everywhere; only this file defines the
 * settings behind them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "inbox.h"

/* Settings; each is the default a consumer gets without inbox_configure. */
int			inbox_lease = 300;		/* seconds */
int			inbox_max_attempts = 5;
int			inbox_retention = 7 * 24 * 60;	/* minutes */

/*
 * Settings of the maintenance worker.
 *
 * Batches are large and apart because the claims that run while a batch
 * runs wait longer: a few long batches with a pause between them delay
 * fewer claims than many short ones back to back.  The measurements
 * behind both defaults (taken when pruning had pauses of its own inside a
 * batch, which one statement cannot have): bench/HISTORY.md, Pruning.
 */
#define DEFAULT_BATCH_SIZE	10000
#define DEFAULT_BATCH_DELAY	50	/* milliseconds */

int			inbox_naptime = 60;		/* seconds */
int			inbox_batch_size = DEFAULT_BATCH_SIZE;
int			inbox_lock_timeout = 1000;	/* milliseconds */
int			inbox_batch_delay = DEFAULT_BATCH_DELAY;
int			inbox_database_time = 10 * 1000;	/* milliseconds */
char	   *inbox_databases = NULL;

/* Consumers whose counters shared memory has room for (counters.c). */
int			inbox_max_consumers_counted = 1000;

/*
 * inbox_default_lease
 *		inbox.lease, as the interval a claim gets when neither the call nor
 *		its consumer's settings give one.
 */
Interval *
inbox_default_lease(void)
{
	Interval   *lease = palloc0(sizeof(Interval));

	lease->time = (int64) inbox_lease * USECS_PER_SEC;
	return lease;
}

/*
 * inbox_settings_define
 *		Define the inbox.* settings and reserve the prefix; called from
 *		_PG_init.
 *
 * The per-claim defaults (lease, attempts, retention) are SUSET: a value
 * set for a session, a role or a database applies to every claim made
 * there, whoever made it, so only a superuser chooses it (or a role a
 * superuser granted SET on the parameter); anyone else asks for a lease per
 * call, and the owner of a consumer's settings uses inbox_configure.  A
 * database owner who could set them would fail every session's claims
 * after one attempt, or shorten every lease to a second (docs/security.md).
 * The batch size governs maintenance the same way.  The worker takes all of
 * them from the server's configuration, never from ALTER DATABASE or ALTER
 * ROLE ... SET (trust.c).
 */
void
inbox_settings_define(void)
{
	DefineCustomIntVariable("inbox.lease",
							"Default lease of a two-phase claim.",
							"Used when neither the call nor inbox_configure gives one.",
							&inbox_lease,
							300, 1, INBOX_LEASE_MAX_SECONDS,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.max_attempts",
							"Default number of attempts before a two-phase claim fails.",
							"Used when inbox_configure gives none for the consumer.",
							&inbox_max_attempts,
							5, 1, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.retention",
							"Default time processed and failed markers are kept.",
							"Used when inbox_configure gives none for the consumer.",
							&inbox_retention,
							7 * 24 * 60, 1, INBOX_RETENTION_MAX_SECONDS / 60,
							PGC_SUSET, GUC_UNIT_MIN,
							NULL, NULL, NULL);

	DefineCustomIntVariable("inbox.naptime",
							"Time between two passes of the maintenance worker.",
							NULL,
							&inbox_naptime,
							60, 1, 24 * 60 * 60,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.batch_size",
							"Most rows one maintenance transaction prunes or reclaims.",
							NULL,
							&inbox_batch_size,
							DEFAULT_BATCH_SIZE, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.batch_delay",
							"Pause of the maintenance worker between two full batches.",
							"Spreads a large backlog over time, so the claims running meanwhile wait less.",
							&inbox_batch_delay,
							DEFAULT_BATCH_DELAY, 0, 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.lock_timeout",
							"How long a maintenance batch waits for a lock before giving up.",
							"statement_timeout does not apply to the worker; this bounds what it waits for.",
							&inbox_lock_timeout,
							1000, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.database_time",
							"Time the maintenance worker spends in one database before serving the next.",
							"What is left is done in the next round, which starts at once.",
							&inbox_database_time,
							10 * 1000, 100, 60 * 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomStringVariable("inbox.databases",
							   "Databases the maintenance worker serves (comma-separated).",
							   "Empty means every database in which the extension is installed.",
							   &inbox_databases,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	/* Sizes shared memory, which exists only when preloaded. */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("inbox.max_consumers_counted",
								"Consumers per server whose counters inbox_counters() keeps apart.",
								"Consumers beyond it are counted in their database's row.",
								&inbox_max_consumers_counted,
								1000, 1, 1000000,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);

	MarkGUCPrefixReserved("inbox");
}
