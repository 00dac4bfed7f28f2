/*-------------------------------------------------------------------------
 *
 * validate.c
 *	  Argument checks shared by every SQL-callable inbox function.
 *
 * None of the inbox functions is STRICT: a NULL result would read as "not
 * claimed" to a careless caller, so a NULL argument is an error instead.
 * Keys are checked against the documented limits here, so the caller sees
 * a clear message rather than a btree "index row size" error.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "datatype/timestamp.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "inbox.h"

static void check_key(text *value, const char *what, int max_bytes,
					  int element);
static Datum arg_jsonb(FunctionCallInfo fcinfo, int argno, const char *what,
					   int max_bytes, const char *hint);

/*
 * check_key
 *		Reject an empty or over-long key column value.
 *
 * element is the 1-based position in an array argument, or 0 for a scalar.
 */
static void
check_key(text *value, const char *what, int max_bytes, int element)
{
	int			len = VARSIZE_ANY_EXHDR(value);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what),
				 element > 0 ?
				 errdetail("Element %d of the array is empty.", element) : 0));
	if (len > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", what),
				 element > 0 ?
				 errdetail("Element %d of the array is %d bytes long; the limit is %d bytes.",
						   element, len, max_bytes) :
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   len, max_bytes)));
}

/*
 * inbox_check_message_id
 *		Check one message id (element > 0: its position in an array).
 */
void
inbox_check_message_id(text *message_id, int element)
{
	check_key(message_id, "message_id", INBOX_MESSAGE_ID_MAX_BYTES, element);
}

/*
 * inbox_arg_not_null
 *		Reject a NULL argument, named name in the message.
 */
void
inbox_arg_not_null(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/*
 * inbox_arg_message_id
 *		Fetch and check a message_id text argument; never returns NULL.
 */
text *
inbox_arg_message_id(FunctionCallInfo fcinfo, int argno)
{
	text	   *message_id;

	inbox_arg_not_null(fcinfo, argno, "message_id");
	message_id = PG_GETARG_TEXT_PP(argno);
	inbox_check_message_id(message_id, 0);
	return message_id;
}

/*
 * inbox_arg_consumer
 *		Fetch and check a consumer text argument; never returns NULL.
 */
text *
inbox_arg_consumer(FunctionCallInfo fcinfo, int argno)
{
	text	   *consumer;

	inbox_arg_not_null(fcinfo, argno, "consumer");
	consumer = PG_GETARG_TEXT_PP(argno);
	check_key(consumer, "consumer", INBOX_CONSUMER_MAX_BYTES, 0);
	return consumer;
}

/*
 * inbox_arg_token
 *		Fetch a fencing token argument; never NULL.
 *
 * Any other value is accepted: a token that matches no claim is an answer
 * (false), not an error.
 */
int64
inbox_arg_token(FunctionCallInfo fcinfo, int argno)
{
	inbox_arg_not_null(fcinfo, argno, "token");
	return PG_GETARG_INT64(argno);
}

/*
 * inbox_interval_problem
 *		What is wrong with an interval setting (a lease or a retention),
 *		or NULL when it is valid: it must be positive, and at most
 *		max_seconds.
 *
 * An interval has three parts, months, days and microseconds, and
 * PostgreSQL adds each to a timestamp on its own: months move the
 * calendar month, days the calendar day (23 or 25 hours across a
 * daylight-saving change), microseconds the clock.  '1 month -29 days'
 * compares as one day, but added to January 31st it reaches March 3rd
 * minus 29 days, February 2nd: two days.  So each part must be zero or
 * positive on its own, and only then is the total meaningful; for the
 * maximum, a month counts as 30 days and a day as 24 hours, as in
 * interval comparison.
 */
const char *
inbox_interval_problem(const Interval *value, int64 max_seconds)
{
	double		usecs;

	if (value->month < 0 || value->day < 0 || value->time < 0)
	{
		if (value->month > 0 || value->day > 0 || value->time > 0)
			return "mixed";
		return "negative";
	}
	usecs = (double) value->time +
		(double) value->day * USECS_PER_DAY +
		(double) value->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (usecs <= 0)
		return "negative";
	if (usecs > (double) max_seconds * USECS_PER_SEC)
		return "long";
	return NULL;
}

/*
 * inbox_check_interval
 *		Raise the error inbox_interval_problem finds, if any, for the
 *		setting called what (max_text: its maximum, in words).
 */
void
inbox_check_interval(const Interval *value, const char *what,
					 int64 max_seconds, const char *max_text)
{
	const char *problem = inbox_interval_problem(value, max_seconds);
	char	   *text;

	if (problem == NULL)
		return;
	text = DatumGetCString(DirectFunctionCall1(interval_out,
											   IntervalPGetDatum(value)));
	if (strcmp(problem, "mixed") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not mix positive and negative parts", what),
				 errdetail("It is \"%s\"; its months, days and time are each added to a timestamp on their own.",
						   text)));
	if (strcmp(problem, "negative") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what),
				 errdetail("It is \"%s\".", text)));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s must be at most %s", what, max_text),
			 errdetail("It is \"%s\".", text),
			 strcmp(what, "lease") == 0 ?
			 errhint("Renew the lease of a longer job with inbox_extend.") : 0));
}

/*
 * inbox_arg_lease
 *		Fetch and check an optional lease argument.
 *
 * Returns NULL when the argument is NULL (omitted): the caller then uses
 * the consumer's configured lease.
 */
Interval *
inbox_arg_lease(FunctionCallInfo fcinfo, int argno)
{
	Interval   *lease;

	if (PG_ARGISNULL(argno))
		return NULL;
	lease = PG_GETARG_INTERVAL_P(argno);
	inbox_check_interval(lease, "lease", INBOX_LEASE_MAX_SECONDS,
						 INBOX_LEASE_MAX_TEXT);
	return lease;
}

/*
 * inbox_arg_retention
 *		Fetch and check an optional retention argument; NULL if omitted.
 */
Interval *
inbox_arg_retention(FunctionCallInfo fcinfo, int argno)
{
	Interval   *retention;

	if (PG_ARGISNULL(argno))
		return NULL;
	retention = PG_GETARG_INTERVAL_P(argno);
	inbox_check_interval(retention, "retention", INBOX_RETENTION_MAX_SECONDS,
						 INBOX_RETENTION_MAX_TEXT);
	return retention;
}

/*
 * arg_jsonb
 *		Fetch and check an optional jsonb argument of at most max_bytes,
 *		named what, with hint for a larger one: (Datum) 0 when NULL.
 */
static Datum
arg_jsonb(FunctionCallInfo fcinfo, int argno, const char *what, int max_bytes,
		  const char *hint)
{
	struct varlena *value;

	if (PG_ARGISNULL(argno))
		return (Datum) 0;
	value = PG_GETARG_VARLENA_PP(argno);
	if (VARSIZE_ANY_EXHDR(value) > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large", what),
				 errdetail("It is %zu bytes; the limit is %d bytes.",
						   VARSIZE_ANY_EXHDR(value), max_bytes),
				 errhint("%s", hint)));
	return PointerGetDatum(value);
}

/*
 * inbox_arg_payload
 *		Fetch and check an optional jsonb payload: (Datum) 0 when NULL.
 */
Datum
inbox_arg_payload(FunctionCallInfo fcinfo, int argno)
{
	return arg_jsonb(fcinfo, argno, "payload", INBOX_PAYLOAD_MAX_BYTES,
					 "Keep large message bodies elsewhere and store their key in the payload.");
}

/*
 * inbox_arg_result
 *		Fetch and check an optional jsonb result: (Datum) 0 when NULL, or
 *		when the argument is absent (a function still at 1.0.0's SQL).
 */
Datum
inbox_arg_result(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno)
		return (Datum) 0;
	return arg_jsonb(fcinfo, argno, "result", INBOX_RESULT_MAX_BYTES,
					 "Keep large results elsewhere and store their key in the result.");
}

/*
 * inbox_arg_fingerprint
 *		Fetch and check an optional request fingerprint: NULL when NULL
 *		(the claim is not checked) or absent.
 *
 * Empty is refused: it cannot be a hash of anything, only a client's bug,
 * and taken as one it would make every other request a mismatch.
 */
text *
inbox_arg_fingerprint(FunctionCallInfo fcinfo, int argno)
{
	text	   *fingerprint;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	fingerprint = PG_GETARG_TEXT_PP(argno);
	check_key(fingerprint, "fingerprint", INBOX_FINGERPRINT_MAX_BYTES, 0);
	return fingerprint;
}

/*
 * inbox_arg_sent_at
 *		Fetch an optional sent_at: false when NULL or absent.  Infinite
 *		times say nothing about when a message was sent, and are refused.
 */
bool
inbox_arg_sent_at(FunctionCallInfo fcinfo, int argno, TimestampTz *sent_at)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return false;
	*sent_at = PG_GETARG_TIMESTAMPTZ(argno);
	if (TIMESTAMP_NOT_FINITE(*sent_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sent_at must be a finite time")));
	return true;
}

/*
 * inbox_arg_last_error
 *		Fetch a failure's description, cut to INBOX_LAST_ERROR_MAX_BYTES at
 *		a character boundary; never NULL.
 *
 * Cut rather than refused: inbox_fail records a failure, and an error here
 * would leave the claim held until its lease ran out.
 */
text *
inbox_arg_last_error(FunctionCallInfo fcinfo, int argno)
{
	text	   *error;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("error must not be null"),
				 errhint("Describe the failure; it is kept in last_error.")));
	error = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(error);
	if (len <= INBOX_LAST_ERROR_MAX_BYTES)
		return error;
	len = pg_mbcliplen(VARDATA_ANY(error), len, INBOX_LAST_ERROR_MAX_BYTES);
	return cstring_to_text_with_len(VARDATA_ANY(error), len);
}
