/*-------------------------------------------------------------------------
 *
 * operate.c
 *	  An operator's decisions on failed claims: retry them, or discard them
 *	  with a reason.
 *
 * A claim whose attempts are used up stays failed, with its last error:
 * the consumer acked it, and nothing takes it again.  A person decides.
 * inbox_retry puts it back as released with a fresh budget of attempts
 * (attempts 0, so the consumer's max_attempts apply again), for a sweeper
 * (inbox_next) or a redelivery (inbox_begin) to take.  inbox_discard closes
 * it: processed, with the operator's reason in resolution, so that a
 * redelivery is acked (processed) and pruning removes it after the
 * consumer's retention counted from the discard.  Both record who decided
 * (session_user: the role that logged in, even after SET ROLE to the
 * operator role) and when, and both draw a new token, above the one they
 * replace, so that a late owner of the failed claim is fenced: without it
 * the owner's inbox_complete of a discarded claim would find its own token
 * on a processed row and answer true.  The bulk forms select the failed
 * claims of one consumer, by when they failed and by their error text.
 *
 * Only a failed claim changes: the single forms refuse anything else with
 * an error that says what the marker is; the bulk forms select failed
 * claims only and skip those another session holds.
 *
 * Concurrency: each call is one UPDATE (the single forms, then a read to
 * explain a refusal).  Its WHERE state = 'failed' is re-checked on the
 * latest row version after the row lock (READ COMMITTED), so a decision
 * never applies to a claim another operator decided meanwhile.  The bulk
 * forms lock their rows with FOR UPDATE SKIP LOCKED and change them by
 * ctid, as inbox_next does.  The token is drawn in the UPDATE's SET, after
 * the row lock, as GREATEST(nextval, token + 1).
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
#include "utils/timestamp.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_retry);
PG_FUNCTION_INFO_V1(inbox_discard);
PG_FUNCTION_INFO_V1(inbox_retry_failed);
PG_FUNCTION_INFO_V1(inbox_discard_failed);

/* Most failed claims one bulk call changes; call again for more. */
#define OPERATE_MAX			10000

/* Longest reason a discard keeps. */
#define OPERATE_REASON_MAX_BYTES	INBOX_LAST_ERROR_MAX_BYTES

/*
 * The SET clauses of a decision.  Parameters: $3 now, $4 the token
 * sequence, $5 the reason (NULL for a retry).  The token is above the one
 * it replaces whatever the sequence says (twophase.c, docs/tokens.md).
 */
#define OPERATE_SET_COMMON \
	" token = GREATEST(pg_catalog.nextval($4), i.token" INBOX_PLUS "1)," \
	" lease_until = NULL," \
	" resolved_by = SESSION_USER, resolved_at = $3, resolution = $5"
#define OPERATE_SET_RETRY \
	" SET state = 'released', attempts = 0, processed_at = NULL," \
	OPERATE_SET_COMMON
#define OPERATE_SET_DISCARD \
	" SET state = 'processed', processed_at = $3," \
	OPERATE_SET_COMMON

/*
 * The single forms: the failed claim named by $1 and $2.  state compared
 * as text, as twophase.c's STATE_IS does, so that only the key index
 * applies.
 */
#define OPERATE_ONE(set) \
	"UPDATE ONLY %1$s.inbox i" set \
	" WHERE i.message_id" INBOX_EQ "$1 AND i.consumer" INBOX_EQ "$2" \
	" AND i.state::pg_catalog.text" INBOX_EQ "'failed'" \
	" RETURNING i.token"

/*
 * The bulk forms: up to $8 failed claims of consumer $1 (with the
 * parameters $3 to $5 of the SET clauses), that failed before $6 (NULL:
 * whenever) and whose last_error is LIKE $7 (NULL: any), oldest failure
 * first.  state = 'failed' implies inbox_prunable's predicate: the scan
 * reads that index from the consumer's oldest final markers.
 */
#define OPERATE_MANY(set) \
	"WITH changed AS (UPDATE ONLY %1$s.inbox i" set \
	" WHERE i.ctid" INBOX_EQ "ANY (ARRAY(" \
	"  SELECT x.ctid FROM ONLY %1$s.inbox x" \
	"  WHERE x.consumer" INBOX_EQ "$1" \
	"  AND x.state" INBOX_EQ "'failed'" \
	"  AND x.processed_at" INBOX_LT "COALESCE($6, 'infinity'::pg_catalog.timestamptz)" \
	"  AND ($7 IS NULL OR x.last_error OPERATOR(pg_catalog.~~) $7)" \
	"  ORDER BY x.processed_at, x.id LIMIT $8" \
	"  FOR UPDATE SKIP LOCKED))" \
	" RETURNING i.processed_at, i.id, i.message_id)" \
	" SELECT message_id FROM changed ORDER BY id"

static InboxPlan retry_plan;
static InboxPlan discard_plan;
static InboxPlan retry_many_plan;
static InboxPlan discard_many_plan;
static InboxPlan state_plan;

/*
 * operate_open
 *		Checks shared by every decision; resolves the extension's objects.
 *		A superuser's decision is maintenance, as its inbox_prune() is: no
 *		trigger fires in it (trust.c).  Returns the nest level to pass to
 *		inbox_superuser_write_end once the decision is written.
 */
static int
operate_open(const char *caller, InboxObjects *objects)
{
	Relation	rel;
	int			nestlevel;

	PreventCommandIfReadOnly(caller);
	rel = inbox_open_table(RowExclusiveLock, objects);
	nestlevel = inbox_superuser_write_begin(rel, caller);
	table_close(rel, NoLock);
	if (objects->table_in_citus)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s is not supported on a table Citus manages", caller)));
	if (!OidIsValid(objects->token_sequence_oid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is missing its token sequence",
						INBOX_EXTENSION_NAME)));
	return nestlevel;
}

/*
 * operate_reason
 *		Fetch and check a discard's reason: not NULL, not empty, at most
 *		OPERATE_REASON_MAX_BYTES (refused rather than cut: a person wrote
 *		it and can shorten it).
 */
static text *
operate_reason(FunctionCallInfo fcinfo, int argno)
{
	text	   *reason;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reason must not be null"),
				 errhint("Say why the message is not retried; it is kept in resolution.")));
	reason = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(reason);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reason must not be empty"),
				 errhint("Say why the message is not retried; it is kept in resolution.")));
	if (len > OPERATE_REASON_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("reason is too long"),
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   len, OPERATE_REASON_MAX_BYTES)));
	return reason;
}

/*
 * operate_refuse
 *		Raise the error that says why the single form changed nothing: no
 *		marker, or a marker that is not a failed claim.  The caller is
 *		connected to SPI.
 */
static void
operate_refuse(const InboxObjects *objects, Datum *values, const char *what)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID};
	SPIPlanPtr	plan;
	char	   *message_id = TextDatumGetCString(values[0]);
	char	   *consumer = TextDatumGetCString(values[1]);
	char	   *state;

	plan = inbox_plan(&state_plan, objects,
					  "SELECT state::pg_catalog.text FROM ONLY %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2",
					  2, argtypes);
	inbox_spi_run(plan, values, NULL, true, 1, SPI_OK_SELECT, what);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("no marker of message \"%s\" for consumer \"%s\"",
						message_id, consumer)));
	state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("marker of message \"%s\" for consumer \"%s\" is not a failed claim",
					message_id, consumer),
			 errdetail("It is %s.", state ? state : "in no state"),
			 errhint("Only a failed claim can be retried or discarded; a released or claimed one is being retried already, and a processed one is done.")));
}

/*
 * operate_one
 *		Retry (reason NULL) or discard the failed claim of (message_id,
 *		consumer).
 */
static void
operate_one(text *message_id, text *consumer, text *reason,
			const char *caller)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, REGCLASSOID,
	TEXTOID};
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int64		token;
	bool		isnull;
	int			nestlevel;

	nestlevel = operate_open(caller, &objects);
	SPI_connect();
	inbox_tokens_check(objects.token_sequence_oid);
	if (reason == NULL)
		plan = inbox_plan(&retry_plan, &objects,
						  OPERATE_ONE(OPERATE_SET_RETRY), 5, argtypes);
	else
		plan = inbox_plan(&discard_plan, &objects,
						  OPERATE_ONE(OPERATE_SET_DISCARD), 5, argtypes);

	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = ObjectIdGetDatum(objects.token_sequence_oid);
	values[4] = PointerGetDatum(reason);
	if (reason == NULL)
		nulls[4] = 'n';

	inbox_spi_run(plan, values, nulls, false, 0,
				  SPI_OK_UPDATE_RETURNING, caller);
	if (SPI_processed != 1)
		operate_refuse(&objects, values, caller);
	token = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	inbox_superuser_write_end(nestlevel);

	/* As every draw: durable before anyone may see it (tokens.c). */
	inbox_tokens_drawn(objects.token_sequence_oid, token);
	inbox_count(reason == NULL ? INBOX_COUNT_RETRIED : INBOX_COUNT_DISCARDED,
				consumer, 1);
}

/*
 * operate_many
 *		Retry (reason NULL) or discard the failed claims of consumer that
 *		the bulk form's arguments select (failed_before at argno,
 *		error_like and max after it); returns their message ids, in the
 *		order they were first claimed.
 */
static void
operate_many(FunctionCallInfo fcinfo, text *consumer, text *reason,
			 int argno, const char *caller)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, REGCLASSOID,
	TEXTOID, TIMESTAMPTZOID, TEXTOID, INT4OID};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int32		max;
	int			nestlevel;

	inbox_arg_not_null(fcinfo, argno + 2, "max");
	max = PG_GETARG_INT32(argno + 2);
	if (max < 1 || max > OPERATE_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max must be between 1 and %d", OPERATE_MAX)));

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	nestlevel = operate_open(caller, &objects);
	SPI_connect();
	inbox_tokens_check(objects.token_sequence_oid);
	if (reason == NULL)
		plan = inbox_plan(&retry_many_plan, &objects,
						  OPERATE_MANY(OPERATE_SET_RETRY), 8, argtypes);
	else
		plan = inbox_plan(&discard_many_plan, &objects,
						  OPERATE_MANY(OPERATE_SET_DISCARD), 8, argtypes);

	values[0] = PointerGetDatum(consumer);
	values[1] = (Datum) 0;
	nulls[1] = 'n';				/* unused: $2 keeps the single forms' numbers */
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = ObjectIdGetDatum(objects.token_sequence_oid);
	values[4] = PointerGetDatum(reason);
	if (reason == NULL)
		nulls[4] = 'n';
	if (PG_ARGISNULL(argno))
		nulls[5] = 'n';
	else
		values[5] = PG_GETARG_DATUM(argno);
	if (PG_ARGISNULL(argno + 1))
		nulls[6] = 'n';
	else
		values[6] = PG_GETARG_DATUM(argno + 1);
	values[7] = Int32GetDatum(max);

	inbox_spi_run(plan, values, nulls, false, 0, SPI_OK_SELECT, caller);
	if (SPI_processed > 0)
		inbox_tokens_drawn(objects.token_sequence_oid, 0);
	inbox_count(reason == NULL ? INBOX_COUNT_RETRIED : INBOX_COUNT_DISCARDED,
				consumer, (int64) SPI_processed);

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		Datum		column;
		bool		isnull;

		column = SPI_getbinval(SPI_tuptable->vals[row],
							   SPI_tuptable->tupdesc, 1, &isnull);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 &column, &isnull);
	}
	SPI_finish();
	inbox_superuser_write_end(nestlevel);
}

/*
 * inbox_retry(message_id text, consumer text) returns void
 *
 * Puts a failed claim back as released, with attempts 0 and a new token
 * that no one holds (a begin or a sweeper takes the claim with a token of
 * its own).  An error if the marker is not a failed claim.  Returns
 * nothing: a token returned would read as a claim the caller holds.
 */
Datum
inbox_retry(PG_FUNCTION_ARGS)
{
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);

	operate_one(message_id, consumer, NULL, "inbox_retry()");
	PG_RETURN_VOID();
}

/*
 * inbox_discard(message_id text, consumer text, reason text) returns void
 *
 * Closes a failed claim: processed now, with reason, and a new token.  An
 * error if the marker is not a failed claim.
 */
Datum
inbox_discard(PG_FUNCTION_ARGS)
{
	text	   *message_id = inbox_arg_message_id(fcinfo, 0);
	text	   *consumer = inbox_arg_consumer(fcinfo, 1);
	text	   *reason = operate_reason(fcinfo, 2);

	operate_one(message_id, consumer, reason, "inbox_discard()");
	PG_RETURN_VOID();
}

/*
 * inbox_retry_failed(consumer text, failed_before timestamptz,
 *					  error_like text, max integer) returns setof text
 *
 * inbox_retry for up to max failed claims of consumer, oldest failure
 * first; the message ids it retried.
 */
Datum
inbox_retry_failed(PG_FUNCTION_ARGS)
{
	text	   *consumer = inbox_arg_consumer(fcinfo, 0);

	operate_many(fcinfo, consumer, NULL, 1, "inbox_retry_failed()");
	return (Datum) 0;
}

/*
 * inbox_discard_failed(consumer text, reason text, failed_before
 *						timestamptz, error_like text, max integer)
 *		returns setof text
 *
 * inbox_discard for up to max failed claims of consumer, oldest failure
 * first; the message ids it discarded.
 */
Datum
inbox_discard_failed(PG_FUNCTION_ARGS)
{
	text	   *consumer = inbox_arg_consumer(fcinfo, 0);
	text	   *reason = operate_reason(fcinfo, 1);

	operate_many(fcinfo, consumer, reason, 2, "inbox_discard_failed()");
	return (Datum) 0;
}
