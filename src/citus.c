/*-------------------------------------------------------------------------
 *
 * citus.c
 *	  Marker ids and fencing tokens that stay unique when several Citus
 *	  nodes write one distributed inbox.
 *
 * On a table Citus manages (objects.c, inbox_managed_by_citus), a claim can be
 * made through the coordinator or through any worker that has the
 * metadata, and each node has its own copy of the extension's sequences:
 * the identity sequence of inbox.id and inbox_token_seq each start at 1 on
 * every node.  Citus passes a sequence's value on unchanged from the node
 * that planned the INSERT, so values drawn on two nodes collide.  The
 * statements on a distributed inbox therefore write id and token
 * explicitly, made unique here from the node's Citus group id
 * (pg_dist_local_group: 0 on the coordinator, 1, 2, ... on the workers):
 *
 *	Marker ids follow Citus's own rule for a bigint sequence used on
 *	several nodes: the group id above 48 bits of the node's own count.  On
 *	the coordinator an id is the plain sequence value, as before the table
 *	was distributed.
 *
 *	Tokens keep the group id in their low TOKENS_GROUP_BITS bits, below
 *	a count the node draws from its own inbox_token_seq (with everything
 *	tokens.c makes it promise on that node).  Two nodes never draw the
 *	same token.  A claim that takes a message over gets a token above the
 *	one it replaces (inbox_citus_token's above): its count is the next of
 *	the node's sequence, or, if that is not above the replaced token's
 *	count (another node's sequence may stand far ahead), one more than
 *	that count, without moving the sequence.  The replaced token is a
 *	column a consumer role may write: a value it wrote must never steer
 *	the node's sequence, or one forged token would use it up for every
 *	consumer.  So a message's tokens increase whichever nodes its claims
 *	came through; a count taken that way may be drawn again by this node
 *	later, for another message (global uniqueness is the sequence's, and
 *	docs/tokens.md says what a reader loses with it); and two tokens of
 *	different messages drawn on different nodes say nothing about which
 *	claim came first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "inbox.h"

/* Citus's rule for bigint sequences: the node's group id above bit 48. */
#define IDS_GROUP_SHIFT		48

/* The group id in a token's low bits: up to 1023 groups. */
#define TOKENS_GROUP_BITS	10


/*
 * inbox_citus_group
 *		This node's Citus group id, from pg_dist_local_group.
 *
 * Read once per call of a function that needs it, rather than cached: it
 * is one row, and it changes when the node joins a cluster, which nothing
 * here would be told of.
 */
int32
inbox_citus_group(void)
{
	bool		isnull;
	int32		group;

	SPI_connect();
	if (SPI_execute("SELECT groupid FROM pg_catalog.pg_dist_local_group",
					true, 0) != SPI_OK_SELECT || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not read this node's Citus group id"),
				 errdetail("pg_dist_local_group has " UINT64_FORMAT " rows.",
						   SPI_processed)));
	group = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	if (isnull || group < 0 || group >= (1 << TOKENS_GROUP_BITS))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("Citus group id %d is out of the range inbox supports", group),
				 errdetail("Marker ids and tokens hold group ids from 0 to %d.",
						   (1 << TOKENS_GROUP_BITS) - 1)));
	return group;
}

/*
 * inbox_citus_marker_id
 *		A new marker's id, unique in the cluster; group is this node's
 *		(inbox_citus_group).
 *
 * A value the identity sequence already gives in this group's range (if
 * Citus ever moves it there, as it does for the sequences it manages) is
 * taken as it is.
 */
int64
inbox_citus_marker_id(const InboxObjects *objects, int32 group)
{
	int64		value;

	if (!OidIsValid(objects->id_sequence_oid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s.%s\" has no identity sequence for its id",
						NameStr(objects->schema_name), INBOX_TABLE_NAME),
				 errdetail("On a table Citus manages, inbox draws each marker's id itself.")));

	/* as the executor draws an identity value: no privilege check */
	value = nextval_internal(objects->id_sequence_oid, false);
	if (value >= 0 && (value >> IDS_GROUP_SHIFT) == group)
		return value;
	if (value < 0 || value >= (INT64CONST(1) << IDS_GROUP_SHIFT))
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("marker id " INT64_FORMAT " does not fit below this node's Citus group id %d",
						value, group)));
	return ((int64) group << IDS_GROUP_SHIFT) | value;
}

/*
 * inbox_citus_token
 *		A new token, unique in the cluster and greater than above (the
 *		token of the claim it replaces, or 0); group is this node's.
 *
 * The caller has called inbox_tokens_check, and calls inbox_tokens_drawn
 * before any client sees the token.
 */
int64
inbox_citus_token(const InboxObjects *objects, int32 group, int64 above)
{
	const int64 max_count = PG_INT64_MAX >> TOKENS_GROUP_BITS;
	int64		floor = above >> TOKENS_GROUP_BITS;
	int64		count;

	if (floor >= max_count)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("no token is left above " INT64_FORMAT, above),
				 errdetail("On Citus, a token holds a count below " INT64_FORMAT " and the node's group id.",
						   max_count)));
	count = nextval_internal(objects->token_sequence_oid, true);
	if (count <= floor)
		count = floor + 1;
	if (count > max_count)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("token " INT64_FORMAT " does not fit beside a Citus group id",
						count)));
	return (count << TOKENS_GROUP_BITS) | group;
}

/*
 * inbox_citus_check_consumers
 *		Refuse to read a consumer's settings from a node's own
 *		inbox_consumers while the inbox table is distributed.
 *
 * Each node would read its own copy, which inbox_configure on another node
 * never wrote: a worker would prune with the default retention (deleting
 * markers a consumer keeps longer, so their messages are processed again)
 * and give the default lease and attempts.
 */
void
inbox_citus_check_consumers(const InboxObjects *objects)
{
	if (objects->table_in_citus && !objects->consumers_in_citus)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s.%s\" is distributed but \"%s\" is not a reference table",
						NameStr(objects->schema_name), INBOX_TABLE_NAME,
						INBOX_CONSUMERS_NAME),
				 errdetail("Every node must read the settings inbox_configure writes."),
				 errhint("Run SELECT create_reference_table('%s.%s') on the coordinator.",
						 quote_identifier(NameStr(objects->schema_name)),
						 INBOX_CONSUMERS_NAME)));
}

/*
 * citus_check_placements
 *		Refuse to run a maintenance pass over shards that have several
 *		placements (a reference table, or a replication factor above 1):
 *		each node would change its own copy by itself, on its own clock,
 *		and the copies would differ.
 */
static void
citus_check_placements(const InboxObjects *objects)
{
	Oid			argtypes[] = {REGCLASSOID};
	Datum		values[1];
	bool		single = false;

	values[0] = ObjectIdGetDatum(objects->table_oid);
	SPI_connect();
	if (SPI_execute_with_args("SELECT repmodel" INBOX_EQ "'s' FROM pg_catalog.pg_dist_partition"
							  " WHERE logicalrelid" INBOX_EQ "$1",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read Citus's table of distributed tables");
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull);

		single = !isnull && DatumGetBool(value);
	}
	SPI_finish();
	if (!single)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("inbox cannot maintain table \"%s.%s\": Citus keeps more than one copy of its shards",
						NameStr(objects->schema_name), INBOX_TABLE_NAME),
				 errdetail("Each node's passes change the copies on that node, so the copies would differ."),
				 errhint("Distribute it with create_distributed_table and citus.shard_replication_factor = 1, not as a reference table.")));
}

/*
 * citus_local_shard
 *		The smallest id, at least from, of a shard of relation that Citus
 *		placed on this node; 0 if there is none.
 */
static int64
citus_local_shard(Oid relation, int64 from)
{
	Oid			argtypes[] = {REGCLASSOID, INT8OID};
	Datum		values[2];
	int64		shard = 0;

	values[0] = ObjectIdGetDatum(relation);
	values[1] = Int64GetDatum(from);
	SPI_connect();
	if (SPI_execute_with_args("SELECT s.shardid FROM pg_catalog.pg_dist_shard s"
							  " JOIN pg_catalog.pg_dist_placement p"
							  "  ON p.shardid" INBOX_EQ "s.shardid"
							  " JOIN pg_catalog.pg_dist_local_group g"
							  "  ON g.groupid" INBOX_EQ "p.groupid"
							  " WHERE s.logicalrelid" INBOX_EQ "$1"
							  " AND s.shardid" INBOX_GE "$2"
							  " ORDER BY s.shardid LIMIT 1",
							  2, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read Citus's shard placements");
	if (SPI_processed == 1)
	{
		bool		isnull;

		shard = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	return shard;
}

/*
 * inbox_pass_target
 *		What the next batch of a maintenance pass works on: the table
 *		itself, or, when Citus manages it, the shard the pass is on
 *		(position->shard) or the next one placed on this node.  False, with
 *		position->shard INBOX_PASS_NO_SHARD, when no shard is left.
 *
 * The distributed table's own heap is an empty shell, and a statement on
 * it would be Citus's to plan across every node, which it cannot for the
 * passes' statements.  So each node's passes (the worker's, and
 * inbox_prune() and inbox_reclaim() run on it) prune and reclaim the
 * shards on that node, with the same batches as on a table of one server:
 * on its node, a shard is a table of its own.  A coordinator that holds no
 * shard has nothing to do.  The consumers' settings are read from the
 * placement of inbox_consumers on this node when it is a reference table.
 */
bool
inbox_pass_target(const InboxObjects *objects, InboxPassPosition *position,
				  InboxObjects *target)
{
	int64		consumers_shard = 0;

	if (!objects->table_in_citus)
	{
		*target = *objects;
		return true;
	}
	if (position->shard == INBOX_PASS_NO_SHARD)
		return false;
	inbox_citus_check_consumers(objects);
	citus_check_placements(objects);
	consumers_shard = citus_local_shard(objects->consumers_oid, 0);

	for (;;)
	{
		int64		shard = citus_local_shard(objects->table_oid,
											  position->shard);

		if (shard == 0)
		{
			position->shard = INBOX_PASS_NO_SHARD;
			return false;
		}
		if (shard != position->shard)
			position->valid = false;
		position->shard = shard;
		if (inbox_objects_of_shard(objects, shard, consumers_shard, target))
			return true;
		position->shard = shard + 1;	/* moved away meanwhile */
	}
}

/*
 * inbox_pass_next_relation
 *		After a batch that left nothing more: true if the pass goes on with
 *		the next shard (inbox_pass_target finds it), false if it is done.
 */
bool
inbox_pass_next_relation(InboxPassPosition *position)
{
	if (position->shard <= 0)
		return false;
	position->shard++;
	position->valid = false;
	return true;
}
