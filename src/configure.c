/*-------------------------------------------------------------------------
 *
 * configure.c
 *	  Per-consumer settings: inbox_configure, the checks of their values,
 *	  and inbox_retention_for.
 *
 * A consumer's settings are a row of inbox_consumers; a NULL column falls
 * back to the inbox.* setting.  Every pass of the maintenance worker reads
 * them, so a value that cannot be used (a retention so long that now minus
 * it is no timestamp, a lease whose month and day parts pull in opposite
 * directions) would stop maintenance, not just misconfigure one consumer.
 * The values are checked here, with the same rules as the functions'
 * arguments (validate.c), and again by the table's CHECK constraints,
 * which call inbox_lease_is_valid and inbox_retention_is_valid, so that
 * a row written by hand obeys them too.
 *
 * inbox_configure is C rather than PL/pgSQL so that it finds the table
 * through the extension's cached objects (objects.c), like every other
 * function: a PL/pgSQL body would have the schema's name as text, and
 * after a rename it would write into whatever now has that name.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_configure);
PG_FUNCTION_INFO_V1(inbox_lease_is_valid);
PG_FUNCTION_INFO_V1(inbox_retention_is_valid);
PG_FUNCTION_INFO_V1(inbox_retention_for);

static InboxPlan configure_plan;

static Interval *arg_span(FunctionCallInfo fcinfo, int argno,
						  const char *what, bool zero_allowed);

/*
 * inbox_configure(consumer text, retention interval, lease interval,
 *				   max_attempts integer) returns inbox_consumers
 *
 * Sets the arguments given (not NULL) and keeps the others; returns the
 * consumer's row as it is now.
 */
Datum
inbox_configure(PG_FUNCTION_ARGS)
{
	static Oid	argtypes[] = {TEXTOID, INTERVALOID, INTERVALOID, INT4OID};
	text	   *consumer = inbox_arg_consumer(fcinfo, 0);
	Interval   *retention = inbox_arg_retention(fcinfo, 1);
	Interval   *lease = inbox_arg_lease(fcinfo, 2);
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	Datum		result;
	Relation	consumers;
	int			nestlevel;

	if (!PG_ARGISNULL(3) && PG_GETARG_INT32(3) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_attempts must be at least 1")));

	table_close(inbox_open_table(AccessShareLock, &objects), NoLock);
	if (!OidIsValid(objects.consumers_oid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is missing its table \"%s\"",
						INBOX_EXTENSION_NAME, INBOX_CONSUMERS_NAME)));

	values[0] = PointerGetDatum(consumer);
	values[1] = PointerGetDatum(retention);
	nulls[1] = retention ? ' ' : 'n';
	values[2] = PointerGetDatum(lease);
	nulls[2] = lease ? ' ' : 'n';
	values[3] = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	nulls[3] = PG_ARGISNULL(3) ? 'n' : ' ';

	/*
	 * A superuser's call fires no trigger that a grantee of inbox_consumers
	 * attached (trust.c, docs/security.md).
	 */
	consumers = table_open(objects.consumers_oid, RowExclusiveLock);
	nestlevel = inbox_superuser_write_begin(consumers, "inbox_configure()");
	table_close(consumers, NoLock);

	SPI_connect();
	plan = inbox_plan(&configure_plan, &objects,
					  "INSERT INTO %1$s.inbox_consumers AS c"
					  " (consumer, retention, lease, max_attempts)"
					  " VALUES ($1, $2, $3, $4)"
					  " ON CONFLICT ON CONSTRAINT " INBOX_CONSUMERS_KEY_NAME
					  " DO UPDATE SET"
					  " retention = COALESCE(excluded.retention, c.retention),"
					  " lease = COALESCE(excluded.lease, c.lease),"
					  " max_attempts = COALESCE(excluded.max_attempts, c.max_attempts)"
					  " RETURNING c.*",
					  4, argtypes);
	inbox_spi_run(plan, values, nulls, false, 0, SPI_OK_INSERT_RETURNING,
				  "inbox_configure");
	if (SPI_processed != 1)
		elog(ERROR, "inbox_configure statement returned " UINT64_FORMAT " rows",
			 SPI_processed);
	result = PointerGetDatum(SPI_returntuple(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc));
	SPI_finish();
	inbox_superuser_write_end(nestlevel);

	PG_RETURN_DATUM(result);
}

/*
 * inbox_lease_is_valid(interval) returns boolean
 * inbox_retention_is_valid(interval) returns boolean
 *
 * For inbox_consumers' CHECK constraints: the rules of inbox_configure.
 * STRICT, so a NULL (the inbox.* setting applies) passes.
 */
Datum
inbox_lease_is_valid(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(inbox_interval_problem(PG_GETARG_INTERVAL_P(0),
										  INBOX_LEASE_MAX_SECONDS) == NULL);
}

Datum
inbox_retention_is_valid(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(inbox_interval_problem(PG_GETARG_INTERVAL_P(0),
										  INBOX_RETENTION_MAX_SECONDS) == NULL);
}

/*
 * arg_span
 *		Fetch and check a non-NULL interval argument of inbox_retention_for:
 *		positive (or, with zero_allowed, zero), at most the longest
 *		retention.
 */
static Interval *
arg_span(FunctionCallInfo fcinfo, int argno, const char *what,
		 bool zero_allowed)
{
	Interval   *value;
	const char *problem;

	inbox_arg_not_null(fcinfo, argno, what);
	value = PG_GETARG_INTERVAL_P(argno);
	if (zero_allowed)
	{
		if (value->month == 0 && value->day == 0 && value->time == 0)
			return value;
		problem = inbox_interval_problem(value, INBOX_RETENTION_MAX_SECONDS);
		if (problem != NULL && strcmp(problem, "negative") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not be negative", what)));
	}
	inbox_check_interval(value, what, INBOX_RETENTION_MAX_SECONDS,
						 INBOX_RETENTION_MAX_TEXT);
	return value;
}

/*
 * inbox_retention_for(lock_timeout interval, max_deliveries integer,
 *					   message_ttl interval, margin interval)
 *		returns interval
 *
 * The smallest safe retention for a broker with these settings.  The
 * broker can redeliver a message until its last delivery's lock or
 * visibility timeout runs out, or until it expires unconsumed; a replay
 * from a dead-letter queue comes later still, hence the margin.  The
 * result is a valid retention, or an error says why it cannot be one.
 */
Datum
inbox_retention_for(PG_FUNCTION_ARGS)
{
	Interval   *lock_timeout = arg_span(fcinfo, 0, "lock_timeout", false);
	Interval   *message_ttl = arg_span(fcinfo, 2, "message_ttl", true);
	Interval   *margin = arg_span(fcinfo, 3, "margin", true);
	int32		max_deliveries;
	Datum		result;

	inbox_arg_not_null(fcinfo, 1, "max_deliveries");
	max_deliveries = PG_GETARG_INT32(1);
	if (max_deliveries < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_deliveries must be at least 1")));

	result = DirectFunctionCall2(interval_mul, IntervalPGetDatum(lock_timeout),
								 Float8GetDatum((float8) max_deliveries));
	result = DirectFunctionCall2(interval_pl, result,
								 IntervalPGetDatum(message_ttl));
	result = DirectFunctionCall2(interval_pl, result, IntervalPGetDatum(margin));
	if (inbox_interval_problem(DatumGetIntervalP(result),
							   INBOX_RETENTION_MAX_SECONDS) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the retention these settings need is longer than %s",
						INBOX_RETENTION_MAX_TEXT),
				 errdetail("It is \"%s\".",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   result)))));
	PG_RETURN_DATUM(result);
}
