/*-------------------------------------------------------------------------
 *
 * result.c
 *	  Idempotency keys: a marker's stored result, and the fingerprint of
 *	  the request that made it.
 *
 * An API that takes an idempotency key claims the key as a message id.  A
 * duplicate request (a client's retry) then meets the marker, and gets the
 * first attempt's result back from it (inbox_claim_outcome,
 * inbox_begin_outcome, inbox_result); a different request reusing the key
 * (the fingerprints differ) gets mismatch, and changes nothing.
 *
 * Every read of a result or a fingerprint here is a statement run as the
 * caller, so privileges and row-level security apply: a role confined to
 * its consumer's rows never reads another consumer's result.  (claim.c's
 * probe reads them directly only where it may answer at all, no
 * row-level security on, and where the caller may read both columns.)
 *
 * The result is written by the statement that completes a two-phase claim
 * (twophase.c), or, for a one-phase claim, by inbox_set_result in the
 * business transaction that made the claim: only the transaction that
 * wrote the marker may, so a duplicate can never overwrite the first
 * attempt's result.
 *
 * On a table Citus manages, results and fingerprints are refused (0A000):
 * the single-server statements are not routed to shards, and the first
 * version keeps Citus's paths as they were (docs/citus.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_set_result);
PG_FUNCTION_INFO_V1(inbox_result);

static InboxPlan marker_plan;
static InboxPlan result_plan;
static InboxPlan seen_plan;
static InboxPlan set_result_plan;

static bool marker_written_here(const InboxObjects *objects,
								text *message_id, text *consumer);

/*
 * inbox_has_results
 *		Has the table the columns of idempotency keys?  Not until ALTER
 *		EXTENSION UPDATE has run, in a database made by 1.0.0.
 */
bool
inbox_has_results(const InboxObjects *objects)
{
	return objects->result_attnum != InvalidAttrNumber;
}

/*
 * inbox_results_refused_on_citus
 *		Refuse what (an argument or a function) on a table Citus manages.
 */
void
inbox_results_refused_on_citus(const InboxObjects *objects, const char *what)
{
	if (objects->table_in_citus)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s is not supported on a table Citus manages", what),
				 errdetail("Results and request fingerprints of idempotency keys are kept on a single server only.")));
}

/*
 * results_required
 *		Refuse a call that needs the columns of idempotency keys on a table
 *		that has none yet.
 */
static void
results_required(const InboxObjects *objects, const char *what)
{
	if (!inbox_has_results(objects))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s needs the inbox table's result and fingerprint columns", what),
				 errhint("Run ALTER EXTENSION inbox UPDATE.")));
}

/*
 * inbox_result_transfer
 *		A result that a statement read, detoasted, copied out of SPI's
 *		memory into the caller's (SPI_datumTransfer): a pointer to its
 *		toasted value must not outlive the statement's snapshot.
 */
Datum
inbox_result_transfer(Datum value)
{
	return SPI_datumTransfer(PointerGetDatum(PG_DETOAST_DATUM(value)),
							 false, -1);
}

/*
 * inbox_fingerprints_differ
 *		Is a claim that asked with fingerprint asked a mismatch for a marker
 *		claimed with fingerprint claimed?  Only when both are given and
 *		differ, byte for byte: a claim without one is not checked, and a
 *		marker stored without one is not checked against.
 */
bool
inbox_fingerprints_differ(text *claimed, text *asked)
{
	if (claimed == NULL || asked == NULL)
		return false;
	return VARSIZE_ANY_EXHDR(claimed) != VARSIZE_ANY_EXHDR(asked) ||
		memcmp(VARDATA_ANY(claimed), VARDATA_ANY(asked),
			   VARSIZE_ANY_EXHDR(asked)) != 0;
}

/*
 * inbox_marker_read
 *		Read the fingerprint and result of the marker of (message_id,
 *		consumer) as the caller, into *marker (allocated in the caller's
 *		memory context).  latest: with a new snapshot rather than the
 *		statement's, for a marker that a claim under REPEATABLE READ found
 *		committed after its transaction's snapshot.
 *
 * The caller is not connected to SPI.
 */
void
inbox_marker_read(const InboxObjects *objects, text *message_id,
				  text *consumer, bool latest, InboxMarker *marker)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID};
	SPIPlanPtr	plan;
	Datum		values[2];
	int			rc;

	memset(marker, 0, sizeof(*marker));
	SPI_connect();
	plan = inbox_plan(&marker_plan, objects,
					  objects->table_in_citus ?
					  "SELECT fingerprint, result FROM %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2" :
					  "SELECT fingerprint, result FROM ONLY %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
					  2, argtypes);
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	if (latest)
	{
		rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
								  InvalidSnapshot, false, false, 1);
		inbox_spi_check(rc, SPI_OK_SELECT, "inbox marker read");
	}
	else
		inbox_spi_run(plan, values, NULL, false, 1, SPI_OK_SELECT,
					  "inbox marker read");

	if (SPI_processed == 1)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		value;

		marker->found = true;
		value = SPI_getbinval(row, desc, 1, &isnull);
		if (!isnull)
			marker->fingerprint = DatumGetTextPP(SPI_datumTransfer(value, false, -1));
		value = SPI_getbinval(row, desc, 2, &isnull);
		if (!isnull)
			marker->result = inbox_result_transfer(value);
	}
	SPI_finish();
}

/*
 * marker_written_here
 *		Did the current transaction (or one of its subtransactions) write
 *		the version of the marker that the caller's snapshot sees?
 *
 * Read with the probe, for the version's xmin: a statement could read it
 * only with SELECT on the whole table.  The caller has just seen the
 * marker through a statement of its own, with its privileges and
 * policies, so the probe tells it nothing about a row it may not see.
 */
static bool
marker_written_here(const InboxObjects *objects, text *message_id,
					text *consumer)
{
	Relation	heap = table_open(objects->table_oid, RowExclusiveLock);
	Relation	index = index_open(objects->key_index_oid, RowExclusiveLock);
	InboxKeyProbe p;
	bool		here = false;

	inbox_key_probe_begin(&p, heap, index, consumer, GetActiveSnapshot());
	if (inbox_key_probe_found(&p, message_id))
	{
		bool		isnull;
		TransactionId xmin;

		xmin = DatumGetTransactionId(slot_getsysattr(p.slot,
													 MinTransactionIdAttributeNumber,
													 &isnull));
		here = !isnull && TransactionIdIsCurrentTransactionId(xmin);
	}
	inbox_key_probe_end(&p);
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return here;
}

/*
 * inbox_set_result(message_id text, consumer text, result jsonb)
 *		returns void
 *
 * Records the result of a one-phase claim, in the business transaction
 * that made it (after inbox_claim_outcome answered claimed, or inbox_claim
 * true), so that the result commits with the marker and the business
 * change, or none of them does.
 *
 * Refused, with SQLSTATE 55000 (object_not_in_prerequisite_state), when
 * the caller sees no marker of the key, or one that this transaction did
 * not write: a duplicate's transaction must never overwrite the first
 * attempt's result.  55000 because the call is well formed and allowed,
 * and the marker is not in the state it needs; neither a privilege
 * (42501) nor an argument (22023) would fix it.  A NULL result is
 * refused as well (22004): "no result" is the default, not a value to
 * record.
 */
Datum
inbox_set_result(PG_FUNCTION_ARGS)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, JSONBOID};
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	Datum		result;
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[3];

	inbox_arg_not_null(fcinfo, 2, "result");
	result = inbox_arg_result(fcinfo, 2);

	PreventCommandIfReadOnly("inbox_set_result()");
	table_close(inbox_open_table(RowExclusiveLock, &objects), NoLock);
	results_required(&objects, "inbox_set_result()");
	inbox_results_refused_on_citus(&objects, "inbox_set_result()");

	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = result;

	/* 1. The caller sees the marker, with its own rights and policies. */
	SPI_connect();
	plan = inbox_plan(&seen_plan, &objects,
					  "SELECT 1 FROM ONLY %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
					  2, argtypes);
	inbox_spi_run(plan, values, NULL, false, 1, SPI_OK_SELECT,
				  "inbox_set_result");
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("message \"%s\" has no marker for consumer \"%s\"",
						text_to_cstring(message_id), text_to_cstring(consumer)),
				 errhint("Claim it in this transaction first, with inbox_claim_outcome or inbox_claim.")));

	/* 2. This transaction wrote it. */
	if (!marker_written_here(&objects, message_id, consumer))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the marker of message \"%s\" for consumer \"%s\" was not written by this transaction",
						text_to_cstring(message_id), text_to_cstring(consumer)),
				 errdetail("Only the transaction that claimed a message may record its result."),
				 errhint("Record the result in the transaction whose claim answered claimed; a duplicate reads it with inbox_result.")));

	/* 3. Record it. */
	plan = inbox_plan(&set_result_plan, &objects,
					  "UPDATE ONLY %1$s.inbox SET result = $3"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
					  3, argtypes);
	inbox_spi_run(plan, values, NULL, false, 0, SPI_OK_UPDATE,
				  "inbox_set_result");
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the result of message \"%s\" for consumer \"%s\" was not recorded",
						text_to_cstring(message_id), text_to_cstring(consumer)),
				 errdetail("The marker's update changed no row: a policy or a trigger on the inbox table skipped it.")));
	SPI_finish();

	PG_RETURN_VOID();
}

/*
 * inbox_result(message_id text, consumer text) returns jsonb
 *
 * The stored result of the marker of (message_id, consumer), read as the
 * caller: NULL when the caller sees no such marker (none, or one its
 * policies hide), or the marker has no result (none recorded, or the
 * claim is not complete).  A NULL therefore never means "not processed":
 * inbox_claim_outcome and inbox_begin_outcome say that.
 */
Datum
inbox_result(PG_FUNCTION_ARGS)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID};
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[2];
	Datum		result = (Datum) 0;

	table_close(inbox_open_table(AccessShareLock, &objects), NoLock);
	results_required(&objects, "inbox_result()");

	SPI_connect();
	plan = inbox_plan(&result_plan, &objects,
					  objects.table_in_citus ?
					  "SELECT result FROM %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2" :
					  "SELECT result FROM ONLY %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
					  2, argtypes);
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	inbox_spi_run(plan, values, NULL, true, 1, SPI_OK_SELECT, "inbox_result");
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			result = inbox_result_transfer(value);
	}
	SPI_finish();

	if (result == (Datum) 0)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}
