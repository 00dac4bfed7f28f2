/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  One-phase claims: inbox_claim, inbox_claim_outcome and
 *	  inbox_claim_many.
 *
 * A one-phase claim writes the marker row for (message_id, consumer) in the
 * caller's own transaction, next to the business change, so that both
 * commit or neither does.  The unique key on (message_id, consumer) picks
 * the winner among concurrent claimers; this file only has to read that
 * verdict correctly and cheaply.
 *
 * Every marker is written by an INSERT statement, planned once per backend
 * and kept (inbox_plan), so that the executor makes every check a user's
 * INSERT gets: privileges, row-level security, triggers, constraints,
 * every index, replica identity, read-only transactions.  inbox_claim takes
 * two steps:
 *
 *	1. The probe (probe.c): a read of the key index with the caller's active
 *	   snapshot.  A marker that is visible (committed by someone else, or
 *	   written earlier in this transaction) answers false at the cost of one
 *	   index lookup: no subtransaction, no XID, no dead tuple, no identity
 *	   value consumed.  Anything else, a marker in progress among it, is
 *	   left to the statement; the probe never waits.
 *
 *	2. The INSERT, which waits for a concurrent claimer of the same key in
 *	   the executor, after ending its index scan.  Under READ COMMITTED it is
 *	   INSERT ... ON CONFLICT DO NOTHING: it inserted (true) or found the key
 *	   taken once the other claimer committed (false), with no
 *	   subtransaction.  Under REPEATABLE READ or SERIALIZABLE, ON CONFLICT
 *	   would raise a serialization failure for a marker committed after the
 *	   snapshot, so the plain INSERT runs inside an internal subtransaction
 *	   and only a unique violation on the inbox key is caught (answering
 *	   false, with the subtransaction rolled back and the caller's
 *	   transaction intact); every other error, including a serialization
 *	   failure, a deadlock or a cancel, is re-thrown unchanged.
 *
 * Each subtransaction that inserted stays in the backend's 64-entry subxid
 * cache until the top-level transaction ends, so inbox_claim_many does not
 * use subtransactions at all: it probes every id, then inserts the rest
 * with one INSERT ... ON CONFLICT DO NOTHING.
 *
 * On a table Citus manages (its markers in shards on other nodes), both
 * functions write with INSERT ... ON CONFLICT DO NOTHING RETURNING, which
 * Citus routes to the shards, with marker ids unique in the cluster
 * (citus.c): no probe, no subtransaction (claim_insert_citus says why).
 *
 * Row-level security: when policies apply to the caller, there is no
 * probe, and every claim goes through the INSERT, so the policies' WITH
 * CHECK clauses decide which consumers a role may claim for.
 *
 * inbox_claim_outcome is inbox_claim for an idempotency key (result.c):
 * it stores the request's fingerprint with a new marker, and answers a
 * duplicate with the marker's stored result, or mismatch.  Without a
 * fingerprint it inserts with inbox_claim's own statements.  Its probe
 * reads the result and fingerprint of the marker it finds only where the
 * caller may read both columns; otherwise a statement run as the caller
 * reads them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/qunique.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_claim);
PG_FUNCTION_INFO_V1(inbox_claim_uuid);
PG_FUNCTION_INFO_V1(inbox_claim_outcome);
PG_FUNCTION_INFO_V1(inbox_claim_many);

static InboxPlan insert_one_plan;
static InboxPlan insert_or_nothing_plan;
static InboxPlan insert_many_plan;
static InboxPlan insert_citus_plan;
static InboxPlan insert_one_fingerprint_plan;
static InboxPlan insert_or_nothing_fingerprint_plan;

/*
 * What inbox_claim_outcome asks and answers (claim_one's answer; NULL for
 * inbox_claim).
 */
typedef enum ClaimOutcome
{
	CLAIM_CLAIMED,				/* new: do the work in this transaction */
	CLAIM_PROCESSED,			/* a marker exists: ack; result is its own */
	CLAIM_MISMATCH,				/* claimed with another fingerprint */
	CLAIM_EXPIRED				/* new, but sent before the consumer's floor */
} ClaimOutcome;

static const char *const claim_outcome_names[] = {
	"claimed", "processed", "mismatch", "expired"
};

/* What inbox_counters() counts for each (counters.c). */
static const InboxCounter claim_outcome_counters[] = {
	INBOX_COUNT_CLAIMED, INBOX_COUNT_DUPLICATE, INBOX_COUNT_MISMATCHED,
	INBOX_COUNT_EXPIRED
};

typedef struct ClaimAnswer
{
	text	   *fingerprint;	/* the request's, or NULL: not checked */
	bool		has_sent_at;
	TimestampTz sent_at;
	ClaimOutcome outcome;
	Datum		result;			/* processed: the stored result, or 0 */
} ClaimAnswer;

static Relation claim_open(const char *caller, InboxObjects *objects,
						   Relation *index, bool *probe);
static void claim_close(Relation heap, Relation index);
static bool claim_insert_one(const InboxObjects *objects, text *message_id,
							 text *consumer, text *fingerprint);
static bool claim_insert_or_nothing(const InboxObjects *objects,
									text *message_id, text *consumer,
									text *fingerprint);
static bool claim_insert_citus(const InboxObjects *objects, text *message_id,
							   text *consumer);
static void claim_insert_many_citus(const InboxObjects *objects, Datum *ids,
									int nids, text *consumer,
									ReturnSetInfo *rsinfo);
static bool claim_probe_reads_results(const InboxObjects *objects);
static void claim_probe_marker(const InboxObjects *objects,
							   TupleTableSlot *slot, InboxMarker *marker);
static void claim_answer_from(ClaimAnswer *answer, const InboxMarker *marker);
static bool claim_one(text *message_id, text *consumer, ClaimAnswer *answer);
static bool claim_key_exists_now(const InboxObjects *objects, text *message_id,
								 text *consumer);
static void claim_skipped(text *message_id, text *consumer);
static int	compare_ids(const void *a, const void *b);
static Datum *claim_many_ids(ArrayType *array, int *nids);
static void claim_many_return(ReturnSetInfo *rsinfo, Datum id);
static void claim_insert_many(const InboxObjects *objects, Datum *ids,
							  int nids, text *consumer, ReturnSetInfo *rsinfo);
static void claim_many(Datum *ids, int nids, text *consumer,
					   ReturnSetInfo *rsinfo);

/*
 * claim_open
 *		Open the table and key index for a claim; *probe says whether the
 *		probe may answer for a visible marker (inbox_probe_applies) before
 *		the INSERT.
 *
 * Returns the table, locked in RowExclusiveLock like any INSERT's target.
 */
static Relation
claim_open(const char *caller, InboxObjects *objects, Relation *index,
		   bool *probe)
{
	Relation	heap;

	PreventCommandIfReadOnly(caller);
	heap = inbox_open_table(RowExclusiveLock, objects);
	*index = index_open(objects->key_index_oid, RowExclusiveLock);
	*probe = inbox_probe_applies(heap, *index, objects);
	return heap;
}

/*
 * claim_close
 *		Close what claim_open opened, keeping the locks until commit.
 */
static void
claim_close(Relation heap, Relation index)
{
	index_close(index, NoLock);
	table_close(heap, NoLock);
}

/*
 * claim_insert_or_nothing
 *		Under READ COMMITTED: insert one marker with INSERT ... ON CONFLICT
 *		DO NOTHING; false if the key is taken.
 *
 * The statement waits for a concurrent claimer of the key, and answers
 * from the row it committed; no subtransaction.
 */
static bool
claim_insert_or_nothing(const InboxObjects *objects, text *message_id,
						text *consumer, text *fingerprint)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, TEXTOID};
	SPIPlanPtr	plan;
	Datum		values[4];
	bool		claimed;

	SPI_connect();
	if (fingerprint == NULL)
		plan = inbox_plan(&insert_or_nothing_plan, objects,
						  "INSERT INTO %1$s.inbox"
						  " (message_id, consumer, state, received_at, processed_at)"
						  " VALUES ($1, $2, 'processed', $3, $3)"
						  " ON CONFLICT ON CONSTRAINT " INBOX_KEY_NAME " DO NOTHING",
						  3, argtypes);
	else
		plan = inbox_plan(&insert_or_nothing_fingerprint_plan, objects,
						  "INSERT INTO %1$s.inbox"
						  " (message_id, consumer, state, received_at, processed_at,"
						  "  fingerprint)"
						  " VALUES ($1, $2, 'processed', $3, $3, $4)"
						  " ON CONFLICT ON CONSTRAINT " INBOX_KEY_NAME " DO NOTHING",
						  4, argtypes);

	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = PointerGetDatum(fingerprint);

	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_INSERT, "inbox_claim");
	claimed = SPI_processed == 1;
	SPI_finish();

	/*
	 * No row: the key was taken, or a BEFORE trigger someone added returned
	 * NULL.  Only the first may answer false (the caller acks the message).
	 */
	if (!claimed && !claim_key_exists_now(objects, message_id, consumer))
		claim_skipped(message_id, consumer);
	return claimed;
}

/*
 * claim_insert_one
 *		Under REPEATABLE READ or SERIALIZABLE: insert one marker in a
 *		subtransaction; false if the key is taken.
 *
 * RETURNING the key: so that the statement needs the privileges that
 * ON CONFLICT needs under READ COMMITTED (SELECT on its arbiter's
 * columns), and a role is refused or not alike at every isolation level.
 */
static bool
claim_insert_one(const InboxObjects *objects, text *message_id,
				 text *consumer, text *fingerprint)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, TEXTOID};
	MemoryContext oldcontext;
	ResourceOwner oldowner;
	SPIPlanPtr	plan;
	Datum		values[4];
	volatile bool claimed = false;

	/*
	 * Each subtransaction that inserted stays in this backend's cache of
	 * subtransaction ids until the top-level transaction ends.  Past
	 * PGPROC_MAX_CACHED_SUBXIDS the cache overflows, and every snapshot
	 * taken in the cluster meanwhile must look subtransactions up in
	 * pg_subtrans: one statement claiming a hundred messages under
	 * REPEATABLE READ would slow every session down.  Refuse instead.
	 */
	if (MyProc->subxidStatus.overflowed ||
		MyProc->subxidStatus.count >= PGPROC_MAX_CACHED_SUBXIDS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many subtransactions in this transaction for another inbox_claim"),
				 errdetail("Under REPEATABLE READ or SERIALIZABLE, each new message inbox_claim claims keeps a subtransaction until the transaction ends, and this one has %d.",
						   MyProc->subxidStatus.count),
				 errhint("Claim a batch with inbox_claim_many, which uses none, or commit more often.")));

	SPI_connect();
	if (fingerprint == NULL)
		plan = inbox_plan(&insert_one_plan, objects,
						  "INSERT INTO %1$s.inbox"
						  " (message_id, consumer, state, received_at, processed_at)"
						  " VALUES ($1, $2, 'processed', $3, $3)"
						  " RETURNING message_id, consumer",
						  3, argtypes);
	else
		plan = inbox_plan(&insert_one_fingerprint_plan, objects,
						  "INSERT INTO %1$s.inbox"
						  " (message_id, consumer, state, received_at, processed_at,"
						  "  fingerprint)"
						  " VALUES ($1, $2, 'processed', $3, $3, $4)"
						  " RETURNING message_id, consumer",
						  4, argtypes);

	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = PointerGetDatum(fingerprint);

	oldcontext = CurrentMemoryContext;
	oldowner = CurrentResourceOwner;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);

	PG_TRY();
	{
		inbox_spi_run(plan, values, NULL, false, 0, SPI_OK_INSERT_RETURNING,
					  "inbox_claim");
		if (SPI_processed != 1)
			claim_skipped(message_id, consumer);

		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		claimed = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* Same recovery as PL/pgSQL's exception blocks. */
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		/*
		 * The key's violation, and for this very key: a trigger's insert of
		 * another message's marker can violate the key too.
		 */
		if (!inbox_is_key_violation(edata, objects) ||
			!claim_key_exists_now(objects, message_id, consumer))
			ReThrowError(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();

	SPI_finish();
	return claimed;
}

/*
 * claim_key_exists_now
 *		Is there a marker for (message_id, consumer) that a new snapshot
 *		sees, or that this transaction wrote?  For telling a taken key from
 *		an insert that a trigger skipped, or a key violation of another row.
 */
static bool
claim_key_exists_now(const InboxObjects *objects, text *message_id,
					 text *consumer)
{
	Relation	heap = table_open(objects->table_oid, RowExclusiveLock);
	Relation	index = index_open(objects->key_index_oid, RowExclusiveLock);
	InboxKeyProbe p;
	bool		found;

	PushActiveSnapshot(GetLatestSnapshot());
	inbox_key_probe_begin(&p, heap, index, consumer, GetActiveSnapshot());
	found = inbox_key_probe_found(&p, message_id);
	inbox_key_probe_end(&p);
	PopActiveSnapshot();
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return found;
}

/*
 * claim_skipped
 *		Refuse a claim whose INSERT wrote no marker although the key is free:
 *		a BEFORE INSERT trigger on inbox returned NULL.  Answering false
 *		would have the caller ack a message nobody processed.
 */
static void
claim_skipped(text *message_id, text *consumer)
{
	ereport(ERROR,
			(errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
			 errmsg("the marker of message \"%s\" for consumer \"%s\" was not written",
					text_to_cstring(message_id), text_to_cstring(consumer)),
			 errdetail("A trigger on the inbox table skipped the insert, and no marker holds the key."),
			 errhint("Triggers on inbox must not return NULL from BEFORE INSERT.")));
}

/*
 * claim_insert_citus
 *		Insert one marker into a table Citus manages (it routes the
 *		statement to the message's shard); false if the key is taken.
 *
 * INSERT ... ON CONFLICT DO NOTHING, not the subtransaction that
 * claim_insert_one catches a unique violation in: the violation raised
 * in a shard reaches this node without the constraint's name (and the
 * shard's index has a name of its own), so it could not be told from any
 * other.  DO NOTHING waits for a concurrent claimer of the same key like
 * the plain INSERT does.  Under REPEATABLE READ, a marker committed after
 * the shard's snapshot raises a serialization failure (40001) instead of
 * answering false, as ON CONFLICT does on any table: retrying the
 * transaction then answers false.
 */
static bool
claim_insert_citus(const InboxObjects *objects, text *message_id,
				   text *consumer)
{
	static Oid	argtypes[] = {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID};
	SPIPlanPtr	plan;
	Datum		values[4];
	bool		claimed;

	SPI_connect();
	plan = inbox_plan(&insert_citus_plan, objects,
					  "INSERT INTO %1$s.inbox"
					  " (id, message_id, consumer, state, received_at, processed_at)"
					  " OVERRIDING SYSTEM VALUE"
					  " VALUES ($1, $2, $3, 'processed', $4, $4)"
					  " ON CONFLICT ON CONSTRAINT " INBOX_KEY_NAME " DO NOTHING"
					  " RETURNING 1",
					  4, argtypes);

	values[0] = Int64GetDatum(inbox_citus_marker_id(objects, inbox_citus_group()));
	values[1] = PointerGetDatum(message_id);
	values[2] = PointerGetDatum(consumer);
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());

	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_INSERT_RETURNING, "inbox marker insert");
	claimed = SPI_processed == 1;
	SPI_finish();
	return claimed;
}

/*
 * claim_probe_reads_results
 *		May the probe, which found a marker, also read its result and
 *		fingerprint for inbox_claim_outcome?  Where the probe applies (no
 *		row-level security among it) and the caller may read both columns,
 *		as the statement that would read them otherwise requires.
 */
static bool
claim_probe_reads_results(const InboxObjects *objects)
{
	Oid			user = GetUserId();

	if (pg_class_aclcheck(objects->table_oid, user, ACL_SELECT) == ACLCHECK_OK)
		return true;
	return pg_attribute_aclcheck(objects->table_oid, objects->result_attnum,
								 user, ACL_SELECT) == ACLCHECK_OK &&
		pg_attribute_aclcheck(objects->table_oid, objects->fingerprint_attnum,
							  user, ACL_SELECT) == ACLCHECK_OK;
}

/*
 * claim_probe_marker
 *		The fingerprint and result of the marker the probe found, copied
 *		out of its slot (which the probe's end drops).
 */
static void
claim_probe_marker(const InboxObjects *objects, TupleTableSlot *slot,
				   InboxMarker *marker)
{
	Datum		value;
	bool		isnull;

	memset(marker, 0, sizeof(*marker));
	marker->found = true;
	value = slot_getattr(slot, objects->fingerprint_attnum, &isnull);
	if (!isnull)
		marker->fingerprint = DatumGetTextPCopy(value);
	value = slot_getattr(slot, objects->result_attnum, &isnull);
	if (!isnull)
		marker->result = PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
}

/*
 * claim_answer_from
 *		inbox_claim_outcome's answer for a marker that exists: mismatch if
 *		it was claimed with another fingerprint than the request's (no
 *		result: it belongs to another request), processed with its result
 *		otherwise.  A two-phase marker answers the same, as inbox_claim
 *		answers false for it, whatever its state.
 */
static void
claim_answer_from(ClaimAnswer *answer, const InboxMarker *marker)
{
	if (inbox_fingerprints_differ(marker->fingerprint, answer->fingerprint))
		answer->outcome = CLAIM_MISMATCH;
	else
	{
		answer->outcome = CLAIM_PROCESSED;
		answer->result = marker->result;
	}
}

/*
 * claim_one
 *		The claim shared by both inbox_claim signatures and
 *		inbox_claim_outcome: the probe, then the INSERT.  True if this call
 *		wrote the marker.  answer is NULL for inbox_claim; for
 *		inbox_claim_outcome it carries the request in and the answer out.
 */
static bool
claim_one(text *message_id, text *consumer, ClaimAnswer *answer)
{
	InboxObjects objects;
	Relation	heap;
	Relation	index;
	bool		probe;
	bool		found = false;
	InboxMarker marker;
	bool		claimed;

	marker.found = false;
	heap = claim_open(answer ? "inbox_claim_outcome()" : "inbox_claim()",
					  &objects, &index, &probe);
	if (answer != NULL)
	{
		if (!inbox_has_results(&objects))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("inbox_claim_outcome() needs the inbox table's result and fingerprint columns"),
					 errhint("Run ALTER EXTENSION inbox UPDATE.")));
		if (answer->fingerprint != NULL)
			inbox_results_refused_on_citus(&objects, "a fingerprint");
	}
	if (probe)
	{
		InboxKeyProbe p;

		inbox_key_probe_begin(&p, heap, index, consumer, GetActiveSnapshot());
		found = inbox_key_probe_found(&p, message_id);
		if (found && answer != NULL && claim_probe_reads_results(&objects))
			claim_probe_marker(&objects, p.slot, &marker);
		inbox_key_probe_end(&p);
	}
	claim_close(heap, index);

	if (found && answer == NULL)
		return false;

	if (answer != NULL)
	{
		/*
		 * A marker the probe saw, but could not read for this caller, is
		 * read by a statement as the caller.  A marker that may be new, of
		 * a message sent before the consumer's floor, is looked for first:
		 * it is a duplicate if it exists, and expired otherwise.
		 */
		if ((found && !marker.found) ||
			(!found && answer->has_sent_at &&
			 inbox_floor_refuses(&objects, consumer, answer->sent_at)))
		{
			inbox_marker_read(&objects, message_id, consumer, false, &marker);
			if (!marker.found && !found)
			{
				answer->outcome = CLAIM_EXPIRED;
				return false;
			}
		}
		if (marker.found)
		{
			claim_answer_from(answer, &marker);
			return false;
		}
	}

	if (objects.table_in_citus)
		claimed = claim_insert_citus(&objects, message_id, consumer);
	else if (IsolationUsesXactSnapshot())
		claimed = claim_insert_one(&objects, message_id, consumer,
								   answer ? answer->fingerprint : NULL);
	else
		claimed = claim_insert_or_nothing(&objects, message_id, consumer,
										  answer ? answer->fingerprint : NULL);
	if (answer == NULL)
		return claimed;
	if (claimed)
	{
		/*
		 * No read saw the old marker gone before the floor was read: the
		 * probe reads with the caller's snapshot (the transaction's, or a
		 * statement's that may have run for longer than the retention),
		 * which may predate the marker itself, and without the probe there
		 * was no read at all.  A prune may have deleted the marker and
		 * raised the floor since (floor.c).
		 */
		if (answer->has_sent_at)
			inbox_floor_recheck(&objects, consumer, answer->sent_at);
		answer->outcome = CLAIM_CLAIMED;
		return true;
	}

	/*
	 * The key was taken, by a claim that committed while this one waited
	 * (or, under REPEATABLE READ, after this transaction's snapshot: read
	 * with a new one).  A caller whose policies hide it learns nothing
	 * from it, and gets an error rather than a processed it could ack.
	 */
	inbox_marker_read(&objects, message_id, consumer,
					  IsolationUsesXactSnapshot() && !objects.table_in_citus,
					  &marker);
	if (!marker.found)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("the marker of message \"%s\" for consumer \"%s\" is hidden from this role",
						text_to_cstring(message_id), text_to_cstring(consumer)),
				 errdetail("The key is taken, and row-level security or privileges keep the marker from being read."),
				 errhint("Give the role a policy FOR ALL on its consumer's rows (docs/privileges.md).")));
	claim_answer_from(answer, &marker);
	return false;
}

/*
 * inbox_claim(message_id text, consumer text) returns boolean
 *
 * True: this transaction now owns the message; do the work and commit.
 * False: a marker already exists; acknowledge the message and skip it.
 */
Datum
inbox_claim(PG_FUNCTION_ARGS)
{
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);

	PG_RETURN_BOOL(inbox_counted(claim_one(message_id, consumer, NULL), consumer,
								 INBOX_COUNT_CLAIMED, INBOX_COUNT_DUPLICATE));
}

/*
 * inbox_claim(message_id uuid, consumer text) returns boolean
 *
 * The uuid is stored in its canonical text form (lower case, hyphenated),
 * so it meets the same marker as the text call with that form.
 */
Datum
inbox_claim_uuid(PG_FUNCTION_ARGS)
{
	text	   *message_id;
	text	   *consumer;

	inbox_arg_not_null(fcinfo, 0, "message_id");
	message_id = cstring_to_text(DatumGetCString(DirectFunctionCall1(uuid_out,
																	 PG_GETARG_DATUM(0))));
	consumer = inbox_arg_consumer(fcinfo, 1);

	PG_RETURN_BOOL(inbox_counted(claim_one(message_id, consumer, NULL), consumer,
								 INBOX_COUNT_CLAIMED, INBOX_COUNT_DUPLICATE));
}

/*
 * inbox_claim_outcome(message_id text, consumer text, fingerprint text,
 *					   sent_at timestamptz)
 *		returns table (outcome text, result jsonb)
 *
 * inbox_claim for an idempotency key, with what it found, in one row:
 *
 *	claimed		this transaction wrote the marker (with the fingerprint):
 *				do the work, and record its result with inbox_set_result
 *	processed	a marker exists (a one-phase one, or a two-phase one in any
 *				state, as inbox_claim answers false): ack, and return
 *				result, its stored result (NULL if none)
 *	mismatch	the marker was claimed with another fingerprint: another
 *				request reused the key; nothing changed, result is NULL
 *	expired		new, but sent_at is below the consumer's floor: nothing
 *				changed
 *
 * fingerprint NULL: the claim is not checked; a marker stored without one
 * is not checked against.
 */
Datum
inbox_claim_outcome(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	ClaimAnswer answer;
	Datum		columns[2];
	bool		isnull[2] = {false, true};

	memset(&answer, 0, sizeof(answer));
	answer.fingerprint = inbox_arg_fingerprint(fcinfo, 2);
	answer.has_sent_at = inbox_arg_sent_at(fcinfo, 3, &answer.sent_at);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	claim_one(message_id, consumer, &answer);
	inbox_count(claim_outcome_counters[answer.outcome], consumer, 1);

	columns[0] = CStringGetTextDatum(claim_outcome_names[answer.outcome]);
	if (answer.result != (Datum) 0)
	{
		columns[1] = answer.result;
		isnull[1] = false;
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, columns, isnull);
	return (Datum) 0;
}

/*
 * compare_ids
 *		qsort comparator for message id datums: byte order, then length.
 *
 * Any total order would do; this one needs no collation lookup.
 */
static int
compare_ids(const void *a, const void *b)
{
	text	   *ta = DatumGetTextPP(*(const Datum *) a);
	text	   *tb = DatumGetTextPP(*(const Datum *) b);
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			cmp = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	if (cmp != 0)
		return cmp;
	return (la > lb) - (la < lb);
}

/*
 * claim_many_ids
 *		The ids of inbox_claim_many's array, checked, sorted, and each
 *		once; sets *nids.
 *
 * Sorted so that concurrent batches insert their common ids in the same
 * order, and wait for each other instead of deadlocking; each once, so
 * that a repeated id is neither probed twice nor consumes an identity
 * value.
 */
static Datum *
claim_many_ids(ArrayType *array, int *nids)
{
	Datum	   *ids;
	bool	   *nulls;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("message_ids must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT,
					  &ids, &nulls, nids);
	for (int i = 0; i < *nids; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("message_ids must not contain nulls"),
					 errdetail("Element %d of the array is null.", i + 1)));
		inbox_check_message_id(DatumGetTextPP(ids[i]), i + 1);
	}

	qsort(ids, *nids, sizeof(Datum), compare_ids);
	*nids = qunique(ids, *nids, sizeof(Datum), compare_ids);
	return ids;
}

/*
 * claim_many_return
 *		Add one claimed id to inbox_claim_many's result.
 */
static void
claim_many_return(ReturnSetInfo *rsinfo, Datum id)
{
	bool		isnull = false;

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &id, &isnull);
}

/*
 * claim_insert_many
 *		Insert the markers of ids with one INSERT ... ON CONFLICT DO
 *		NOTHING, and return those it inserted.
 *
 * No subtransaction: the statement waits for concurrent claimers of the
 * same ids like a single claim's INSERT does, and drops the ids they
 * claimed.
 */
static void
claim_insert_many(const InboxObjects *objects, Datum *ids, int nids,
				  text *consumer, ReturnSetInfo *rsinfo)
{
	static Oid	argtypes[] = {TEXTARRAYOID, TEXTOID, TIMESTAMPTZOID};
	SPIPlanPtr	plan;
	Datum		values[3];

	SPI_connect();
	plan = inbox_plan(&insert_many_plan, objects,
					  "INSERT INTO %1$s.inbox"
					  " (message_id, consumer, state, received_at, processed_at)"
					  " SELECT id, $2, 'processed', $3, $3"
					  " FROM pg_catalog.unnest($1) AS id"
					  " ON CONFLICT ON CONSTRAINT " INBOX_KEY_NAME " DO NOTHING"
					  " RETURNING message_id",
					  3, argtypes);

	values[0] = PointerGetDatum(construct_array(ids, nids, TEXTOID, -1,
												false, TYPALIGN_INT));
	values[1] = PointerGetDatum(consumer);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_INSERT_RETURNING, "inbox batch insert");

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		Datum		id = SPI_getbinval(SPI_tuptable->vals[row],
									   SPI_tuptable->tupdesc, 1, &isnull);

		claim_many_return(rsinfo, id);
	}

	/*
	 * An id not returned had its key taken, or a BEFORE trigger someone
	 * added returned NULL for it: only the first may read as "claimed
	 * before".  The statement inserts in the array's order, which is the
	 * ids' (sorted), and RETURNING follows it; each id left out is looked
	 * up, which costs nothing when every id was inserted.
	 */
	if (SPI_processed < (uint64) nids)
	{
		uint64		row = 0;

		for (int i = 0; i < nids; i++)
		{
			bool		isnull;
			Datum		returned = (Datum) 0;

			if (row < SPI_processed)
				returned = SPI_getbinval(SPI_tuptable->vals[row],
										 SPI_tuptable->tupdesc, 1, &isnull);
			if (row < SPI_processed && compare_ids(&ids[i], &returned) == 0)
				row++;
			else if (!claim_key_exists_now(objects, DatumGetTextPP(ids[i]),
										   consumer))
				claim_skipped(DatumGetTextPP(ids[i]), consumer);
		}
	}
	SPI_finish();
}

/*
 * claim_insert_many_citus
 *		claim_insert_many, on a table Citus manages: multi-row VALUES,
 *		CLAIM_MANY_CITUS_ROWS ids per statement.
 *
 * Not INSERT ... SELECT: Citus runs that through its own executor, whose
 * row count does not reach SPI ("consistency check on SPI tuple count
 * failed" as soon as one id conflicts).  A multi-row VALUES is split by
 * shard and counts right.  The ids come back in no particular order, and
 * inbox_claim_many returns them sorted.
 */
#define CLAIM_MANY_CITUS_ROWS 1000

static void
claim_insert_many_citus(const InboxObjects *objects, Datum *ids, int nids,
						text *consumer, ReturnSetInfo *rsinfo)
{
	Datum	   *claimed = palloc(sizeof(Datum) * nids);
	int			nclaimed = 0;
	int32		group = inbox_citus_group();

	SPI_connect();
	for (int first = 0; first < nids; first += CLAIM_MANY_CITUS_ROWS)
	{
		int			rows = Min(nids - first, CLAIM_MANY_CITUS_ROWS);
		int			nargs = 2 + 2 * rows;
		Oid		   *argtypes = palloc(sizeof(Oid) * nargs);
		Datum	   *values = palloc(sizeof(Datum) * nargs);
		StringInfoData query;

		initStringInfo(&query);
		appendStringInfo(&query,
						 "INSERT INTO %s.inbox"
						 " (id, message_id, consumer, state, received_at, processed_at)"
						 " OVERRIDING SYSTEM VALUE VALUES",
						 quote_identifier(NameStr(objects->schema_name)));
		argtypes[0] = TEXTOID;
		values[0] = PointerGetDatum(consumer);
		argtypes[1] = TIMESTAMPTZOID;
		values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
		for (int row = 0; row < rows; row++)
		{
			int			arg = 2 + 2 * row;

			appendStringInfo(&query, "%s($%d, $%d, $1, 'processed', $2, $2)",
							 row > 0 ? ", " : " ", arg + 1, arg + 2);
			argtypes[arg] = INT8OID;
			values[arg] = Int64GetDatum(inbox_citus_marker_id(objects, group));
			argtypes[arg + 1] = TEXTOID;
			values[arg + 1] = ids[first + row];
		}
		appendStringInfoString(&query,
							   " ON CONFLICT ON CONSTRAINT " INBOX_KEY_NAME
							   " DO NOTHING RETURNING message_id");

		inbox_spi_check(SPI_execute_with_args(query.data, nargs, argtypes,
											  values, NULL, false, 0),
						SPI_OK_INSERT_RETURNING, "inbox batch insert");
		for (uint64 row = 0; row < SPI_processed; row++)
		{
			bool		isnull;
			Datum		id = SPI_getbinval(SPI_tuptable->vals[row],
										   SPI_tuptable->tupdesc, 1, &isnull);

			/* out of SPI's memory, which SPI_finish frees */
			claimed[nclaimed++] = SPI_datumTransfer(id, false, -1);
		}
		pfree(query.data);
		pfree(argtypes);
		pfree(values);
	}
	SPI_finish();

	qsort(claimed, nclaimed, sizeof(Datum), compare_ids);
	for (int i = 0; i < nclaimed; i++)
		claim_many_return(rsinfo, claimed[i]);
}

/*
 * claim_many
 *		Claim each of ids (sorted, each once) for consumer, returning those
 *		this call claimed: a probe that drops the ids with a visible marker,
 *		and one INSERT for the rest.
 */
static void
claim_many(Datum *ids, int nids, text *consumer, ReturnSetInfo *rsinfo)
{
	InboxObjects objects;
	Relation	heap;
	Relation	index;
	bool		probe;
	int			nfresh = 0;

	heap = claim_open("inbox_claim_many()", &objects, &index, &probe);
	if (probe)
	{
		InboxKeyProbe p;

		inbox_key_probe_begin(&p, heap, index, consumer, GetActiveSnapshot());
		for (int i = 0; i < nids; i++)
		{
			if (!inbox_key_probe_found(&p, DatumGetTextPP(ids[i])))
				ids[nfresh++] = ids[i];
		}
		inbox_key_probe_end(&p);
	}
	else
		nfresh = nids;
	claim_close(heap, index);

	if (nfresh == 0)
		return;
	if (objects.table_in_citus)
		claim_insert_many_citus(&objects, ids, nfresh, consumer, rsinfo);
	else
		claim_insert_many(&objects, ids, nfresh, consumer, rsinfo);
}

/*
 * inbox_claim_many(message_ids text[], consumer text) returns setof text
 *
 * Claims a batch and returns the ids this call claimed, in byte order; an
 * id repeated in the array is claimed (and returned) once.  Uses no
 * subtransaction: ids with a visible marker are dropped by the probe, and
 * the rest go into one INSERT ... ON CONFLICT DO NOTHING, which waits for
 * concurrent claimers of the same ids like a single claim does.
 */
Datum
inbox_claim_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *array;
	text	   *consumer;
	Datum	   *ids;
	int			nids;

	inbox_arg_not_null(fcinfo, 0, "message_ids");
	array = PG_GETARG_ARRAYTYPE_P(0);
	consumer = inbox_arg_consumer(fcinfo, 1);
	ids = claim_many_ids(array, &nids);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (nids > 0)
		claim_many(ids, nids, consumer, rsinfo);
	inbox_count_claims(consumer, nids, tuplestore_tuple_count(rsinfo->setResult));
	return (Datum) 0;
}
