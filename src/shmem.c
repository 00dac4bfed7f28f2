/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  The maintenance worker's last-pass figures, in shared memory.
 *
 * One slot per database the worker served: when its last pass started and
 * ended, how many markers it pruned and claims it reclaimed, and the error
 * that ended it, if any; and the totals since the server started.  There
 * is no history table (it would need pruning itself); these figures are
 * what inbox_worker_status() shows.  They are lost at restart, which is
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
				   int64 reclaimed, const char *error)
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
	LWLockRelease(shared_state->lock);
}

/*
 * inbox_worker_status()
 *		returns table (database name, passes bigint,
 *					   last_pass_start timestamptz, last_pass_end timestamptz,
 *					   pruned bigint, reclaimed bigint, last_error text,
 *					   pruned_total bigint, reclaimed_total bigint)
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
		Datum		values[9];
		bool		nulls[9] = {0};
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
		values[6] = CStringGetTextDatum(slot->last_error);
		nulls[6] = slot->last_error[0] == '\0';
		values[7] = Int64GetDatum(slot->pruned_total);
		values[8] = Int64GetDatum(slot->reclaimed_total);
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
