/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *	  Reclaiming dead claims, and running a maintenance pass in batches.
 *
 * Reclaiming turns claims whose lease expired into released claims
 * (attempts left) or failed ones (attempts used up), each keeping its old
 * token, which is thereby dead: extend, complete and fail require the
 * claimed state.  It works in batches of at most inbox.batch_size claims,
 * each one SQL statement that locks its rows with FOR UPDATE SKIP LOCKED
 * (leaving a claim another session holds for a later pass rather than wait
 * for it) and changes them by their ctids (a TID scan), never by a join
 * that the planner could turn into a scan of the whole table.
 *
 * A pass of either kind (pruning is prune.c's) is batches until one comes
 * back short: the background worker runs each batch in its own
 * transaction (worker.c); the SQL functions run the whole pass in the
 * caller's, with inbox_maintenance_pass.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_reclaim);

static InboxPlan reclaim_plan;

/* In reclaim: the max_attempts of claim i's consumer. */
#define MAX_ATTEMPTS \
	" COALESCE((SELECT c.max_attempts FROM %1$s.inbox_consumers c" \
	" WHERE c.consumer" INBOX_EQ "i.consumer), $2) "

/*
 * inbox_reclaim_batch
 *		Release or fail at most batch_size claims whose lease expired by now.
 *
 * Same calling convention as inbox_prune_batch (prune.c); needs no
 * position (the claims it changes leave the condition it selects on).
 * Returns the claims released or failed.
 */
int64
inbox_reclaim_batch(const InboxObjects *objects, TimestampTz now,
					int batch_size, InboxPassPosition *position)
{
	static Oid	argtypes[] = {TIMESTAMPTZOID, INT4OID, INT4OID};
	Datum		values[3];
	SPIPlanPtr	plan;

	plan = inbox_plan(&reclaim_plan, objects,
					  "UPDATE ONLY %1$s.inbox i SET"
					  " state = CASE WHEN i.attempts" INBOX_GE MAX_ATTEMPTS
					  "  THEN 'failed'::%1$s.inbox_state ELSE 'released' END,"
					  " processed_at = CASE WHEN i.attempts" INBOX_GE MAX_ATTEMPTS
					  "  THEN $1 END,"
					  " last_error = 'lease expired after attempt '" INBOX_CONCAT
					  "  i.attempts" INBOX_CONCAT "' of '" INBOX_CONCAT MAX_ATTEMPTS ","
					  " lease_until = NULL"
					  " WHERE i.ctid" INBOX_EQ "ANY (ARRAY("
					  "  SELECT x.ctid FROM ONLY %1$s.inbox x"
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
 * inbox_maintenance_pass
 *		Run batches of one kind until one comes back short; for the SQL
 *		functions, all in the caller's transaction.
 */
int64
inbox_maintenance_pass(const char *caller, InboxBatchFunction batch)
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
	} while (done == inbox_batch_size || position.more);
	SPI_finish();

	return total;
}

/*
 * inbox_reclaim() returns bigint
 *		One reclaim pass in the current database; returns claims released
 *		or failed.
 */
Datum
inbox_reclaim(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(inbox_maintenance_pass("inbox_reclaim()",
										   inbox_reclaim_batch));
}
