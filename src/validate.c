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
