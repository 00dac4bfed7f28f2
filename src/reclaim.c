/*-------------------------------------------------------------------------
 *
 * reclaim.c
 *	  Reclaiming dead claims: one batch of a reclaim pass.
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
 * A pass is batches until one leaves nothing more: inbox_reclaim() runs
 * them all in the caller's transaction (pass.c), the background worker
 * each in its own (worker.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "inbox.h"

static InboxPlan reclaim_plan;

/* In reclaim: the max_attempts of claim i's consumer. */
#define MAX_ATTEMPTS \
	" COALESCE((SELECT c.max_attempts FROM %1$s.%3$s c" \
	" WHERE c.consumer" INBOX_EQ "i.consumer), $2) "

/*
 * inbox_reclaim_batch
 *		Release or fail at most batch_size claims whose lease expired by now.
 *
 * An InboxBatchFunction, like inbox_prune_batch (prune.c); it needs no
 * position (the claims it changes leave the condition it selects on).  The
 * statement skips the claims others hold rather than
 * return them, so what it examined is what it changed.
 */
InboxBatchResult
inbox_reclaim_batch(const InboxObjects *objects, TimestampTz now,
					int batch_size, InboxPassPosition *position)
{
	static Oid	argtypes[] = {TIMESTAMPTZOID, INT4OID, INT4OID};
	Datum		values[3];
	SPIPlanPtr	plan;
	InboxBatchResult result;

	/*----------
	 * In plain SQL (the text qualifies every name with the extension's
	 * schema and every operator with pg_catalog), with max for
	 * MAX_ATTEMPTS, COALESCE((SELECT c.max_attempts FROM inbox_consumers c
	 * WHERE c.consumer = i.consumer), $2):
	 *
	 *	UPDATE ONLY inbox i SET
	 *		state = CASE WHEN i.attempts >= max
	 *				THEN 'failed'::inbox_state ELSE 'released' END,
	 *		processed_at = CASE WHEN i.attempts >= max THEN $1 END,
	 *		last_error = 'lease expired after attempt ' || i.attempts
	 *					 || ' of ' || max,
	 *		lease_until = NULL
	 *	WHERE i.ctid = ANY (ARRAY(
	 *		SELECT x.ctid FROM ONLY inbox x
	 *		WHERE x.state = 'claimed' AND x.lease_until <= $1
	 *		LIMIT $3
	 *		FOR UPDATE SKIP LOCKED))
	 *----------
	 */
	plan = inbox_plan(&reclaim_plan, objects,
					  "UPDATE ONLY %1$s.%2$s i SET"
					  " state = CASE WHEN i.attempts" INBOX_GE MAX_ATTEMPTS
					  "  THEN 'failed'::%1$s.inbox_state ELSE 'released' END,"
					  " processed_at = CASE WHEN i.attempts" INBOX_GE MAX_ATTEMPTS
					  "  THEN $1 END,"
					  " last_error = 'lease expired after attempt '" INBOX_CONCAT
					  "  i.attempts" INBOX_CONCAT "' of '" INBOX_CONCAT MAX_ATTEMPTS ","
					  " lease_until = NULL"
					  " WHERE i.ctid" INBOX_EQ "ANY (ARRAY("
					  "  SELECT x.ctid FROM ONLY %1$s.%2$s x"
					  "  WHERE x.state" INBOX_EQ "'claimed'"
					  "  AND x.lease_until" INBOX_LE "$1"
					  "  LIMIT $3"
					  "  FOR UPDATE SKIP LOCKED))",
					  3, argtypes);

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(inbox_max_attempts);
	values[2] = Int32GetDatum(batch_size);

	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_UPDATE, "inbox reclaim");
	result.examined = result.changed = (int64) SPI_processed;
	inbox_count(INBOX_COUNT_RECLAIMED, NULL, result.changed);
	return result;
}
