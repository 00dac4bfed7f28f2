/*-------------------------------------------------------------------------
 *
 * marker.c
 *	  Writing markers through the table and index access methods: the fast
 *	  path of a one-phase claim, and of a two-phase claim of a new message,
 *	  under READ COMMITTED.
 *
 * Why: a claim of a new message is the product's main cost figure, and the
 * SQL path (claim.c) pays for an SPI INSERT (plan revalidation, executor
 * start-up, a projection) inside a subtransaction, on top of the probe that
 * makes duplicates cheap.  That overhead kept a claim slower than the raw
 * INSERT ... ON CONFLICT DO NOTHING it replaces.
 * inbox_begin of a new message (twophase_fast.c) writes its claim the same
 * way, with a claim's columns instead of a processed marker's.
 *
 * How: the same protocol as INSERT ... ON CONFLICT DO NOTHING, written for
 * one known table:
 *
 *	1. Probe the key index with a dirty snapshot, which also sees rows of
 *	   transactions still in progress.  A live marker answers false.  A
 *	   marker inserted or deleted by a transaction still running makes us
 *	   wait for that transaction (or only for its speculative insertion) and
 *	   probe again, exactly as the unique check of a plain INSERT would.
 *
 *	2. No marker: insert the heap tuple speculatively, then its index
 *	   entries, with the key index checked in "partial" mode, which reports
 *	   a conflicting entry instead of raising an error.  A marker that
 *	   appeared between steps 1 and 2 makes us kill our own tuple (a
 *	   "super-delete", invisible to everyone) and go back to step 1.
 *
 * No subtransaction, so no subxid cache entry and no error to catch; no
 * second probe, so a new message costs one key lookup plus the inserts,
 * like the raw statement.  When the table has exactly the indexes inbox.sql
 * creates, their entries are formed here from the values we already hold:
 * the key index first (a conflict there makes the other unnecessary), then
 * the one index the marker's state puts it in: inbox_prunable for a
 * processed marker, inbox_open_claims for a two-phase claim (each index's
 * predicate excludes the other's rows).
 * That skips building executor state, index descriptions and the partial
 * indexes' predicates on every call.  Any other index (one a DBA added),
 * or one of ours recreated on other columns, makes us hand the whole tuple
 * to the executor's ExecInsertIndexTuples instead, which knows every kind
 * of index.
 *
 * When: only under READ COMMITTED.  Under REPEATABLE READ the design wants
 * false for a marker committed after the snapshot, and under SERIALIZABLE
 * the conflict must reach the predicate lock manager the way an INSERT's
 * unique check reports it; claim.c keeps the SQL path for both.  And
 * only while the table is as inbox.sql created it: no triggers, rules, row
 * security in force, CHECK constraints, or columns added, dropped or
 * changed; and while the key index is ready, valid and live (the other
 * index is written here only under the same condition, objects.c).  An
 * INSERT needs no replica identity, so publications change nothing here.  Otherwise the INSERT would do something this file does not (fire
 * a trigger, apply a default), so claim.c takes the SQL path, which runs
 * a real INSERT.  Column defaults other than the extension's are not
 * detected: the table belongs to the extension.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "inbox.h"

static void marker_prepare_insert(InboxMarkerWriter *writer);
static bool marker_insert_index_entries(InboxMarkerWriter *writer,
										TupleTableSlot *slot,
										text *message_id, int64 id);
static bool marker_insert(InboxMarkerWriter *writer, text *message_id);

/*
 * inbox_marker_begin
 *		Set up writing markers of one kind for one consumer, if the fast
 *		path applies.
 *
 * heap and key_index are open and locked by the caller (claim.c,
 * twophase_fast.c), who has checked privileges, the read-only state and
 * row-level security, and calls this only where they let the fast path
 * run.  Returns false, touching nothing, when the caller must take the
 * SQL path instead.
 */
bool
inbox_marker_begin(InboxMarkerWriter *writer, const InboxObjects *objects,
				   Relation heap, Relation key_index, text *consumer,
				   InboxMarkerKind kind)
{
	bool		claimed = kind == INBOX_MARKER_CLAIMED;

	if (!inbox_fast_paths_audited() ||
		IsolationUsesXactSnapshot() ||
		!inbox_index_is_usable(key_index) ||
		!OidIsValid(objects->id_sequence_oid) ||
		!OidIsValid(claimed ? objects->claimed_oid : objects->processed_oid) ||
		(claimed && !OidIsValid(objects->token_sequence_oid)) ||
		!inbox_table_is_plain(heap, objects))
		return false;

	writer->objects = objects;
	writer->heap = heap;
	writer->key_index = key_index;
	writer->consumer = consumer;
	writer->now = GetCurrentTimestamp();
	writer->kind = kind;
	writer->lease_until = 0;
	writer->payload = (Datum) 0;
	writer->token = 0;
	writer->insert_slot = NULL;
	writer->estate = NULL;

	InitDirtySnapshot(writer->dirty);
	inbox_key_probe_begin(&writer->probe, heap, key_index, consumer,
						  &writer->dirty);
	return true;
}

/*
 * marker_prepare_insert
 *		Open the other indexes at the first insert of a call, so that a
 *		duplicate costs only the probe.
 */
static void
marker_prepare_insert(InboxMarkerWriter *writer)
{
	const InboxObjects *objects = writer->objects;

	writer->insert_slot = table_slot_create(writer->heap, NULL);
	writer->cid = GetCurrentCommandId(true);

	/*
	 * The entries are formed below from the columns inbox.sql indexes
	 * (index_insert is called without an IndexInfo, which nbtree ignores),
	 * when objects.c finds the indexes as inbox.sql made them; any other
	 * index, or one of ours changed, gets its entries from
	 * ExecInsertIndexTuples, as in the executor.
	 */
	writer->state_index =
		inbox_open_state_index(writer->heap, objects, writer->key_index,
							   writer->kind == INBOX_MARKER_CLAIMED ?
							   objects->claimed_oid : objects->processed_oid);
	if (writer->state_index != NULL)
		return;

	writer->estate = CreateExecutorState();
	writer->estate->es_output_cid = writer->cid;
	writer->result_rel = makeNode(ResultRelInfo);
	InitResultRelInfo(writer->result_rel, writer->heap, 0, NULL, 0);
	ExecOpenIndices(writer->result_rel, false);
	writer->arbiters = list_make1_oid(RelationGetRelid(writer->key_index));
}

/*
 * marker_insert_index_entries
 *		Insert the index entries of a speculatively inserted marker; false
 *		if the key index reports a possibly conflicting entry.
 *
 * Formed here, the entries come from the values the caller passes:
 * the slot's own value array is not valid once the table AM has turned the
 * slot into a heap tuple.
 */
static bool
marker_insert_index_entries(InboxMarkerWriter *writer, TupleTableSlot *slot,
							text *message_id, int64 id)
{
	Datum		values[3];
	bool		isnull[3] = {false, false, false};
	bool		conflict = false;

	if (writer->state_index == NULL)
	{
		MemoryContext oldcontext;

		oldcontext = MemoryContextSwitchTo(GetPerTupleMemoryContext(writer->estate));
		inbox_insert_index_tuples(writer->result_rel, slot, writer->estate,
								  &conflict, writer->arbiters);
		MemoryContextSwitchTo(oldcontext);
		ResetPerTupleExprContext(writer->estate);
		return !conflict;
	}

	/*
	 * "Partial" checking reports a live or in-progress entry with the same
	 * key instead of raising a unique violation; the caller then kills the
	 * tuple, which needs no entry in the other index.
	 */
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(writer->consumer);
	if (!index_insert(writer->key_index, values, isnull, &slot->tts_tid,
					  writer->heap, UNIQUE_CHECK_PARTIAL, false, NULL))
		return false;

	/*
	 * A processed marker satisfies inbox_prunable's predicate, a claim
	 * inbox_open_claims'.
	 */
	values[0] = PointerGetDatum(writer->consumer);
	if (writer->kind == INBOX_MARKER_CLAIMED)
		values[1] = Int64GetDatum(id);
	else
	{
		values[1] = TimestampTzGetDatum(writer->now);
		values[2] = Int64GetDatum(id);
	}
	index_insert(writer->state_index, values, isnull, &slot->tts_tid,
				 writer->heap, UNIQUE_CHECK_NO, false, NULL);
	return true;
}

/*
 * marker_insert
 *		Insert one marker speculatively; false if a conflicting key entry
 *		appeared since the probe (the tuple is then super-deleted).
 */
static bool
marker_insert(InboxMarkerWriter *writer, text *message_id)
{
	TupleTableSlot *slot = writer->insert_slot;
	const InboxObjects *objects = writer->objects;
	TransactionId xid = GetCurrentTransactionId();
	int64		id = nextval_internal(objects->id_sequence_oid, false);
	Datum	   *values = slot->tts_values;
	bool	   *isnull = slot->tts_isnull;
	uint32		token;
	bool		inserted;

	ExecClearTuple(slot);
	memset(isnull, true, INBOX_NATTS * sizeof(bool));
	values[INBOX_ATT_ID - 1] = Int64GetDatum(id);
	values[INBOX_ATT_MESSAGE_ID - 1] = PointerGetDatum(message_id);
	values[INBOX_ATT_CONSUMER - 1] = PointerGetDatum(writer->consumer);
	values[INBOX_ATT_RECEIVED_AT - 1] = TimestampTzGetDatum(writer->now);
	values[INBOX_ATT_ATTEMPTS - 1] = Int32GetDatum(1);
	isnull[INBOX_ATT_ID - 1] = false;
	isnull[INBOX_ATT_MESSAGE_ID - 1] = false;
	isnull[INBOX_ATT_CONSUMER - 1] = false;
	isnull[INBOX_ATT_STATE - 1] = false;
	isnull[INBOX_ATT_RECEIVED_AT - 1] = false;
	isnull[INBOX_ATT_ATTEMPTS - 1] = false;
	if (writer->kind == INBOX_MARKER_CLAIMED)
	{
		/*
		 * A new token for every claim written, as inbox_begin's INSERT
		 * draws one; nextval checks the caller's USAGE on the sequence.
		 */
		inbox_tokens_check(objects->token_sequence_oid);
		writer->token = nextval_internal(objects->token_sequence_oid, true);
		inbox_tokens_drawn(objects->token_sequence_oid, writer->token);
		values[INBOX_ATT_STATE - 1] = ObjectIdGetDatum(objects->claimed_oid);
		values[INBOX_ATT_TOKEN - 1] = Int64GetDatum(writer->token);
		values[INBOX_ATT_LEASE_UNTIL - 1] = TimestampTzGetDatum(writer->lease_until);
		values[INBOX_ATT_PAYLOAD - 1] = writer->payload;
		isnull[INBOX_ATT_TOKEN - 1] = false;
		isnull[INBOX_ATT_LEASE_UNTIL - 1] = false;
		isnull[INBOX_ATT_PAYLOAD - 1] = writer->payload == (Datum) 0;
	}
	else
	{
		values[INBOX_ATT_STATE - 1] = ObjectIdGetDatum(objects->processed_oid);
		values[INBOX_ATT_PROCESSED_AT - 1] = TimestampTzGetDatum(writer->now);
		isnull[INBOX_ATT_PROCESSED_AT - 1] = false;
	}
	ExecStoreVirtualTuple(slot);

	/*
	 * The speculative insertion lock lets a concurrent prober of the same key
	 * wait for this insertion alone rather than for our whole transaction.
	 */
	token = SpeculativeInsertionLockAcquire(xid);
	table_tuple_insert_speculative(writer->heap, slot, writer->cid, 0, NULL,
								   token);
	inserted = marker_insert_index_entries(writer, slot, message_id, id);
	table_tuple_complete_speculative(writer->heap, slot, token, inserted);
	SpeculativeInsertionLockRelease(xid);
	return inserted;
}

/*
 * inbox_marker_claim
 *		Claim one message for the writer's consumer: true if this call wrote
 *		its marker, false if a marker exists.
 */
bool
inbox_marker_claim(InboxMarkerWriter *writer, text *message_id)
{
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();

		if (inbox_key_probe_found(&writer->probe, message_id))
		{
			SnapshotData *dirty = &writer->dirty;
			ItemPointerData ctid = writer->probe.slot->tts_tid;
			TransactionId xwait;

			/* A marker no running transaction is writing or deleting. */
			xwait = TransactionIdIsValid(dirty->xmin) ? dirty->xmin : dirty->xmax;
			if (!TransactionIdIsValid(xwait))
				return false;

			/*
			 * Its fate is in another transaction's hands: wait for it, with
			 * no buffer pinned, then look again.
			 */
			ExecClearTuple(writer->probe.slot);
			if (dirty->speculativeToken != 0)
				SpeculativeInsertionWait(dirty->xmin, dirty->speculativeToken);
			else
				XactLockTableWait(xwait, writer->heap, &ctid, XLTW_InsertIndex);
			continue;
		}

		if (writer->insert_slot == NULL)
			marker_prepare_insert(writer);
		if (marker_insert(writer, message_id))
			return true;
		/* Someone inserted the key since the probe: probe again. */
	}
}

/*
 * inbox_marker_end
 *		Release what inbox_marker_begin and the inserts set up.  The table
 *		and key index stay open for the caller to close.
 */
void
inbox_marker_end(InboxMarkerWriter *writer)
{
	inbox_key_probe_end(&writer->probe);
	if (writer->insert_slot == NULL)
		return;
	ExecDropSingleTupleTableSlot(writer->insert_slot);
	if (writer->state_index != NULL)
		index_close(writer->state_index, NoLock);
	else
	{
		ExecCloseIndices(writer->result_rel);
		FreeExecutorState(writer->estate);
	}
}
