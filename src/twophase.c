/*-------------------------------------------------------------------------
 *
 * twophase.c
 *	  Two-phase claims with leases and fencing tokens.
 *
 * For side effects that cannot join the database transaction (an e-mail, a
 * card charge, an HTTP call), a handler claims the message in one short
 * transaction (inbox_begin), performs the effect, and marks the claim
 * processed in another (inbox_complete).  A lease is only a timing rule: an
 * owner that paused past it may wake up while another owns the message.
 * So every change of ownership draws a new token from inbox_token_seq, and
 * every later step (extend, complete, fail) is an UPDATE conditional on
 * the token still being current.  A stale owner's step matches no row and
 * is reported as false, never as success.
 *
 * A begin also says what it found (inbox_begin_outcome): claimed or taken
 * over (work with the token), processed or failed (the consumer acks), or
 * busy, with the lease the live holder has left (the consumer must not
 * ack, or the message is lost if the holder dies; it has it delivered
 * again after that time).  inbox_begin returns only the token.
 *
 * Concurrency: each function writes with one SQL statement (complete may
 * add a read-only second one, begin a read before and after), so row locks
 * decide every race.  A statement that locks rows first and then changes
 * them (inbox_next, like the maintenance passes) changes them by ctid, a
 * TID scan, never through a join the planner could turn into a scan of
 * the whole table.  Concurrent begins on one message serialize on the
 * unique key and the row lock of INSERT ... ON CONFLICT DO UPDATE, whose
 * WHERE is re-checked on the latest row version: exactly one takes the
 * claim.  The token of a takeover is drawn once the row is held (in DO
 * UPDATE's SET, after the lock; in inbox_next's UPDATE, after its FOR
 * UPDATE), that of a new claim just before the insert of the message's
 * first row, so a message's tokens increase in the order in which claims
 * took it.  inbox_next locks its rows with FOR UPDATE SKIP LOCKED, so
 * sweepers get disjoint claims and a begin racing a sweeper waits for it
 * and re-checks.  These functions are meant for short READ COMMITTED
 * transactions; under REPEATABLE READ a race with a concurrent change
 * raises a serialization failure (40001) instead.
 *
 * Leases run on the database server's clock at the time of the call
 * (clock_timestamp, not the transaction start), so a claim made late in a
 * long transaction is neither born expired nor over-long.
 *
 * Every statement reads the consumer's settings (inbox_consumers) with a
 * fallback to the inbox.* settings, passed in as parameters.
 *
 * On a table Citus manages, each function runs twophase_citus.c's
 * statements instead, which Citus can route to the message's shard.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_begin);
PG_FUNCTION_INFO_V1(inbox_begin_outcome);
PG_FUNCTION_INFO_V1(inbox_extend);
PG_FUNCTION_INFO_V1(inbox_complete);
PG_FUNCTION_INFO_V1(inbox_fail);
PG_FUNCTION_INFO_V1(inbox_next);

/*
 * SQL fragments for a consumer's effective settings: the lease given to
 * the call, else the consumer's configured one, else the inbox.* setting
 * (passed in as the parameter named fallback).
 */
#define CONSUMER_LEASE(consumer, explicit, fallback) \
	"COALESCE(" explicit ", (SELECT c.lease FROM %1$s.inbox_consumers c" \
	" WHERE c.consumer" INBOX_EQ consumer "), " fallback ")"
#define CONSUMER_MAX_ATTEMPTS(consumer, fallback) \
	"COALESCE((SELECT c.max_attempts FROM %1$s.inbox_consumers c" \
	" WHERE c.consumer" INBOX_EQ consumer "), " fallback ")"

/* The row of the claim named by $1, $2 and token $3. */
#define CLAIM_WITH_TOKEN \
	" WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2" \
	" AND token" INBOX_EQ "$3"

/*
 * The state test of a claim named by its key.  "state = 'claimed'" would
 * imply inbox_open_claims' predicate (and "state = 'processed'"
 * inbox_prunable's), and the planner, seeing a small index, chose it over
 * the key: every call then read all open claims of the consumer, and the
 * entries of completed ones until vacuum removed them, a cost that grows
 * with the consumer's backlog.  Compared as text, the test proves no index
 * predicate, so only the key index applies: one lookup, however many
 * claims are open.  Test: sql/twophase.sql.
 */
#define STATE_IS(label) \
	" AND state::pg_catalog.text" INBOX_EQ "'" label "'"

/*
 * In inbox_begin's takeover: does the claim i have attempts left?  Read
 * from a CTE of its own, which only a conflict evaluates: a new message
 * does not look its consumer's max_attempts up.
 */
#define ATTEMPTS_LEFT \
	" i.attempts" INBOX_LT "(SELECT max_attempts FROM attempts_setting) "

/*
 * Step 2 of twophase_begin (see the plain SQL there): the upsert that
 * claims a message or takes it over.  A claim with a fingerprint stores
 * it with a new marker (columns, values), and takes over only a marker
 * made without one or with the same (where), so that a mismatch changes
 * nothing.
 */
#define BEGIN_UPSERT(columns, values, where) \
	"WITH lease_setting AS (" \
	" SELECT " CONSUMER_LEASE("$2", "$4", "$6") " AS lease)," \
	" attempts_setting AS (" \
	" SELECT " CONSUMER_MAX_ATTEMPTS("$2", "$7") " AS max_attempts)" \
	" INSERT INTO %1$s.inbox AS i" \
	" (message_id, consumer, state, received_at, token," \
	"  lease_until, attempts, payload" columns ")" \
	" SELECT $1, $2, 'claimed', $3, pg_catalog.nextval($8)," \
	" " INBOX_UTC_PLUS("$3", "s.lease") ", 1, $5" values " FROM lease_setting s" \
	" ON CONFLICT ON CONSTRAINT " INBOX_KEY_NAME " DO UPDATE SET" \
	" state = CASE WHEN" ATTEMPTS_LEFT \
	"  THEN 'claimed'::%1$s.inbox_state ELSE 'failed' END," \
	" token = CASE WHEN" ATTEMPTS_LEFT \
	"  THEN GREATEST(pg_catalog.nextval($8), i.token" INBOX_PLUS "1)" \
	"  ELSE i.token END," \
	" lease_until = CASE WHEN" ATTEMPTS_LEFT \
	"  THEN excluded.lease_until END," \
	" attempts = CASE WHEN" ATTEMPTS_LEFT \
	"  THEN i.attempts" INBOX_PLUS "1 ELSE i.attempts END," \
	" processed_at = CASE WHEN" ATTEMPTS_LEFT "THEN NULL ELSE $3 END," \
	" last_error = CASE" \
	"  WHEN" ATTEMPTS_LEFT "THEN i.last_error" \
	"  WHEN i.state" INBOX_EQ "'claimed'" \
	"  THEN 'lease expired after attempt '" INBOX_CONCAT "i.attempts" \
	INBOX_CONCAT "' of '" INBOX_CONCAT "(SELECT max_attempts FROM attempts_setting)" \
	"  ELSE i.last_error END," \
	" payload = COALESCE(excluded.payload, i.payload)" \
	" WHERE (i.state" INBOX_EQ "'released'" \
	" OR (i.state" INBOX_EQ "'claimed' AND i.lease_until" INBOX_LE "$3))" where \
	" RETURNING i.state" INBOX_EQ "'claimed', i.token, i.received_at" INBOX_EQ "$3"

static InboxPlan begin_row_plan;
static InboxPlan begin_lock_plan;
static InboxPlan begin_row_results_plan;
static InboxPlan begin_lock_results_plan;
static InboxPlan begin_plan;
static InboxPlan begin_fingerprint_plan;
static InboxPlan extend_plan;
static InboxPlan complete_plan;
static InboxPlan complete_result_plan;
static InboxPlan completed_plan;
static InboxPlan fail_plan;
static InboxPlan next_plan;
static InboxPlan marker_seen_plan;

static Relation twophase_open(const char *caller, InboxObjects *objects);
static Oid	twophase_token_sequence(const InboxObjects *objects);
static bool twophase_changed_claim(SPIPlanPtr plan, Datum *values,
								   const char *nulls);
static text *twophase_refused_for(const InboxObjects *objects,
								  Datum *values, text *consumer);

/*
 * twophase_open
 *		Checks shared by every two-phase call; opens the table.
 *
 * Resolves the extension's objects (with the table lock a writer takes)
 * so that the plans name the right schema.  The caller closes the table
 * with NoLock.
 */
static Relation
twophase_open(const char *caller, InboxObjects *objects)
{
	PreventCommandIfReadOnly(caller);
	return inbox_open_table(RowExclusiveLock, objects);
}

/*
 * twophase_token_sequence
 *		The OID of inbox_token_seq, for the statements that draw tokens.
 *
 * The statements take the sequence as a regclass parameter.  Its name,
 * spliced into nextval's string argument, would be parsed again as SQL:
 * a schema whose name holds a quote (a rename can give it one) would then
 * inject code into every call.  Test: sql/schema_quote.sql.
 */
static Oid
twophase_token_sequence(const InboxObjects *objects)
{
	if (!OidIsValid(objects->token_sequence_oid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is missing its token sequence",
						INBOX_EXTENSION_NAME),
				 errdetail("Expected sequence \"%s\" in schema \"%s\".",
						   INBOX_TOKEN_SEQ_NAME,
						   NameStr(objects->schema_name))));
	return objects->token_sequence_oid;
}

/*
 * twophase_refused_for
 *		Whose counter a refusal (a token that is not current) raises: the
 *		consumer's when the caller can see the marker ($1, $2 of values),
 *		the database's row (NULL) otherwise.  Anyone may name any consumer,
 *		and a role that row-level security confines to its own would
 *		otherwise add entries for made-up names, filling
 *		inbox.max_consumers_counted, or raise another consumer's refusals
 *		(counters.c).  Only a refusal pays this read.  On Citus, whose
 *		paths read no marker, every refusal counts in the database's row.
 *		The caller is connected to SPI.
 */
static text *
twophase_refused_for(const InboxObjects *objects, Datum *values,
					 text *consumer)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID};
	SPIPlanPtr	plan;

	plan = inbox_plan(&marker_seen_plan, objects,
					  "SELECT 1 FROM ONLY %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
					  2, argtypes);
	inbox_spi_run(plan, values, NULL, false, 1, SPI_OK_SELECT,
				  "inbox marker read");
	return SPI_processed == 1 ? consumer : NULL;
}

/*
 * twophase_changed_claim
 *		Run an UPDATE of one claim (the plan names it by key and token);
 *		true if it changed the row, false if the token was not current.
 */
static bool
twophase_changed_claim(SPIPlanPtr plan, Datum *values, const char *nulls)
{
	inbox_spi_run(plan, values, nulls, false, 0,
				  SPI_OK_UPDATE, "inbox claim update");
	return SPI_processed == 1;
}

/* The outcome column's values, in InboxTwophaseOutcome order. */
static const char *const outcome_names[] = {
	"claimed", "taken_over", "processed", "failed", "busy", "mismatch",
	"expired"
};

static bool twophase_row_answers(SPIPlanPtr plan, Datum *values,
								 TimestampTz now, text *fingerprint,
								 InboxTwophaseBegin *result, bool *exists);

/*
 * twophase_row_answers
 *		Read the marker of ($1, $2) with the plan begin_row_plan (or its
 *		variant that reads the fingerprint and result as well); true, with
 *		*result, if it was claimed with another fingerprint than the
 *		request's (a mismatch, whatever its state), or is processed,
 *		failed or a claim whose lease runs past now.  False for no marker
 *		(*exists false), a released claim or an expired one.
 */
static bool
twophase_row_answers(SPIPlanPtr plan, Datum *values, TimestampTz now,
					 text *fingerprint, InboxTwophaseBegin *result,
					 bool *exists)
{
	HeapTuple	row;
	TupleDesc	desc;
	char	   *state;
	bool		isnull;
	TimestampTz lease_until;

	inbox_spi_run(plan, values, NULL, false, 1,
				  SPI_OK_SELECT, "inbox_begin");
	*exists = SPI_processed == 1;
	if (SPI_processed == 0)
		return false;

	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	state = SPI_getvalue(row, desc, 1);
	lease_until = DatumGetTimestampTz(SPI_getbinval(row, desc, 2, &isnull));
	if (state == NULL)
		return false;			/* not as inbox.sql made the table */
	if (desc->natts >= 4)
	{
		bool		fingerprint_null;
		Datum		claimed = SPI_getbinval(row, desc, 3, &fingerprint_null);

		if (!fingerprint_null &&
			inbox_fingerprints_differ(DatumGetTextPP(claimed), fingerprint))
		{
			result->outcome = INBOX_OUTCOME_MISMATCH;
			return true;
		}
	}
	if (strcmp(state, "processed") == 0)
	{
		result->outcome = INBOX_OUTCOME_PROCESSED;
		if (desc->natts >= 4)
		{
			bool		result_null;
			Datum		stored = SPI_getbinval(row, desc, 4, &result_null);

			if (!result_null)
				result->result = inbox_result_transfer(stored);
		}
	}
	else if (strcmp(state, "failed") == 0)
		result->outcome = INBOX_OUTCOME_FAILED;
	else if (strcmp(state, "claimed") == 0 && !isnull && lease_until > now)
	{
		result->outcome = INBOX_OUTCOME_BUSY;
		result->retry_after =
			*DatumGetIntervalP(DirectFunctionCall2(timestamp_mi,
												   TimestampTzGetDatum(lease_until),
												   TimestampTzGetDatum(now)));
	}
	else
		return false;
	return true;
}

/*
 * twophase_begin
 *		The claim that inbox_begin and inbox_begin_outcome make, and what
 *		it found.  The arguments are theirs.
 *
 * 1. A read of the marker.  Processed and failed are final (no claim
 *	  leaves them), so the answer needs no lock, writes nothing and draws
 *	  no token: the common duplicate of a processed message costs a read.
 *	  A claim whose lease runs past now is read again with FOR SHARE,
 *	  which waits for a transaction changing it (a completion or a release
 *	  in flight) and returns the latest version: still live, it is busy,
 *	  without running the upsert's much larger plan; otherwise the upsert
 *	  decides.  The row lock is given up at once (a subtransaction rolled
 *	  back), so that a busy answer holds up no owner.
 * 2. The upsert: a new claim, or ON CONFLICT DO UPDATE, which locks the
 *	  latest version of the row and takes it if it is released or its lease
 *	  ran out by now, or marks it failed if its attempts are used up.  It
 *	  waits for a transaction changing the row, so an answer never predates
 *	  a completion or a release in flight.  The token of a takeover is
 *	  drawn in DO UPDATE, after the lock: drawn in the INSERT's projection,
 *	  before the wait, it could be lower than the token of a claim that
 *	  took the row meanwhile (specs/twophase-token-order.spec).  The
 *	  projection's own draw is then wasted; tokens may have gaps.  A
 *	  takeover's token is above the token it replaces by construction
 *	  (GREATEST with that token + 1), whatever the sequence says: after a
 *	  logical replica takes over the writes, or a restore, the sequence may
 *	  stand below the tokens the rows carry (docs/tokens.md).
 * 3. When the upsert took nothing, the row is still locked by it, so a
 *	  read with a new snapshot sees the very version that decided:
 *	  processed, failed, or a claim whose lease runs past now (busy).
 */
static void
twophase_begin(FunctionCallInfo fcinfo, const char *caller,
			   InboxTwophaseBegin *result)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, INTERVALOID,
	JSONBOID, INTERVALOID, INT4OID, REGCLASSOID, TEXTOID};
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	Interval   *lease = inbox_arg_lease(fcinfo, 2);
	Datum		payload = inbox_arg_payload(fcinfo, 3);
	text	   *fingerprint = inbox_arg_fingerprint(fcinfo, 4);
	TimestampTz sent_at = 0;
	bool		has_sent_at = inbox_arg_sent_at(fcinfo, 5, &sent_at);
	InboxObjects objects;
	SPIPlanPtr	row_plan;
	SPIPlanPtr	lock_plan;
	SPIPlanPtr	plan;
	Datum		values[9];
	char		nulls[9];
	TimestampTz now;
	bool		answered;
	bool		exists;

	memset(result, 0, sizeof(*result));

	table_close(twophase_open(caller, &objects), NoLock);
	if (fingerprint != NULL)
		inbox_results_refused_on_citus(&objects, "a fingerprint");
	if (objects.table_in_citus)
	{
		inbox_citus_begin(&objects, message_id, consumer, lease, payload,
						  result);
		return;
	}

	SPI_connect();
	now = GetCurrentTimestamp();
	memset(nulls, ' ', sizeof(nulls));
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = TimestampTzGetDatum(now);

	/*
	 * 1. A final state answers without a lock, a live claim after FOR
	 * SHARE.  A mismatch needs no lock either: a marker's fingerprint is
	 * the one it was made with, and never changes.  On a table at 1.1.0's
	 * SQL the read takes the fingerprint and result too.
	 */
	if (inbox_has_results(&objects))
		row_plan = inbox_plan(&begin_row_results_plan, &objects,
							  "SELECT state::pg_catalog.text, lease_until,"
							  " fingerprint, result"
							  " FROM ONLY %1$s.inbox"
							  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
							  2, argtypes);
	else
		row_plan = inbox_plan(&begin_row_plan, &objects,
							  "SELECT state::pg_catalog.text, lease_until"
							  " FROM ONLY %1$s.inbox"
							  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
							  2, argtypes);
	answered = twophase_row_answers(row_plan, values, now, fingerprint,
									result, &exists);
	if (answered && result->outcome == INBOX_OUTCOME_BUSY)
	{
		MemoryContext oldcontext = CurrentMemoryContext;
		ResourceOwner oldowner = CurrentResourceOwner;

		/*
		 * FOR SHARE waits for a transaction changing the row, in the
		 * executor; in a subtransaction rolled back at once, so that the
		 * row lock ends with the read: held until the caller's transaction
		 * ends, it would block the owner's completion and heartbeat.  An
		 * error rolls back the caller's transaction, and the
		 * subtransaction with it.
		 */
		if (inbox_has_results(&objects))
			lock_plan = inbox_plan(&begin_lock_results_plan, &objects,
								   "SELECT state::pg_catalog.text, lease_until,"
								   " fingerprint, result"
								   " FROM ONLY %1$s.inbox"
								   " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2"
								   " FOR SHARE",
								   2, argtypes);
		else
			lock_plan = inbox_plan(&begin_lock_plan, &objects,
								   "SELECT state::pg_catalog.text, lease_until"
								   " FROM ONLY %1$s.inbox"
								   " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2"
								   " FOR SHARE",
								   2, argtypes);
		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(oldcontext);
		answered = twophase_row_answers(lock_plan, values, now, fingerprint,
										result, &exists);
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	if (answered)
	{
		SPI_finish();
		return;
	}
	memset(result, 0, sizeof(*result));

	/*
	 * A new claim of a message sent before the consumer's floor.  The read
	 * above found no marker, so a prune that deleted one committed before
	 * it, and raised the floor in the same transaction: the floor read now
	 * (with a newer snapshot) is final (floor.c).  Except under REPEATABLE
	 * READ, where the read used the transaction's snapshot, which may
	 * predate the marker: the claim below rechecks then.
	 */
	if (!exists && has_sent_at &&
		inbox_floor_refuses(&objects, consumer, sent_at))
	{
		result->outcome = INBOX_OUTCOME_EXPIRED;
		SPI_finish();
		return;
	}

	/* only a claim draws a token: checked here, not for a read's answer */
	inbox_tokens_check(objects.token_sequence_oid);

	/*----------
	 * 2. Claim it, or take it over, under the row lock.  In plain SQL (the
	 * text qualifies every name with the extension's schema and every
	 * operator with pg_catalog), with left for ATTEMPTS_LEFT,
	 * i.attempts < (SELECT max_attempts FROM attempts_setting):
	 *
	 *	WITH lease_setting AS (
	 *		SELECT COALESCE($4, (SELECT c.lease FROM inbox_consumers c
	 *							 WHERE c.consumer = $2), $6) AS lease),
	 *	attempts_setting AS (
	 *		SELECT COALESCE((SELECT c.max_attempts FROM inbox_consumers c
	 *						 WHERE c.consumer = $2), $7) AS max_attempts)
	 *	INSERT INTO inbox AS i
	 *		(message_id, consumer, state, received_at, token,
	 *		 lease_until, attempts, payload)
	 *	SELECT $1, $2, 'claimed', $3, pg_catalog.nextval($8),
	 *		   $3 + s.lease, 1, $5 FROM lease_setting s
	 *	ON CONFLICT ON CONSTRAINT inbox_message_id_consumer_key DO UPDATE SET
	 *		state = CASE WHEN left
	 *				THEN 'claimed'::inbox_state ELSE 'failed' END,
	 *		token = CASE WHEN left
	 *				THEN GREATEST(pg_catalog.nextval($8), i.token + 1)
	 *				ELSE i.token END,
	 *		lease_until = CASE WHEN left THEN excluded.lease_until END,
	 *		attempts = CASE WHEN left
	 *				   THEN i.attempts + 1 ELSE i.attempts END,
	 *		processed_at = CASE WHEN left THEN NULL ELSE $3 END,
	 *		last_error = CASE
	 *			WHEN left THEN i.last_error
	 *			WHEN i.state = 'claimed'
	 *			THEN 'lease expired after attempt ' || i.attempts || ' of '
	 *				 || (SELECT max_attempts FROM attempts_setting)
	 *			ELSE i.last_error END,
	 *		payload = COALESCE(excluded.payload, i.payload)
	 *	WHERE i.state = 'released'
	 *	   OR (i.state = 'claimed' AND i.lease_until <= $3)
	 *	RETURNING i.state = 'claimed', i.token, i.received_at = $3
	 *
	 * received_at = $3 only in a row this statement inserted (a takeover
	 * keeps it): a new claim, even of a message whose failed claim an
	 * operator retried with attempts 0 (operate.c).
	 *----------
	 */
	if (fingerprint == NULL)
		plan = inbox_plan(&begin_plan, &objects,
						  BEGIN_UPSERT("", "", ""), 8, argtypes);
	else
		plan = inbox_plan(&begin_fingerprint_plan, &objects,
						  BEGIN_UPSERT(", fingerprint", ", $9",
									   " AND (i.fingerprint IS NULL"
									   " OR i.fingerprint" INBOX_EQ "$9)"),
						  9, argtypes);

	values[3] = PointerGetDatum(lease);
	nulls[3] = lease ? ' ' : 'n';
	values[4] = payload;
	nulls[4] = payload == (Datum) 0 ? 'n' : ' ';
	values[5] = IntervalPGetDatum(inbox_default_lease());
	values[6] = Int32GetDatum(inbox_max_attempts);
	values[7] = ObjectIdGetDatum(twophase_token_sequence(&objects));
	values[8] = PointerGetDatum(fingerprint);

	inbox_spi_run(plan, values, nulls, false, 0,
				  SPI_OK_INSERT_RETURNING, "inbox_begin");
	if (SPI_processed == 1)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		if (!DatumGetBool(SPI_getbinval(row, desc, 1, &isnull)))
			result->outcome = INBOX_OUTCOME_FAILED;	/* expired, no attempts left */
		else
		{
			result->token = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
			result->outcome =
				DatumGetBool(SPI_getbinval(row, desc, 3, &isnull)) ?
				INBOX_OUTCOME_CLAIMED : INBOX_OUTCOME_TAKEN_OVER;
		}
	}

	/* 3. Not taken: the version the upsert locked says why. */
	else if (!twophase_row_answers(row_plan, values, now, fingerprint, result,
								   &exists))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("marker of message \"%s\" for consumer \"%s\" is in a state inbox_begin cannot take",
						text_to_cstring(message_id), text_to_cstring(consumer)),
				 errdetail("It is claimed without a lease, or the table was changed; only a marker written past the functions can be."),
				 errhint("Give it a lease_until, or set its state to released, by hand.")));
	SPI_finish();

	if (result->outcome == INBOX_OUTCOME_CLAIMED && has_sent_at &&
		IsolationUsesXactSnapshot())
		inbox_floor_recheck(&objects, consumer, sent_at);

	/* The token is durable before the caller sees it (tokens.c). */
	if (result->outcome == INBOX_OUTCOME_CLAIMED ||
		result->outcome == INBOX_OUTCOME_TAKEN_OVER)
		inbox_tokens_drawn(objects.token_sequence_oid, result->token);
}

/*
 * inbox_begin(message_id text, consumer text, lease interval, payload jsonb)
 *		returns bigint
 *
 * The token of the claim this call holds: the message was new, released,
 * or held by a claim whose lease expired (a takeover: attempts + 1, the
 * old token dead).  NULL when this call holds no claim, for any of three
 * reasons it cannot tell apart: the message is processed, or failed (an
 * expired claim with its attempts used up is marked failed by this call),
 * or a live claim holds it.  A consumer that must know which, to ack or
 * not, calls inbox_begin_outcome.
 */
Datum
inbox_begin(PG_FUNCTION_ARGS)
{
	InboxTwophaseBegin result;

	twophase_begin(fcinfo, "inbox_begin()", &result);
	inbox_count(INBOX_COUNT_BEGIN(result.outcome), PG_GETARG_TEXT_PP(1), 1);
	if (result.outcome != INBOX_OUTCOME_CLAIMED &&
		result.outcome != INBOX_OUTCOME_TAKEN_OVER)
		PG_RETURN_NULL();
	PG_RETURN_INT64(result.token);
}

/*
 * inbox_begin_outcome(message_id text, consumer text, lease interval,
 *					   payload jsonb,
 *					   OUT outcome text, OUT token bigint,
 *					   OUT retry_after interval) returns record
 *
 * inbox_begin, with what it found, in one row, so that a broker's consumer
 * decides from this one answer whether to work, ack, or have the message
 * delivered again later:
 *
 *	claimed		this call holds the message's first attempt: work, with token
 *	taken_over	this call holds a later attempt (the claim was released, or
 *				its lease ran out): work, with token; an earlier attempt may
 *				have performed the side effect, in part or whole
 *	processed	done, by this consumer: ack
 *	failed		attempts used up (perhaps marked so by this call): ack, and
 *				report it
 *	busy		a live claim holds it, possibly this consumer's own earlier
 *				delivery: do not ack; deliver it again after retry_after,
 *				the lease its holder had left
 *	mismatch	the key was claimed with another fingerprint than this
 *				call's (whatever the marker's state): another request
 *				reused the key; nothing changed
 *	expired		new, but sent_at is below the consumer's floor: nothing
 *				changed
 *
 * token is NULL unless this call holds the claim; retry_after is NULL
 * unless busy; result is the stored result of a processed marker (NULL if
 * none).  fingerprint NULL: the call is not checked; a marker stored
 * without one is not checked against (result.c).  One row with a text outcome, rather than an enum or a
 * NULL-coded token, because every client library reads a row of text,
 * bigint and interval without any type registration (psycopg: a tuple with
 * a timedelta; node-postgres: an object; JDBC: getString, getLong,
 * getObject), and a handler switches on the outcome's name.
 */
Datum
inbox_begin_outcome(PG_FUNCTION_ARGS)
{
	InboxTwophaseBegin result;
	TupleDesc	desc;
	Datum		columns[4];
	bool		isnull[4] = {false, true, true, true};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "inbox_begin_outcome must return a composite type");

	twophase_begin(fcinfo, "inbox_begin_outcome()", &result);
	inbox_count(INBOX_COUNT_BEGIN(result.outcome), PG_GETARG_TEXT_PP(1), 1);
	columns[0] = CStringGetTextDatum(outcome_names[result.outcome]);
	if (result.outcome == INBOX_OUTCOME_CLAIMED ||
		result.outcome == INBOX_OUTCOME_TAKEN_OVER)
	{
		columns[1] = Int64GetDatum(result.token);
		isnull[1] = false;
	}
	if (result.outcome == INBOX_OUTCOME_BUSY)
	{
		columns[2] = IntervalPGetDatum(&result.retry_after);
		isnull[2] = false;
	}
	/* 1.0.0's SQL declares three columns, without the result */
	if (desc->natts >= 4 && result.result != (Datum) 0)
	{
		columns[3] = result.result;
		isnull[3] = false;
	}
	desc = BlessTupleDesc(desc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, columns, isnull)));
}

/*
 * inbox_extend(message_id text, consumer text, token bigint, lease interval)
 *		returns boolean
 *
 * Heartbeat: the lease runs again from now, if token is still the current
 * claim (live, or expired but not yet taken over or reclaimed).
 */
Datum
inbox_extend(PG_FUNCTION_ARGS)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID,
	INTERVALOID, INTERVALOID};
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	int64		token = inbox_arg_token(fcinfo, 2);
	Interval   *lease = inbox_arg_lease(fcinfo, 3);
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[6];
	char		nulls[6];
	bool		extended;
	text	   *counted_for = consumer;

	table_close(twophase_open("inbox_extend()", &objects), NoLock);
	if (objects.table_in_citus)
	{
		extended = inbox_citus_extend(&objects, message_id, consumer, token,
									  lease);
		PG_RETURN_BOOL(inbox_counted(extended, extended ? consumer : NULL,
									 INBOX_COUNT_EXTENDED,
									 INBOX_COUNT_EXTEND_REFUSED));
	}
	SPI_connect();
	plan = inbox_plan(&extend_plan, &objects,
					  "UPDATE ONLY %1$s.inbox"
					  " SET lease_until = " INBOX_UTC_PLUS("$4", CONSUMER_LEASE("$2", "$5", "$6"))
					  CLAIM_WITH_TOKEN STATE_IS("claimed"),
					  6, argtypes);

	memset(nulls, ' ', sizeof(nulls));
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = Int64GetDatum(token);
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[4] = PointerGetDatum(lease);
	nulls[4] = lease ? ' ' : 'n';
	values[5] = IntervalPGetDatum(inbox_default_lease());

	extended = twophase_changed_claim(plan, values, nulls);
	if (!extended)
		counted_for = twophase_refused_for(&objects, values, consumer);
	SPI_finish();

	PG_RETURN_BOOL(inbox_counted(extended, counted_for, INBOX_COUNT_EXTENDED,
								 INBOX_COUNT_EXTEND_REFUSED));
}

/*
 * inbox_complete(message_id text, consumer text, token bigint,
 *				  result jsonb) returns boolean
 *
 * Marks the claim processed if token is current, with its result if one is
 * given (a duplicate's begin returns it).  Repeating the completion with
 * the token that completed it answers true again, because the first reply
 * may have been lost, and changes nothing; any other token answers false.
 * Called with three arguments by a database still at 1.0.0's SQL.
 */
Datum
inbox_complete(PG_FUNCTION_ARGS)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID,
	JSONBOID};
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	int64		token = inbox_arg_token(fcinfo, 2);
	Datum		result = inbox_arg_result(fcinfo, 3);
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[5];
	bool		completed;
	text	   *counted_for = consumer;

	table_close(twophase_open("inbox_complete()", &objects), NoLock);
	if (result != (Datum) 0)
		inbox_results_refused_on_citus(&objects, "a result");
	if (objects.table_in_citus)
	{
		completed = inbox_citus_complete(&objects, message_id, consumer,
										 token);
		PG_RETURN_BOOL(inbox_counted(completed, completed ? consumer : NULL,
									 INBOX_COUNT_COMPLETED,
									 INBOX_COUNT_COMPLETE_REFUSED));
	}

	SPI_connect();
	if (result == (Datum) 0)
		plan = inbox_plan(&complete_plan, &objects,
						  "UPDATE ONLY %1$s.inbox"
						  " SET state = 'processed', processed_at = $4, lease_until = NULL"
						  CLAIM_WITH_TOKEN STATE_IS("claimed"),
						  4, argtypes);
	else
		plan = inbox_plan(&complete_result_plan, &objects,
						  "UPDATE ONLY %1$s.inbox"
						  " SET state = 'processed', processed_at = $4, lease_until = NULL,"
						  " result = $5"
						  CLAIM_WITH_TOKEN STATE_IS("claimed"),
						  5, argtypes);

	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = Int64GetDatum(token);
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[4] = result;

	completed = twophase_changed_claim(plan, values, NULL);

	/*
	 * A repeat: already processed under this very token.  A separate
	 * statement, so that under READ COMMITTED it sees a completion that a
	 * concurrent repeat committed while our UPDATE waited for its row lock.
	 * It reads the marker by its key alone, so that it also tells whose
	 * counter a refusal raises (as twophase_refused_for does for the
	 * others): none visible, the database's row.
	 */
	if (!completed)
	{
		bool		isnull;

		plan = inbox_plan(&completed_plan, &objects,
						  "SELECT token" INBOX_EQ "$3"
						  " AND state::pg_catalog.text" INBOX_EQ "'processed'"
						  " FROM ONLY %1$s.inbox"
						  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
						  3, argtypes);
		inbox_spi_run(plan, values, NULL, false, 1,
					  SPI_OK_SELECT, "inbox_complete");
		if (SPI_processed == 1)
		{
			Datum		repeat = SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 1,
											   &isnull);

			completed = !isnull && DatumGetBool(repeat);
		}
		else
			counted_for = NULL;
	}
	SPI_finish();

	PG_RETURN_BOOL(inbox_counted(completed, counted_for, INBOX_COUNT_COMPLETED,
								 INBOX_COUNT_COMPLETE_REFUSED));
}

/*
 * inbox_fail(message_id text, consumer text, token bigint, error text)
 *		returns boolean
 *
 * Records the error and releases the claim for another attempt, or marks
 * it failed when the consumer's attempts are used up.  False, changing
 * nothing, when token is not the current claim.
 */
Datum
inbox_fail(PG_FUNCTION_ARGS)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, INT8OID, TEXTOID, INT4OID,
	TIMESTAMPTZOID};
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	int64		token = inbox_arg_token(fcinfo, 2);
	text	   *error = inbox_arg_last_error(fcinfo, 3);
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[6];
	bool		failed;
	bool		for_good = false;
	text	   *counted_for = consumer;

	table_close(twophase_open("inbox_fail()", &objects), NoLock);
	if (objects.table_in_citus)
	{
		failed = inbox_citus_fail(&objects, message_id, consumer, token,
								  error, &for_good);
		inbox_count_fail(failed ? consumer : NULL, failed, for_good);
		PG_RETURN_BOOL(failed);
	}
	SPI_connect();
	plan = inbox_plan(&fail_plan, &objects,
					  "UPDATE ONLY %1$s.inbox"
					  " SET state = CASE WHEN attempts" INBOX_GE
					  CONSUMER_MAX_ATTEMPTS("$2", "$5")
					  "  THEN 'failed'::%1$s.inbox_state ELSE 'released' END,"
					  " processed_at = CASE WHEN attempts" INBOX_GE
					  CONSUMER_MAX_ATTEMPTS("$2", "$5") " THEN $6 END,"
					  " last_error = $4, lease_until = NULL"
					  CLAIM_WITH_TOKEN STATE_IS("claimed")
					  " RETURNING state::pg_catalog.text" INBOX_EQ "'failed'",
					  6, argtypes);

	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = Int64GetDatum(token);
	values[3] = PointerGetDatum(error);
	values[4] = Int32GetDatum(inbox_max_attempts);
	values[5] = TimestampTzGetDatum(GetCurrentTimestamp());

	/* Which way it went, for the counters. */
	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_UPDATE_RETURNING, "inbox claim update");
	failed = SPI_processed == 1;
	if (failed)
	{
		bool		isnull;

		for_good = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1,
											  &isnull));
	}
	else
		counted_for = twophase_refused_for(&objects, values, consumer);
	SPI_finish();

	inbox_count_fail(counted_for, failed, for_good);
	PG_RETURN_BOOL(failed);
}

/*
 * inbox_next(consumer text, lease interval, max integer)
 *		returns table (message_id text, token bigint, attempts integer,
 *					   payload jsonb)
 *
 * For a sweeper that retries without the broker: takes up to max released
 * claims and claims whose lease expired, oldest first, each with a new
 * token and attempts + 1.  Rows another session holds are skipped, so
 * concurrent sweepers get disjoint claims.  Expired claims with no attempts
 * left are not taken; inbox_begin or the reclaimer marks them failed.
 */
Datum
inbox_next(PG_FUNCTION_ARGS)
{
	static Oid	argtypes[] = {TEXTOID, TIMESTAMPTZOID, INTERVALOID, INT4OID,
	INTERVALOID, INT4OID, REGCLASSOID};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *consumer = inbox_arg_consumer(fcinfo, 0);
	Interval   *lease = inbox_arg_lease(fcinfo, 1);
	int32		max;
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[7];
	char		nulls[7];

	inbox_arg_not_null(fcinfo, 2, "max");
	max = PG_GETARG_INT32(2);
	if (max < 1 || max > INBOX_NEXT_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max must be between 1 and %d", INBOX_NEXT_MAX)));

	InitMaterializedSRF(fcinfo, 0);
	table_close(twophase_open("inbox_next()", &objects), NoLock);
	if (objects.table_in_citus)
	{
		inbox_citus_next(&objects, consumer, lease, max, rsinfo);
		inbox_count(INBOX_COUNT_NEXT_TAKEN, consumer,
					tuplestore_tuple_count(rsinfo->setResult));
		return (Datum) 0;
	}
	SPI_connect();
	inbox_tokens_check(objects.token_sequence_oid);
	plan = inbox_plan(&next_plan, &objects,
					  "WITH settings AS ("
					  " SELECT " CONSUMER_LEASE("$1", "$3", "$5") " AS lease,"
					  " " CONSUMER_MAX_ATTEMPTS("$1", "$6") " AS max_attempts),"
					  " taken AS ("
					  " UPDATE ONLY %1$s.inbox i SET state = 'claimed',"
					  " token = GREATEST(pg_catalog.nextval($7), i.token" INBOX_PLUS "1),"
					  " lease_until = " INBOX_UTC_PLUS("$2", "SELECT lease FROM settings") ","
					  " attempts = i.attempts" INBOX_PLUS "1"
					  " WHERE i.ctid" INBOX_EQ "ANY (ARRAY("
					  "  SELECT x.ctid FROM ONLY %1$s.inbox x"
					  "  WHERE x.consumer" INBOX_EQ "$1"
					  "  AND (x.state" INBOX_EQ "'released' OR (x.state" INBOX_EQ "'claimed'"
					  "   AND x.lease_until" INBOX_LE "$2))"
					  "  AND x.attempts" INBOX_LT "(SELECT max_attempts FROM settings)"
					  "  AND (x.token IS NULL OR x.token" INBOX_LT "'9223372036854775807'::pg_catalog.int8)"
					  "  ORDER BY x.id LIMIT $4"
					  "  FOR UPDATE SKIP LOCKED))"
					  " RETURNING i.id, i.message_id, i.token, i.attempts, i.payload)"
					  " SELECT message_id, token, attempts, payload FROM taken ORDER BY id",
					  7, argtypes);

	memset(nulls, ' ', sizeof(nulls));
	values[0] = PointerGetDatum(consumer);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[2] = PointerGetDatum(lease);
	nulls[2] = lease ? ' ' : 'n';
	values[3] = Int32GetDatum(max);
	values[4] = IntervalPGetDatum(inbox_default_lease());
	values[5] = Int32GetDatum(inbox_max_attempts);
	values[6] = ObjectIdGetDatum(twophase_token_sequence(&objects));

	inbox_spi_run(plan, values, nulls, false, 0,
				  SPI_OK_SELECT, "inbox_next");
	if (SPI_processed > 0)
		inbox_tokens_drawn(objects.token_sequence_oid, 0);
	inbox_count(INBOX_COUNT_NEXT_TAKEN, consumer, SPI_processed);

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		Datum		columns[4];
		bool		isnull[4];

		for (int col = 0; col < 4; col++)
			columns[col] = SPI_getbinval(SPI_tuptable->vals[row],
										 SPI_tuptable->tupdesc, col + 1,
										 &isnull[col]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 columns, isnull);
	}
	SPI_finish();

	return (Datum) 0;
}
