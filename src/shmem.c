/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  The maintenance worker's last-pass figures, in shared memory.
 *
 * One slot per database the worker served: when its last pass started and
 * ended, how many markers it pruned and claims it reclaimed, and the error
 * that ended it, if any; and the totals since the server started.  There
 * is no history table (it would need pruning itself); these figures are
 * what inbox_worker_status() shows.  Also per database: how often the
 * launcher found no background worker slot to start its worker (shown in
 * last_error until a column exists for it), and whether its last pass ran
 * out of inbox.database_time with work left (the launcher's next round
 * then starts at once).  They are lost at restart, which is
 * what a last-pass report should do.
 *
 * Who sees what: like pg_stat_statements, the figures of other databases
 * (their names, and errors that may quote their data) are shown only to
 * roles with the privileges of pg_read_all_stats (pg_monitor has them);
 * anyone else allowed to call the function sees the current database's.
 *
 * Locking: one LWLock protects the whole array.  Writers (the database
 * workers, once per pass) and readers (inbox_worker_status) hold it only to
 * copy a slot.  The array exists only when the library is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_worker_status);

typedef struct InboxSharedState
{
	LWLock	   *lock;
	InboxDatabaseStatus databases[INBOX_MAX_DATABASES];
} InboxSharedState;

static InboxSharedState *shared_state = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void shmem_request(void);
static void shmem_startup(void);
static InboxDatabaseStatus *shmem_slot(Oid dboid);

/*
 * inbox_shmem_init
 *		Install the hooks that create the shared state; called from
 *		_PG_init while shared_preload_libraries is being processed.
 */
void
inbox_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
}

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(InboxSharedState)));
	RequestNamedLWLockTranche("inbox", 1);
}

static void
shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared_state = ShmemInitStruct("inbox", sizeof(InboxSharedState), &found);
	if (!found)
	{
		memset(shared_state, 0, sizeof(InboxSharedState));
		shared_state->lock = &(GetNamedLWLockTranche("inbox"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * shmem_slot
 *		The slot of a database, claiming a free one (or the least recently
 *		used one) if it has none.  Caller holds the lock exclusively.
 */
static InboxDatabaseStatus *
shmem_slot(Oid dboid)
{
	InboxDatabaseStatus *oldest = &shared_state->databases[0];

	for (int i = 0; i < INBOX_MAX_DATABASES; i++)
	{
		InboxDatabaseStatus *slot = &shared_state->databases[i];

		if (slot->dboid == dboid)
			return slot;
		if (slot->dboid == InvalidOid ||
			(oldest->dboid != InvalidOid && slot->pass_end < oldest->pass_end))
			oldest = slot;
	}
	memset(oldest, 0, sizeof(InboxDatabaseStatus));
	oldest->dboid = dboid;
	return oldest;
}

/*
 * inbox_shmem_report
 *		Record the figures of a database's pass (error NULL if it succeeded).
 *
 * Safe to call from an error handler: it takes only the one LWLock.
 */
void
inbox_shmem_report(Oid dboid, TimestampTz start, int64 pruned,
				   int64 reclaimed, const char *error, bool left_more)
{
	InboxDatabaseStatus *slot;
	int			len = 0;

	if (shared_state == NULL)
		return;

	/* Cut at a character boundary: the figures are shown as text. */
	if (error != NULL)
		len = pg_mbcliplen(error, strlen(error), sizeof(slot->last_error) - 1);

	LWLockAcquire(shared_state->lock, LW_EXCLUSIVE);
	slot = shmem_slot(dboid);
	slot->pass_start = start;
	slot->pass_end = GetCurrentTimestamp();
	slot->pruned = pruned;
	slot->reclaimed = reclaimed;
	slot->pruned_total += pruned;
	slot->reclaimed_total += reclaimed;
	if (len > 0)
		memcpy(slot->last_error, error, len);
	slot->last_error[len] = '\0';
	slot->passes++;
	slot->left_more = left_more;
	LWLockRelease(shared_state->lock);
}

/*
 * inbox_shmem_start_failed
 *		Count a worker the launcher could not start for a database, for
 *		want of a background worker slot; returns the count since the
 *		server started.
 *
 * Until inbox_worker_status() has a column for it (1.1.0), the count is
 * shown in last_error, which the database's next pass clears.
 */
int64
inbox_shmem_start_failed(Oid dboid)
{
	InboxDatabaseStatus *slot;
	int64		failures;

	if (shared_state == NULL)
		return 0;

	LWLockAcquire(shared_state->lock, LW_EXCLUSIVE);
	slot = shmem_slot(dboid);
	failures = ++slot->start_failures;
	snprintf(slot->last_error, sizeof(slot->last_error),
			 "could not start the inbox worker: no background worker slot was free (%lld times since the server started)",
			 (long long) failures);
	LWLockRelease(shared_state->lock);
	return failures;
}

/*
 * inbox_shmem_left_more
 *		Did the last pass in the database end for want of time, with work
 *		left?  The launcher then starts its next round at once.
 */
bool
inbox_shmem_left_more(Oid dboid)
{
	bool		left_more = false;

	if (shared_state == NULL)
		return false;

	LWLockAcquire(shared_state->lock, LW_SHARED);
	for (int i = 0; i < INBOX_MAX_DATABASES; i++)
	{
		if (shared_state->databases[i].dboid == dboid)
			left_more = shared_state->databases[i].left_more;
	}
	LWLockRelease(shared_state->lock);
	return left_more;
}

/*
 * inbox_worker_status()
 *		returns table (database name, passes bigint,
 *					   last_pass_start timestamptz, last_pass_end timestamptz,
 *					   pruned bigint, reclaimed bigint, last_error text,
 *					   pruned_total bigint, reclaimed_total bigint
 *					   [, start_failures bigint, from 1.1.0])
 *
 * The maintenance worker's last pass in every database it served, or only
 * in the current one for a caller without pg_read_all_stats' privileges.
 */
Datum
inbox_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	InboxDatabaseStatus *copy;
	bool		all_databases;
	bool		found_current = false;

	if (shared_state == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the inbox worker is not running"),
				 errdetail("Its status lives in shared memory, which exists only when the library is preloaded."),
				 errhint("Add inbox to shared_preload_libraries and restart the server.")));

	InitMaterializedSRF(fcinfo, 0);
	all_databases = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);

	copy = palloc(sizeof(shared_state->databases));
	LWLockAcquire(shared_state->lock, LW_SHARED);
	memcpy(copy, shared_state->databases, sizeof(shared_state->databases));
	LWLockRelease(shared_state->lock);

	for (int i = 0; i < INBOX_MAX_DATABASES; i++)
	{
		InboxDatabaseStatus *slot = &copy[i];
		Datum		values[10];
		bool		nulls[10] = {0};
		char	   *name;

		if (slot->dboid == InvalidOid ||
			(!all_databases && slot->dboid != MyDatabaseId))
			continue;
		if (slot->dboid == MyDatabaseId)
			found_current = true;
		name = get_database_name(slot->dboid);
		if (name == NULL)
			continue;			/* dropped since */

		values[0] = DirectFunctionCall1(namein, CStringGetDatum(name));
		values[1] = Int64GetDatum(slot->passes);
		values[2] = TimestampTzGetDatum(slot->pass_start);
		values[3] = TimestampTzGetDatum(slot->pass_end);
		values[4] = Int64GetDatum(slot->pruned);
		values[5] = Int64GetDatum(slot->reclaimed);
		/* A database the launcher never could start a worker for. */
		nulls[2] = nulls[3] = (slot->passes == 0);
		values[6] = CStringGetTextDatum(slot->last_error);
		nulls[6] = slot->last_error[0] == '\0';
		values[7] = Int64GetDatum(slot->pruned_total);
		values[8] = Int64GetDatum(slot->reclaimed_total);
		/* From 1.1.0 (its upgrade script adds the column); 1.0.0 has 9. */
		values[9] = Int64GetDatum(slot->start_failures);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	/*
	 * The current database before the worker's first pass there (its first
	 * round comes one naptime after the start): a row with no pass, rather
	 * than none, which would read as a worker that does not work.
	 */
	if (!found_current)
	{
		Datum		values[9] = {0};
		bool		nulls[9] = {0};

		values[0] = DirectFunctionCall1(namein,
										CStringGetDatum(get_database_name(MyDatabaseId)));
		values[1] = Int64GetDatum(0);
		nulls[2] = nulls[3] = true;
		values[4] = Int64GetDatum(0);
		values[5] = Int64GetDatum(0);
		nulls[6] = true;
		values[7] = Int64GetDatum(0);
		values[8] = Int64GetDatum(0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
