/*-------------------------------------------------------------------------
 *
 * twophase_fast.c
 *	  The fast path of the two-phase claims' common case, under READ
 *	  COMMITTED: inbox_begin of a new message, and inbox_complete, written
 *	  through the table and index access methods.
 *
 * Why: a begin and a complete are each one SQL statement (twophase.c), run
 * through SPI inside the function, on top of the caller's own statement.
 * Those inner statements, executor start-up included, were most of the
 * backend's time in a begin + complete cycle, which then ran no faster
 * than the same two statements written by hand on a table with a lease
 * column and no token (bench/HISTORY.md).
 *
 * How, for inbox_begin: a new message is claimed the way a one-phase claim
 * writes its marker (marker.c: a probe of the key index with a dirty
 * snapshot, then a speculative insert), with the claim's columns: state
 * 'claimed', a new token, the lease's end: the outcome "claimed".  Any
 * marker already there (or one that appears meanwhile) sends the call to
 * the SQL statements, which decide every other outcome.
 *
 * How, for inbox_complete: what the UPDATE does under READ COMMITTED.  The
 * key index is read with a new snapshot; the visible version, if it is the
 * claim of this token, is updated to processed.  If a concurrent
 * transaction updated it first, we wait for that transaction, lock the
 * latest version and test it again, as the executor's EvalPlanQual does,
 * so a takeover or a reclaim that committed meanwhile leaves our token dead
 * (false).  A call that changed nothing then looks for the repeat (the
 * claim processed under this very token) with another new snapshot, as the
 * SQL path's second statement does.
 *
 * When: only under READ COMMITTED (the SQL statements raise serialization
 * failures under the stricter levels), on the tables and indexes as
 * inbox.sql created them, with no row security in force, and when the
 * caller holds the table privileges the statements need (INSERT, SELECT
 * and UPDATE on inbox for a begin, SELECT and UPDATE for a complete, SELECT
 * on inbox_consumers for a begin).  Otherwise the SQL path runs, and its
 * statements decide, with their errors.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "inbox.h"

static bool fast_path_applies(const InboxObjects *objects, Relation heap,
							  AclMode privileges);
static bool consumer_lease(const InboxObjects *objects, text *consumer,
						   Interval *explicit, Interval **lease);
static bool claim_fetch(Relation heap, Relation key_index, ScanKeyData *keys,
						Snapshot snapshot, TupleTableSlot *slot);
static bool claim_matches(const InboxObjects *objects, TupleTableSlot *slot,
						  text *message_id, text *consumer, Oid state,
						  int64 token);
static bool claim_complete(const InboxObjects *objects, Relation heap,
						   Relation key_index, Relation prunable,
						   TupleTableSlot *claim, text *message_id,
						   text *consumer, int64 token, Snapshot snapshot);

/*
 * fast_path_applies
 *		The checks both fast paths share: the isolation level, row security,
 *		and the caller's privileges on the table.
 *
 * The statements would check column privileges; a caller without the
 * table-wide ones is left to them, so that both paths accept and refuse
 * the same callers.
 */
static bool
fast_path_applies(const InboxObjects *objects, Relation heap,
				  AclMode privileges)
{
	return inbox_fast_paths_audited() &&
		!IsolationUsesXactSnapshot() &&
		OidIsValid(objects->claimed_oid) &&
		OidIsValid(objects->processed_oid) &&
		pg_class_aclmask(objects->table_oid, GetUserId(), privileges,
						 ACLMASK_ALL) == privileges &&
		!inbox_row_security_applies(heap);
}

/*
 * consumer_lease
 *		The lease a new claim gets: the call's, else the consumer's in
 *		inbox_consumers, else inbox.lease.  False when inbox_consumers may
 *		not be read here (then the SQL path runs).
 *
 * inbox_begin's statement reads inbox_consumers even when the call gives a
 * lease, so its SELECT privilege is checked either way.
 */
static bool
consumer_lease(const InboxObjects *objects, text *consumer,
			   Interval *explicit, Interval **lease)
{
	static const AttrNumber key_columns[] = {INBOX_CONSUMERS_ATT_CONSUMER};
	Relation	rel;
	Relation	index;
	Snapshot	snapshot;
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;

	if (!OidIsValid(objects->consumers_oid) ||
		!OidIsValid(objects->consumers_key_oid) ||
		pg_class_aclcheck(objects->consumers_oid, GetUserId(),
						  ACL_SELECT) != ACLCHECK_OK)
		return false;
	rel = try_table_open(objects->consumers_oid, AccessShareLock);
	if (rel == NULL)
		return false;
	if (!inbox_consumers_is_plain(rel, objects) || inbox_row_security_applies(rel))
	{
		table_close(rel, NoLock);
		return false;
	}
	if (explicit != NULL)
	{
		*lease = explicit;
		table_close(rel, NoLock);
		return true;
	}

	index = index_open(objects->consumers_key_oid, AccessShareLock);
	if (!inbox_index_is_usable(index) ||
		!inbox_index_is(index, lengthof(key_columns), key_columns) ||
		!heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, NULL))
	{
		index_close(index, NoLock);
		table_close(rel, NoLock);
		return false;
	}

	*lease = NULL;
	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ,
						   PointerGetDatum(consumer));
	slot = table_slot_create(rel, NULL);
	scan = inbox_index_beginscan(rel, index, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		value = slot_getattr(slot, INBOX_CONSUMERS_ATT_LEASE, &isnull);

		if (!isnull)
			*lease = DatumGetIntervalP(datumCopy(value, false, sizeof(Interval)));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	table_close(rel, NoLock);

	if (*lease == NULL)
		*lease = inbox_default_lease();
	return true;
}

/*
 * inbox_fast_begin
 *		inbox_begin of a message that has no marker, written without SQL.
 *
 * True, with the claim's token, when it wrote the claim.  False, with
 * nothing written that anyone could see, when the message has a marker or
 * the fast path does not apply: the caller then runs inbox_begin's
 * statement.  heap is open and locked by the caller.
 */
bool
inbox_fast_begin(const InboxObjects *objects, Relation heap, text *message_id,
				 text *consumer, Interval *explicit_lease, Datum payload,
				 int64 *token)
{
	Interval   *lease;
	Relation	key_index;
	InboxMarkerWriter writer;
	bool		claimed;

	if (!fast_path_applies(objects, heap, ACL_INSERT | ACL_SELECT | ACL_UPDATE))
		return false;

	/* As a new SQL statement would, see what this transaction did so far. */
	CommandCounterIncrement();
	if (!consumer_lease(objects, consumer, explicit_lease, &lease))
		return false;

	key_index = index_open(objects->key_index_oid, RowExclusiveLock);
	if (!inbox_marker_begin(&writer, objects, heap, key_index, consumer,
							INBOX_MARKER_CLAIMED))
	{
		index_close(key_index, NoLock);
		return false;
	}

	/* The lease runs from the claim's received_at, as in the statement. */
	writer.lease_until =
		DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												TimestampTzGetDatum(writer.now),
												IntervalPGetDatum(lease)));
	writer.payload = payload;
	claimed = inbox_marker_claim(&writer, message_id);
	*token = writer.token;
	inbox_marker_end(&writer);
	index_close(key_index, NoLock);
	return claimed;
}

/*
 * claim_fetch
 *		The version of the message's marker that snapshot sees, into slot.
 */
static bool
claim_fetch(Relation heap, Relation key_index, ScanKeyData *keys,
			Snapshot snapshot, TupleTableSlot *slot)
{
	IndexScanDesc scan = inbox_index_beginscan(heap, key_index, snapshot, 2, 0);
	bool		found;

	index_rescan(scan, keys, 2, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

/*
 * claim_matches
 *		Is the marker in slot this message's, in this state, under this
 *		token?  The whole WHERE clause of the statement, so that a version
 *		reached by following an update chain is tested like the first.
 */
static bool
claim_matches(const InboxObjects *objects, TupleTableSlot *slot,
			  text *message_id, text *consumer, Oid state, int64 token)
{
	Datum		value;
	bool		isnull;

	value = slot_getattr(slot, INBOX_ATT_STATE, &isnull);
	if (isnull || DatumGetObjectId(value) != state)
		return false;
	value = slot_getattr(slot, INBOX_ATT_TOKEN, &isnull);
	if (isnull || DatumGetInt64(value) != token)
		return false;
	value = slot_getattr(slot, INBOX_ATT_MESSAGE_ID, &isnull);
	if (isnull ||
		!DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, value,
											  PointerGetDatum(message_id))))
		return false;
	value = slot_getattr(slot, INBOX_ATT_CONSUMER, &isnull);
	return !isnull &&
		DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, value,
											 PointerGetDatum(consumer)));
}

/*
 * claim_complete
 *		Update the claim in slot to processed; false if it turns out to be
 *		no longer this token's claim.
 *
 * The UPDATE's protocol under READ COMMITTED: update the version our
 * snapshot sees; if a concurrent transaction updated it first, wait for
 * it, lock the latest version and test it again (EvalPlanQual), then
 * update that one.
 */
static bool
claim_complete(const InboxObjects *objects, Relation heap, Relation key_index,
			   Relation prunable, TupleTableSlot *claim, text *message_id,
			   text *consumer, int64 token, Snapshot snapshot)
{
	TupleTableSlot *processed = table_slot_create(heap, NULL);
	CommandId	cid = GetCurrentCommandId(true);
	TimestampTz now = GetCurrentTimestamp();
	ItemPointerData tid = claim->tts_tid;

	for (;;)
	{
		TM_Result	result;
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		InboxUpdateIndexes update_indexes;
		int64		id;

		/* The new version: the claim's columns, processed as of now. */
		slot_getallattrs(claim);
		ExecClearTuple(processed);
		memcpy(processed->tts_values, claim->tts_values, INBOX_NATTS * sizeof(Datum));
		memcpy(processed->tts_isnull, claim->tts_isnull, INBOX_NATTS * sizeof(bool));
		processed->tts_values[INBOX_ATT_STATE - 1] = ObjectIdGetDatum(objects->processed_oid);
		processed->tts_values[INBOX_ATT_PROCESSED_AT - 1] = TimestampTzGetDatum(now);
		processed->tts_isnull[INBOX_ATT_PROCESSED_AT - 1] = false;
		processed->tts_isnull[INBOX_ATT_LEASE_UNTIL - 1] = true;
		ExecStoreVirtualTuple(processed);
		id = DatumGetInt64(claim->tts_values[INBOX_ATT_ID - 1]);

		result = table_tuple_update(heap, &tid, processed, cid, snapshot,
									InvalidSnapshot, true, &tmfd, &lockmode,
									&update_indexes);
		switch (result)
		{
			case TM_Ok:
				break;
			case TM_Updated:

				/*
				 * Changed by a transaction that committed while we waited:
				 * the latest version decides, locked so that it cannot
				 * change again before our update.
				 */
				result = table_tuple_lock(heap, &tid, snapshot, claim, cid,
										  lockmode, LockWaitBlock,
										  TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
										  &tmfd);
				if (result == TM_Ok)
				{
					if (!claim_matches(objects, claim, message_id, consumer,
									   objects->claimed_oid, token))
					{
						ExecDropSingleTupleTableSlot(processed);
						return false;
					}
					tid = claim->tts_tid;
					continue;
				}
				if (result != TM_Deleted && result != TM_SelfModified)
					elog(ERROR, "unexpected table_tuple_lock status: %u", result);
				/* FALLTHROUGH */
			case TM_Deleted:
			case TM_SelfModified:

				/*
				 * Deleted by a transaction that committed, or changed by this
				 * very command: nothing of ours to update, as the UPDATE
				 * would find.
				 */
				ExecDropSingleTupleTableSlot(processed);
				return false;
			default:
				elog(ERROR, "unexpected table_tuple_update status: %u", result);
		}

		/*
		 * The new version's index entries: the key's (its unique check
		 * skips the version we just replaced) and, since it is processed
		 * now, inbox_prunable's; inbox_open_claims indexes no processed
		 * marker.  The values are our own: the slot's are not valid once
		 * the table AM has formed the new tuple.
		 */
		if (inbox_update_needs_btree_entries(update_indexes))
		{
			Datum		values[3];
			bool		isnull[3] = {false, false, false};

			values[0] = PointerGetDatum(message_id);
			values[1] = PointerGetDatum(consumer);
			index_insert(key_index, values, isnull, &processed->tts_tid, heap,
						 UNIQUE_CHECK_YES, true, NULL);
			values[0] = PointerGetDatum(consumer);
			values[1] = TimestampTzGetDatum(now);
			values[2] = Int64GetDatum(id);
			index_insert(prunable, values, isnull, &processed->tts_tid, heap,
						 UNIQUE_CHECK_NO, false, NULL);
		}
		ExecDropSingleTupleTableSlot(processed);
		return true;
	}
}

/*
 * inbox_fast_complete
 *		inbox_complete without SQL.
 *
 * True, with *completed, when it answered; false, having changed nothing,
 * when the fast path does not apply: the caller then runs the statements.
 * heap is open and locked by the caller.
 */
bool
inbox_fast_complete(const InboxObjects *objects, Relation heap,
					text *message_id, text *consumer, int64 token,
					bool *completed)
{
	Relation	key_index;
	Relation	prunable;
	TupleTableSlot *claim;
	ScanKeyData keys[2];
	Snapshot	snapshot;

	if (!fast_path_applies(objects, heap, ACL_SELECT | ACL_UPDATE) ||
		!inbox_table_is_plain(heap, objects))
		return false;

	/*
	 * What the executor checks of an UPDATE's target before it runs
	 * (CheckValidResultRel): a table in a publication that replicates
	 * updates needs a replica identity.  The same error, whether or not a
	 * row would change.
	 */
	CheckCmdReplicaIdentity(heap, CMD_UPDATE);

	/* The processed version's entries go into the key and inbox_prunable. */
	key_index = index_open(objects->key_index_oid, RowExclusiveLock);
	prunable = inbox_open_state_index(heap, objects, key_index,
									  objects->processed_oid);
	if (prunable == NULL)
	{
		index_close(key_index, NoLock);
		return false;
	}

	/* As a new SQL statement would, see what this transaction did so far. */
	CommandCounterIncrement();
	inbox_key_scankeys(keys, key_index, consumer);
	keys[0].sk_argument = PointerGetDatum(message_id);
	claim = table_slot_create(heap, NULL);

	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	*completed = claim_fetch(heap, key_index, keys, snapshot, claim) &&
		claim_matches(objects, claim, message_id, consumer,
					  objects->claimed_oid, token) &&
		claim_complete(objects, heap, key_index, prunable, claim, message_id,
					   consumer, token, snapshot);
	UnregisterSnapshot(snapshot);

	/*
	 * A repeat: already processed under this very token.  A new snapshot,
	 * so that it sees a completion that a concurrent repeat committed while
	 * we waited for its row lock.
	 */
	if (!*completed)
	{
		snapshot = RegisterSnapshot(GetTransactionSnapshot());
		*completed = claim_fetch(heap, key_index, keys, snapshot, claim) &&
			claim_matches(objects, claim, message_id, consumer,
						  objects->processed_oid, token);
		UnregisterSnapshot(snapshot);
	}

	ExecDropSingleTupleTableSlot(claim);
	index_close(prunable, NoLock);
	index_close(key_index, NoLock);
	return true;
}
