/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *	  The maintenance passes: pruning old markers, reclaiming dead claims.
 *
 * Pruning deletes processed and failed markers whose processed_at is older
 * than their consumer's retention; it never touches a claim that is live,
 * expired or released.  Reclaiming turns claims whose lease expired into
 * released claims (attempts left) or failed ones (attempts used up), each
 * keeping its old token, which is thereby dead: extend, complete and fail
 * require the claimed state.
 *
 * Both work in batches of at most inbox.batch_size rows, and leave a row
 * that another session holds for a later pass rather than wait for it.
 * Reclaiming is one SQL statement per batch that locks its rows with FOR
 * UPDATE SKIP LOCKED.  Pruning selects its batch with SQL, then deletes the
 * rows through the table access method without waiting (a row held by
 * someone else reports "being modified" and is skipped): no row lock is
 * taken and WAL-logged before each delete, which measured (pg_waldump) half
 * of the WAL records of a pass, and no executor runs the DELETE; a plain
 * DELETE by ctid ran about 3.5 times as fast as the locking statement.  On
 * a table with triggers, rules or row security, where a DELETE would do
 * more, pruning runs the locking DELETE statement instead.
 * The background worker runs each batch in its own short transaction,
 * pausing for a moment every PRUNE_CHUNK rows so that it never holds a CPU
 * that claimers are waiting for; the SQL functions inbox_prune() and
 * inbox_reclaim() run a whole pass in the caller's transaction:
 * inbox_prune() walks its candidates once with a cursor, deleting a batch
 * per fetch, since a batch that started over would read again every row
 * the pass had deleted.
 *
 * Pruning reads the partial index inbox_prunable (consumer, processed_at,
 * id), one consumer at a time, so each batch reads only rows it deletes,
 * and a consumer with a long retention costs the others nothing.  Both passes
 * then change the rows they locked by their ctids (a TID scan), never by a
 * join that the planner could turn into a scan of the whole table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_prune);
PG_FUNCTION_INFO_V1(inbox_reclaim);

static InboxPlan prune_select_plan;
static InboxPlan prune_delete_plan;
static InboxPlan reclaim_plan;

/* The parameters of PRUNE_CANDIDATES. */
#define PRUNE_NARGS 6
static Oid	prune_argtypes[PRUNE_NARGS] = {TIMESTAMPTZOID, INTERVALOID, INT4OID,
TEXTOID, TIMESTAMPTZOID, INT8OID};

/*
 * The markers a worker batch reads and deletes between two pauses.
 *
 * A process that computes without making a system call can keep its CPU
 * until the scheduler's next tick, even from the processes it woke, and
 * whatever its priority: measured (perf sched timehist, Linux 6.18, a tick
 * every 4 ms, 2 cores), claimers woken while the worker read or deleted a
 * batch of 10,000 in one stretch waited up to 4.3 ms behind it for its CPU,
 * at times while the other CPU was idle; at nice 19 or SCHED_IDLE too.
 * Breaking those stretches about halved the ratio of the claims' p99 while
 * pruning to their p99 without (3.4-5.1x to 1.7-2.5x in diagnostic pairs);
 * what is left is the worker's share of the CPU itself (README,
 * Performance, Pruning).  A sleep after every chunk, the shortest there
 * is (1 microsecond, which Linux stretches to its timer slack, 50 by
 * default), hands them the CPU within a fraction of a millisecond.
 */
#define PRUNE_CHUNK 500

/* The lowest id, where the walk of a consumer other than $4 starts. */
#define PRUNE_MIN_ID "'-9223372036854775808'::pg_catalog.int8"

/* The final states, as an array constant of the extension's enum. */
#define FINAL_STATES "'{processed,failed}'::%1$s.inbox_state[]"

/* In reclaim: the max_attempts of claim i's consumer. */
#define MAX_ATTEMPTS \
	" COALESCE((SELECT c.max_attempts FROM %1$s.inbox_consumers c" \
	" WHERE c.consumer" INBOX_EQ "i.consumer), $2) "

/*
 * The markers of a prune batch, with their consumer, processed_at and id:
 * consumers are enumerated by skipping through inbox_prunable (one descent
 * each), then each gives up to a batch of its oldest markers past its
 * retention.  $1 is now, $2 the default retention, $3 the batch size; $4,
 * $5 and $6 the pass's position (InboxPassPosition; $4 NULL: from the
 * first consumer), the (consumer, processed_at, id) where the walk
 * resumes, inclusive.  The row comparison is an index condition on
 * inbox_prunable (consumer, processed_at, id): the scan starts at the
 * position, without reading again the entries of markers the pass
 * deleted, even where thousands tie on processed_at.  lock is appended to
 * the innermost SELECT.
 */
#define PRUNE_CANDIDATES(lock) \
	"WITH RECURSIVE consumers(consumer) AS (" \
	" SELECT COALESCE($4, (SELECT consumer FROM %1$s.inbox" \
	"  WHERE state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  ORDER BY consumer LIMIT 1))" \
	" UNION ALL" \
	" SELECT (SELECT i.consumer FROM %1$s.inbox i" \
	"  WHERE i.state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  AND i.consumer" INBOX_GT "c.consumer" \
	"  ORDER BY i.consumer LIMIT 1)" \
	" FROM consumers c WHERE c.consumer IS NOT NULL)" \
	" SELECT d.tid, c.consumer, d.processed_at, d.id" \
	" FROM consumers c CROSS JOIN LATERAL (" \
	"  SELECT i.ctid AS tid, i.processed_at, i.id FROM %1$s.inbox i" \
	"  WHERE i.consumer" INBOX_EQ "c.consumer" \
	"  AND i.state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  AND ROW(i.processed_at, i.id)" INBOX_GE "ROW(" \
	"   CASE WHEN c.consumer" INBOX_EQ "$4 THEN $5 ELSE '-infinity' END," \
	"   CASE WHEN c.consumer" INBOX_EQ "$4 THEN $6 ELSE " PRUNE_MIN_ID " END)" \
	"  AND i.processed_at" INBOX_LT "($1" INBOX_MINUS \
	"   COALESCE((SELECT x.retention FROM %1$s.inbox_consumers x" \
	"   WHERE x.consumer" INBOX_EQ "c.consumer), $2))" \
	"  ORDER BY i.processed_at, i.id LIMIT $3 " lock ") d" \
	" WHERE c.consumer IS NOT NULL" \
	" LIMIT $3"

/*
 * prune_deletes_directly
 *		May pruning delete rows itself, or must a DELETE statement run (for
 *		the triggers, rules or row security it would apply)?
 */
static bool
prune_deletes_directly(Relation rel)
{
	return rel->trigdesc == NULL && rel->rd_rules == NULL &&
		!rel->rd_rel->relrowsecurity;
}

/*
 * prune_advance
 *		Move the pass's position to the last marker of the current SPI
 *		result, whose columns consumer_column to consumer_column + 2 are the
 *		consumer, processed_at and id of each row, if it lies further on.
 *
 * The last in inbox_prunable's order: the greatest consumer, then
 * processed_at, then id; the result's own order is not relied on (a
 * DELETE ... RETURNING has none), nor that of the chunks a batch fetches:
 * the position only ever moves forward.  Rows the batch left because
 * someone held them are counted too: the next pass retries them.
 */
static void
prune_advance(InboxPassPosition *position, int consumer_column)
{
	SPITupleTable *tuptable = SPI_tuptable;
	text	   *last = NULL;
	TimestampTz last_at = 0;
	int64		last_id = 0;
	bool		moved = false;

	if (position->valid)
	{
		last = (text *) position->consumer.data;
		last_at = position->processed_at;
		last_id = position->id;
	}

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		HeapTuple	tuple = tuptable->vals[row];
		bool		isnull;
		text	   *consumer;
		TimestampTz at;
		int64		id;
		int			cmp = 1;

		consumer = DatumGetTextPP(SPI_getbinval(tuple, tuptable->tupdesc,
												consumer_column, &isnull));
		at = DatumGetTimestampTz(SPI_getbinval(tuple, tuptable->tupdesc,
											   consumer_column + 1, &isnull));
		id = DatumGetInt64(SPI_getbinval(tuple, tuptable->tupdesc,
										 consumer_column + 2, &isnull));
		if (last != NULL)
		{
			/* The consumer column's own order: the "C" collation. */
			cmp = varstr_cmp(VARDATA_ANY(consumer), VARSIZE_ANY_EXHDR(consumer),
							 VARDATA_ANY(last), VARSIZE_ANY_EXHDR(last),
							 C_COLLATION_OID);
			if (cmp == 0)
				cmp = (at > last_at) - (at < last_at);
			if (cmp == 0)
				cmp = (id > last_id) - (id < last_id);
		}
		if (cmp > 0)
		{
			last = consumer;
			last_at = at;
			last_id = id;
			moved = true;
		}
	}

	if (!moved)
		return;
	position->valid = VARSIZE_ANY_EXHDR(last) <= INBOX_CONSUMER_MAX_BYTES;
	if (position->valid)
	{
		SET_VARSIZE(position->consumer.data, VARHDRSZ + VARSIZE_ANY_EXHDR(last));
		memcpy(VARDATA(position->consumer.data), VARDATA_ANY(last),
			   VARSIZE_ANY_EXHDR(last));
		position->processed_at = last_at;
		position->id = last_id;
	}
}

/*
 * prune_delete_rows
 *		Delete the rows whose ctids are in the first column of the current
 *		SPI result; returns how many were deleted.
 *
 * Each row is a version a snapshot of this transaction saw as expired.
 * Deleting without waiting: a row that another transaction has locked,
 * updated or deleted since is skipped.  The caller has checked the DELETE
 * privilege, and moves its position before calling, if it keeps one.
 */
static int64
prune_delete_rows(Relation rel)
{
	CommandId	cid = GetCurrentCommandId(true);
	int64		deleted = 0;

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		ItemPointer tid;
		TM_FailureData tmfd;
		TM_Result	result;

		CHECK_FOR_INTERRUPTS();
		tid = (ItemPointer) DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[row],
														  SPI_tuptable->tupdesc,
														  1, &isnull));
		result = table_tuple_delete(rel, tid, cid, GetActiveSnapshot(),
									InvalidSnapshot, false, &tmfd, false);
		switch (result)
		{
			case TM_Ok:
				deleted++;
				break;
			case TM_BeingModified:
			case TM_Updated:
			case TM_Deleted:
			case TM_SelfModified:
				break;
			default:
				elog(ERROR, "unexpected result %d deleting an inbox marker",
					 (int) result);
		}
	}
	SPI_freetuptable(SPI_tuptable);
	return deleted;
}

/*
 * prune_check_privilege
 *		What the DELETE statement would check.
 */
static void
prune_check_privilege(Relation rel)
{
	AclResult	aclresult;

	aclresult = pg_class_aclcheck(RelationGetRelid(rel), GetUserId(), ACL_DELETE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_TABLE, RelationGetRelationName(rel));
}

/*
 * prune_candidates_plan
 *		The saved plan selecting prune candidates, $3 at most.
 */
static SPIPlanPtr
prune_candidates_plan(const InboxObjects *objects)
{
	return inbox_plan(&prune_select_plan, objects,
					  PRUNE_CANDIDATES(""),
					  PRUNE_NARGS, prune_argtypes);
}

/*
 * prune_arguments
 *		The candidate query's arguments: now, the default retention, limit,
 *		and the position to resume at (NULL: from the start).
 */
static void
prune_arguments(Datum *values, char *nulls, Interval *retention,
				TimestampTz now, int limit, InboxPassPosition *position)
{
	memset(retention, 0, sizeof(Interval));
	retention->time = (int64) inbox_retention * SECS_PER_MINUTE * USECS_PER_SEC;
	memset(nulls, ' ', PRUNE_NARGS);
	values[0] = TimestampTzGetDatum(now);
	values[1] = IntervalPGetDatum(retention);
	values[2] = Int32GetDatum(limit);
	if (position != NULL && position->valid)
	{
		values[3] = PointerGetDatum(position->consumer.data);
		values[4] = TimestampTzGetDatum(position->processed_at);

		/*
		 * The walk resumes inclusively at the next id.  Ids are unique, so
		 * nothing lies between; at the very last id the next batch reads
		 * that one entry again, which is harmless.
		 */
		values[5] = Int64GetDatum(position->id < PG_INT64_MAX ?
								  position->id + 1 : position->id);
	}
	else
	{
		values[3] = (Datum) 0;
		nulls[3] = 'n';
		values[4] = TimestampTzGetDatum(DT_NOBEGIN);
		values[5] = Int64GetDatum(PG_INT64_MIN);
	}
}

/*
 * prune_by_cursor
 *		Delete the candidates from position on (NULL: from the start), at
 *		most limit, reading them with a cursor, fetch at a time; returns
 *		how many were deleted.
 *
 * With a position, it is moved past each fetch.  With pause, a pause
 * follows each fetch (see PRUNE_CHUNK).
 */
static int64
prune_by_cursor(const InboxObjects *objects, Relation rel, TimestampTz now,
				int limit, int fetch, InboxPassPosition *position, bool pause)
{
	Interval	retention;
	Datum		values[PRUNE_NARGS];
	char		nulls[PRUNE_NARGS];
	Portal		portal;
	int64		deleted = 0;

	prune_check_privilege(rel);
	prune_arguments(values, nulls, &retention, now, limit, position);
	portal = SPI_cursor_open(NULL, prune_candidates_plan(objects), values,
							 nulls, false);
	for (;;)
	{
		SPI_cursor_fetch(portal, true, fetch);
		if (SPI_processed == 0)
			break;
		if (position != NULL)
			prune_advance(position, 2);
		deleted += prune_delete_rows(rel);
		if (pause)
			pg_usleep(1L);
	}
	SPI_cursor_close(portal);
	return deleted;
}

/*
 * inbox_prune_batch
 *		Delete at most batch_size markers past their retention at now,
 *		from position on, and move position past them.
 *
 * The caller is connected to SPI, has an active snapshot, and passes the
 * objects it resolved in this transaction.  Returns the rows deleted.
 * Deleting directly, it reads the candidates PRUNE_CHUNK at a time, and
 * pauses after each chunk.
 */
int64
inbox_prune_batch(const InboxObjects *objects, TimestampTz now, int batch_size,
				  InboxPassPosition *position)
{
	Interval	retention;
	Datum		values[PRUNE_NARGS];
	char		nulls[PRUNE_NARGS];
	Relation	rel;
	SPIPlanPtr	plan;
	int64		deleted;

	rel = table_open(objects->table_oid, RowExclusiveLock);
	if (prune_deletes_directly(rel))
	{
		deleted = prune_by_cursor(objects, rel, now, batch_size, PRUNE_CHUNK,
								  position, true);
		table_close(rel, NoLock);
		return deleted;
	}

	table_close(rel, NoLock);
	prune_arguments(values, nulls, &retention, now, batch_size, position);
	plan = inbox_plan(&prune_delete_plan, objects,
					  "WITH doomed AS ("
					  PRUNE_CANDIDATES("FOR UPDATE OF i SKIP LOCKED") ")"
					  " DELETE FROM %1$s.inbox"
					  " WHERE ctid" INBOX_EQ "ANY (ARRAY(SELECT tid FROM doomed))"
					  " RETURNING consumer, processed_at, id",
					  PRUNE_NARGS, prune_argtypes);
	if (SPI_execute_plan(plan, values, nulls, false, 0) !=
		SPI_OK_DELETE_RETURNING)
		elog(ERROR, "inbox prune statement failed");
	prune_advance(position, 1);
	return (int64) SPI_processed;
}

/*
 * inbox_reclaim_batch
 *		Release or fail at most batch_size claims whose lease expired by now.
 *
 * Same calling convention as inbox_prune_batch; needs no position (the
 * claims it changes leave the condition it selects on).  Returns the
 * claims released or failed.
 */
int64
inbox_reclaim_batch(const InboxObjects *objects, TimestampTz now, int batch_size,
					InboxPassPosition *position)
{
	static Oid	argtypes[] = {TIMESTAMPTZOID, INT4OID, INT4OID};
	Datum		values[3];
	SPIPlanPtr	plan;

	plan = inbox_plan(&reclaim_plan, objects,
					  "UPDATE %1$s.inbox i SET"
					  " state = CASE WHEN i.attempts" INBOX_GE MAX_ATTEMPTS
					  "  THEN 'failed'::%1$s.inbox_state ELSE 'released' END,"
					  " processed_at = CASE WHEN i.attempts" INBOX_GE MAX_ATTEMPTS
					  "  THEN $1 END,"
					  " last_error = 'lease expired after attempt '" INBOX_CONCAT
					  "  i.attempts" INBOX_CONCAT "' of '" INBOX_CONCAT MAX_ATTEMPTS ","
					  " lease_until = NULL"
					  " WHERE i.ctid" INBOX_EQ "ANY (ARRAY("
					  "  SELECT x.ctid FROM %1$s.inbox x"
					  "  WHERE x.state" INBOX_EQ "'claimed'"
					  "  AND x.lease_until" INBOX_LE "$1"
					  "  LIMIT $3"
					  "  FOR UPDATE SKIP LOCKED))",
					  3, argtypes);

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(inbox_max_attempts);
	values[2] = Int32GetDatum(batch_size);

	if (SPI_execute_plan(plan, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "inbox reclaim statement failed");
	return (int64) SPI_processed;
}

/*
 * maintenance_pass
 *		Run batches of one kind until one comes back short; for the SQL
 *		functions, all in the caller's transaction.
 */
static int64
maintenance_pass(const char *caller, InboxBatchFunction batch)
{
	InboxObjects objects;
	Relation	rel;
	TimestampTz now = GetCurrentTimestamp();
	InboxPassPosition position = {.valid = false};
	int64		total = 0;
	int64		done;

	PreventCommandIfReadOnly(caller);
	rel = inbox_open_table(RowExclusiveLock, &objects);
	table_close(rel, NoLock);

	SPI_connect();
	do
	{
		CHECK_FOR_INTERRUPTS();
		done = batch(&objects, now, inbox_batch_size, &position);
		total += done;
	} while (done == inbox_batch_size);
	SPI_finish();

	return total;
}

/*
 * inbox_prune() returns bigint
 *		One pruning pass in the current database; returns markers deleted.
 */
Datum
inbox_prune(PG_FUNCTION_ARGS)
{
	InboxObjects objects;
	Relation	rel;
	int64		deleted;

	PreventCommandIfReadOnly("inbox_prune()");
	rel = inbox_open_table(RowExclusiveLock, &objects);
	if (!prune_deletes_directly(rel))
	{
		table_close(rel, NoLock);
		PG_RETURN_INT64(maintenance_pass("inbox_prune()", inbox_prune_batch));
	}

	/*
	 * One cursor walks the candidates once, deleting each fetch of
	 * batch_size rows.  All of the pass runs in the caller's transaction,
	 * where the index entries of rows it deleted cannot be marked dead yet;
	 * batches that each started their scan over would read again every row
	 * deleted before them, a pass quadratic in the backlog (measured:
	 * 400,000 markers in 9 s with batches of 1000, 4 times the 200,000's
	 * 2.4 s).  No pause: the pass is the caller's own work.
	 */
	SPI_connect();
	deleted = prune_by_cursor(&objects, rel, GetCurrentTimestamp(),
							  PG_INT32_MAX, inbox_batch_size, NULL, false);
	SPI_finish();
	table_close(rel, NoLock);
	PG_RETURN_INT64(deleted);
}

/*
 * inbox_reclaim() returns bigint
 *		One reclaim pass in the current database; returns claims released
 *		or failed.
 */
Datum
inbox_reclaim(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(maintenance_pass("inbox_reclaim()", inbox_reclaim_batch));
}
