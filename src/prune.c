/*-------------------------------------------------------------------------
 *
 * prune.c
 *	  Pruning: deleting the markers past their consumer's retention.
 *
 * Pruning deletes processed and failed markers whose processed_at is older
 * than their consumer's retention; it never touches a claim that is live,
 * expired or released.  It works in batches of at most inbox.batch_size
 * markers, and leaves a marker that another session holds for a later pass
 * rather than wait for it.
 *
 * It reads the partial index inbox_prunable (consumer, processed_at, id),
 * one consumer at a time, so that each batch reads only markers it deletes
 * and a consumer with a long retention costs the others nothing.  A pass
 * keeps its position in that order between batches (InboxPassPosition): the
 * entries of markers a batch deleted stay in the index until vacuum, and a
 * batch that started over would read them all again.
 *
 * The walk (the usual way): an index scan of inbox_prunable of our own
 * finds each consumer, then its markers past their retention from the
 * position on, and each marker found is deleted through the table access
 * method without waiting: one held by someone else reports "being
 * modified" and is skipped.  No row lock is taken and WAL-logged before
 * each delete (a WAL record per marker on top of the delete's own), and
 * neither executor nor SPI runs per marker: the claimers pay for every bit
 * of the worker's CPU time while it runs.
 * The scan returns the version of each marker its snapshot sees, following
 * HOT chains, so the delete names that version, never the index entry's.
 *
 * The statement: on a table with triggers, rules or row security, where a
 * DELETE would do more, or one changed from what inbox.sql created, each
 * batch is one DELETE statement that locks its rows with FOR UPDATE SKIP
 * LOCKED and deletes them by ctid (a TID scan), never by a join that the
 * planner could turn into a scan of the whole table.
 *
 * This file runs one batch (inbox_prune_batch); the passes are driven
 * elsewhere, with the same batches: the background worker runs each batch
 * in its own short transaction (worker.c), pausing for a moment every
 * PRUNE_CHUNK markers so that claimers waiting for its CPU do not wait
 * long; inbox_prune() runs them all in the caller's transaction, without
 * pauses (pass.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "inbox.h"

/*
 * The markers a worker batch reads and deletes between two pauses.
 *
 * A process that computes without making a system call can keep its CPU
 * until the scheduler's next tick, even from the processes it woke, and
 * whatever its priority (a nice level or SCHED_IDLE does not help):
 * claimers woken while the worker reads or deletes a whole batch in one
 * stretch wait behind it for its CPU, at times while another CPU is idle.
 * A sleep after every chunk, the shortest there is (1 microsecond, which
 * Linux stretches to its timer slack), hands them the CPU.  The shorter
 * the stretch, the less a claim waits, and the more pauses the walk pays
 * for, each one the claimers' turn; inbox.batch_delay (settings.c) was
 * chosen together with this value.  The measurements behind both:
 * bench/HISTORY.md, Pruning.
 */
#define PRUNE_CHUNK 50

/*
 * A walk through inbox_prunable: the consumers one after another, and the
 * markers of each past its retention, in the index's order.
 */
typedef struct InboxPruneWalk
{
	const InboxObjects *objects;
	Relation	heap;
	Relation	index;			/* inbox_prunable */
	Snapshot	snapshot;
	TimestampTz now;
	InboxPassPosition *position;	/* moved to each marker read */
	bool		position_consumer_set;	/* holds the current consumer? */
	IndexScanDesc consumers;	/* finds the next consumer */
	IndexScanDesc markers;		/* reads the current one's markers */
	TupleTableSlot *slot;
	text	   *consumer;		/* the current consumer; NULL before the
								 * first */
	bool		consumer_fits;	/* does the position have room for it? */
	int64		limit;			/* how many markers and consumers the batch
								 * may handle */
	int64		handled;		/* how many it has: markers deleted or
								 * skipped, consumers walked to their end */
	ScanKeyData consumer_key;
	ScanKeyData marker_keys[3];
	ScanKeyData start_keys[2];	/* the members of marker_keys[1] */
} InboxPruneWalk;

static InboxPlan cutoff_plan;
static InboxPlan delete_plan;

/*
 * The parameters of PRUNE_CANDIDATES, the statement's way of selecting the
 * markers of a batch.
 */
#define PRUNE_NARGS 6
static Oid	prune_argtypes[PRUNE_NARGS] = {TIMESTAMPTZOID, INTERVALOID, INT4OID,
TEXTOID, TIMESTAMPTZOID, INT8OID};

/* The lowest id, where the walk of a consumer other than $4 starts. */
#define PRUNE_MIN_ID "'-9223372036854775808'::pg_catalog.int8"

/* The final states, as an array constant of the extension's enum. */
#define FINAL_STATES "'{processed,failed}'::%1$s.inbox_state[]"

/*
 * The markers of a prune batch, with their consumer, processed_at and id,
 * the same ones a walk reads: consumers are enumerated by skipping through
 * inbox_prunable (one descent each), then each gives up to a batch of its
 * oldest markers past its retention.  $1 is now, $2 the default retention,
 * $3 the batch size; $4, $5 and $6 the pass's position ($4 NULL: from the
 * first consumer), the (consumer, processed_at, id) where the walk resumes,
 * inclusive.  The row comparison is an index condition on inbox_prunable:
 * the scan starts at the position, without reading again the entries of
 * markers the pass deleted, even where thousands tie on processed_at.
 * A consumer whose retention is not valid (only a row written past the
 * CHECK constraints can have one) gets no markers pruned, and the others
 * are pruned as usual (see prune_cutoff).  lock is appended to the
 * innermost SELECT.
 *
 * In plain SQL (the text qualifies every name with the extension's schema
 * and every operator with pg_catalog), with final for
 * '{processed,failed}'::inbox_state[]:
 *
 *----------
 *	WITH RECURSIVE consumers(consumer) AS (
 *		SELECT COALESCE($4, (SELECT consumer FROM ONLY inbox
 *							 WHERE state = ANY (final)
 *							 ORDER BY consumer LIMIT 1))
 *		UNION ALL
 *		SELECT (SELECT i.consumer FROM ONLY inbox i
 *				WHERE i.state = ANY (final) AND i.consumer > c.consumer
 *				ORDER BY i.consumer LIMIT 1)
 *		FROM consumers c WHERE c.consumer IS NOT NULL)
 *	SELECT d.tid, c.consumer, d.processed_at, d.id
 *	FROM consumers c CROSS JOIN LATERAL (
 *		SELECT i.ctid AS tid, i.processed_at, i.id FROM ONLY inbox i
 *		WHERE i.consumer = c.consumer
 *		  AND i.state = ANY (final)
 *		  AND ROW(i.processed_at, i.id) >= ROW(
 *				CASE WHEN c.consumer = $4 THEN $5 ELSE '-infinity' END,
 *				CASE WHEN c.consumer = $4 THEN $6
 *					 ELSE '-9223372036854775808'::int8 END)
 *		  AND i.processed_at < (
 *				SELECT CASE
 *					WHEN r.retention IS NULL THEN $1 - $2
 *					WHEN inbox_retention_is_valid(r.retention)
 *					THEN $1 - r.retention
 *					ELSE '-infinity'::timestamptz END
 *				FROM (SELECT (SELECT x.retention FROM inbox_consumers x
 *							  WHERE x.consumer = c.consumer) AS retention) r)
 *		ORDER BY i.processed_at, i.id LIMIT $3 lock) d
 *	WHERE c.consumer IS NOT NULL
 *	LIMIT $3
 *----------
 */
#define PRUNE_CANDIDATES(lock) \
	"WITH RECURSIVE consumers(consumer) AS (" \
	" SELECT COALESCE($4, (SELECT consumer FROM ONLY %1$s.%2$s" \
	"  WHERE state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  ORDER BY consumer LIMIT 1))" \
	" UNION ALL" \
	" SELECT (SELECT i.consumer FROM ONLY %1$s.%2$s i" \
	"  WHERE i.state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  AND i.consumer" INBOX_GT "c.consumer" \
	"  ORDER BY i.consumer LIMIT 1)" \
	" FROM consumers c WHERE c.consumer IS NOT NULL)" \
	" SELECT d.tid, c.consumer, d.processed_at, d.id" \
	" FROM consumers c CROSS JOIN LATERAL (" \
	"  SELECT i.ctid AS tid, i.processed_at, i.id FROM ONLY %1$s.%2$s i" \
	"  WHERE i.consumer" INBOX_EQ "c.consumer" \
	"  AND i.state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  AND ROW(i.processed_at, i.id)" INBOX_GE "ROW(" \
	"   CASE WHEN c.consumer" INBOX_EQ "$4 THEN $5 ELSE '-infinity' END," \
	"   CASE WHEN c.consumer" INBOX_EQ "$4 THEN $6 ELSE " PRUNE_MIN_ID " END)" \
	"  AND i.processed_at" INBOX_LT "(SELECT CASE" \
	"   WHEN r.retention IS NULL THEN $1" INBOX_MINUS "$2" \
	"   WHEN %1$s.inbox_retention_is_valid(r.retention)" \
	"   THEN $1" INBOX_MINUS "r.retention" \
	"   ELSE '-infinity'::pg_catalog.timestamptz END" \
	"   FROM (SELECT (SELECT x.retention FROM %1$s.%3$s x" \
	"   WHERE x.consumer" INBOX_EQ "c.consumer) AS retention) r)" \
	"  ORDER BY i.processed_at, i.id LIMIT $3 " lock ") d" \
	" WHERE c.consumer IS NOT NULL" \
	" LIMIT $3"

/*
 * prune_default_retention
 *		inbox.retention as an interval.
 */
static Interval *
prune_default_retention(Interval *retention)
{
	memset(retention, 0, sizeof(Interval));
	retention->time = (int64) inbox_retention * SECS_PER_MINUTE * USECS_PER_SEC;
	return retention;
}

/*
 * prune_check_privilege
 *		What a DELETE ... WHERE on the table would check before it runs,
 *		whether or not it deletes a row: a transaction that may write
 *		(ExecCheckXactReadOnly), the privileges (ExecCheckRTPerms), and a
 *		replica identity if a publication replicates deletes
 *		(CheckValidResultRel).  The same errors as the statement.
 */
static void
prune_check_privilege(Relation rel)
{
	AclMode		modes[] = {ACL_SELECT, ACL_DELETE};

	PreventCommandIfReadOnly("DELETE");

	for (int i = 0; i < lengthof(modes); i++)
	{
		AclResult	aclresult;

		aclresult = pg_class_aclcheck(RelationGetRelid(rel), GetUserId(),
									  modes[i]);
		if (aclresult != ACLCHECK_OK)
			aclcheck_error(aclresult, OBJECT_TABLE,
						   RelationGetRelationName(rel));
	}
	CheckCmdReplicaIdentity(rel, CMD_DELETE);
}

/*
 * prune_open_index
 *		Open inbox_prunable for a walk; NULL if the statement must prune
 *		instead.
 *
 * The walk deletes as a DELETE would only on the table inbox.sql created,
 * with no triggers, rules or row security; and it relies on the index's
 * order, so the index must be the one inbox.sql created too: ready, valid
 * and live (not one CREATE INDEX CONCURRENTLY is still building), a btree
 * on (consumer, processed_at, id) in ascending order, with the default
 * operator classes, consumer in the "C" collation, and holding every
 * processed and failed marker (its predicate proves it; the walk checks
 * each marker's state itself besides).
 */
static Relation
prune_open_index(Relation heap, const InboxObjects *objects)
{
	static const AttrNumber columns[] = {
	INBOX_ATT_CONSUMER, INBOX_ATT_PROCESSED_AT, INBOX_ATT_ID};
	static const Oid opclasses[] = {
	TEXT_BTREE_OPS_OID, TIMESTAMPTZ_BTREE_OPS_OID, INT8_BTREE_OPS_OID};
	Relation	index;
	Datum		datum;
	bool		isnull;
	oidvector  *indclass;

	/* The plain table has no triggers or rules; row security is extra. */
	if (!inbox_fast_paths_audited() ||
		heap->rd_rel->relrowsecurity ||
		!OidIsValid(objects->prunable_oid) ||
		!OidIsValid(objects->processed_oid) ||
		!OidIsValid(objects->failed_oid) ||
		!inbox_table_is_plain(heap, objects))
		return NULL;

	/*
	 * The walk deletes as the statement would only for a caller with the
	 * table-wide privileges; one with column privileges gets the statement,
	 * which checks them precisely.
	 */
	if (pg_class_aclmask(objects->table_oid, GetUserId(),
						 ACL_SELECT | ACL_DELETE, ACLMASK_ALL) !=
		(ACL_SELECT | ACL_DELETE))
		return NULL;

	index = index_open(objects->prunable_oid, AccessShareLock);
	if (!inbox_index_is(index, lengthof(columns), columns) ||
		!inbox_index_is_usable(index) ||
		!inbox_index_holds_all(objects->prunable_oid, objects,
							   objects->processed_oid) ||
		!inbox_index_holds_all(objects->prunable_oid, objects,
							   objects->failed_oid) ||
		index->rd_indcollation[0] != C_COLLATION_OID)
	{
		index_close(index, AccessShareLock);
		return NULL;
	}
	datum = SysCacheGetAttr(INDEXRELID, index->rd_indextuple,
							Anum_pg_index_indclass, &isnull);
	Assert(!isnull);
	indclass = (oidvector *) DatumGetPointer(datum);
	for (int i = 0; i < lengthof(columns); i++)
	{
		if (indclass->values[i] != opclasses[i] || index->rd_indoption[i] != 0)
		{
			index_close(index, AccessShareLock);
			return NULL;
		}
	}
	return index;
}

/*
 * prune_cutoff
 *		The processed_at before which the consumer's markers are past their
 *		retention at now.
 *
 * The retention is a row of inbox_consumers, read with SQL once per
 * consumer and batch.  One that is not valid (written past the CHECK
 * constraints) is that consumer's problem alone: a WARNING names it, and
 * none of its markers is pruned, rather than the arithmetic failing and
 * the pass with it, for every consumer.  Interval arithmetic follows the
 * session's time zone, as in SQL.
 */
static TimestampTz
prune_cutoff(const InboxObjects *objects, text *consumer, TimestampTz now)
{
	static Oid	argtypes[] = {TEXTOID};
	Interval	default_retention;
	Interval   *retention = prune_default_retention(&default_retention);
	Datum		value;
	SPIPlanPtr	plan;
	bool		isnull = true;

	plan = inbox_plan(&cutoff_plan, objects,
					  "SELECT x.retention FROM %1$s.%3$s x"
					  " WHERE x.consumer" INBOX_EQ "$1",
					  1, argtypes);
	value = PointerGetDatum(consumer);
	if (SPI_execute_plan(plan, &value, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "inbox retention query failed");
	if (SPI_processed == 1)
		value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
							  1, &isnull);
	if (!isnull)
		retention = DatumGetIntervalP(value);

	if (inbox_interval_problem(retention, INBOX_RETENTION_MAX_SECONDS) != NULL)
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention of inbox consumer \"%s\" is not valid; its markers are not pruned",
						text_to_cstring(consumer)),
				 errdetail("It is \"%s\".",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(retention)))),
				 errhint("Set a valid one with inbox_configure.")));
		SPI_freetuptable(SPI_tuptable);
		return DT_NOBEGIN;
	}
	value = DirectFunctionCall2(timestamptz_mi_interval,
								TimestampTzGetDatum(now),
								IntervalPGetDatum(retention));
	SPI_freetuptable(SPI_tuptable);
	return DatumGetTimestampTz(value);
}

/*
 * prune_walk_begin
 *		Set up a walk from position on (invalid: from the first consumer).
 *
 * The caller has opened heap and index (prune_open_index), checked the
 * privileges, and has an active snapshot and an SPI connection, which last
 * as long as the walk.
 */
static void
prune_walk_begin(InboxPruneWalk *walk, const InboxObjects *objects, Relation heap,
				 Relation index, TimestampTz now, InboxPassPosition *position)
{
	memset(walk, 0, sizeof(InboxPruneWalk));
	walk->objects = objects;
	walk->heap = heap;
	walk->index = index;
	walk->snapshot = GetActiveSnapshot();
	walk->now = now;
	walk->position = position;
	walk->slot = table_slot_create(heap, NULL);
	walk->consumers = inbox_index_beginscan(heap, index, walk->snapshot, 1, 0);
	walk->markers = inbox_index_beginscan(heap, index, walk->snapshot,
										  lengthof(walk->marker_keys), 0);
}

/*
 * prune_walk_end
 *		Release what the walk set up.
 */
static void
prune_walk_end(InboxPruneWalk *walk)
{
	index_endscan(walk->markers);
	index_endscan(walk->consumers);
	ExecDropSingleTupleTableSlot(walk->slot);
}

/*
 * prune_slot_is_final
 *		Is the marker in the walk's slot processed or failed?  Reads its
 *		columns up to processed_at.
 */
static bool
prune_slot_is_final(InboxPruneWalk *walk)
{
	Oid			state;

	slot_getsomeattrs(walk->slot, INBOX_ATT_PROCESSED_AT);
	state = DatumGetObjectId(walk->slot->tts_values[INBOX_ATT_STATE - 1]);
	return state == walk->objects->processed_oid ||
		state == walk->objects->failed_oid;
}

/*
 * prune_is_position_consumer
 *		Is consumer the one the walk's position names?
 */
static bool
prune_is_position_consumer(InboxPruneWalk *walk, text *consumer)
{
	text	   *other = (text *) walk->position->consumer.data;

	return walk->position->valid &&
		VARSIZE_ANY_EXHDR(consumer) == VARSIZE_ANY_EXHDR(other) &&
		memcmp(VARDATA_ANY(consumer), VARDATA_ANY(other),
			   VARSIZE_ANY_EXHDR(consumer)) == 0;
}

/*
 * prune_position_set_consumer
 *		Make consumer the position's.  One too long for the position (only a
 *		hand-inserted marker can have it) leaves the position invalid: the
 *		next batch then starts over.
 */
static void
prune_position_set_consumer(InboxPassPosition *position, text *consumer)
{
	Size		len = VARSIZE_ANY_EXHDR(consumer);

	position->valid = len <= INBOX_CONSUMER_MAX_BYTES;
	if (position->valid)
	{
		SET_VARSIZE(position->consumer.data, VARHDRSZ + len);
		memcpy(VARDATA(position->consumer.data), VARDATA_ANY(consumer), len);
	}
}

/*
 * prune_next_consumer
 *		Move the walk to the next consumer that has final markers, and start
 *		reading its markers past their retention; false when there is none.
 *
 * The first is the position's consumer, if the position is valid (whether
 * or not it still has markers), or the first there is; then each one after
 * the current, one descent of the index each.  Reading the position's
 * consumer, the scan starts just after the position's marker: a row
 * comparison, an index condition that skips the entries of the markers
 * deleted before, however many tie on processed_at.
 */
static bool
prune_next_consumer(InboxPruneWalk *walk)
{
	InboxPassPosition *position = walk->position;
	text	   *consumer = NULL;
	TimestampTz start_at = DT_NOBEGIN;
	int64		start_id = PG_INT64_MIN;
	StrategyNumber start_strategy = BTGreaterEqualStrategyNumber;

	if (walk->consumer == NULL && position->valid)
	{
		/*
		 * Not looked up: the index's first entries of the position's
		 * consumer are those of the markers the pass deleted before.
		 */
		consumer = DatumGetTextPCopy(PointerGetDatum(position->consumer.data));
	}
	else
	{
		if (walk->consumer != NULL)
			ScanKeyEntryInitialize(&walk->consumer_key, 0, 1,
								   BTGreaterStrategyNumber, InvalidOid,
								   C_COLLATION_OID, F_TEXT_GT,
								   PointerGetDatum(walk->consumer));
		else
			ScanKeyEntryInitialize(&walk->consumer_key, 0, 1,
								   BTGreaterEqualStrategyNumber, InvalidOid,
								   C_COLLATION_OID, F_TEXT_GE,
								   PointerGetDatum(cstring_to_text("")));
		index_rescan(walk->consumers, &walk->consumer_key, 1, NULL, 0);
		while (index_getnext_slot(walk->consumers, ForwardScanDirection,
								  walk->slot))
		{
			if (prune_slot_is_final(walk))
			{
				Datum		found = walk->slot->tts_values[INBOX_ATT_CONSUMER - 1];

				consumer = DatumGetTextPCopy(found);
				break;
			}
		}
		ExecClearTuple(walk->slot);
		if (consumer == NULL)
			return false;
	}

	if (walk->consumer != NULL)
		pfree(walk->consumer);
	walk->consumer = consumer;
	walk->consumer_fits = VARSIZE_ANY_EXHDR(consumer) <= INBOX_CONSUMER_MAX_BYTES;
	if (!walk->consumer_fits)
		ereport(WARNING,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("inbox consumer of %zu bytes is not pruned",
						VARSIZE_ANY_EXHDR(consumer)),
				 errdetail("Consumers are at most %d bytes long; a marker written past the functions has a longer one.",
						   INBOX_CONSUMER_MAX_BYTES),
				 errhint("Delete its markers by hand.")));
	walk->position_consumer_set = prune_is_position_consumer(walk, consumer);
	if (walk->position_consumer_set)
	{
		start_at = position->processed_at;
		start_id = position->id;
		start_strategy = BTGreaterStrategyNumber;
	}

	/* consumer = $consumer */
	ScanKeyEntryInitialize(&walk->marker_keys[0], 0, 1, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ,
						   PointerGetDatum(consumer));
	/* ROW(processed_at, id) > or >= ROW(start_at, start_id) */
	ScanKeyEntryInitialize(&walk->start_keys[0], SK_ROW_MEMBER, 2,
						   start_strategy, TIMESTAMPTZOID, InvalidOid,
						   F_TIMESTAMPTZ_CMP, TimestampTzGetDatum(start_at));
	ScanKeyEntryInitialize(&walk->start_keys[1], SK_ROW_MEMBER | SK_ROW_END, 3,
						   start_strategy, INT8OID, InvalidOid,
						   F_BTINT8CMP, Int64GetDatum(start_id));

	/*
	 * The header is set field by field, as the executor does for a row
	 * comparison (ExecIndexBuildScanKeys): it has no comparison function,
	 * which ScanKeyEntryInitialize accepts only for an IS [NOT] NULL key
	 * (an assertion, seen on builds with --enable-cassert).
	 */
	MemSet(&walk->marker_keys[1], 0, sizeof(ScanKeyData));
	walk->marker_keys[1].sk_flags = SK_ROW_HEADER;
	walk->marker_keys[1].sk_attno = 2;
	walk->marker_keys[1].sk_strategy = start_strategy;
	walk->marker_keys[1].sk_argument = PointerGetDatum(walk->start_keys);
	/* processed_at < the consumer's cutoff */
	ScanKeyEntryInitialize(&walk->marker_keys[2], 0, 2, BTLessStrategyNumber,
						   InvalidOid, InvalidOid, F_TIMESTAMPTZ_LT,
						   TimestampTzGetDatum(prune_cutoff(walk->objects,
															consumer,
															walk->now)));
	index_rescan(walk->markers, walk->marker_keys, lengthof(walk->marker_keys),
				 NULL, 0);
	return true;
}

/*
 * prune_walk_next
 *		Read the next marker past its retention into the walk's slot, and
 *		move the position to it; false when the walk is done, or has
 *		handled its limit.
 *
 * The walk reads in inbox_prunable's order, so the marker read last is the
 * furthest on.  A consumer walked to its end counts as handled: each costs
 * an index descent and a query of its retention, and a million consumers
 * with nothing to prune must not make one batch, and the snapshot it
 * holds, last for seconds.  A walk that stops there leaves the position
 * after that consumer's last possible marker, where the next batch goes on.
 *
 * A consumer too long for the position (only a row written by hand, past
 * the functions' checks, can have one) is passed over with a WARNING, its
 * markers kept: a batch that ended on it could not say where the next one
 * starts, and every batch would start over and end there again.
 */
static bool
prune_walk_next(InboxPruneWalk *walk)
{
	InboxPassPosition *position = walk->position;
	TupleTableSlot *slot = walk->slot;

	for (;;)
	{
		if (walk->handled >= walk->limit)
			return false;
		while (walk->consumer != NULL && walk->consumer_fits &&
			   index_getnext_slot(walk->markers, ForwardScanDirection, slot))
		{
			if (!prune_slot_is_final(walk))
				continue;
			if (!walk->position_consumer_set)
			{
				prune_position_set_consumer(position, walk->consumer);
				walk->position_consumer_set = true;
			}
			position->processed_at =
				DatumGetTimestampTz(slot->tts_values[INBOX_ATT_PROCESSED_AT - 1]);
			position->id = DatumGetInt64(slot->tts_values[INBOX_ATT_ID - 1]);
			return true;
		}
		if (walk->consumer != NULL && walk->consumer_fits)
		{
			if (!walk->position_consumer_set)
			{
				prune_position_set_consumer(position, walk->consumer);
				walk->position_consumer_set = true;
			}
			position->processed_at = DT_NOEND;
			position->id = PG_INT64_MAX;
			if (++walk->handled >= walk->limit)
				return false;
		}
		if (!prune_next_consumer(walk))
			return false;
	}
}

/*
 * prune_delete_marker
 *		Delete one marker version the walk's snapshot saw, without waiting.
 *
 * TM_Ok: deleted.  Another transaction has locked, updated or deleted it
 * since: skipped, for a later pass.  TM_SelfModified: this transaction
 * deleted it already, in an earlier batch of inbox_prune().
 */
static TM_Result
prune_delete_marker(Relation heap, ItemPointer tid, CommandId cid,
					Snapshot snapshot)
{
	TM_FailureData tmfd;
	TM_Result	result;

	result = table_tuple_delete(heap, tid, cid, snapshot, InvalidSnapshot,
								false, &tmfd, false);
	switch (result)
	{
		case TM_Ok:
		case TM_BeingModified:
		case TM_Updated:
		case TM_Deleted:
		case TM_SelfModified:
			return result;
		default:
			elog(ERROR, "unexpected result %d deleting an inbox marker",
				 (int) result);
	}
	return result;				/* keep compiler quiet */
}

/*
 * prune_walk_delete
 *		Walk on until limit markers and consumers are handled (see
 *		prune_walk_next), deleting each marker; returns how many were
 *		deleted, and sets *handled (the batch's examined count).
 *
 * A marker is handled when it is deleted, or skipped because another
 * transaction holds or changed it.  One this transaction deleted before
 * is not: inbox_prune() runs all its batches in one snapshot, which still
 * sees those, and a batch that starts over (an invalid position) reads
 * them again; were they counted, it could read the same ones forever.
 * With pause, a pause follows every PRUNE_CHUNK markers read.
 */
static int64
prune_walk_delete(InboxPruneWalk *walk, int64 limit, bool pause, int64 *handled)
{
	CommandId	cid = GetCurrentCommandId(true);
	int64		read = 0;
	int64		deleted = 0;

	walk->limit = limit;
	walk->handled = 0;
	while (prune_walk_next(walk))
	{
		CHECK_FOR_INTERRUPTS();
		switch (prune_delete_marker(walk->heap, &walk->slot->tts_tid, cid,
									walk->snapshot))
		{
			case TM_Ok:
				deleted++;
				walk->handled++;
				break;
			case TM_SelfModified:
				break;
			default:
				walk->handled++;
				break;
		}
		if (pause && ++read % PRUNE_CHUNK == 0)
			pg_usleep(1L);
	}
	*handled = walk->handled;
	return deleted;
}

/*
 * prune_walk_batch
 *		One batch of a walk: at most batch_size markers and consumers
 *		handled, from position on, moving it.
 *
 * The caller has opened heap and index (prune_open_index), checked the
 * privileges, and has an active snapshot and an SPI connection.
 */
static InboxBatchResult
prune_walk_batch(const InboxObjects *objects, Relation heap, Relation index,
				 TimestampTz now, int batch_size, InboxPassPosition *position,
				 bool pause)
{
	InboxPruneWalk walk;
	InboxBatchResult result;

	prune_walk_begin(&walk, objects, heap, index, now, position);
	result.changed = prune_walk_delete(&walk, batch_size, pause,
									   &result.examined);
	prune_walk_end(&walk);
	return result;
}

/*
 * prune_advance
 *		Move the pass's position to the last marker the DELETE statement
 *		returned (columns consumer, processed_at, id), if it lies further on.
 *
 * The last in inbox_prunable's order: the greatest consumer, then
 * processed_at, then id; a DELETE ... RETURNING has no order of its own.
 */
static void
prune_advance(InboxPassPosition *position)
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

		consumer = DatumGetTextPP(SPI_getbinval(tuple, tuptable->tupdesc, 1,
												&isnull));
		at = DatumGetTimestampTz(SPI_getbinval(tuple, tuptable->tupdesc, 2,
											   &isnull));
		id = DatumGetInt64(SPI_getbinval(tuple, tuptable->tupdesc, 3, &isnull));
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
	prune_position_set_consumer(position, last);
	position->processed_at = last_at;
	position->id = last_id;
}

/*
 * prune_by_statement
 *		One batch as a DELETE statement that locks its rows first, for a
 *		table a walk must not prune.
 *
 * The statement skips the markers others hold rather than return them, so
 * what it examined is what it deleted.
 */
static InboxBatchResult
prune_by_statement(const InboxObjects *objects, TimestampTz now,
				   int batch_size, InboxPassPosition *position)
{
	Interval	retention;
	Datum		values[PRUNE_NARGS];
	char		nulls[PRUNE_NARGS];
	SPIPlanPtr	plan;
	InboxBatchResult result;

	/*----------
	 * WITH doomed AS (PRUNE_CANDIDATES(FOR UPDATE OF i SKIP LOCKED))
	 * DELETE FROM ONLY inbox
	 * WHERE ctid = ANY (ARRAY(SELECT tid FROM doomed))
	 * RETURNING consumer, processed_at, id
	 *----------
	 */
	plan = inbox_plan(&delete_plan, objects,
					  "WITH doomed AS ("
					  PRUNE_CANDIDATES("FOR UPDATE OF i SKIP LOCKED") ")"
					  " DELETE FROM ONLY %1$s.%2$s"
					  " WHERE ctid" INBOX_EQ "ANY (ARRAY(SELECT tid FROM doomed))"
					  " RETURNING consumer, processed_at, id",
					  PRUNE_NARGS, prune_argtypes);

	memset(nulls, ' ', PRUNE_NARGS);
	values[0] = TimestampTzGetDatum(now);
	values[1] = IntervalPGetDatum(prune_default_retention(&retention));
	values[2] = Int32GetDatum(batch_size);
	if (position->valid)
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

	if (SPI_execute_plan(plan, values, nulls, false, 0) !=
		SPI_OK_DELETE_RETURNING)
		elog(ERROR, "inbox prune statement failed");
	prune_advance(position);
	result.examined = result.changed = (int64) SPI_processed;
	return result;
}

/*
 * inbox_prune_batch
 *		Delete at most batch_size markers past their retention at now,
 *		from position on, and move position past them.
 *
 * An InboxBatchFunction (pass.c, worker.c): the caller is connected to
 * SPI, has an active snapshot, and passes the objects it resolved in this
 * transaction.  With pause, a walk pauses every PRUNE_CHUNK markers.
 */
InboxBatchResult
inbox_prune_batch(const InboxObjects *objects, TimestampTz now, int batch_size,
				  bool pause, InboxPassPosition *position)
{
	Relation	heap;
	Relation	index;
	InboxBatchResult result;

	heap = table_open(objects->table_oid, RowExclusiveLock);
	index = prune_open_index(heap, objects);
	if (index == NULL)
	{
		table_close(heap, NoLock);
		return prune_by_statement(objects, now, batch_size, position);
	}

	prune_check_privilege(heap);
	result = prune_walk_batch(objects, heap, index, now, batch_size,
							  position, pause);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return result;
}
