/*-------------------------------------------------------------------------
 *
 * floor.c
 *	  The floor below which a late duplicate is refused.
 *
 * Retention is a window: a message redelivered after its marker was
 * pruned would be claimed again as new.  So pruning records, per consumer,
 * the latest processed_at of the markers it deleted (inbox_floors, raised
 * in the statement that deletes them, src/prune.c, and only ever raised).
 * A marker is written at or after its message was sent, so a message sent
 * after the floor had no marker pruned: its marker, if any, still exists
 * and answers.  A message sent at or before the floor may have had one:
 * its outcome is unknown, and a claim that says when it was sent (sent_at,
 * the broker's timestamp) and finds no marker answers expired instead of
 * claiming it.  A claim without sent_at is not checked.
 *
 * Clocks: sent_at is on the broker's clock, the floor on the database's.
 * A broker clock running ahead makes an old message look younger than it
 * is, the unsafe direction, so a message counts as sent before the floor
 * up to FLOOR_SKEW after it.  One running behind only makes a message
 * look older: expired where it may not have needed to be.
 *
 * Concurrency: the floor is raised in the transaction that deletes the
 * markers, so a read with a snapshot of its own that found no marker of the
 * message (inbox_begin's first read, under READ COMMITTED) came after any
 * prune that deleted it had committed, and a later snapshot sees the raised
 * floor: the floor read after it is final.  A read with an older snapshot
 * (the probe reads with the caller's; inbox_begin's first read, under
 * REPEATABLE READ, with the transaction's) may predate the marker itself, and
 * a claim the probe does not serve (row-level security, privileges) reads
 * none at all: they check the floor, then insert; a prune that deletes the
 * old marker and raises the floor between the two lets the insert find no
 * marker and succeed.  But the prune then committed before the insert's
 * unique check ended (the check waits for a deleter still in progress), so a
 * snapshot taken after the insert sees the raised floor, at every isolation
 * level: inbox_floor_recheck reads it so, and raises a serialization failure
 * if the floor now covers the message; the caller's retry answers expired
 * (specs/floor-race.spec).  Both reads use the latest snapshot, never the
 * transaction's: under REPEATABLE READ a snapshot older than the prune would
 * miss the floor.
 *
 * The floor is read through SPI with a plan kept per backend; a database
 * still at 1.0.0's SQL has no inbox_floors and no floor.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "inbox.h"

/*
 * How far ahead of the database's clock a broker's may run before a
 * pruned message's redelivery could pass as new.
 */
#define FLOOR_SKEW			(60 * USECS_PER_SEC)

static InboxPlan floor_plan;

/*
 * floor_covers
 *		Is a message sent at sent_at at or below consumer's floor (plus
 *		FLOOR_SKEW), read with the latest snapshot?
 */
static bool
floor_covers(const InboxObjects *objects, text *consumer, TimestampTz sent_at)
{
	static Oid	argtypes[] = {TEXTOID};
	SPIPlanPtr	plan;
	Datum		values[1];
	bool		covers = false;
	int			rc;

	if (!OidIsValid(objects->floors_oid) || objects->table_in_citus)
		return false;

	SPI_connect();
	plan = inbox_plan(&floor_plan, objects,
					  "SELECT floor FROM %1$s." INBOX_FLOORS_NAME
					  " WHERE consumer" INBOX_EQ "$1",
					  1, argtypes);
	values[0] = PointerGetDatum(consumer);
	rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, true, false, 1);
	inbox_spi_check(rc, SPI_OK_SELECT, "inbox floor");
	if (SPI_processed == 1)
	{
		bool		isnull;
		TimestampTz floor;

		floor = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
												  SPI_tuptable->tupdesc, 1,
												  &isnull));
		/* sent_at - skew <= floor, without overflow near the ends */
		covers = !isnull &&
			(floor >= DT_NOEND - FLOOR_SKEW || sent_at <= floor + FLOOR_SKEW);
	}
	SPI_finish();
	return covers;
}

/*
 * inbox_floor_refuses
 *		Should a new claim of a message consumer's broker sent at sent_at
 *		be refused as expired?  The caller then looks for the marker: a
 *		message that has one is a duplicate, not expired.
 */
bool
inbox_floor_refuses(const InboxObjects *objects, text *consumer,
					TimestampTz sent_at)
{
	return floor_covers(objects, consumer, sent_at);
}

/*
 * inbox_floor_recheck
 *		After a claim wrote a new marker for a message sent at sent_at:
 *		raise a serialization failure if a prune raised the floor over it
 *		meanwhile (it may have deleted the message's marker).
 */
void
inbox_floor_recheck(const InboxObjects *objects, text *consumer,
					TimestampTz sent_at)
{
	if (floor_covers(objects, consumer, sent_at))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not claim a message sent before the floor of consumer \"%s\"",
						text_to_cstring(consumer)),
				 errdetail("A prune removed markers up to after the message was sent while this claim was made."),
				 errhint("Retry the transaction: the claim then answers expired.")));
}
