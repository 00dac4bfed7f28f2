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
#include "utils/timestamp.h"

#include "inbox.h"

static void check_key(text *value, const char *what, int max_bytes,
					  int element);

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
 * inbox_arg_message_id
 *		Fetch and check a message_id text argument; never returns NULL.
 */
text *
inbox_arg_message_id(FunctionCallInfo fcinfo, int argno)
{
	text	   *message_id;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("message_id must not be null")));
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

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("consumer must not be null")));
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
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("token must not be null")));
	return PG_GETARG_INT64(argno);
}

/*
 * inbox_arg_lease
 *		Fetch and check an optional lease argument.
 *
 * Returns NULL when the argument is NULL (omitted): the caller then uses
 * the consumer's configured lease.  A lease must be positive and at most
 * INBOX_LEASE_MAX_SECONDS; months count as 30 days, as in interval
 * comparison.
 */
Interval *
inbox_arg_lease(FunctionCallInfo fcinfo, int argno)
{
	Interval   *lease;
	double		usecs;

	if (PG_ARGISNULL(argno))
		return NULL;
	lease = PG_GETARG_INTERVAL_P(argno);
	usecs = (double) lease->time +
		(double) lease->day * USECS_PER_DAY +
		(double) lease->month * DAYS_PER_MONTH * USECS_PER_DAY;

	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be positive")));
	if (usecs > (double) INBOX_LEASE_MAX_SECONDS * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be at most %d hours", INBOX_LEASE_MAX_SECONDS / 3600),
				 errhint("Renew the lease of a longer job with inbox_extend.")));
	return lease;
}
