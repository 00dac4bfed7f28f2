/*-------------------------------------------------------------------------
 *
 * begin_wait.c
 *	  inbox_begin_wait: a two-phase begin that waits, up to a bound, for a
 *	  live claim to finish.
 *
 * A begin that finds a live claim answers busy; a caller that would rather
 * wait for the holder (an HTTP server answering a retried request while
 * the first is in flight) calls this procedure, which begins, and while
 * the answer is busy and the bound is not reached, sleeps and looks again.
 * It returns the first answer that is not busy (processed, with the
 * stored result; failed; taken over after the lease ran out; claimed, if
 * the marker went away; mismatch, for another fingerprint), or busy when
 * the bound is reached.
 *
 * Why a procedure: a function called by a SELECT holds its statement's
 * snapshot for the whole call, so its backend's xmin would hold back
 * VACUUM's horizon in every table of the cluster for as long as it waits.
 * A procedure called non-atomically (CALL outside a transaction block)
 * commits between its looks: after SPI_commit it holds no snapshot, no
 * buffer pin and no lock while it sleeps.  Called in a transaction block
 * or from a function it could not commit, so it refuses (25001), as
 * VACUUM does; and in a pipeline after other statements, which its first
 * commit would commit before the client's Sync.  Called by a procedure
 * (or a DO block) that is itself called non-atomically, it commits the
 * procedure's earlier work with its own, as a COMMIT there would.  The
 * CALL is one statement, so it works through PgBouncer in transaction
 * mode.
 *
 * Each look is a short transaction of its own.  The first runs the begin
 * (inbox_begin_outcome, found by its exact signature in the extension's
 * schema and called through fmgr, so a function someone else created
 * cannot stand in for it; the caller needs EXECUTE on it, as for a direct
 * call).  While that answer is busy, each later look only reads the
 * marker, with no lock and no transaction ID: as long as it is a claim
 * whose lease runs past now, the begin would answer busy again.  When it
 * is anything else, the begin runs again, in that look's transaction, and
 * decides.  The last transaction, which holds the answer (and the claim,
 * when it took one), commits when the CALL ends.
 *
 * Waking is by polling: the sleeps start at WAIT_POLL_FIRST_MS and double
 * up to WAIT_POLL_MAX_MS, and never run past the holder's lease or the
 * bound.  So the waiter learns of a completion at most WAIT_POLL_MAX_MS
 * after it commits, and of an expired lease at once.  A condition
 * variable broadcast by inbox_complete and inbox_fail at commit would wake
 * it at once, at the price of shared memory (the library preloaded), a
 * transaction callback in every completion, and a wake-up of every waiter
 * for every completion; a look costs one index read.
 *
 * A look can also wait for a lock: the begin waits for a transaction
 * changing the marker (a completion in flight), and its snapshot with it.
 * So each look's lock waits end at the bound (lock_timeout, set for the
 * look's transaction only), and the answer is then busy, as at the bound:
 * a holder that leaves its completion uncommitted cannot keep a waiter.
 *
 * The sleep is a latch wait: a cancel, statement_timeout (which the
 * internal commits leave armed: it covers the whole CALL) and
 * postmaster death interrupt it.  A cancel aborts only the look in
 * progress; the looks before it changed no marker (a busy begin changes
 * nothing), so the marker is as the holder left it.
 *
 * Behind a pooler in transaction mode (PgBouncer), the CALL holds its
 * server connection for the whole wait, as any statement does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parse_func.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_begin_wait);

/* The longest wait a caller may ask for. */
#define WAIT_MAX_SECONDS		(60 * 60)
#define WAIT_MAX_TEXT			"1 hour"

/* The sleeps between looks (see the banner). */
#define WAIT_POLL_FIRST_MS		10
#define WAIT_POLL_MAX_MS		100

/* The procedure's arguments, in inbox.sql's order. */
#define ARG_MESSAGE_ID	0
#define ARG_CONSUMER	1
#define ARG_WAIT		2
#define ARG_LEASE		3
#define ARG_PAYLOAD		4
#define ARG_FINGERPRINT	5

/* The begin it runs: inbox_begin_outcome's name, arguments and columns. */
#define BEGIN_NAME		"inbox_begin_outcome"
#define BEGIN_NARGS		6
#define BEGIN_NCOLUMNS	4

/* The procedure's output columns (its INOUT arguments). */
#define WAIT_NCOLUMNS	4

/* One answer of the begin, kept in memory that outlives the looks. */
typedef struct WaitAnswer
{
	Datum		columns[WAIT_NCOLUMNS];	/* outcome, token, retry_after,
										 * result */
	bool		isnull[WAIT_NCOLUMNS];
	bool		busy;
	TimestampTz lease_until;	/* when busy: the end of the holder's lease,
								 * as last seen */
} WaitAnswer;

static InboxPlan holder_plan;

static void wait_begin(Datum *args, bool *argnulls, MemoryContext keep,
					   WaitAnswer *answer);
static bool wait_holder_live(text *message_id, text *consumer,
							 TimestampTz now, TimestampTz *lease_until);
static bool wait_bound_locks(TimestampTz deadline);
static void wait_look(Datum *args, bool *argnulls, MemoryContext keep,
					  TimestampTz deadline, bool read_first,
					  WaitAnswer *answer);
static void wait_answer_busy(MemoryContext keep, TimestampTz lease_until,
							 WaitAnswer *answer);
static Interval *wait_arg_bound(FunctionCallInfo fcinfo);

/*
 * wait_arg_bound
 *		Fetch and check the wait argument: zero (do not wait) up to
 *		WAIT_MAX_SECONDS, never NULL.
 */
static Interval *
wait_arg_bound(FunctionCallInfo fcinfo)
{
	Interval   *wait;

	inbox_arg_not_null(fcinfo, ARG_WAIT, "wait");
	wait = PG_GETARG_INTERVAL_P(ARG_WAIT);
	if (wait->month == 0 && wait->day == 0 && wait->time == 0)
		return wait;			/* a begin that does not wait */
	if (wait->month <= 0 && wait->day <= 0 && wait->time <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must not be negative"),
				 errdetail("It is \"%s\".",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(wait))))));
	inbox_check_interval(wait, "wait", WAIT_MAX_SECONDS, WAIT_MAX_TEXT);
	return wait;
}

/*
 * wait_begin
 *		Run inbox_begin_outcome with the procedure's begin arguments, in
 *		the current transaction; its answer, copied into keep.
 *
 * The function is the one in the extension's schema with exactly these
 * argument types: a member of the extension, which only its owner can
 * replace.
 */
static void
wait_begin(Datum *args, bool *argnulls, MemoryContext keep,
		   WaitAnswer *answer)
{
	static Oid	argtypes[BEGIN_NARGS] = {TEXTOID, TEXTOID, INTERVALOID, JSONBOID,
	TEXTOID, TIMESTAMPTZOID};
	InboxObjects objects;
	Oid			begin_oid;
	AclResult	aclresult;
	FmgrInfo	flinfo;
	TupleDesc	desc;
	HeapTupleData row;
	HeapTupleHeader header;
	Datum		columns[BEGIN_NCOLUMNS];
	bool		isnull[BEGIN_NCOLUMNS];
	Datum		result;
	MemoryContext oldcontext;
	int			i;

	LOCAL_FCINFO(fcinfo, BEGIN_NARGS);

	table_close(inbox_open_table(AccessShareLock, &objects), NoLock);
	begin_oid = LookupFuncName(list_make2(makeString(NameStr(objects.schema_name)),
										  makeString(BEGIN_NAME)),
							   BEGIN_NARGS, argtypes, false);
	aclresult = inbox_proc_aclcheck(begin_oid, GetUserId());
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_FUNCTION, BEGIN_NAME);

	fmgr_info(begin_oid, &flinfo);
	InitFunctionCallInfoData(*fcinfo, &flinfo, BEGIN_NARGS, InvalidOid,
							 NULL, NULL);
	for (i = 0; i < BEGIN_NARGS; i++)
	{
		fcinfo->args[i].value = args[i];
		fcinfo->args[i].isnull = argnulls[i];
	}
	result = FunctionCallInvoke(fcinfo);
	if (fcinfo->isnull)
		elog(ERROR, "%s returned NULL", BEGIN_NAME);

	if (get_func_result_type(begin_oid, NULL, &desc) != TYPEFUNC_COMPOSITE ||
		desc->natts != BEGIN_NCOLUMNS)
		elog(ERROR, "%s does not return %d columns", BEGIN_NAME,
			 BEGIN_NCOLUMNS);
	header = DatumGetHeapTupleHeader(result);
	row.t_len = HeapTupleHeaderGetDatumLength(header);
	ItemPointerSetInvalid(&row.t_self);
	row.t_tableOid = InvalidOid;
	row.t_data = header;
	heap_deform_tuple(&row, desc, columns, isnull);

	oldcontext = MemoryContextSwitchTo(keep);
	memset(answer, 0, sizeof(*answer));
	for (i = 0; i < WAIT_NCOLUMNS; i++)
	{
		Form_pg_attribute att;

		answer->isnull[i] = i >= BEGIN_NCOLUMNS || isnull[i];
		if (answer->isnull[i])
			continue;
		att = TupleDescAttr(desc, i);
		answer->columns[i] = datumCopy(columns[i], att->attbyval, att->attlen);
	}
	MemoryContextSwitchTo(oldcontext);
	answer->busy = !answer->isnull[0] &&
		strcmp(TextDatumGetCString(answer->columns[0]), "busy") == 0;
	if (answer->busy && !answer->isnull[2])
		answer->lease_until = DatumGetTimestampTz(
			DirectFunctionCall2(timestamptz_pl_interval,
								TimestampTzGetDatum(GetCurrentTimestamp()),
								answer->columns[2]));
}

/*
 * wait_answer_busy
 *		Make *answer busy, with the lease left until lease_until (zero if
 *		it has run out), in keep.
 */
static void
wait_answer_busy(MemoryContext keep, TimestampTz lease_until,
				 WaitAnswer *answer)
{
	TimestampTz now = GetCurrentTimestamp();
	Interval   *left;
	MemoryContext oldcontext;

	left = DatumGetIntervalP(DirectFunctionCall2(timestamp_mi,
												 TimestampTzGetDatum(Max(lease_until, now)),
												 TimestampTzGetDatum(now)));
	oldcontext = MemoryContextSwitchTo(keep);
	memset(answer, 0, sizeof(*answer));
	answer->columns[0] = CStringGetTextDatum("busy");
	answer->columns[2] = datumCopy(IntervalPGetDatum(left), false,
								   sizeof(Interval));
	answer->isnull[1] = answer->isnull[3] = true;
	answer->busy = true;
	answer->lease_until = lease_until;
	MemoryContextSwitchTo(oldcontext);
}

/*
 * wait_holder_live
 *		Is the marker of (message_id, consumer) still a claim whose lease
 *		runs past now?  If so, *lease_until is its end.
 *
 * A read with no lock, in the current transaction: true means the begin
 * would answer busy again; false, that it must run and decide.  On a
 * table Citus manages the local table is an empty shell, so the begin
 * always decides there.
 */
static bool
wait_holder_live(text *message_id, text *consumer, TimestampTz now,
				 TimestampTz *lease_until)
{
	static Oid	argtypes[] = {TEXTOID, TEXTOID};
	InboxObjects objects;
	SPIPlanPtr	plan;
	Datum		values[2];
	bool		live = false;

	table_close(inbox_open_table(AccessShareLock, &objects), NoLock);
	if (objects.table_in_citus)
		return false;

	plan = inbox_plan(&holder_plan, &objects,
					  "SELECT lease_until FROM ONLY %1$s.inbox"
					  " WHERE message_id" INBOX_EQ "$1 AND consumer" INBOX_EQ "$2"
					  " AND state::pg_catalog.text" INBOX_EQ "'claimed'",
					  2, argtypes);
	values[0] = PointerGetDatum(message_id);
	values[1] = PointerGetDatum(consumer);
	inbox_spi_run(plan, values, NULL, true, 1, SPI_OK_SELECT,
				  "inbox_begin_wait");
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull && DatumGetTimestampTz(value) > now)
		{
			*lease_until = DatumGetTimestampTz(value);
			live = true;
		}
	}
	SPI_freetuptable(SPI_tuptable);
	return live;
}

/*
 * wait_bound_locks
 *		Bound the lock waits of the current transaction by the time left
 *		until deadline (SET LOCAL lock_timeout), unless the caller's own
 *		lock_timeout is shorter; true if it did.
 *
 * A look waits for a transaction changing the marker (the begin reads a
 * live claim FOR SHARE, and its upsert waits for the row): a holder whose
 * completion stays uncommitted would keep the waiter, and its snapshot,
 * past its bound.  The setting ends with the look's transaction.
 */
static bool
wait_bound_locks(TimestampTz deadline)
{
	long		left_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
														  deadline);
	char		value[32];

	left_ms = Max(left_ms, 1);	/* 0 would turn the timeout off */
	if (LockTimeout > 0 && LockTimeout <= left_ms)
		return false;
	snprintf(value, sizeof(value), "%ld", left_ms);
	(void) set_config_option("lock_timeout", value, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	return true;
}

/*
 * wait_look
 *		One look, in the current transaction, its lock waits bounded by
 *		deadline: with read_first, a read of the marker, which answers busy
 *		while the claim is live (and before deadline); otherwise, or then,
 *		the begin.  A lock timeout of ours answers busy, as the bound does,
 *		with the lease the holder had left when last seen.
 *
 * The look runs in a subtransaction, so that the timeout's error rolls
 * back only the look; any other error propagates as it was raised (and
 * rolls back the CALL's transaction, as a direct call's would).
 */
static void
wait_look(Datum *args, bool *argnulls, MemoryContext keep,
		  TimestampTz deadline, bool read_first, WaitAnswer *answer)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	bool		bounded = wait_bound_locks(deadline);
	int			level = GetCurrentTransactionNestLevel();
	TimestampTz last_lease_until = answer->lease_until;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz lease_until;

		if (read_first && now < deadline &&
			wait_holder_live(DatumGetTextPP(args[0]), DatumGetTextPP(args[1]),
							 now, &lease_until))
			wait_answer_busy(keep, lease_until, answer);
		else
			wait_begin(args, argnulls, keep, answer);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/*
		 * Roll back to the look's level before anything else, rethrowing
		 * too: the begin may have been in a subtransaction of its own (the
		 * read FOR SHARE), which the error left open, and an error that
		 * left ours open would abort only it, leaving the CALL's
		 * transaction behind as an aborted block.
		 */
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		while (GetCurrentTransactionNestLevel() > level)
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		if (!bounded || edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		wait_answer_busy(keep, last_lease_until, answer);
	}
	PG_END_TRY();
}

/*
 * inbox_begin_wait(message_id text, consumer text, wait interval,
 *					lease interval, payload jsonb, fingerprint text,
 *					INOUT outcome text, INOUT token bigint,
 *					INOUT retry_after interval, INOUT result jsonb)
 *		procedure
 *
 * inbox_begin_outcome's answer, after waiting up to wait while it is busy
 * (see the banner).  The INOUT arguments are its output only: their
 * defaults let a caller leave them out.
 */
Datum
inbox_begin_wait(PG_FUNCTION_ARGS)
{
	text	   *message_id;
	text	   *consumer;
	Interval   *wait;
	Datum		args[BEGIN_NARGS];
	bool		argnulls[BEGIN_NARGS];
	MemoryContext keep = CurrentMemoryContext;
	TimestampTz deadline;
	WaitAnswer	answer;
	TupleDesc	desc;
	long		sleep_ms = WAIT_POLL_FIRST_MS;

	if (fcinfo->context == NULL || !IsA(fcinfo->context, CallContext) ||
		castNode(CallContext, fcinfo->context)->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("inbox_begin_wait cannot run inside a transaction block"),
				 errdetail("It commits between its looks at the claim, so that it holds no snapshot while it waits."),
				 errhint("CALL it on its own, in autocommit mode, or call inbox_begin_outcome and retry after retry_after.")));

	/*
	 * In an extended-protocol pipeline, the statements sent before the CALL
	 * share its transaction until the client's Sync; the first commit would
	 * commit them early.  Core refuses its own such commands there alike
	 * (PreventInTransactionBlock).
	 */
	if (MyXactFlags & XACT_FLAGS_PIPELINING)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("inbox_begin_wait cannot be executed within a pipeline"),
				 errdetail("It commits between its looks at the claim, which would commit the statements sent before it."),
				 errhint("Send it first in the pipeline, or sync before it.")));

	/*
	 * The arguments are copied (detoasted) into memory that outlives the
	 * looks' transactions: a toasted value would be read through a
	 * snapshot that the first commit ends.
	 */
	(void) inbox_arg_message_id(fcinfo, ARG_MESSAGE_ID);
	(void) inbox_arg_consumer(fcinfo, ARG_CONSUMER);
	wait = wait_arg_bound(fcinfo);
	(void) inbox_arg_lease(fcinfo, ARG_LEASE);
	(void) inbox_arg_payload(fcinfo, ARG_PAYLOAD);
	(void) inbox_arg_fingerprint(fcinfo, ARG_FINGERPRINT);
	message_id = DatumGetTextPCopy(PG_GETARG_DATUM(ARG_MESSAGE_ID));
	consumer = DatumGetTextPCopy(PG_GETARG_DATUM(ARG_CONSUMER));

	args[0] = PointerGetDatum(message_id);
	args[1] = PointerGetDatum(consumer);
	args[2] = PG_ARGISNULL(ARG_LEASE) ? (Datum) 0 :
		datumCopy(PG_GETARG_DATUM(ARG_LEASE), false, sizeof(Interval));
	args[3] = PG_ARGISNULL(ARG_PAYLOAD) ? (Datum) 0 :
		PointerGetDatum(PG_DETOAST_DATUM_COPY(PG_GETARG_DATUM(ARG_PAYLOAD)));
	args[4] = PG_ARGISNULL(ARG_FINGERPRINT) ? (Datum) 0 :
		PointerGetDatum(DatumGetTextPCopy(PG_GETARG_DATUM(ARG_FINGERPRINT)));
	args[5] = (Datum) 0;		/* sent_at: a message's, not a request's */
	argnulls[0] = argnulls[1] = false;
	argnulls[2] = PG_ARGISNULL(ARG_LEASE);
	argnulls[3] = PG_ARGISNULL(ARG_PAYLOAD);
	argnulls[4] = PG_ARGISNULL(ARG_FINGERPRINT);
	argnulls[5] = true;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE ||
		desc->natts != WAIT_NCOLUMNS)
		elog(ERROR, "inbox_begin_wait must have %d INOUT arguments",
			 WAIT_NCOLUMNS);
	desc = BlessTupleDesc(desc);

	deadline = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													   TimestampTzGetDatum(GetCurrentTimestamp()),
													   IntervalPGetDatum(wait)));

	SPI_connect_ext(SPI_OPT_NONATOMIC);
	memset(&answer, 0, sizeof(answer));
	wait_look(args, argnulls, keep, deadline, false, &answer);
	while (answer.busy && GetCurrentTimestamp() < deadline)
	{
		long		lease_ms;

		/* The look's reads end here: nothing is held while it sleeps. */
		SPI_commit();

		/* Sleep no longer than the holder's lease, or the bound. */
		lease_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
												   answer.lease_until);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(Min(sleep_ms, lease_ms),
							 TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
															 deadline)),
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		sleep_ms = Min(sleep_ms * 2, WAIT_POLL_MAX_MS);

		/* Still held, a read says; else (or at the bound) the begin. */
		wait_look(args, argnulls, keep, deadline, true, &answer);
	}
	SPI_finish();

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, answer.columns,
													  answer.isnull)));
}
