/*-------------------------------------------------------------------------
 *
 * prune.c
 *	  Pruning: deleting the markers past their consumer's retention.
 *
 * Pruning deletes processed and failed markers whose processed_at is older
 * than their consumer's retention; it never touches a claim that is live,
 * expired or released.  It works in batches of at most inbox.batch_size
 * markers, and leaves a marker that another session holds for a later pass
 * rather than wait for it.
 *
 * Each batch is one DELETE statement (a plan kept per backend), so that the
 * executor makes every check a user's DELETE gets (privileges, row-level
 * security, replica identity, read-only transactions) and fires what a
 * DELETE fires.  It selects its markers through the partial index
 * inbox_prunable (consumer, processed_at, id), one consumer at a time, so
 * that each batch reads only markers it deletes and a consumer with a long
 * retention costs the others nothing; locks them with FOR UPDATE SKIP
 * LOCKED, leaving those another session holds; and deletes them by ctid (a
 * TID scan), never by a join that the planner could turn into a scan of
 * the whole table.  A pass keeps its position in that order between
 * batches (InboxPassPosition): the entries of markers a batch deleted stay
 * in the index until vacuum, and a batch that started over would read them
 * all again.
 *
 * Cutoffs are computed in UTC (INBOX_UTC_MINUS), so that no session time
 * zone moves them.
 *
 * The same statement raises each consumer's floor (inbox_floors) to the
 * latest processed_at it deleted, so that a late duplicate of a pruned
 * message is refused rather than claimed again (floor.c).
 *
 * This file runs one batch (inbox_prune_batch); the passes are driven
 * elsewhere, with the same batches: the background worker runs each batch
 * in its own short transaction (worker.c); inbox_prune() runs them all in
 * the caller's transaction (pass.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "inbox.h"

static InboxPlan delete_plan;
static InboxPlan delete_floor_plan;
static InboxPlan invalid_plan;

/*
 * The parameters of PRUNE_CANDIDATES, the statement's way of selecting the
 * markers of a batch.
 */
#define PRUNE_NARGS 6
static Oid	prune_argtypes[PRUNE_NARGS] = {TIMESTAMPTZOID, INTERVALOID, INT4OID,
TEXTOID, TIMESTAMPTZOID, INT8OID};

/* The lowest id, where the walk of a consumer other than $4 starts. */
#define PRUNE_MIN_ID "'-9223372036854775808'::pg_catalog.int8"

/* The final states, as an array constant of the extension's enum. */
#define FINAL_STATES "'{processed,failed}'::%1$s.inbox_state[]"

/*
 * The markers of a prune batch, with their consumer, processed_at and id,
 * and the consumers it walked past: consumers are enumerated by skipping
 * through inbox_prunable (one descent each), then each gives up to a batch
 * of its oldest markers past its retention, or, if it has none, one row
 * with a NULL tid.  LIMIT $3 counts both, so that a batch walks at most $3
 * consumers however many have nothing to prune (200,000 consumers once
 * held one transaction for ten seconds).  $1 is now, $2 the default
 * retention, $3 the batch size; $4, $5 and $6 the pass's position ($4
 * NULL: from the first consumer), the (consumer, processed_at, id) where
 * the walk resumes, inclusive; $5 'infinity': $4 was walked to its end, so
 * resume after it.  The row comparison is an index condition on
 * inbox_prunable: the scan starts at the position, without reading again
 * the entries of markers the pass deleted, even where thousands tie on
 * processed_at.  A consumer whose retention is not valid (only a row
 * written past the CHECK constraints can have one) gets no markers pruned,
 * and the others are pruned as usual (prune_warn_invalid names them).  The
 * cutoff is computed in UTC.  lock is appended to the innermost SELECT.
 *
 * In plain SQL (the text qualifies every name with the extension's schema
 * and every operator with pg_catalog), with final for
 * '{processed,failed}'::inbox_state[] and utc(t, i) for
 * timezone('UTC', timezone('UTC', t) - i):
 *
 *----------
 *	WITH RECURSIVE consumers(consumer) AS (
 *		SELECT CASE WHEN $5 = 'infinity'
 *			   THEN (SELECT consumer FROM ONLY inbox
 *					 WHERE state = ANY (final) AND consumer > $4
 *					 ORDER BY consumer LIMIT 1)
 *			   ELSE COALESCE($4, (SELECT consumer FROM ONLY inbox
 *								  WHERE state = ANY (final)
 *								  ORDER BY consumer LIMIT 1)) END
 *		UNION ALL
 *		SELECT (SELECT i.consumer FROM ONLY inbox i
 *				WHERE i.state = ANY (final) AND i.consumer > c.consumer
 *				ORDER BY i.consumer LIMIT 1)
 *		FROM consumers c WHERE c.consumer IS NOT NULL)
 *	SELECT d.tid, c.consumer, d.processed_at, d.id
 *	FROM consumers c LEFT JOIN LATERAL (
 *		SELECT i.ctid AS tid, i.processed_at, i.id FROM ONLY inbox i
 *		WHERE i.consumer = c.consumer
 *		  AND i.state = ANY (final)
 *		  AND octet_length(c.consumer) <= 256
 *		  AND ROW(i.processed_at, i.id) >= ROW(
 *				CASE WHEN c.consumer = $4 THEN $5 ELSE '-infinity' END,
 *				CASE WHEN c.consumer = $4 THEN $6
 *					 ELSE '-9223372036854775808'::int8 END)
 *		  AND i.processed_at < (
 *				SELECT CASE
 *					WHEN r.retention IS NULL THEN utc($1, $2)
 *					WHEN inbox_retention_is_valid(r.retention)
 *					THEN utc($1, r.retention)
 *					ELSE '-infinity'::timestamptz END
 *				FROM (SELECT (SELECT x.retention FROM inbox_consumers x
 *							  WHERE x.consumer = c.consumer) AS retention) r)
 *		ORDER BY i.processed_at, i.id LIMIT $3 lock) d ON true
 *	WHERE c.consumer IS NOT NULL
 *	LIMIT $3
 *----------
 */
/*
 * A consumer the functions allow: one longer (only a marker written by
 * hand has one) is walked past like a consumer with nothing to prune,
 * counted against the batch, its markers kept.  The position holds its
 * first INBOX_CONSUMER_MAX_BYTES bytes, and the next batch resumes after
 * every consumer that starts with them (prune_by_statement), all of them
 * longer than the functions allow.  Tested inside the walk of one
 * consumer, where it is a constant, not in the index scans that find the
 * consumers, whose plans it would change.
 */
#define PRUNE_CONSUMER_FITS(column) \
	"pg_catalog.octet_length(" column ")" INBOX_LE \
	CppAsString2(INBOX_CONSUMER_MAX_BYTES)
#define PRUNE_FIRST_CONSUMER(after) \
	"(SELECT consumer FROM ONLY %1$s.%2$s" \
	"  WHERE state" INBOX_EQ "ANY (" FINAL_STATES ")" after \
	"  ORDER BY consumer LIMIT 1)"
#define PRUNE_CANDIDATES(lock) \
	"WITH RECURSIVE consumers(consumer) AS (" \
	" SELECT CASE WHEN $5" INBOX_EQ "'infinity'::pg_catalog.timestamptz" \
	"  THEN " PRUNE_FIRST_CONSUMER(" AND consumer" INBOX_GT "$4") \
	"  ELSE COALESCE($4, " PRUNE_FIRST_CONSUMER("") ") END" \
	" UNION ALL" \
	" SELECT (SELECT i.consumer FROM ONLY %1$s.%2$s i" \
	"  WHERE i.state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  AND i.consumer" INBOX_GT "c.consumer" \
	"  ORDER BY i.consumer LIMIT 1)" \
	" FROM consumers c WHERE c.consumer IS NOT NULL)" \
	" SELECT d.tid, c.consumer, d.processed_at, d.id" \
	" FROM consumers c LEFT JOIN LATERAL (" \
	"  SELECT i.ctid AS tid, i.processed_at, i.id FROM ONLY %1$s.%2$s i" \
	"  WHERE i.consumer" INBOX_EQ "c.consumer" \
	"  AND i.state" INBOX_EQ "ANY (" FINAL_STATES ")" \
	"  AND " PRUNE_CONSUMER_FITS("c.consumer") \
	"  AND ROW(i.processed_at, i.id)" INBOX_GE "ROW(" \
	"   CASE WHEN c.consumer" INBOX_EQ "$4 THEN $5 ELSE '-infinity' END," \
	"   CASE WHEN c.consumer" INBOX_EQ "$4 THEN $6 ELSE " PRUNE_MIN_ID " END)" \
	"  AND i.processed_at" INBOX_LT "(SELECT CASE" \
	"   WHEN r.retention IS NULL THEN " INBOX_UTC_MINUS("$1", "$2") \
	"   WHEN %1$s.inbox_retention_is_valid(r.retention)" \
	"   THEN " INBOX_UTC_MINUS("$1", "r.retention") \
	"   ELSE '-infinity'::pg_catalog.timestamptz END" \
	"   FROM (SELECT (SELECT x.retention FROM %1$s.%3$s x" \
	"   WHERE x.consumer" INBOX_EQ "c.consumer) AS retention) r)" \
	"  ORDER BY i.processed_at, i.id LIMIT $3 " lock ") d ON true" \
	" WHERE c.consumer IS NOT NULL" \
	" LIMIT $3"

/*----------
 * One batch: PRUNE_CANDIDATES locked, deleted, and each consumer's floor
 * raised to the latest processed_at deleted (floors: PRUNE_RAISE_FLOORS,
 * or "" on a database still at 1.0.0's SQL, or on Citus's shards, which
 * keep no floor).  The floor moves in the statement that deletes the
 * markers, so no one ever sees a marker gone and its floor not yet raised
 * (floor.c).
 *
 *	WITH doomed AS (PRUNE_CANDIDATES(FOR UPDATE OF i SKIP LOCKED)),
 *	deleted AS (
 *		DELETE FROM ONLY inbox
 *		WHERE ctid = ANY (ARRAY(SELECT tid FROM doomed WHERE tid IS NOT NULL))
 *		RETURNING consumer, processed_at, id),
 *	floors AS (
 *		INSERT INTO inbox_floors AS f (consumer, floor)
 *		SELECT consumer, max(processed_at) FROM deleted GROUP BY consumer
 *		ON CONFLICT ON CONSTRAINT inbox_floors_pkey
 *		DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor)
 *	SELECT consumer, processed_at, id, true FROM deleted
 *	UNION ALL
 *	SELECT consumer, 'infinity', 9223372036854775807, false
 *	FROM doomed WHERE tid IS NULL
 *----------
 */
#define PRUNE_RAISE_FLOORS \
	", floors AS (INSERT INTO %1$s." INBOX_FLOORS_NAME " AS f (consumer, floor)" \
	" SELECT consumer, pg_catalog.max(processed_at) FROM deleted GROUP BY consumer" \
	" ON CONFLICT ON CONSTRAINT " INBOX_FLOORS_KEY_NAME \
	" DO UPDATE SET floor = excluded.floor WHERE f.floor" INBOX_LT "excluded.floor)"
#define PRUNE_DELETE(floors) \
	"WITH doomed AS (" \
	PRUNE_CANDIDATES("FOR UPDATE OF i SKIP LOCKED") ")" \
	", deleted AS (DELETE FROM ONLY %1$s.%2$s" \
	" WHERE ctid" INBOX_EQ "ANY (ARRAY(SELECT tid FROM doomed" \
	"  WHERE tid IS NOT NULL))" \
	" RETURNING consumer, processed_at, id)" \
	floors \
	" SELECT consumer, processed_at, id, true FROM deleted" \
	" UNION ALL" \
	" SELECT consumer, 'infinity'::pg_catalog.timestamptz," \
	" '9223372036854775807'::pg_catalog.int8, false" \
	" FROM doomed WHERE tid IS NULL"

/*
 * prune_default_retention
 *		inbox.retention as an interval.
 */
static Interval *
prune_default_retention(Interval *retention)
{
	memset(retention, 0, sizeof(Interval));
	retention->time = (int64) inbox_retention * SECS_PER_MINUTE * USECS_PER_SEC;
	return retention;
}

/*
 * prune_position_set_consumer
 *		Make consumer the position's.  Of one too long for the position
 *		(only a hand-inserted marker can have it) the position keeps the
 *		first bytes, and past_prefix: the next batch resumes after every
 *		consumer starting with them.
 */
static void
prune_position_set_consumer(InboxPassPosition *position, text *consumer)
{
	Size		len = VARSIZE_ANY_EXHDR(consumer);

	position->valid = true;
	position->past_prefix = len > INBOX_CONSUMER_MAX_BYTES;
	len = Min(len, INBOX_CONSUMER_MAX_BYTES);
	SET_VARSIZE(position->consumer.data, VARHDRSZ + len);
	memcpy(VARDATA(position->consumer.data), VARDATA_ANY(consumer), len);
}

/*
 * prune_advance
 *		Move the pass's position to the last marker the statement deleted,
 *		or consumer it walked past (columns consumer, processed_at, id), if
 *		it lies further on.
 *
 * The last in inbox_prunable's order: the greatest consumer, then
 * processed_at, then id; a DELETE ... RETURNING has no order of its own.
 */
static void
prune_advance(InboxPassPosition *position)
{
	SPITupleTable *tuptable = SPI_tuptable;
	text	   *last = NULL;
	TimestampTz last_at = 0;
	int64		last_id = 0;
	bool		moved = false;

	if (position->valid)
	{
		last = (text *) position->consumer.data;
		last_at = position->processed_at;
		last_id = position->id;
	}

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		HeapTuple	tuple = tuptable->vals[row];
		bool		isnull;
		text	   *consumer;
		TimestampTz at;
		int64		id;
		int			cmp = 1;

		consumer = DatumGetTextPP(SPI_getbinval(tuple, tuptable->tupdesc, 1,
												&isnull));
		at = DatumGetTimestampTz(SPI_getbinval(tuple, tuptable->tupdesc, 2,
											   &isnull));
		id = DatumGetInt64(SPI_getbinval(tuple, tuptable->tupdesc, 3, &isnull));
		if (last != NULL)
		{
			/* The consumer column's own order: the "C" collation. */
			cmp = varstr_cmp(VARDATA_ANY(consumer), VARSIZE_ANY_EXHDR(consumer),
							 VARDATA_ANY(last), VARSIZE_ANY_EXHDR(last),
							 C_COLLATION_OID);
			if (cmp == 0)
				cmp = (at > last_at) - (at < last_at);
			if (cmp == 0)
				cmp = (id > last_id) - (id < last_id);
		}
		if (cmp > 0)
		{
			last = consumer;
			last_at = at;
			last_id = id;
			moved = true;
		}
	}

	if (!moved)
		return;
	prune_position_set_consumer(position, last);
	position->processed_at = last_at;
	position->id = last_id;
}

/*
 * prune_by_statement
 *		One batch as a DELETE statement that locks its rows first, for a
 *		table a walk must not prune.
 *
 * The statement skips the markers others hold rather than return them, so
 * what it examined is what it deleted.
 */
static InboxBatchResult
prune_by_statement(const InboxObjects *objects, TimestampTz now,
				   int batch_size, InboxPassPosition *position)
{
	Interval	retention;
	Datum		values[PRUNE_NARGS];
	char		nulls[PRUNE_NARGS];
	SPIPlanPtr	plan;
	InboxBatchResult result;

	if (OidIsValid(objects->floors_oid))
		plan = inbox_plan(&delete_floor_plan, objects,
						  PRUNE_DELETE(PRUNE_RAISE_FLOORS),
						  PRUNE_NARGS, prune_argtypes);
	else
		plan = inbox_plan(&delete_plan, objects, PRUNE_DELETE(""),
						  PRUNE_NARGS, prune_argtypes);

	memset(nulls, ' ', PRUNE_NARGS);
	values[0] = TimestampTzGetDatum(now);
	values[1] = IntervalPGetDatum(prune_default_retention(&retention));
	values[2] = Int32GetDatum(batch_size);
	if (position->valid)
	{
		values[3] = PointerGetDatum(position->consumer.data);
		values[4] = TimestampTzGetDatum(position->processed_at);
		if (position->past_prefix)
		{
			/*
			 * After every consumer starting with the prefix: the prefix and
			 * a byte above any in the "C" order of the rest, compared
			 * byte by byte, never shown to anyone.
			 */
			Size		len = VARSIZE_ANY_EXHDR(position->consumer.data);
			text	   *after = palloc(VARHDRSZ + len + 1);

			SET_VARSIZE(after, VARHDRSZ + len + 1);
			memcpy(VARDATA(after), VARDATA_ANY(position->consumer.data), len);
			VARDATA(after)[len] = (char) 0xFF;
			values[3] = PointerGetDatum(after);
			values[4] = TimestampTzGetDatum(DT_NOEND);
		}

		/*
		 * The walk resumes inclusively at the next id.  Ids are unique, so
		 * nothing lies between; at the very last id the next batch reads
		 * that one entry again, which is harmless.
		 */
		values[5] = Int64GetDatum(position->id < PG_INT64_MAX ?
								  position->id + 1 : position->id);
	}
	else
	{
		values[3] = (Datum) 0;
		nulls[3] = 'n';
		values[4] = TimestampTzGetDatum(DT_NOBEGIN);
		values[5] = Int64GetDatum(PG_INT64_MIN);
	}

	inbox_spi_run(plan, values, nulls, false, 0,
				  SPI_OK_SELECT, "inbox prune");
	prune_advance(position);

	/* examined: markers deleted and consumers walked past; changed: the first */
	result.examined = (int64) SPI_processed;
	result.changed = 0;
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;

		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[row],
									   SPI_tuptable->tupdesc, 4, &isnull)))
			result.changed++;
	}
	inbox_count(INBOX_COUNT_PRUNED, NULL, result.changed);
	return result;
}

/*
 * prune_warn_invalid
 *		A WARNING for each consumer whose retention is not valid (only a
 *		row written past inbox_consumers' CHECK constraints can have one):
 *		its markers are not pruned, and the others are, rather than the
 *		arithmetic failing and the pass with it, for every consumer.
 */
static void
prune_warn_invalid(const InboxObjects *objects)
{
	SPIPlanPtr	plan;

	plan = inbox_plan(&invalid_plan, objects,
					  "SELECT x.consumer, x.retention::pg_catalog.text"
					  " FROM %1$s.%3$s x"
					  " WHERE NOT %1$s.inbox_retention_is_valid(x.retention)"
					  " ORDER BY x.consumer",
					  0, NULL);
	inbox_spi_run(plan, NULL, NULL, true, 0,
				  SPI_OK_SELECT, "inbox retention check");
	for (uint64 row = 0; row < SPI_processed; row++)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retention of inbox consumer \"%s\" is not valid; its markers are not pruned",
						SPI_getvalue(SPI_tuptable->vals[row],
									 SPI_tuptable->tupdesc, 1)),
				 errdetail("It is \"%s\".",
						   SPI_getvalue(SPI_tuptable->vals[row],
										SPI_tuptable->tupdesc, 2)),
				 errhint("Set a valid one with inbox_configure.")));
	SPI_freetuptable(SPI_tuptable);
}

/*
 * inbox_prune_batch
 *		Delete at most batch_size markers past their retention at now,
 *		from position on, and move position past them.
 *
 * An InboxBatchFunction (pass.c, worker.c): the caller is connected to
 * SPI, has an active snapshot, and passes the objects it resolved in this
 * transaction.
 */
InboxBatchResult
inbox_prune_batch(const InboxObjects *objects, TimestampTz now, int batch_size,
				  InboxPassPosition *position)
{
	/* once a pass */
	if (!position->warned)
	{
		prune_warn_invalid(objects);
		position->warned = true;
	}
	return prune_by_statement(objects, now, batch_size, position);
}
