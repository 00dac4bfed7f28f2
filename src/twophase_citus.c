/*-------------------------------------------------------------------------
 *
 * twophase_citus.c
 *	  Two-phase claims on a table Citus manages: read the marker, decide,
 *	  then change it only if its token has not changed meanwhile.
 *
 * twophase.c writes each call as one statement that decides under the row
 * lock: an upsert whose DO UPDATE draws the token, sub-selects of the
 * consumer's settings, FOR UPDATE SKIP LOCKED.  Citus routes none of
 * these to a shard (it evaluates functions before it sends a statement,
 * so it refuses nextval or a sub-select next to a column, and takes no
 * row locks across shards).  Here every value is computed first, on this
 * node: the consumer's settings, the lease's end, the token
 * (inbox_citus_token) and the marker's id.  The statements that Citus
 * sends to the message's shard then carry only constants:
 *
 *	1. Read the marker (state, lease, token, attempts).
 *	2. Decide, as twophase.c's statement would on that version.
 *	3. Write it, conditional on the version read: the same token (every
 *	   change of ownership changes it) and the same claim state test.  The
 *	   UPDATE waits for a concurrent writer of the row and re-checks its
 *	   WHERE on the row's latest version, as any UPDATE does under READ
 *	   COMMITTED, so of two racing calls one changes the row and the other
 *	   changes nothing and starts again from 1 (REPEATABLE READ raises a
 *	   serialization failure instead).  A new claim is an INSERT ... ON
 *	   CONFLICT DO NOTHING: if another claimer inserted first, it waits
 *	   for that claimer's transaction and starts again.
 *
 * Every retry follows a change that another transaction committed, so it
 * does not loop without progress; a takeover's token is drawn above the
 * token it replaces, so a message's tokens increase whichever node each
 * call comes through (citus.c).
 *
 * Differences from the single-server functions (docs/citus.md):
 * inbox_next waits for a row another sweeper is taking rather than
 * skipping it, and returns a claim it lost to that sweeper as not taken
 * (it may return fewer than max while more were due); it returns the
 * oldest by marker id, which on Citus is ordered per node.  Leases run on
 * the clock of the node the call comes through.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "inbox.h"

/* The claim named by $1 (message_id), $2 (consumer) and $3 (token). */
#define KEY_IS " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2"
#define CLAIM_WITH_TOKEN KEY_IS " AND token" INBOX_EQ "$3"

/*
 * The marker as step 1 read it: with the token it had then, 0 for none
 * (a one-phase marker, or one written by hand), so that a takeover's
 * condition matches it.  Never for extend, complete or fail: a caller's
 * token 0 names no claim.
 */
#define MARKER_AS_READ KEY_IS " AND COALESCE(token, 0)" INBOX_EQ "$3"

/*
 * Claim states, tested with an immutable CASE: Citus refuses the
 * stable text cast that twophase.c uses, and a plain equality on the state
 * would let the shard's planner prefer a partial index over the key
 * (twophase.c, STATE_IS).
 */
#define STATE_TEST(label) \
	"CASE WHEN state" INBOX_EQ "'" label "'::%1$s.inbox_state THEN true ELSE false END"
#define IS_CLAIMED " AND " STATE_TEST("claimed")

/*
 * Can a claim take this marker over: released, or claimed with a lease
 * that ran out by $now?
 */
#define TAKEABLE(now) \
	" AND CASE WHEN state" INBOX_EQ "'released'::%1$s.inbox_state THEN true" \
	" WHEN state" INBOX_EQ "'claimed'::%1$s.inbox_state" \
	" THEN lease_until" INBOX_LE now " ELSE false END"

/* Retries of one call before giving up on a row that keeps changing. */
#define CITUS_RETRIES 100

static InboxPlan settings_plan;
static InboxPlan read_plan;
static InboxPlan insert_plan;
static InboxPlan take_plan;
static InboxPlan fail_exhausted_plan;
static InboxPlan extend_plan;
static InboxPlan complete_plan;
static InboxPlan completed_plan;
static InboxPlan fail_plan;
static InboxPlan candidates_plan;

/* A consumer's effective settings. */
typedef struct CitusSettings
{
	Interval   *lease;
	int32		max_attempts;
} CitusSettings;

/* A marker as read in step 1. */
typedef struct CitusMarker
{
	bool		found;
	char	   *state;
	TimestampTz lease_until;
	bool		lease_null;
	int64		token;			/* 0 for none */
	int32		attempts;
} CitusMarker;

static void citus_settings(const InboxObjects *objects, text *consumer,
						   Interval *lease, CitusSettings *settings);
static TimestampTz citus_lease_end(TimestampTz now, Interval *lease);
static void citus_read(const InboxObjects *objects, text *message_id,
					   text *consumer, CitusMarker *marker);
static bool citus_take(const InboxObjects *objects, int32 group,
					   text *message_id, text *consumer, int64 old_token,
					   TimestampTz now,
					   const CitusSettings *settings, Datum payload,
					   int64 *token, int32 *attempts, Datum *payload_out,
					   bool *payload_null);
static void citus_retry_check(int tries);

/*
 * citus_settings
 *		The consumer's lease (lease if given) and max_attempts, from
 *		inbox_consumers with the inbox.* settings as fallback.
 *
 * Run on this node: with inbox_consumers a reference table (docs/citus.md,
 * Setting up), every node reads the same settings.
 */
static void
citus_settings(const InboxObjects *objects, text *consumer, Interval *lease,
			   CitusSettings *settings)
{
	static Oid	argtypes[] = {TEXTOID};
	SPIPlanPtr	plan;
	Datum		values[1];

	inbox_citus_check_consumers(objects);
	settings->lease = lease ? lease : inbox_default_lease();
	settings->max_attempts = inbox_max_attempts;

	plan = inbox_plan(&settings_plan, objects,
					  "SELECT lease, max_attempts FROM %1$s.inbox_consumers"
					  " WHERE consumer" INBOX_EQ "$1",
					  1, argtypes);
	values[0] = PointerGetDatum(consumer);
	inbox_spi_run(plan, values, NULL, true, 1,
				  SPI_OK_SELECT, "inbox settings query");
	if (SPI_processed == 1)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		value;

		value = SPI_getbinval(row, desc, 1, &isnull);
		if (!isnull && lease == NULL)
			settings->lease = DatumGetIntervalP(SPI_datumTransfer(value, false, sizeof(Interval)));
		value = SPI_getbinval(row, desc, 2, &isnull);
		if (!isnull)
			settings->max_attempts = DatumGetInt32(value);
	}
}

/*
 * citus_lease_end
 *		now + lease, in UTC (timestamp_pl_interval: no time zone applies).
 */
static TimestampTz
citus_lease_end(TimestampTz now, Interval *lease)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamp_pl_interval,
												   TimestampTzGetDatum(now),
												   IntervalPGetDatum(lease)));
}

/*
 * citus_read
 *		Step 1: the marker of (message_id, consumer), if any.
 */
static void
citus_read(const InboxObjects *objects, text *message_id, text *consumer,
		   CitusMarker *marker)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID};
	SPIPlanPtr	plan;
	Datum		values[2];
	HeapTuple	row;
	TupleDesc	desc;
	bool		isnull;

	plan = inbox_plan(&read_plan, objects,
					  "SELECT state::pg_catalog.text, lease_until,"
					  " COALESCE(token, 0), attempts"
					  " FROM %1$s.inbox" KEY_IS,
					  2, argtypes);
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	inbox_spi_run(plan, values, NULL, false, 1,
				  SPI_OK_SELECT, "inbox marker read");

	memset(marker, 0, sizeof(*marker));
	if (SPI_processed == 0)
		return;
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	marker->found = true;
	marker->state = SPI_getvalue(row, desc, 1);
	marker->lease_until = DatumGetTimestampTz(SPI_getbinval(row, desc, 2,
															&marker->lease_null));
	marker->token = DatumGetInt64(SPI_getbinval(row, desc, 3, &isnull));
	marker->attempts = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));
}

/*
 * citus_take
 *		Step 3 of a takeover: give the claim whose token is old_token to a
 *		new token, if it is still takeable and has attempts left.  True,
 *		with the new token, attempts and payload, if it did.
 */
static bool
citus_take(const InboxObjects *objects, int32 group, text *message_id,
		   text *consumer, int64 old_token, TimestampTz now,
		   const CitusSettings *settings,
		   Datum payload, int64 *token, int32 *attempts, Datum *payload_out,
		   bool *payload_null)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, INT8OID, INT8OID,
	TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, INT4OID};
	SPIPlanPtr	plan;
	Datum		values[8];
	char		nulls[8];
	HeapTuple	row;
	TupleDesc	desc;
	bool		isnull;

	plan = inbox_plan(&take_plan, objects,
					  "UPDATE %1$s.inbox SET state = 'claimed', token = $4,"
					  " lease_until = $5, attempts = attempts" INBOX_PLUS "1,"
					  " processed_at = NULL, payload = COALESCE($6, payload)"
					  MARKER_AS_READ TAKEABLE("$7")
					  " AND attempts" INBOX_LT "$8"
					  " RETURNING token, attempts, payload",
					  8, argtypes);

	memset(nulls, ' ', sizeof(nulls));
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = Int64GetDatum(old_token);
	values[3] = Int64GetDatum(inbox_citus_token(objects, group, old_token));
	values[4] = TimestampTzGetDatum(citus_lease_end(now, settings->lease));
	values[5] = payload;
	nulls[5] = payload == (Datum) 0 ? 'n' : ' ';
	values[6] = TimestampTzGetDatum(now);
	values[7] = Int32GetDatum(settings->max_attempts);

	inbox_spi_run(plan, values, nulls, false, 0,
				  SPI_OK_UPDATE_RETURNING, "inbox claim update");
	if (SPI_processed != 1)
		return false;

	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	*token = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
	*attempts = DatumGetInt32(SPI_getbinval(row, desc, 2, &isnull));
	if (payload_out)
	{
		Datum		value = SPI_getbinval(row, desc, 3, payload_null);

		*payload_out = *payload_null ? (Datum) 0 :
			SPI_datumTransfer(value, false, -1);
	}
	return true;
}

/*
 * citus_retry_check
 *		Give up on a call whose row kept changing under it.
 */
static void
citus_retry_check(int tries)
{
	CHECK_FOR_INTERRUPTS();
	if (tries >= CITUS_RETRIES)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not claim the message: its marker changed %d times during the call",
						tries),
				 errhint("Retry the call.")));
}

/*
 * inbox_citus_begin
 *		twophase.c's begin, on a table Citus manages.
 */
void
inbox_citus_begin(const InboxObjects *objects, text *message_id,
				  text *consumer, Interval *lease, Datum payload,
				  InboxTwophaseBegin *result)
{
	static Oid	insert_types[] = {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID,
	INT8OID, TIMESTAMPTZOID, JSONBOID};
	static Oid	fail_types[] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID,
	TEXTOID, JSONBOID, INT4OID};
	CitusSettings settings;
	bool		drew = false;
	int32		group;

	memset(result, 0, sizeof(*result));
	inbox_tokens_check(objects->token_sequence_oid);
	group = inbox_citus_group();
	SPI_connect();
	citus_settings(objects, consumer, lease, &settings);

	for (int tries = 0;; tries++)
	{
		TimestampTz now = GetCurrentTimestamp();
		CitusMarker marker;
		Datum		values[7];
		char		nulls[7];
		SPIPlanPtr	plan;

		citus_retry_check(tries);
		citus_read(objects, message_id, consumer, &marker);
		memset(nulls, ' ', sizeof(nulls));

		if (!marker.found)
		{
			/* a new claim, unless another claimer inserts first */
			plan = inbox_plan(&insert_plan, objects,
							  "INSERT INTO %1$s.inbox"
							  " (id, message_id, consumer, state, received_at,"
							  "  token, lease_until, attempts, payload)"
							  " OVERRIDING SYSTEM VALUE"
							  " VALUES ($1, $2, $3, 'claimed', $4, $5, $6, 1, $7)"
							  " ON CONFLICT ON CONSTRAINT " INBOX_KEY_NAME
							  " DO NOTHING RETURNING token",
							  7, insert_types);
			values[0] = Int64GetDatum(inbox_citus_marker_id(objects, group));
			values[1] = PointerGetDatum(message_id);
			values[2] = PointerGetDatum(consumer);
			values[3] = TimestampTzGetDatum(now);
			values[4] = Int64GetDatum(inbox_citus_token(objects, group, 0));
			values[5] = TimestampTzGetDatum(citus_lease_end(now, settings.lease));
			values[6] = payload;
			nulls[6] = payload == (Datum) 0 ? 'n' : ' ';
			drew = true;
			inbox_spi_run(plan, values, nulls, false, 0,
						  SPI_OK_INSERT_RETURNING, "inbox_begin");
			if (SPI_processed == 1)
			{
				result->outcome = INBOX_OUTCOME_CLAIMED;
				result->token = DatumGetInt64(values[4]);
				break;
			}
			continue;
		}

		if (strcmp(marker.state, "processed") == 0)
		{
			result->outcome = INBOX_OUTCOME_PROCESSED;
			break;
		}
		if (strcmp(marker.state, "failed") == 0)
		{
			result->outcome = INBOX_OUTCOME_FAILED;
			break;
		}
		if (strcmp(marker.state, "claimed") == 0 && marker.lease_null)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("marker of message \"%s\" for consumer \"%s\" is in a state inbox_begin cannot take",
							text_to_cstring(message_id), text_to_cstring(consumer)),
					 errdetail("It is claimed without a lease, or the table was changed; only a marker written past the functions can be."),
					 errhint("Give it a lease_until, or set its state to released, by hand.")));
		if (strcmp(marker.state, "claimed") == 0 && marker.lease_until > now)
		{
			result->outcome = INBOX_OUTCOME_BUSY;
			result->retry_after =
				*DatumGetIntervalP(DirectFunctionCall2(timestamp_mi,
													   TimestampTzGetDatum(marker.lease_until),
													   TimestampTzGetDatum(now)));
			break;
		}

		/* released, or its lease ran out */
		if (marker.attempts < settings.max_attempts)
		{
			int32		attempts;

			drew = true;
			if (citus_take(objects, group, message_id, consumer, marker.token,
						   now, &settings, payload, &result->token, &attempts,
						   NULL, NULL))
			{
				result->outcome = attempts == 1 ?
					INBOX_OUTCOME_CLAIMED : INBOX_OUTCOME_TAKEN_OVER;
				break;
			}
			continue;
		}

		/* no attempts left: mark it failed, as twophase.c's upsert does */
		plan = inbox_plan(&fail_exhausted_plan, objects,
						  "UPDATE %1$s.inbox SET state = 'failed',"
						  " processed_at = $4, lease_until = NULL,"
						  " payload = COALESCE($6, payload),"
						  " last_error = CASE WHEN " STATE_TEST("claimed")
						  " THEN $5 ELSE last_error END"
						  MARKER_AS_READ TAKEABLE("$4")
						  " AND attempts" INBOX_GE "$7",
						  7, fail_types);
		values[0] = PointerGetDatum(message_id);
		values[1] = PointerGetDatum(consumer);
		values[2] = Int64GetDatum(marker.token);
		values[3] = TimestampTzGetDatum(now);
		values[4] = CStringGetTextDatum(psprintf("lease expired after attempt %d of %d",
												 marker.attempts,
												 settings.max_attempts));
		values[5] = payload;
		nulls[5] = payload == (Datum) 0 ? 'n' : ' ';
		values[6] = Int32GetDatum(settings.max_attempts);
		inbox_spi_run(plan, values, nulls, false, 0,
					  SPI_OK_UPDATE, "inbox_begin");
		if (SPI_processed == 1)
		{
			result->outcome = INBOX_OUTCOME_FAILED;
			break;
		}
	}
	SPI_finish();

	/* The token is durable before the caller sees it (tokens.c). */
	if (drew)
		inbox_tokens_drawn(objects->token_sequence_oid, 0);
}

/*
 * inbox_citus_extend
 *		twophase.c's inbox_extend, on a table Citus manages.
 */
bool
inbox_citus_extend(const InboxObjects *objects, text *message_id,
				   text *consumer, int64 token, Interval *lease)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID};
	CitusSettings settings;
	SPIPlanPtr	plan;
	Datum		values[4];
	bool		extended;

	SPI_connect();
	citus_settings(objects, consumer, lease, &settings);
	plan = inbox_plan(&extend_plan, objects,
					  "UPDATE %1$s.inbox SET lease_until = $4"
					  CLAIM_WITH_TOKEN IS_CLAIMED,
					  4, argtypes);
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = Int64GetDatum(token);
	values[3] = TimestampTzGetDatum(citus_lease_end(GetCurrentTimestamp(),
													settings.lease));
	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_UPDATE, "inbox_extend");
	extended = SPI_processed == 1;
	SPI_finish();
	return extended;
}

/*
 * inbox_citus_complete
 *		twophase.c's inbox_complete, on a table Citus manages.
 */
bool
inbox_citus_complete(const InboxObjects *objects, text *message_id,
					 text *consumer, int64 token)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID};
	SPIPlanPtr	plan;
	Datum		values[4];
	bool		completed;

	SPI_connect();
	plan = inbox_plan(&complete_plan, objects,
					  "UPDATE %1$s.inbox"
					  " SET state = 'processed', processed_at = $4, lease_until = NULL"
					  CLAIM_WITH_TOKEN IS_CLAIMED,
					  4, argtypes);
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = Int64GetDatum(token);
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());
	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_UPDATE, "inbox_complete");
	completed = SPI_processed == 1;

	/* a repeat of the completion that used this token (twophase.c) */
	if (!completed)
	{
		plan = inbox_plan(&completed_plan, objects,
						  "SELECT 1 FROM %1$s.inbox" CLAIM_WITH_TOKEN
						  " AND " STATE_TEST("processed"),
						  3, argtypes);
		inbox_spi_run(plan, values, NULL, false, 1,
					  SPI_OK_SELECT, "inbox_complete");
		completed = SPI_processed == 1;
	}
	SPI_finish();
	return completed;
}

/*
 * inbox_citus_fail
 *		twophase.c's inbox_fail, on a table Citus manages.
 */
bool
inbox_citus_fail(const InboxObjects *objects, text *message_id,
				 text *consumer, int64 token, text *error, bool *for_good)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, INT8OID, TEXTOID, INT4OID,
	TIMESTAMPTZOID};
	CitusSettings settings;
	SPIPlanPtr	plan;
	Datum		values[6];
	bool		failed;

	SPI_connect();
	citus_settings(objects, consumer, NULL, &settings);
	plan = inbox_plan(&fail_plan, objects,
					  "UPDATE %1$s.inbox"
					  " SET state = CASE WHEN attempts" INBOX_GE "$5"
					  "  THEN 'failed'::%1$s.inbox_state"
					  "  ELSE 'released'::%1$s.inbox_state END,"
					  " processed_at = CASE WHEN attempts" INBOX_GE "$5 THEN $6 END,"
					  " last_error = $4, lease_until = NULL"
					  CLAIM_WITH_TOKEN IS_CLAIMED
					  " RETURNING processed_at IS NOT NULL",
					  6, argtypes);
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = Int64GetDatum(token);
	values[3] = PointerGetDatum(error);
	values[4] = Int32GetDatum(settings.max_attempts);
	values[5] = TimestampTzGetDatum(GetCurrentTimestamp());
	inbox_spi_run(plan, values, NULL, false, 0,
				  SPI_OK_UPDATE_RETURNING, "inbox_fail");
	failed = SPI_processed == 1;
	if (failed)
	{
		bool		isnull;

		/*
		 * Failed for good exactly when processed_at was set.  Not
		 * state::text = 'failed': Citus allows only immutable functions in
		 * RETURNING, and the enum's output function is stable.
		 */
		*for_good = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 1,
											   &isnull));
	}
	SPI_finish();
	return failed;
}

/*
 * inbox_citus_next
 *		twophase.c's inbox_next, on a table Citus manages: the candidates
 *		first (a read across the shards), then each taken as a begin takes
 *		one over.
 */
void
inbox_citus_next(const InboxObjects *objects, text *consumer,
				 Interval *lease, int32 max, ReturnSetInfo *rsinfo)
{
	static Oid	argtypes[] = {TEXTOID, TIMESTAMPTZOID, INT4OID, INT4OID};
	CitusSettings settings;
	SPIPlanPtr	plan;
	Datum		values[4];
	TimestampTz now = GetCurrentTimestamp();
	SPITupleTable *candidates;
	uint64		ncandidates;
	bool		drew = false;
	int32		group;

	inbox_tokens_check(objects->token_sequence_oid);
	group = inbox_citus_group();
	SPI_connect();
	citus_settings(objects, consumer, lease, &settings);
	plan = inbox_plan(&candidates_plan, objects,
					  "SELECT message_id, COALESCE(token, 0) FROM %1$s.inbox"
					  " WHERE consumer" INBOX_EQ "$1"
					  " AND (state" INBOX_EQ "'released'"
					  "  OR (state" INBOX_EQ "'claimed' AND lease_until" INBOX_LE "$2))"
					  " AND attempts" INBOX_LT "$3"
					  " ORDER BY id LIMIT $4",
					  4, argtypes);
	values[0] = PointerGetDatum(consumer);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(settings.max_attempts);
	values[3] = Int32GetDatum(max);
	inbox_spi_run(plan, values, NULL, true, 0,
				  SPI_OK_SELECT, "inbox_next");
	candidates = SPI_tuptable;
	ncandidates = SPI_processed;

	for (uint64 i = 0; i < ncandidates; i++)
	{
		HeapTuple	row = candidates->vals[i];
		bool		isnull;
		text	   *message_id = DatumGetTextPP(SPI_getbinval(row, candidates->tupdesc, 1, &isnull));
		int64		old_token = DatumGetInt64(SPI_getbinval(row, candidates->tupdesc, 2, &isnull));
		Datum		columns[4];
		bool		nulls[4] = {false, false, false, false};
		int64		token;
		int32		attempts;

		drew = true;
		if (!citus_take(objects, group, message_id, consumer, old_token, now,
						&settings, (Datum) 0, &token, &attempts,
						&columns[3], &nulls[3]))
			continue;
		columns[0] = PointerGetDatum(message_id);
		columns[1] = Int64GetDatum(token);
		columns[2] = Int32GetDatum(attempts);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 columns, nulls);
	}
	SPI_finish();

	if (drew)
		inbox_tokens_drawn(objects->token_sequence_oid, 0);
}
