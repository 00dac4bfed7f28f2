/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Module entry point of the inbox extension.
 *
 * The library works both when loaded on demand by CREATE EXTENSION and when
 * listed in shared_preload_libraries.  _PG_init only hands off to the files
 * that own each piece, and it never raises an error: a failure here would
 * stop the whole server from starting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "inbox.h"

PG_MODULE_MAGIC;

/* Settings; each is the default a consumer gets without inbox_configure. */
int			inbox_lease = 300;		/* seconds */
int			inbox_max_attempts = 5;
int			inbox_retention = 7 * 24 * 60;	/* minutes */

/*
 * Settings of the maintenance worker.
 *
 * Batches are large and apart because the claims that run while a batch
 * runs wait longer: with batches of 1000 every 5 ms a few percent of the
 * claims did (the p99), with 10000 every 70 ms fewer than one in a
 * hundred; measured before a batch paused every PRUNE_CHUNK rows
 * (prune.c), which shortened those waits.  The pauses cost the walk time,
 * so 50 ms between batches: with chunks of 50, the claims' p99 ratio while
 * pruning was as low as with chunks of 100 and 70 ms (1.09x-1.35x against
 * 1.27x-2.03x, side by side) at 120,000-124,000 rows/s instead of
 * 103,000-108,000.  README, Performance, Pruning; bench/HISTORY.md.
 */
#define DEFAULT_BATCH_SIZE	10000
#define DEFAULT_BATCH_DELAY	50	/* milliseconds */

int			inbox_naptime = 60;		/* seconds */
int			inbox_batch_size = DEFAULT_BATCH_SIZE;
int			inbox_lock_timeout = 1000;	/* milliseconds */
int			inbox_batch_delay = DEFAULT_BATCH_DELAY;
char	   *inbox_databases = NULL;

static void define_settings(void);

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
 * _PG_init
 *		Module load callback.
 */
void
_PG_init(void)
{
	inbox_objects_init();
	define_settings();

	/*
	 * The worker and its shared memory exist only when the library is
	 * preloaded, and never during a binary upgrade, when nothing must
	 * write to the databases being upgraded.
	 */
	if (process_shared_preload_libraries_in_progress && !IsBinaryUpgrade)
	{
		inbox_shmem_init();
		inbox_worker_register();
	}
}

/*
 * define_settings
 *		Define the inbox.* settings and reserve the prefix.
 *
 * The per-claim defaults are USERSET: a session may choose its own, and
 * inbox_configure overrides them per consumer.  Retention and the batch
 * size govern maintenance: only a superuser may change them for a session
 * (to run inbox_prune by hand differently), and the worker takes them, like
 * its SIGHUP settings, from the configuration file at each reload.
 */
static void
define_settings(void)
{
	DefineCustomIntVariable("inbox.lease",
							"Default lease of a two-phase claim.",
							"Used when neither the call nor inbox_configure gives one.",
							&inbox_lease,
							300, 1, INBOX_LEASE_MAX_SECONDS,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.max_attempts",
							"Default number of attempts before a two-phase claim fails.",
							"Used when inbox_configure gives none for the consumer.",
							&inbox_max_attempts,
							5, 1, INT_MAX,
							PGC_USERSET, 0,
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
	DefineCustomStringVariable("inbox.databases",
							   "Databases the maintenance worker serves (comma-separated).",
							   "Empty means every database in which the extension is installed.",
							   &inbox_databases,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	MarkGUCPrefixReserved("inbox");
}
