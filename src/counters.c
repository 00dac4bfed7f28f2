/*-------------------------------------------------------------------------
 *
 * counters.c
 *	  What the functions answered, counted per database and consumer, in
 *	  shared memory: inbox_counters(), inbox_counters_reset().
 *
 * inbox_stats counts markers by reading the whole table; these counters
 * say what happened instead (new claims, duplicates, begins by outcome,
 * completions refused to a stale token, failures, prunes...), and cost
 * nothing to read.  A counter counts the answers the functions gave,
 * whether or not the caller's transaction then committed, as
 * pg_stat_statements' calls do: a duplicate answered is a duplicate the
 * consumer acted on, and counting at commit would need a transaction
 * callback and a list of pending counts on every claim.
 *
 * One fixed-size shared hash holds an entry per (database, consumer) with an
 * atomic counter per InboxCounter, and one entry per database with no
 * consumer: the database's own row, which counts what a pass does across
 * consumers (pruned, reclaimed), every consumer past
 * inbox.max_consumers_counted, and the refusals of a marker the caller cannot
 * see (twophase.c: anyone can name any consumer, so a made-up name must not
 * take a consumer's slot).  Entries are never removed while the server runs
 * (a reset zeroes them), so each backend keeps the address of an entry, found
 * once, in a local hash by consumer name (and the last one used in front of
 * it; at most COUNTERS_CACHE_MAX names): after its first claim of a consumer,
 * a backend counts with a local lookup and an atomic add, without a lock.
 *
 * Kept across a clean restart, as PostgreSQL keeps its statistics: the
 * postmaster writes the entries to pg_stat/inbox_counters.stat as it
 * exits, and reads them back at the next start if the server was shut
 * down cleanly (the control file says so); after a crash or an immediate
 * stop they start from zero.  Entries whose counters are all zero are not
 * read back, so a reset frees their slots at the next restart.
 *
 * Who sees what: like inbox_worker_status() (shmem.c), the counters of
 * other databases only to roles with pg_read_all_stats' privileges.
 *
 * Locking: the LWLock "inbox_counters" protects the hash's structure and
 * each entry's stats_reset: shared to find an entry or read them all,
 * exclusive to add one or reset.  The counters themselves are atomics,
 * added to without the lock.  Everything exists only when the library is
 * preloaded; without it, counting does nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_control.h"
#include "commands/dbcommands.h"
#include "common/controldata_utils.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_counters);
PG_FUNCTION_INFO_V1(inbox_counters_reset);

/* The file the postmaster writes at a clean shutdown. */
#define COUNTERS_FILE		"pg_stat/inbox_counters.stat"
#define COUNTERS_FILE_TMP	COUNTERS_FILE ".tmp"
#define COUNTERS_FILE_MAGIC	0x1B0C0001

/*
 * Database rows the hash has room for beside the consumers' entries.  More
 * databases still get one while shared memory has room to spare.
 */
#define COUNTERS_DATABASE_ROWS	INBOX_MAX_DATABASES

/* inbox.h's INBOX_COUNT_BEGIN maps each begin outcome to its counter. */
StaticAssertDecl(INBOX_COUNT_BEGIN(INBOX_OUTCOME_BUSY) == INBOX_COUNT_BEGIN_BUSY &&
				 INBOX_COUNT_BEGIN(INBOX_OUTCOME_TAKEN_OVER) == INBOX_COUNT_BEGIN_TAKEN_OVER,
				 "begin counters follow InboxTwophaseOutcome");

/*
 * Most consumer names a backend's cache keeps: a backend that serves more
 * (a sweeper of many consumers) starts its cache over, rather than keep a
 * name for every consumer it ever counted.
 */
#define COUNTERS_CACHE_MAX		1024

/* An entry's key: consumer "" is the database's own row. */
typedef struct CountersKey
{
	Oid			dboid;
	char		consumer[INBOX_CONSUMER_MAX_BYTES + 1];
} CountersKey;

typedef struct CountersEntry
{
	CountersKey key;			/* zero-padded: the hash compares it whole */
	TimestampTz stats_reset;	/* counting since: creation or last reset */
	pg_atomic_uint64 counts[INBOX_COUNTERS];
} CountersEntry;

typedef struct CountersShared
{
	LWLock	   *lock;
	int			consumers;		/* entries that are not a database's row */
} CountersShared;

/* A backend's own cache: where its consumers' entries are. */
typedef struct CountersCached
{
	char		consumer[INBOX_CONSUMER_MAX_BYTES + 1];	/* the hash key */
	CountersEntry *entry;
} CountersCached;

static CountersShared *shared = NULL;
static HTAB *shared_hash = NULL;

static HTAB *local_cache = NULL;
static CountersEntry *database_entry = NULL;
static CountersEntry *last_entry = NULL;
static int	last_length = -1;
static char last_consumer[INBOX_CONSUMER_MAX_BYTES + 1];

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void counters_shmem_request(void);
static void counters_shmem_startup(void);
static Size counters_entries(void);
static CountersEntry *counters_add_entry(const CountersKey *key);
static CountersEntry *counters_shared_entry(const char *consumer);
static CountersEntry *counters_entry(text *consumer);
static void counters_save(int code, Datum arg);
static void counters_load(void);
static bool counters_clean_shutdown(void);

/*
 * inbox_counters_init
 *		Install the hooks that create the counters; called from _PG_init
 *		while shared_preload_libraries is being processed.
 */
void
inbox_counters_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = counters_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = counters_shmem_startup;
}

/* The hash's size: every consumer counted, and the databases' rows. */
static Size
counters_entries(void)
{
	return (Size) inbox_max_consumers_counted + COUNTERS_DATABASE_ROWS;
}

static void
counters_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(CountersShared)));
	RequestAddinShmemSpace(hash_estimate_size(counters_entries(),
											  sizeof(CountersEntry)));
	RequestNamedLWLockTranche("inbox_counters", 1);
}

static void
counters_shmem_startup(void)
{
	HASHCTL		info;
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("inbox_counters", sizeof(CountersShared), &found);
	if (!found)
	{
		shared->lock = &(GetNamedLWLockTranche("inbox_counters"))->lock;
		shared->consumers = 0;
	}
	info.keysize = sizeof(CountersKey);
	info.entrysize = sizeof(CountersEntry);
	shared_hash = ShmemInitHash("inbox_counters hash",
								counters_entries(), counters_entries(),
								&info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);

	/*
	 * The postmaster (never a backend, even with EXEC_BACKEND) reads the
	 * saved counters, and writes them when it exits.  After a crash it
	 * comes here again, with new shared memory and no file to read.
	 */
	if (!IsUnderPostmaster)
	{
		on_shmem_exit(counters_save, (Datum) 0);
		if (!found)
			counters_load();
	}
}

/*
 * counters_add_entry
 *		The entry of key, added with zero counts if it has none; NULL when
 *		shared memory is full.  Caller holds the lock exclusively.
 */
static CountersEntry *
counters_add_entry(const CountersKey *key)
{
	CountersEntry *entry;
	bool		found;

	entry = hash_search(shared_hash, key, HASH_ENTER_NULL, &found);
	if (entry != NULL && !found)
	{
		entry->stats_reset = GetCurrentTimestamp();
		for (int i = 0; i < INBOX_COUNTERS; i++)
			pg_atomic_init_u64(&entry->counts[i], 0);
		if (key->consumer[0] != '\0')
			shared->consumers++;
	}
	return entry;
}

/*
 * counters_shared_entry
 *		The shared entry of consumer ("": the database's row) in the
 *		current database, added if new; the database's row once
 *		inbox.max_consumers_counted consumers have one.  NULL when shared
 *		memory is full.
 */
static CountersEntry *
counters_shared_entry(const char *consumer)
{
	CountersKey key;
	CountersEntry *entry;

	memset(&key, 0, sizeof(key));
	key.dboid = MyDatabaseId;
	strlcpy(key.consumer, consumer, sizeof(key.consumer));

	LWLockAcquire(shared->lock, LW_SHARED);
	entry = hash_search(shared_hash, &key, HASH_FIND, NULL);
	LWLockRelease(shared->lock);
	if (entry != NULL)
		return entry;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (key.consumer[0] != '\0' &&
		shared->consumers >= inbox_max_consumers_counted &&
		hash_search(shared_hash, &key, HASH_FIND, NULL) == NULL)
		memset(key.consumer, 0, sizeof(key.consumer));
	entry = counters_add_entry(&key);
	LWLockRelease(shared->lock);
	return entry;
}

/*
 * counters_entry
 *		The entry that counts for consumer (NULL: the database's row) in
 *		this backend, from the backend's cache when it was found before.
 */
static CountersEntry *
counters_entry(text *consumer)
{
	const char *data;
	int			length;
	char		name[INBOX_CONSUMER_MAX_BYTES + 1];
	CountersCached *cached;
	bool		found;

	if (consumer == NULL)
	{
		if (database_entry == NULL)
			database_entry = counters_shared_entry("");
		return database_entry;
	}

	/* Most backends serve one consumer: the last one answers at once. */
	data = VARDATA_ANY(consumer);
	length = VARSIZE_ANY_EXHDR(consumer);
	if (length == last_length && memcmp(data, last_consumer, length) == 0)
		return last_entry;

	/* Longer names are refused by the functions; count them as "". */
	if (length > INBOX_CONSUMER_MAX_BYTES)
		length = 0;
	memcpy(name, data, length);
	name[length] = '\0';

	if (local_cache != NULL &&
		hash_get_num_entries(local_cache) >= COUNTERS_CACHE_MAX)
	{
		hash_destroy(local_cache);
		local_cache = NULL;
	}
	if (local_cache == NULL)
	{
		HASHCTL		info;

		info.keysize = sizeof(name);
		info.entrysize = sizeof(CountersCached);
		info.hcxt = TopMemoryContext;
		local_cache = hash_create("inbox counters cache", 16, &info,
								  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	cached = hash_search(local_cache, name, HASH_ENTER, &found);
	if (!found)
		cached->entry = NULL;
	if (cached->entry == NULL)
		cached->entry = counters_shared_entry(name);

	last_entry = cached->entry;
	memcpy(last_consumer, name, length + 1);
	last_length = last_entry != NULL ? length : -1;
	return last_entry;
}

/*
 * inbox_count
 *		Add n to a counter of consumer (NULL: of the current database's
 *		row).  Does nothing when the library is not preloaded.
 *
 * Takes no lock once this backend has counted for the consumer, and never
 * raises an error but out of memory on a consumer's first count.
 */
void
inbox_count(InboxCounter counter, text *consumer, int64 n)
{
	CountersEntry *entry;

	if (shared == NULL || n <= 0)
		return;
	entry = counters_entry(consumer);
	if (entry != NULL)
		pg_atomic_fetch_add_u64(&entry->counts[counter], (uint64) n);
}

/*
 * inbox_counted
 *		Count a yes-or-no answer for consumer, as if_true or if_false, and
 *		return it: a function counts its answer where it returns it.
 */
bool
inbox_counted(bool answer, text *consumer, InboxCounter if_true,
			  InboxCounter if_false)
{
	inbox_count(answer ? if_true : if_false, consumer, 1);
	return answer;
}

/*
 * inbox_count_claims
 *		Count a batch of ids (each once) of which claimed were new.
 */
void
inbox_count_claims(text *consumer, int64 ids, int64 claimed)
{
	inbox_count(INBOX_COUNT_CLAIMED, consumer, claimed);
	inbox_count(INBOX_COUNT_DUPLICATE, consumer, ids - claimed);
}

/*
 * inbox_count_fail
 *		Count an inbox_fail: refused (not failed), or the claim released
 *		for a retry or failed for good.
 */
void
inbox_count_fail(text *consumer, bool failed, bool for_good)
{
	inbox_count(!failed ? INBOX_COUNT_FAIL_REFUSED :
				for_good ? INBOX_COUNT_FAIL_FAILED : INBOX_COUNT_FAIL_RELEASED,
				consumer, 1);
}

/*
 * counters_check
 *		Raise the error of a function that reads or resets the counters
 *		when the library was not preloaded.
 */
static void
counters_check(void)
{
	if (shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("inbox counters are not available"),
				 errdetail("They live in shared memory, which exists only when the library is preloaded."),
				 errhint("Add inbox to shared_preload_libraries and restart the server.")));
}

/*
 * inbox_counters()
 *		returns table (database name, consumer text, <the counters> bigint,
 *					   stats_reset timestamptz)
 *
 * One row per database and consumer counted, and one per database with a
 * NULL consumer: its own row.  Only the current database's rows for a
 * caller without pg_read_all_stats' privileges.
 */
Datum
inbox_counters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	CountersEntry *entry;
	CountersKey *keys;
	TimestampTz *resets;
	uint64	   *counts;
	int			nentries = 0;
	int			allocated;
	bool		all_databases;

	counters_check();
	InitMaterializedSRF(fcinfo, 0);
	all_databases = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);

	/* A copy, so that no catalog lookup happens under the lock. */
	LWLockAcquire(shared->lock, LW_SHARED);
	allocated = Max(hash_get_num_entries(shared_hash), 1);
	keys = palloc(sizeof(CountersKey) * allocated);
	resets = palloc(sizeof(TimestampTz) * allocated);
	counts = palloc(sizeof(uint64) * INBOX_COUNTERS * allocated);
	hash_seq_init(&status, shared_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (!all_databases && entry->key.dboid != MyDatabaseId)
			continue;
		keys[nentries] = entry->key;
		resets[nentries] = entry->stats_reset;
		for (int i = 0; i < INBOX_COUNTERS; i++)
			counts[nentries * INBOX_COUNTERS + i] =
				pg_atomic_read_u64(&entry->counts[i]);
		nentries++;
	}
	LWLockRelease(shared->lock);

	for (int e = 0; e < nentries; e++)
	{
		Datum		values[INBOX_COUNTERS + 3];
		bool		nulls[INBOX_COUNTERS + 3] = {0};
		char	   *name = get_database_name(keys[e].dboid);

		if (name == NULL)
			continue;			/* dropped since */
		values[0] = DirectFunctionCall1(namein, CStringGetDatum(name));
		if (keys[e].consumer[0] == '\0')
			nulls[1] = true;
		else
			values[1] = CStringGetTextDatum(keys[e].consumer);
		for (int i = 0; i < INBOX_COUNTERS; i++)
			values[2 + i] = Int64GetDatum((int64) counts[e * INBOX_COUNTERS + i]);
		values[INBOX_COUNTERS + 2] = TimestampTzGetDatum(resets[e]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * inbox_counters_reset(consumer text DEFAULT NULL) returns void
 *
 * Zeroes the current database's counters: every row, or the one row of
 * consumer.  EXECUTE is revoked from PUBLIC (a superuser may grant it), as
 * for pg_stat_reset().
 */
Datum
inbox_counters_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS status;
	CountersEntry *entry;
	char	   *consumer = NULL;
	TimestampTz now = GetCurrentTimestamp();

	counters_check();
	if (!PG_ARGISNULL(0))
		consumer = text_to_cstring(inbox_arg_consumer(fcinfo, 0));

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, shared_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dboid != MyDatabaseId ||
			(consumer != NULL && strcmp(entry->key.consumer, consumer) != 0))
			continue;
		entry->stats_reset = now;
		for (int i = 0; i < INBOX_COUNTERS; i++)
			pg_atomic_write_u64(&entry->counts[i], 0);
	}
	LWLockRelease(shared->lock);
	PG_RETURN_VOID();
}

/*
 * The file: a header, then each entry as its key, stats_reset and its
 * counters.  The header names the number of counters, so that a file
 * written by a release that counted something else is not misread.
 */
typedef struct CountersFileHeader
{
	uint32		magic;
	uint32		ncounters;
	int64		nentries;
} CountersFileHeader;

typedef struct CountersFileEntry
{
	CountersKey key;
	TimestampTz stats_reset;
	uint64		counts[INBOX_COUNTERS];
} CountersFileEntry;

/*
 * counters_save
 *		on_shmem_exit callback of the postmaster: write the counters to
 *		COUNTERS_FILE.  Every other process is gone by then.
 *
 * Not after an error exit; an immediate stop may still get here, and the
 * next start then discards the file (counters_clean_shutdown).
 */
static void
counters_save(int code, Datum arg)
{
	HASH_SEQ_STATUS status;
	CountersEntry *entry;
	CountersFileHeader header;
	FILE	   *file;

	if (code != 0 || shared == NULL)
		return;

	file = AllocateFile(COUNTERS_FILE_TMP, PG_BINARY_W);
	if (file == NULL)
		goto error;
	header.magic = COUNTERS_FILE_MAGIC;
	header.ncounters = INBOX_COUNTERS;
	header.nentries = hash_get_num_entries(shared_hash);
	if (fwrite(&header, sizeof(header), 1, file) != 1)
		goto error;
	hash_seq_init(&status, shared_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		CountersFileEntry saved;

		memset(&saved, 0, sizeof(saved));
		saved.key = entry->key;
		saved.stats_reset = entry->stats_reset;
		for (int i = 0; i < INBOX_COUNTERS; i++)
			saved.counts[i] = pg_atomic_read_u64(&entry->counts[i]);
		if (fwrite(&saved, sizeof(saved), 1, file) != 1)
		{
			hash_seq_term(&status);
			goto error;
		}
	}
	if (FreeFile(file) != 0)
	{
		file = NULL;
		goto error;
	}
	(void) durable_rename(COUNTERS_FILE_TMP, COUNTERS_FILE, LOG);
	return;

error:
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not write file \"%s\": %m", COUNTERS_FILE_TMP)));
	if (file != NULL)
		FreeFile(file);
	unlink(COUNTERS_FILE_TMP);
}

/*
 * counters_clean_shutdown
 *		Did the server last stop cleanly?  Read from the control file,
 *		which the startup process has not yet changed.
 */
static bool
counters_clean_shutdown(void)
{
	ControlFileData *control;
	bool		crc_ok;
	bool		clean;

	control = get_controlfile(DataDir, &crc_ok);
	clean = crc_ok && (control->state == DB_SHUTDOWNED ||
					   control->state == DB_SHUTDOWNED_IN_RECOVERY);
	pfree(control);
	return clean;
}

/*
 * counters_load
 *		Read the counters a clean shutdown saved, then remove the file, so
 *		that a crash later starts from zero.  Called by the postmaster
 *		before any backend starts; a bad file is reported and ignored.
 */
static void
counters_load(void)
{
	FILE	   *file;
	CountersFileHeader header;

	file = AllocateFile(COUNTERS_FILE, PG_BINARY_R);
	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", COUNTERS_FILE)));
		return;
	}

	if (!counters_clean_shutdown())
		ereport(LOG,
				(errmsg("inbox counters start from zero: the server did not shut down cleanly")));
	else if (fread(&header, sizeof(header), 1, file) != 1 ||
			 header.magic != COUNTERS_FILE_MAGIC ||
			 header.ncounters != INBOX_COUNTERS)
		ereport(LOG,
				(errmsg("ignoring file \"%s\": it was not written by this version of inbox",
						COUNTERS_FILE)));
	else
	{
		for (int64 e = 0; e < header.nentries; e++)
		{
			CountersFileEntry saved;
			CountersEntry *entry;
			bool		counted = false;

			if (fread(&saved, sizeof(saved), 1, file) != 1)
			{
				ereport(LOG,
						(errmsg("file \"%s\" is cut short", COUNTERS_FILE)));
				break;
			}
			for (int i = 0; i < INBOX_COUNTERS; i++)
				counted |= saved.counts[i] != 0;
			if (!counted)
				continue;		/* its slot is free again */
			saved.key.consumer[INBOX_CONSUMER_MAX_BYTES] = '\0';
			if (saved.key.consumer[0] != '\0' &&
				shared->consumers >= inbox_max_consumers_counted)
				memset(saved.key.consumer, 0, sizeof(saved.key.consumer));
			entry = counters_add_entry(&saved.key);
			if (entry == NULL)
				break;
			entry->stats_reset = saved.stats_reset;
			for (int i = 0; i < INBOX_COUNTERS; i++)
				pg_atomic_fetch_add_u64(&entry->counts[i], saved.counts[i]);
		}
	}
	FreeFile(file);
	unlink(COUNTERS_FILE);
}
