/*-------------------------------------------------------------------------
 *
 * probe.c
 *	  Probes of the key index: is there a marker for (message_id, consumer)?
 *
 * The one place where the extension reads its table without the executor
 * (docs/architecture.md, "The probe").  A one-phase claim (claim.c) looks
 * its message up in the unique index on (message_id, consumer) with the
 * caller's active snapshot before it runs its INSERT: a marker the
 * snapshot sees is a duplicate, answered false without a subtransaction,
 * an XID or a dead tuple.  Everything else (no marker, a marker still being
 * written, a caller or an index the probe cannot answer for) is left to
 * the INSERT, which waits and decides.
 *
 * The contract:
 *	- it only reads, and never waits: a marker in progress is invisible to
 *	  an MVCC snapshot, and the INSERT waits for it in the executor;
 *	- it holds no buffer pin once a call returns (inbox_key_probe_end ends
 *	  the scan), so it never holds up VACUUM's cleanup locks;
 *	- it answers only where the INSERT that follows would answer the same
 *	  for a visible marker (inbox_probe_applies): the caller holds the
 *	  table-wide privileges the statement needs, no row-level security
 *	  applies, the index is complete, the snapshot is MVCC, and the rows are
 *	  in this table (not in Citus's shards).  Under SERIALIZABLE the scan
 *	  takes the predicate locks a SELECT would.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/tableam.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/snapmgr.h"
#include "executor/tuptable.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/rls.h"

#include "inbox.h"

/*
 * inbox_key_scankeys
 *		Scan keys for the key index: (message_id, consumer) equal to a
 *		message id set later in keys[0].sk_argument, and this consumer.
 */
void
inbox_key_scankeys(ScanKeyData *keys, Relation key_index, text *consumer)
{
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber,
						   InvalidOid, key_index->rd_indcollation[0],
						   F_TEXTEQ, (Datum) 0);
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber,
						   InvalidOid, key_index->rd_indcollation[1],
						   F_TEXTEQ, PointerGetDatum(consumer));
}

/*
 * inbox_row_security_applies
 *		Do row-level security policies apply to the current user on this
 *		table?  The probe would bypass them: such a caller's statements
 *		decide alone, with the policies applied.
 */
bool
inbox_row_security_applies(Relation rel)
{
	return rel->rd_rel->relrowsecurity &&
		check_enable_rls(RelationGetRelid(rel), InvalidOid, false) == RLS_ENABLED;
}

/*
 * probe_may_select_key
 *		May the current user read the key columns, as INSERT ... ON
 *		CONFLICT (their arbiter) and RETURNING message_id require?
 */
static bool
probe_may_select_key(Oid table)
{
	if (pg_class_aclcheck(table, GetUserId(), ACL_SELECT) == ACLCHECK_OK)
		return true;
	return pg_attribute_aclcheck(table, INBOX_ATT_MESSAGE_ID, GetUserId(),
								 ACL_SELECT) == ACLCHECK_OK &&
		pg_attribute_aclcheck(table, INBOX_ATT_CONSUMER, GetUserId(),
							  ACL_SELECT) == ACLCHECK_OK;
}

/*
 * inbox_probe_applies
 *		May a probe of key_index with the active snapshot answer "a marker
 *		exists" in place of the claim's INSERT?  Only where that statement
 *		would find the same marker without an error: the caller may INSERT
 *		into the whole table and read the key columns, no row-level
 *		security applies, the index is complete (not one CREATE INDEX
 *		CONCURRENTLY or REINDEX CONCURRENTLY is building), the snapshot is
 *		MVCC, and the rows are in this table.  Otherwise the statement
 *		decides alone, with every check of its own.  heap and key_index
 *		are open and locked.
 */
bool
inbox_probe_applies(Relation heap, Relation key_index,
					const InboxObjects *objects)
{
	Form_pg_index form = key_index->rd_index;

	return !objects->table_in_citus &&
		form->indisvalid && form->indisready && form->indislive &&
		IsMVCCSnapshot(GetActiveSnapshot()) &&
		pg_class_aclcheck(RelationGetRelid(heap), GetUserId(),
						  ACL_INSERT) == ACLCHECK_OK &&
		probe_may_select_key(RelationGetRelid(heap)) &&
		!inbox_row_security_applies(heap);
}

/*
 * inbox_key_probe_begin
 *		Start a scan of the key index for markers of one consumer, as
 *		snapshot sees them.  heap and key_index are open and locked by the
 *		caller, and snapshot outlives the probe.
 *
 * With an MVCC snapshot under SERIALIZABLE, the scan takes the predicate
 * locks a SELECT would, so a claim that saw no marker conflicts properly
 * with one inserted later.
 */
void
inbox_key_probe_begin(InboxKeyProbe *probe, Relation heap,
					  Relation key_index, text *consumer, Snapshot snapshot)
{
	inbox_key_scankeys(probe->keys, key_index, consumer);
	probe->slot = table_slot_create(heap, NULL);
	probe->scan = inbox_index_beginscan(heap, key_index, snapshot, 2, 0);
}

/*
 * inbox_key_probe_found
 *		Is there a marker for this message (and the probe's consumer) that
 *		the probe's snapshot sees?  If so, it is in probe->slot.
 */
bool
inbox_key_probe_found(InboxKeyProbe *probe, text *message_id)
{
	probe->keys[0].sk_argument = PointerGetDatum(message_id);
	index_rescan(probe->scan, probe->keys, 2, NULL, 0);
	return index_getnext_slot(probe->scan, ForwardScanDirection, probe->slot);
}

/*
 * inbox_key_probe_end
 *		Release the probe's scan and slot.
 */
void
inbox_key_probe_end(InboxKeyProbe *probe)
{
	index_endscan(probe->scan);
	ExecDropSingleTupleTableSlot(probe->slot);
}
