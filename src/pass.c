/*-------------------------------------------------------------------------
 *
 * pass.c
 *	  A maintenance pass in the caller's transaction: inbox_prune() and
 *	  inbox_reclaim().
 *
 * A pass is batches of one kind (prune.c, reclaim.c), each resuming at the
 * position where the last one ended, until a batch leaves nothing more
 * (inbox_batch_left_more).  There are two drivers, with the same batches
 * and the same stop condition: this file's runs the whole pass in the
 * caller's transaction, without pauses (the pass is the caller's own
 * work); the background worker's runs each batch in a transaction of its
 * own (worker.c).  What the worker does between its transactions is thus
 * what the SQL functions do between batches, where the tests can count it
 * (sql/prune_resume.sql).
 *
 * On a table Citus manages, a pass is that of each shard placed on the
 * node it runs on (citus.c, inbox_pass_target); to run one on every node,
 * run the function on every node (docs/citus.md).
 *
 * Whose code runs: a pass pins the settings its statements depend on, for
 * the pass only (trust.c).  A superuser's pass also sets
 * session_replication_role = replica, as the worker does, so that no
 * trigger another role attached to the table runs as the superuser; it
 * refuses a table with a trigger or rule that would fire anyway, or a
 * foreign key.  Anyone else's pass fires the table's triggers as for any
 * statement of theirs: with their own rights.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "executor/spi.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_prune);
PG_FUNCTION_INFO_V1(inbox_reclaim);

/*
 * pass_in_transaction
 *		Run batches of one kind, all in the caller's transaction, until one
 *		leaves nothing more; returns the rows they changed.
 *
 * caller names the SQL function in the read-only error.
 */
static int64
pass_in_transaction(const char *caller, InboxBatchFunction batch)
{
	InboxObjects objects;
	InboxObjects target;
	Relation	rel;
	TimestampTz now = GetCurrentTimestamp();
	InboxPassPosition position = {.shard = 0, .valid = false};
	InboxBatchResult result;
	int64		changed = 0;
	int			replica_nestlevel;
	int			save_nestlevel;

	PreventCommandIfReadOnly(caller);
	rel = inbox_open_table(RowExclusiveLock, &objects);
	replica_nestlevel = inbox_superuser_write_begin(rel, caller);
	table_close(rel, NoLock);

	/* Undone at the end of the pass, or by an error. */
	save_nestlevel = NewGUCNestLevel();
	inbox_pin_pass_settings(PGC_S_SESSION, GUC_ACTION_SAVE);

	SPI_connect();
	while (inbox_pass_target(&objects, &position, &target))
	{
		CHECK_FOR_INTERRUPTS();
		result = batch(&target, now, inbox_batch_size, &position);
		changed += result.changed;
		if (!inbox_batch_left_more(&result, inbox_batch_size) &&
			!inbox_pass_next_relation(&position))
			break;
	}
	SPI_finish();
	AtEOXact_GUC(true, save_nestlevel);
	inbox_superuser_write_end(replica_nestlevel);

	return changed;
}

/*
 * inbox_prune() returns bigint
 *		One pruning pass in the current database; returns markers deleted.
 */
Datum
inbox_prune(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(pass_in_transaction("inbox_prune()", inbox_prune_batch));
}

/*
 * inbox_reclaim() returns bigint
 *		One reclaim pass in the current database; returns claims released
 *		or failed.
 */
Datum
inbox_reclaim(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(pass_in_transaction("inbox_reclaim()",
										inbox_reclaim_batch));
}
