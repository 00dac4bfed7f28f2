/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The maintenance worker: a launcher, and one worker per database.
 *
 * The launcher is a static background worker, registered when the library
 * is preloaded.  It connects to no database (it reads only the shared
 * catalog pg_database) and, every inbox.naptime seconds, starts a dynamic
 * worker for each database that allows connections (or each one listed in
 * inbox.databases), one at a time, waiting for each to finish.  So the
 * maintenance needs two worker slots, whatever the number of databases,
 * and a database created later is served at the next pass without any
 * configuration.
 *
 * A database worker runs the prune and reclaim passes in batches, each
 * batch one short transaction that starts by locking the extension (in
 * share mode) if it is installed and committed; a database without it, or
 * where CREATE EXTENSION has not committed yet, is left alone.  That lock
 * is what makes DROP EXTENSION wait for at most one batch, and the batch
 * after it stop.  Nothing is cached across transactions except through
 * objects.c, whose cache DROP EXTENSION invalidates.  lock_timeout
 * (inbox.lock_timeout) bounds what a batch waits for, since
 * statement_timeout does not apply here.
 *
 * Errors: a database worker that fails logs the error, records it in
 * shared memory, and exits; the launcher starts a new one at the next
 * pass.  The launcher exits only on SIGTERM or postmaster death, with a
 * non-zero status, so the postmaster restarts it (a status of 0 would
 * unregister it until the next server start).
 *
 * Recovery: the launcher starts only once recovery has finished, so it
 * never runs on a standby, and the postmaster starts it after promotion.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "inbox.h"

/* Seconds before the postmaster restarts a launcher that exited. */
#define INBOX_LAUNCHER_RESTART_SECONDS	5

/* A database the launcher will serve. */
typedef struct LauncherDatabase
{
	Oid			oid;
	char		name[NAMEDATALEN];
} LauncherDatabase;

static void worker_describe(BackgroundWorker *worker, const char *function,
							int restart_seconds);
static void launcher_pass(void);
static List *launcher_databases(void);
static bool launcher_selected(const char *name);
static void launcher_run_worker(const LauncherDatabase *database);
static void reload_settings_if_asked(void);
static bool worker_lock_extension(void);
static int64 worker_pass(InboxBatchFunction batch, const char *activity);

/*
 * inbox_worker_register
 *		Register the launcher; called from _PG_init while preloading.
 */
void
inbox_worker_register(void)
{
	BackgroundWorker worker;

	worker_describe(&worker, "inbox_launcher_main",
					INBOX_LAUNCHER_RESTART_SECONDS);
	strlcpy(worker.bgw_name, "inbox launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "inbox launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/*
 * worker_describe
 *		Fill in what the launcher and the database workers have in common:
 *		a database connection, started once recovery has finished.
 */
static void
worker_describe(BackgroundWorker *worker, const char *function,
				int restart_seconds)
{
	memset(worker, 0, sizeof(BackgroundWorker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = restart_seconds;
	strlcpy(worker->bgw_library_name, "inbox", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
}

/*
 * reload_settings_if_asked
 *		Apply a pending SIGHUP.
 */
static void
reload_settings_if_asked(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

/*
 * inbox_launcher_main
 *		Entry point of the launcher.
 */
void
inbox_launcher_main(Datum main_arg)
{
	MemoryContext pass_context;
	TimestampTz last_pass_end;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* No database: the launcher reads only shared catalogs. */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("inbox launcher");

	pass_context = AllocSetContextCreate(TopMemoryContext,
										 "inbox launcher pass",
										 ALLOCSET_DEFAULT_SIZES);

	/* The first pass comes one nap after the start, like every other. */
	last_pass_end = GetCurrentTimestamp();

	for (;;)
	{
		long		wait_ms;

		CHECK_FOR_INTERRUPTS();
		reload_settings_if_asked();

		/*
		 * Nap for inbox.naptime after the end of the last pass; a reload
		 * that changes inbox.naptime takes effect at once.
		 */
		wait_ms = inbox_naptime * 1000L -
			TimestampDifferenceMilliseconds(last_pass_end, GetCurrentTimestamp());
		if (wait_ms > 0)
		{
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 wait_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			continue;
		}

		if (!RecoveryInProgress())
		{
			MemoryContext old = MemoryContextSwitchTo(pass_context);

			launcher_pass();
			MemoryContextSwitchTo(old);
			MemoryContextReset(pass_context);
		}
		last_pass_end = GetCurrentTimestamp();
	}
}

/*
 * launcher_pass
 *		Run one database worker after another, for every database served.
 */
static void
launcher_pass(void)
{
	List	   *databases = launcher_databases();
	ListCell   *lc;

	foreach(lc, databases)
	{
		CHECK_FOR_INTERRUPTS();
		launcher_run_worker((LauncherDatabase *) lfirst(lc));
	}
}

/*
 * launcher_selected
 *		Does inbox.databases allow this database?  Empty allows every one.
 */
static bool
launcher_selected(const char *name)
{
	char	   *copy;
	List	   *names;
	ListCell   *lc;
	bool		selected = false;

	if (inbox_databases == NULL || inbox_databases[0] == '\0')
		return true;

	copy = pstrdup(inbox_databases);
	if (!SplitIdentifierString(copy, ',', &names))
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in \"inbox.databases\"")));
		return false;
	}
	foreach(lc, names)
	{
		if (strcmp((char *) lfirst(lc), name) == 0)
			selected = true;
	}
	return selected;
}

/*
 * launcher_databases
 *		The databases to serve: those that accept connections, are not
 *		templates, and are selected by inbox.databases.
 *
 * Whether the extension is installed is checked by the database worker,
 * which can read that database's catalogs.
 */
static List *
launcher_databases(void)
{
	List	   *databases = NIL;
	MemoryContext pass_context = CurrentMemoryContext;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	pgstat_report_activity(STATE_RUNNING, "inbox: listing databases");

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tuple);
		LauncherDatabase *database;
		MemoryContext old;

		if (!form->datallowconn || form->datistemplate ||
			inbox_database_is_invalid(form) ||
			!launcher_selected(NameStr(form->datname)))
			continue;

		old = MemoryContextSwitchTo(pass_context);
		database = palloc(sizeof(LauncherDatabase));
		database->oid = form->oid;
		strlcpy(database->name, NameStr(form->datname), NAMEDATALEN);
		databases = lappend(databases, database);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	CommitTransactionCommand();
	MemoryContextSwitchTo(pass_context);
	pgstat_report_activity(STATE_IDLE, NULL);
	return databases;
}

/*
 * launcher_run_worker
 *		Start the worker of one database and wait until it has finished.
 */
static void
launcher_run_worker(const LauncherDatabase *database)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	BgwHandleStatus status;
	pid_t		pid;

	worker_describe(&worker, "inbox_database_worker_main", BGW_NEVER_RESTART);
	snprintf(worker.bgw_name, BGW_MAXLEN, "inbox worker for database %s",
			 database->name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "inbox worker %s", database->name);
	worker.bgw_main_arg = ObjectIdGetDatum(database->oid);
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start the inbox worker for database \"%s\"",
						database->name),
				 errdetail("All background worker slots are in use."),
				 errhint("Raise \"max_worker_processes\": inbox needs two slots, one for its launcher and one for the database being maintained.")));
		return;
	}

	status = WaitForBackgroundWorkerStartup(handle, &pid);
	if (status == BGWH_STARTED)
		status = WaitForBackgroundWorkerShutdown(handle);
	if (status == BGWH_POSTMASTER_DIED)
		proc_exit(1);
}

/*
 * worker_lock_extension
 *		Lock the extension against DROP EXTENSION for this transaction, if
 *		it is installed and committed; false if it is not.
 *
 * DROP EXTENSION locks the extension exclusively, so it waits for the
 * batch in progress, and a batch that waited for DROP finds it gone.
 */
static bool
worker_lock_extension(void)
{
	Oid			extension = get_extension_oid(INBOX_EXTENSION_NAME, true);

	if (!OidIsValid(extension))
		return false;
	LockDatabaseObject(ExtensionRelationId, extension, 0, AccessShareLock);

	/* Locking absorbed any invalidation: was it dropped meanwhile? */
	return get_extension_oid(INBOX_EXTENSION_NAME, true) == extension;
}

/*
 * worker_pass
 *		Run batches of one kind, each in its own transaction, until one
 *		comes back short.  Returns the rows done, or -1 when the extension
 *		is not (or no longer) installed.
 */
static int64
worker_pass(InboxBatchFunction batch, const char *activity)
{
	InboxPassPosition position = {.valid = false};
	int64		total = 0;

	for (;;)
	{
		int64		done = -1;

		CHECK_FOR_INTERRUPTS();
		reload_settings_if_asked();

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, activity);

		if (worker_lock_extension())
		{
			InboxObjects objects;
			Relation	rel = inbox_open_table(RowExclusiveLock, &objects);

			table_close(rel, NoLock);
			SPI_connect();
			done = batch(&objects, GetCurrentTimestamp(), inbox_batch_size,
						 &position);
			SPI_finish();
		}

		PopActiveSnapshot();
		CommitTransactionCommand();
		pgstat_report_stat(false);
		pgstat_report_activity(STATE_IDLE, NULL);

		if (done < 0)
			return total > 0 ? total : -1;
		total += done;
		if (done < inbox_batch_size && !position.more)
			return total;

		/* Leave room for the database's own work between full batches. */
		if (inbox_batch_delay > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 inbox_batch_delay, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/*
 * inbox_database_worker_main
 *		Entry point of a database worker: one prune and one reclaim pass.
 */
void
inbox_database_worker_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	TimestampTz start;
	volatile int64 pruned = 0;
	volatile int64 reclaimed = 0;
	char		lock_timeout[32];

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("inbox worker");

	/*
	 * The queries name everything explicitly; the pinned search_path is a
	 * second line of defence for anything they call.
	 */
	snprintf(lock_timeout, sizeof(lock_timeout), "%d", inbox_lock_timeout);
	SetConfigOption("lock_timeout", lock_timeout, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);

	start = GetCurrentTimestamp();
	PG_TRY();
	{
		pruned = worker_pass(inbox_prune_batch, "inbox: pruning markers");
		if (pruned >= 0)
			reclaimed = worker_pass(inbox_reclaim_batch, "inbox: reclaiming claims");
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* Log it, keep it for inbox_worker_status(), and exit. */
		EmitErrorReport();
		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		inbox_shmem_report(dboid, start, Max(pruned, 0), Max(reclaimed, 0),
						   edata->message);
		proc_exit(1);
	}
	PG_END_TRY();

	/* A database without the extension is left alone, and unreported. */
	if (pruned >= 0)
		inbox_shmem_report(dboid, start, pruned, Max(reclaimed, 0), NULL);
	proc_exit(0);
}
