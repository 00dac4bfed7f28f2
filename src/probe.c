/*-------------------------------------------------------------------------
 *
 * probe.c
 *	  Probes of the key index: is there a marker for (message_id, consumer)?
 *
 * Every claim starts by looking its message up in the unique index on
 * (message_id, consumer): the one-phase claims' SQL path with the caller's
 * snapshot (claim.c), the fast paths with a dirty snapshot that also sees
 * markers still being written (marker.c), inbox_complete's fast path with
 * a new snapshot (twophase_fast.c).  They share the scan keys and, where
 * they keep a scan open for many messages of one consumer, the probe
 * below; the snapshot is the caller's choice, and so is what a marker
 * found means.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

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
