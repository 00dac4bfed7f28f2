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
 * Giving way to DBA work: DROP DATABASE, CREATE DATABASE ... TEMPLATE, ALTER
 * DATABASE ... RENAME or SET TABLESPACE lock the database object in a mode
 * that conflicts with the RowExclusiveLock every connection takes on it
 * while it starts, and then wait only 5 seconds for the other connections
 * to leave (they signal autovacuum workers alone).  So each batch takes that
 * lock conditionally and holds it to its end, and the pause between two
 * batches tries it every INBOX_WANTED_POLL_MS: a worker that cannot have it
 * ends its pass at once, and such a command waits for at most the batch in
 * progress, then finds the worker gone.  The launcher does not start a
 * worker in a database someone holds that way.
 *
 * Whose code: the batches run with session_replication_role = replica,
 * so that no trigger fires in them (trust.c): they run as a superuser, and
 * a role with the TRIGGER privilege on the table could attach one.  A
 * table with a trigger or rule that would fire anyway, a rule, or a foreign
 * key is refused: the database is skipped with one warning per pass naming
 * it.  What else runs (an index expression or predicate, a CHECK, which
 * only the table's owner, a superuser, can add) runs as the table's owner,
 * with SECURITY_RESTRICTED_OPERATION and a GUC nest level of its own, as
 * VACUUM runs an index expression.
 *
 * Settings: the worker takes nothing from ALTER DATABASE / ALTER ROLE ...
 * SET (the database owner's), but the server's value of every setting, as
 * it was before connecting, and pins what its statements depend on (time
 * zone, styles, planner methods, JIT, search_path, timeouts, the isolation
 * level, the role); see trust.c.  It respects default_transaction_read_only:
 * a read-only database is skipped, with one log line per pass.
 *
 * Time: a database worker reclaims, then prunes, and leaves after
 * inbox.database_time (checked between batches), so that one database's
 * backlog delays the others by at most that much; the launcher then starts
 * its next round at once instead of napping.  A worker the launcher cannot
 * start for want of a slot is warned about once per round and counted per
 * database (shmem.c).
 *
 * Errors: a database worker whose reclaim or prune fails logs the error,
 * records it in shared memory, runs the other, and ends like any other
 * pass (status 0: the error has been logged once, and an exit status of 1
 * would add a line that reads like a crash); the launcher starts a new one
 * at the next pass.  The launcher exits only on SIGTERM or postmaster
 * death, with a non-zero status, so the postmaster restarts it (a status of
 * 0 would unregister it until the next server start).
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
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
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

/*
 * How often a worker pausing between two batches checks whether someone
 * wants its database; DROP DATABASE waits 5 seconds for it, checking every
 * 100 ms.
 */
#define INBOX_WANTED_POLL_MS	100

/* A database the launcher will serve. */
typedef struct InboxLauncherDatabase
{
	Oid			oid;
	char		name[NAMEDATALEN];
} InboxLauncherDatabase;

/* Why a database worker's pass of batches ended. */
typedef enum InboxWorkerPassEnd
{
	WORKER_PASS_DONE,			/* a batch left nothing more: all done */
	WORKER_PASS_NO_EXTENSION,	/* not (or no longer) installed */
	WORKER_PASS_READ_ONLY,		/* default_transaction_read_only is on */
	WORKER_PASS_UNTRUSTED,		/* the extension's schema or objects are
								 * controlled by a role that is not a
								 * superuser */
	WORKER_PASS_REFUSED,		/* the table has what would run code in a
								 * batch (trust.c, inbox_replica_refusal) */
	WORKER_PASS_WANTED,			/* someone wants the database: leave */
	WORKER_PASS_OUT_OF_TIME,	/* inbox.database_time is up: the rest in
								 * the next round */
	WORKER_PASS_FAILED			/* an error, logged and kept */
} InboxWorkerPassEnd;

/* The database worker's figures; static, so that an error keeps them. */
static int64 worker_pruned = 0;
static int64 worker_reclaimed = 0;
static bool worker_served = false;	/* the extension was found */
static char worker_database_name[NAMEDATALEN];
static TimestampTz worker_start;	/* when the worker connected */
static char *worker_refusal = NULL; /* why the table was refused, in
									 * TopMemoryContext */

/*
 * The launcher's last report of inbox.databases (names that match no
 * database, or a syntax error), so that it is repeated only when it changes
 * or after a reload.  In TopMemoryContext; NULL: nothing reported yet.
 */
static char *launcher_reported = NULL;

static void worker_describe(BackgroundWorker *worker, const char *function,
							int restart_seconds);
static bool launcher_pass(void);
static List *launcher_databases(void);
static List *launcher_selection(bool *all);
static void launcher_report_unmatched(List *unmatched, List *all_names);
static bool launcher_run_worker(const InboxLauncherDatabase *database);
static void reload_settings_if_asked(void);
static bool database_is_wanted(Oid dboid, bool for_transaction);
static void worker_pin_settings(void);
static bool worker_lock_extension(void);
static InboxBatchResult worker_batch(InboxBatchFunction batch,
									 InboxPassPosition *position,
									 bool *refused);
static bool worker_pause(void);
static bool worker_out_of_time(void);
static InboxWorkerPassEnd worker_pass(InboxBatchFunction batch,
									  const char *activity, int64 *total);
static InboxWorkerPassEnd worker_run(InboxBatchFunction batch,
									 const char *activity, int64 *total,
									 char **error);

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

		/* The launcher reports inbox.databases again after a reload. */
		if (launcher_reported != NULL)
		{
			pfree(launcher_reported);
			launcher_reported = NULL;
		}
	}
}

/*
 * database_is_wanted
 *		Does another session hold or await a lock on the database that
 *		keeps connections out: DROP DATABASE, CREATE DATABASE ... TEMPLATE,
 *		ALTER DATABASE ... RENAME or SET TABLESPACE?
 *
 * Tries the RowExclusiveLock that a connection takes on its database while
 * it starts (postinit.c), without waiting.  for_transaction: keep it until
 * the end of the current transaction, so that such a command waits for the
 * transaction rather than start counting the connections left; otherwise
 * (no transaction needed) release it at once.
 */
static bool
database_is_wanted(Oid dboid, bool for_transaction)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, dboid, 0);
	if (LockAcquire(&tag, RowExclusiveLock, !for_transaction, true) ==
		LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (!for_transaction)
		LockRelease(&tag, RowExclusiveLock, true);
	return false;
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
	bool		left_more;

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

		left_more = false;
		if (!RecoveryInProgress())
		{
			MemoryContext old = MemoryContextSwitchTo(pass_context);

			left_more = launcher_pass();
			MemoryContextSwitchTo(old);
			MemoryContextReset(pass_context);
		}

		/*
		 * A database that ran out of its time left work: the next round
		 * starts at once, each database again served for at most
		 * inbox.database_time in turn.
		 */
		last_pass_end = left_more ? 0 : GetCurrentTimestamp();
	}
}

/*
 * launcher_pass
 *		Run one database worker after another, for every database served;
 *		true if one of them ran out of time with work left.
 *
 * Each worker stays at most about inbox.database_time in its database, so
 * that one database's backlog, or slow batches, delay the others by at most
 * that much.  A database the launcher finds no worker slot for is counted
 * (inbox_shmem_start_failed); one warning per round says so.
 */
static bool
launcher_pass(void)
{
	List	   *databases = launcher_databases();
	ListCell   *lc;
	bool		left_more = false;
	bool		no_slot = false;

	foreach(lc, databases)
	{
		InboxLauncherDatabase *database = (InboxLauncherDatabase *) lfirst(lc);

		CHECK_FOR_INTERRUPTS();

		/* The others would find none either: count them, warn once. */
		if (no_slot)
		{
			(void) inbox_shmem_start_failed(database->oid);
			continue;
		}

		/*
		 * A worker would only make DROP DATABASE or CREATE DATABASE ...
		 * TEMPLATE fail (or wait, in its connection's start); the next pass
		 * comes soon enough.
		 */
		if (database_is_wanted(database->oid, false))
		{
			elog(DEBUG1, "inbox launcher skips database \"%s\": another session is using it exclusively",
				 database->name);
			continue;
		}
		if (!launcher_run_worker(database))
			no_slot = true;
		else if (inbox_shmem_left_more(database->oid))
			left_more = true;
	}
	return left_more;
}

/*
 * launcher_selection
 *		The names inbox.databases lists, as identifiers (folded to lower
 *		case unless double-quoted, as in SQL); *all is set when it is empty,
 *		which selects every database.  NIL after a syntax error, which is
 *		reported once (until it changes or a reload).
 */
static List *
launcher_selection(bool *all)
{
	char	   *copy;
	List	   *names;

	*all = (inbox_databases == NULL || inbox_databases[0] == '\0');
	if (*all)
		return NIL;

	copy = pstrdup(inbox_databases);
	if (!SplitIdentifierString(copy, ',', &names))
	{
		if (launcher_reported == NULL ||
			strcmp(launcher_reported, inbox_databases) != 0)
		{
			ereport(WARNING,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid list syntax in \"inbox.databases\""),
					 errdetail("The inbox worker serves no database until it is corrected.")));
			if (launcher_reported != NULL)
				pfree(launcher_reported);
			launcher_reported = MemoryContextStrdup(TopMemoryContext,
													inbox_databases);
		}
		return NIL;
	}
	return names;
}

/*
 * launcher_report_unmatched
 *		Warn about each name of inbox.databases that matches no database,
 *		once for each new set of such names (and again after a reload).
 *
 * all_names holds the names of every database, to recognize the usual
 * mistake: a name with capitals left unquoted, which is folded to lower
 * case like any SQL identifier.
 */
static void
launcher_report_unmatched(List *unmatched, List *all_names)
{
	StringInfoData key;
	ListCell   *lc;

	/* What is reported: the setting, and which of its names are missing. */
	initStringInfo(&key);
	appendStringInfoString(&key, inbox_databases);
	foreach(lc, unmatched)
		appendStringInfo(&key, "|%s", (char *) lfirst(lc));

	if (launcher_reported != NULL && strcmp(launcher_reported, key.data) == 0)
		return;
	if (launcher_reported != NULL)
		pfree(launcher_reported);
	launcher_reported = MemoryContextStrdup(TopMemoryContext, key.data);

	foreach(lc, unmatched)
	{
		const char *name = (const char *) lfirst(lc);
		const char *spelled = NULL;
		ListCell   *lc2;

		foreach(lc2, all_names)
		{
			if (pg_strcasecmp((const char *) lfirst(lc2), name) == 0)
				spelled = (const char *) lfirst(lc2);
		}
		if (spelled != NULL)
			ereport(WARNING,
					(errcode(ERRCODE_UNDEFINED_DATABASE),
					 errmsg("database \"%s\" named in \"inbox.databases\" does not exist",
							name),
					 errdetail("Names in \"inbox.databases\" are SQL identifiers: unquoted, they are folded to lower case."),
					 errhint("To serve database \"%s\", double-quote its name in the setting, as in inbox.databases = '\"%s\"'.",
							 spelled, spelled)));
		else
			ereport(WARNING,
					(errcode(ERRCODE_UNDEFINED_DATABASE),
					 errmsg("database \"%s\" named in \"inbox.databases\" does not exist",
							name),
					 errdetail("Names in \"inbox.databases\" are SQL identifiers: unquoted, they are folded to lower case.")));
	}
}

/*
 * launcher_databases
 *		The databases to serve: those that accept connections, are not
 *		templates, and are selected by inbox.databases.  Reports the names
 *		of inbox.databases that match no database.
 *
 * Whether the extension is installed is checked by the database worker,
 * which can read that database's catalogs.
 */
static List *
launcher_databases(void)
{
	List	   *databases = NIL;
	MemoryContext pass_context = CurrentMemoryContext;
	List	   *selection;
	List	   *all_names = NIL;
	List	   *unmatched = NIL;
	bool		all;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	ListCell   *lc;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	pgstat_report_activity(STATE_RUNNING, "inbox: listing databases");

	/* Everything below lives until the end of the launcher's pass. */
	MemoryContextSwitchTo(pass_context);
	selection = launcher_selection(&all);

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tuple);
		InboxLauncherDatabase *database;
		bool		selected = all;

		all_names = lappend(all_names, pstrdup(NameStr(form->datname)));
		foreach(lc, selection)
		{
			if (strcmp((char *) lfirst(lc), NameStr(form->datname)) == 0)
				selected = true;
		}
		if (!selected || !form->datallowconn || form->datistemplate ||
			inbox_database_is_invalid(form))
			continue;

		database = palloc(sizeof(InboxLauncherDatabase));
		database->oid = form->oid;
		strlcpy(database->name, NameStr(form->datname), NAMEDATALEN);
		databases = lappend(databases, database);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);

	CommitTransactionCommand();
	MemoryContextSwitchTo(pass_context);

	foreach(lc, selection)
	{
		char	   *name = (char *) lfirst(lc);
		bool		found = false;
		ListCell   *lc2;

		foreach(lc2, all_names)
		{
			if (strcmp((char *) lfirst(lc2), name) == 0)
				found = true;
		}
		if (!found)
			unmatched = lappend(unmatched, name);
	}
	if (selection != NIL)
		launcher_report_unmatched(unmatched, all_names);

	pgstat_report_activity(STATE_IDLE, NULL);
	return databases;
}

/*
 * launcher_run_worker
 *		Start the worker of one database and wait until it has finished;
 *		false if no background worker slot was free.
 */
static bool
launcher_run_worker(const InboxLauncherDatabase *database)
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
		int64		failures = inbox_shmem_start_failed(database->oid);

		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start the inbox worker for database \"%s\"",
						database->name),
				 errdetail("All background worker slots are in use (%lld times for this database since the server started); no database is maintained in this round.",
						   (long long) failures),
				 errhint("Raise \"max_worker_processes\": inbox needs two slots, one for its launcher and one for the database being maintained, besides those of everything else that uses background workers; and keep \"max_parallel_workers\" below it by at least those, or parallel queries can take every slot.")));
		return false;
	}

	status = WaitForBackgroundWorkerStartup(handle, &pid);
	if (status == BGWH_STARTED)
		status = WaitForBackgroundWorkerShutdown(handle);
	if (status == BGWH_POSTMASTER_DIED)
		proc_exit(1);
	return true;
}

/*
 * worker_pin_settings
 *		Take nothing from ALTER DATABASE or ALTER ROLE ... SET, and pin what
 *		the batches depend on, as autovacuum does: PGC_S_OVERRIDE outranks
 *		those sources (and a reload) for the rest of the worker's life.
 *
 * The database's owner chooses the database's settings; the worker is a
 * superuser, and takes its settings from the server's configuration
 * (inbox_settings_snapshot, before connecting), except
 * default_transaction_read_only, which it respects.  Called once
 * connected, outside a transaction.
 */
static void
worker_pin_settings(void)
{
	char		lock_timeout[32];
	char	   *name;

	StartTransactionCommand();
	inbox_settings_drop_local();

	/*
	 * The batches run as the table's owner (worker_batch); around them the
	 * worker stays the superuser it started as.  A client's login pins
	 * session_authorization the same way (InitializeSessionUserId); the
	 * check of a user name needs a transaction.
	 */
	SetConfigOption("session_authorization",
					GetUserNameFromId(GetAuthenticatedUserId(), false),
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("role", "none", PGC_SUSET, PGC_S_OVERRIDE);
	name = get_database_name(MyDatabaseId);
	strlcpy(worker_database_name, name ? name : "?", NAMEDATALEN);
	CommitTransactionCommand();

	/*
	 * What every pass pins (trust.c): search_path (the queries name
	 * everything explicitly; this is a second line of defence for anything
	 * they call), the time zone, the planner's methods, no JIT and no
	 * parallel workers (which would take background worker slots); and the
	 * styles of dates and intervals, for what the worker logs.
	 */
	inbox_pin_pass_settings(PGC_S_OVERRIDE, GUC_ACTION_SET);
	SetConfigOption("DateStyle", "ISO, MDY", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("IntervalStyle", "postgres", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * No trigger fires in a batch (trust.c): the batches run as a
	 * superuser, and a role with the TRIGGER privilege can attach one.
	 * worker_batch refuses a table with a trigger or rule that would fire
	 * anyway, or a foreign key.
	 */
	SetConfigOption("session_replication_role", "replica", PGC_SUSET,
					PGC_S_OVERRIDE);

	/*
	 * Timeouts, as autovacuum sets them, except lock_timeout: a batch must
	 * not wait long for a lock (inbox.lock_timeout).  statement_timeout
	 * does not apply to a background worker's statements anyway.
	 */
	snprintf(lock_timeout, sizeof(lock_timeout), "%d", inbox_lock_timeout);
	SetConfigOption("lock_timeout", lock_timeout, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET,
					PGC_S_OVERRIDE);
	if (GetConfigOption("transaction_timeout", true, false) != NULL)
		SetConfigOption("transaction_timeout", "0", PGC_SUSET,
						PGC_S_OVERRIDE);

	/*
	 * READ COMMITTED: the batches are written for it (each statement sees
	 * what committed before it), and serializable would add the cost and
	 * the failures of its predicate locks to every session.
	 */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_deferrable", "off",
					PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * A batch must not wait for a standby (which may never come) while it
	 * holds the locks that DROP DATABASE waits for.  Losing a batch at a
	 * failover is harmless: the next pass does it again.
	 */
	if (synchronous_commit > SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
		SetConfigOption("synchronous_commit", "local", PGC_SUSET,
						PGC_S_OVERRIDE);
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
 * worker_batch
 *		Run one batch as the inbox table's owner, restricted as VACUUM runs
 *		an index expression; returns the rows done.  The caller holds a
 *		transaction and the lock on the extension.
 *
 * Any code a user attached to the table (a trigger, a rule, an index
 * expression or predicate, a policy) runs with the owner's rights; it
 * cannot change the worker's role or create temporary objects that would
 * outlive the batch (SECURITY_RESTRICTED_OPERATION), and any setting it
 * changes is undone at the end of the batch (the GUC nest level).  An error
 * aborts the transaction, which restores both.
 */
static InboxBatchResult
worker_batch(InboxBatchFunction batch, InboxPassPosition *position,
			 bool *refused)
{
	InboxObjects objects;
	InboxObjects target;
	Relation	rel = inbox_open_table(RowExclusiveLock, &objects);
	Oid			owner = rel->rd_rel->relowner;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	InboxBatchResult result = {0, 0};
	char	   *refusal;

	/*
	 * Nothing fires in a batch (worker_pin_settings); what would fire
	 * anyway, or what the data relies on firing, stops the pass.  The lock
	 * just taken keeps the answer true to the end of the batch.
	 */
	if (SessionReplicationRole != SESSION_REPLICATION_ROLE_REPLICA)
		elog(ERROR, "inbox worker: session_replication_role is not replica");
	refusal = inbox_replica_refusal(rel);
	table_close(rel, NoLock);
	*refused = (refusal != NULL);
	if (refusal != NULL)
	{
		if (worker_refusal == NULL)
			worker_refusal = MemoryContextStrdup(TopMemoryContext, refusal);
		return result;
	}

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner,
						   save_sec_context | SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();

	SPI_connect();
	if (inbox_pass_target(&objects, position, &target))
		result = batch(&target, GetCurrentTimestamp(), inbox_batch_size,
					   position);
	SPI_finish();

	AtEOXact_GUC(false, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	return result;
}

/*
 * worker_pause
 *		Wait inbox.batch_delay between two full batches, to leave room for
 *		the database's own work; false, at once, if someone wants the
 *		database meanwhile.
 */
static bool
worker_pause(void)
{
	TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  inbox_batch_delay);

	for (;;)
	{
		long		remaining;

		if (database_is_wanted(MyDatabaseId, false))
			return false;
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), end);
		if (remaining <= 0)
			return true;
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(remaining, INBOX_WANTED_POLL_MS),
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * worker_pass
 *		Run batches of one kind, each in its own transaction, until one
 *		leaves nothing more or the pass must end; *total counts the rows
 *		changed as they are changed (an error leaves it counting those
 *		committed).
 *
 * The worker's driver of a pass; pass.c has the SQL functions', which runs
 * the same batches in one transaction.
 */
static InboxWorkerPassEnd
worker_pass(InboxBatchFunction batch, const char *activity, int64 *total)
{
	InboxPassPosition position = {.shard = 0, .valid = false};

	for (;;)
	{
		InboxWorkerPassEnd end = WORKER_PASS_DONE;
		InboxBatchResult result = {0, 0};

		CHECK_FOR_INTERRUPTS();
		reload_settings_if_asked();

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		pgstat_report_activity(STATE_RUNNING, activity);
		/* Nothing found in an earlier transaction is relied on. */
		inbox_objects_forget();

		/* Held to the end of the batch, so DROP DATABASE waits for it. */
		if (database_is_wanted(MyDatabaseId, true))
			end = WORKER_PASS_WANTED;
		else if (!worker_lock_extension())
			end = WORKER_PASS_NO_EXTENSION;
		else if (XactReadOnly)
			end = WORKER_PASS_READ_ONLY;
		else if (!inbox_objects_trusted())
			end = WORKER_PASS_UNTRUSTED;
		else
		{
			bool		refused;

			worker_served = true;
			PushActiveSnapshot(GetTransactionSnapshot());
			result = worker_batch(batch, &position, &refused);
			PopActiveSnapshot();
			if (refused)
				end = WORKER_PASS_REFUSED;
		}

		CommitTransactionCommand();
		pgstat_report_stat(false);
		pgstat_report_activity(STATE_IDLE, NULL);

		if (end == WORKER_PASS_READ_ONLY || end == WORKER_PASS_UNTRUSTED)
			worker_served = true;
		if (end != WORKER_PASS_DONE)
			return end;
		*total += result.changed;
		if (!inbox_batch_left_more(&result, inbox_batch_size) &&
			!inbox_pass_next_relation(&position))
			return WORKER_PASS_DONE;
		if (worker_out_of_time())
			return WORKER_PASS_OUT_OF_TIME;
		if (inbox_batch_delay > 0 && !worker_pause())
			return WORKER_PASS_WANTED;
	}
}

/*
 * worker_out_of_time
 *		Has the worker been in its database for inbox.database_time?  Then
 *		it leaves, and the launcher serves the other databases before it
 *		comes back.
 */
static bool
worker_out_of_time(void)
{
	return TimestampDifferenceExceeds(worker_start, GetCurrentTimestamp(),
									  inbox_database_time);
}

/*
 * worker_run
 *		worker_pass, with an error logged and kept in *error (the first
 *		one, in TopMemoryContext) rather than raised: a pass of one kind
 *		that fails does not stop the other.
 */
static InboxWorkerPassEnd
worker_run(InboxBatchFunction batch, const char *activity, int64 *total,
		   char **error)
{
	InboxWorkerPassEnd end;

	PG_TRY();
	{
		end = worker_pass(batch, activity, total);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		EmitErrorReport();
		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
		if (*error == NULL)
			*error = edata->message;
		end = WORKER_PASS_FAILED;
	}
	PG_END_TRY();
	return end;
}

/*
 * inbox_database_worker_main
 *		Entry point of a database worker: one reclaim and one prune pass,
 *		for at most about inbox.database_time.
 *
 * Reclaiming comes first: an expired claim keeps its message from every
 * consumer until it is released, while a marker kept a little longer
 * costs only space.  A pass that fails is logged and recorded, and the
 * other runs all the same.
 */
void
inbox_database_worker_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	char	   *skipped = NULL;
	char	   *error = NULL;
	InboxWorkerPassEnd end;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/*
	 * Until it connects, the worker has the postmaster's settings: those of
	 * the configuration files and the command line.  Connecting applies
	 * the database's and the role's, which worker_pin_settings undoes.
	 */
	inbox_settings_snapshot();

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("inbox worker");
	worker_pin_settings();

	worker_start = GetCurrentTimestamp();
	end = worker_run(inbox_reclaim_batch, "inbox: reclaiming claims",
					 &worker_reclaimed, &error);
	if (end == WORKER_PASS_DONE || end == WORKER_PASS_FAILED)
	{
		InboxWorkerPassEnd prune_end = worker_run(inbox_prune_batch,
												  "inbox: pruning markers",
												  &worker_pruned, &error);

		if (end == WORKER_PASS_DONE)
			end = prune_end;
	}

	/* One line per pass, whatever the number of batches. */
	if (end == WORKER_PASS_READ_ONLY)
	{
		skipped = psprintf("skipping maintenance of database \"%s\" because it is read-only",
						   worker_database_name);
		ereport(LOG,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("skipping maintenance of database \"%s\" because it is read-only",
						worker_database_name),
				 errdetail("\"default_transaction_read_only\" is on for the inbox worker in this database."),
				 errhint("Pruning and reclaiming resume at the first pass after it is turned off.")));
	}
	else if (end == WORKER_PASS_UNTRUSTED)
	{
		skipped = psprintf("inbox worker skips database \"%s\": the extension's schema or objects are controlled by a role that is not a superuser",
						   worker_database_name);
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("inbox worker skips database \"%s\"", worker_database_name),
				 errdetail("The extension's schema, or one of its objects, is controlled by a role that is not a superuser, which could have its own code run by the worker."),
				 errhint("Make a superuser the owner of the schema and of the extension's objects (README, Installation).")));
	}
	else if (end == WORKER_PASS_REFUSED)
	{
		skipped = psprintf("inbox worker skips database \"%s\": %s",
						   worker_database_name, worker_refusal);
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("inbox worker skips database \"%s\": %s",
						worker_database_name, worker_refusal),
				 errdetail("The worker's batches run as a superuser with session_replication_role = replica, so that no trigger fires in them; a trigger or rule that fires anyway, a rule, or a foreign key, whose checks would not run, stops them."),
				 errhint("Drop it, or make the trigger fire on origin only (ALTER TABLE ... ENABLE TRIGGER). To have triggers see maintenance, run inbox_prune() and inbox_reclaim() as a role that is not a superuser.")));
	}
	else if (end == WORKER_PASS_WANTED)
		elog(DEBUG1, "inbox worker leaves database \"%s\": another session wants it",
			 worker_database_name);
	else if (end == WORKER_PASS_OUT_OF_TIME)
		elog(DEBUG1, "inbox worker leaves database \"%s\" after \"inbox.database_time\", with work left",
			 worker_database_name);

	/* A database without the extension is left alone, and unreported. */
	if (worker_served || error != NULL)
		inbox_shmem_report(dboid, worker_start, worker_pruned,
						   worker_reclaimed, error ? error : skipped,
						   end == WORKER_PASS_OUT_OF_TIME);
	proc_exit(0);
}
