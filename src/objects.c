/*-------------------------------------------------------------------------
 *
 * objects.c
 *	  Finding the extension's objects, and the SPI plans built on them,
 *	  cached per backend.
 *
 * inbox_claim runs once for every message a system consumes, so it must not
 * look anything up in the catalogs per call.  The first call in a backend
 * reads the extension's recorded schema from pg_extension and resolves the
 * table and its unique key index by name in that schema (never through the
 * caller's search_path); later calls reuse the OIDs.
 *
 * Invalidation: a relcache callback marks the cache stale whenever the
 * relcache entry of the inbox table, its key index or inbox_consumers is
 * invalidated (ALTER TABLE, DROP EXTENSION, ALTER EXTENSION ... SET SCHEMA,
 * or a full reset).  The callback only clears a flag: it can run at any
 * lock acquisition, so it must not free anything a caller might be using.
 * inbox_open_table() re-resolves a stale cache and re-checks it after
 * taking the table lock, because taking that lock is exactly when pending
 * invalidations are absorbed.
 *
 * The paths that read and write without SQL (marker.c, twophase_fast.c,
 * prune.c) ask inbox_table_is_plain, inbox_consumers_is_plain and
 * inbox_index_is whether the tables and their indexes are still as
 * inbox.sql created them, and take the SQL way when they are not.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_am.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "inbox.h"

/* The inbox table's columns, in order, as inbox.sql creates them. */
typedef struct InboxColumn
{
	const char *name;
	Oid			type;			/* InvalidOid: the extension's inbox_state */
	bool		not_null;
} InboxColumn;

static const InboxColumn inbox_columns[INBOX_NATTS] = {
	{"id", INT8OID, true},
	{"message_id", TEXTOID, true},
	{"consumer", TEXTOID, true},
	{"state", InvalidOid, true},
	{"received_at", TIMESTAMPTZOID, true},
	{"processed_at", TIMESTAMPTZOID, false},
	{"token", INT8OID, false},
	{"lease_until", TIMESTAMPTZOID, false},
	{"attempts", INT4OID, true},
	{"last_error", TEXTOID, false},
	{"payload", JSONBOID, false},
};

static InboxObjects objects_cache;
static bool objects_cache_valid = false;

/* Which rows in a given state an index of the table holds entries for. */
typedef enum InboxIndexHolds
{
	INBOX_INDEX_HOLDS_ALL,
	INBOX_INDEX_HOLDS_NONE,
	INBOX_INDEX_HOLDS_SOME		/* or: cannot tell */
} InboxIndexHolds;

/*
 * What index_holds found, per index and state, until the table's
 * next relcache invalidation (which any change of its indexes sends).
 */
typedef struct IndexHolds
{
	Oid			index;
	Oid			state;
	InboxIndexHolds holds;
} IndexHolds;

#define INDEX_HOLDS_CACHE_SIZE 8
static IndexHolds index_holds_cache[INDEX_HOLDS_CACHE_SIZE];
static int	index_holds_cached = 0;

static void objects_invalidate(Datum arg, Oid relid);
static InboxIndexHolds index_holds_compute(Oid index_oid,
										   const InboxObjects *objects,
										   Oid state);
static InboxIndexHolds index_holds(Oid index_oid, const InboxObjects *objects,
								   Oid state);
static bool indexes_are_ours(Relation heap, const InboxObjects *objects);
static void objects_lookup(void);
static Oid	objects_extension_schema(void);

/*
 * inbox_objects_init
 *		Register the invalidation callback; called once from _PG_init.
 */
void
inbox_objects_init(void)
{
	CacheRegisterRelcacheCallback(objects_invalidate, (Datum) 0);
}

/*
 * objects_invalidate
 *		Relcache callback: forget the cached OIDs when the table or its key
 *		index changes (a renamed key must be noticed: errors name it).
 *
 * relid is InvalidOid when the whole relcache is being reset.
 */
static void
objects_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == objects_cache.table_oid ||
		relid == objects_cache.key_index_oid ||
		relid == objects_cache.consumers_oid)
	{
		objects_cache_valid = false;
		index_holds_cached = 0;
	}
}

/*
 * objects_extension_schema
 *		The schema recorded for the inbox extension in this database.
 *
 * pg_extension has no syscache, so this is an index scan; it runs only when
 * the cache is rebuilt.
 */
static Oid
objects_extension_schema(void)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	Oid			schema = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum(INBOX_EXTENSION_NAME));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		schema = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	if (!OidIsValid(schema))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is not installed in this database",
						INBOX_EXTENSION_NAME),
				 errhint("Run CREATE EXTENSION %s.", INBOX_EXTENSION_NAME)));
	return schema;
}

/*
 * objects_lookup
 *		Resolve the extension's schema, table and key index into the cache.
 */
static void
objects_lookup(void)
{
	static uint64 generation = 0;
	Oid			schema = objects_extension_schema();
	Oid			table = get_relname_relid(INBOX_TABLE_NAME, schema);
	Oid			key_index = get_relname_relid(INBOX_KEY_NAME, schema);
	InboxObjects found;
	char	   *schema_name = get_namespace_name(schema);

	if (!OidIsValid(table) || !OidIsValid(key_index) || schema_name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is missing its table or key index",
						INBOX_EXTENSION_NAME),
				 errdetail("Expected table \"%s\" and index \"%s\" in schema \"%s\".",
						   INBOX_TABLE_NAME, INBOX_KEY_NAME,
						   schema_name ? schema_name : "?"),
				 errhint("Recreate the extension with DROP EXTENSION and CREATE EXTENSION.")));

	memset(&found, 0, sizeof(found));
	found.schema_oid = schema;
	found.table_oid = table;
	found.key_index_oid = key_index;
	namestrcpy(&found.schema_name, schema_name);

	/* What the claims' fast path (marker.c) writes without SQL. */
	found.id_sequence_oid = getIdentitySequence(table, 1, true);
	found.state_type_oid = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
										   CStringGetDatum(INBOX_STATE_TYPE_NAME),
										   ObjectIdGetDatum(schema));
	if (OidIsValid(found.state_type_oid))
	{
		found.processed_oid = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
											  ObjectIdGetDatum(found.state_type_oid),
											  CStringGetDatum("processed"));
		found.failed_oid = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
										   ObjectIdGetDatum(found.state_type_oid),
										   CStringGetDatum("failed"));
		found.claimed_oid = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
											ObjectIdGetDatum(found.state_type_oid),
											CStringGetDatum("claimed"));
	}
	found.open_claims_oid = get_relname_relid(INBOX_OPEN_CLAIMS_NAME, schema);
	found.prunable_oid = get_relname_relid(INBOX_PRUNABLE_NAME, schema);

	/* And what the two-phase fast path (twophase_fast.c) reads and draws. */
	found.token_sequence_oid = get_relname_relid(INBOX_TOKEN_SEQ_NAME, schema);
	found.consumers_oid = get_relname_relid(INBOX_CONSUMERS_NAME, schema);
	found.consumers_key_oid = get_relname_relid(INBOX_CONSUMERS_KEY_NAME, schema);

	/*
	 * Most invalidations (VACUUM, ANALYZE, ALTER TABLE) leave the objects as
	 * they were; only a real change starts a new generation, so that plans
	 * built on the old ones are rebuilt.
	 */
	found.generation = objects_cache.generation;
	if (memcmp(&found, &objects_cache, sizeof(found)) != 0)
	{
		found.generation = ++generation;
		objects_cache = found;
	}
	objects_cache_valid = true;
}

/*
 * inbox_open_table
 *		Open the inbox table with the given lock, and describe the objects.
 *
 * Copies the current object description into *objects, so that the caller
 * holds a consistent snapshot of it even if an invalidation arrives later
 * in the call.  The caller closes the table with table_close(rel, NoLock),
 * keeping the lock until the end of the transaction like the executor does.
 */
Relation
inbox_open_table(LOCKMODE lockmode, InboxObjects *objects)
{
	for (;;)
	{
		Relation	rel;

		if (!objects_cache_valid)
			objects_lookup();
		*objects = objects_cache;

		/*
		 * Locking absorbs pending invalidations, which may show that the
		 * OIDs we just used are stale (the table was dropped, moved or
		 * renamed).  Then look them up again and retry.
		 */
		rel = try_table_open(objects->table_oid, lockmode);
		if (rel != NULL && objects_cache_valid &&
			objects_cache.generation == objects->generation)
			return rel;
		if (rel != NULL)
			table_close(rel, lockmode);
		objects_cache_valid = false;
	}
}

/*
 * inbox_table_is_plain
 *		Is the table exactly as inbox.sql created it, with nothing an INSERT
 *		or DELETE would have to run besides changing the row and its index
 *		entries?  The paths that write without SQL (marker.c, prune.c)
 *		apply only then.
 */
bool
inbox_table_is_plain(Relation heap, const InboxObjects *objects)
{
	TupleDesc	desc = RelationGetDescr(heap);

	if (heap->rd_rel->relkind != RELKIND_RELATION ||
		heap->trigdesc != NULL ||
		heap->rd_rules != NULL ||
		desc->natts != INBOX_NATTS ||
		(desc->constr != NULL &&
		 (desc->constr->num_check > 0 || desc->constr->has_generated_stored)))
		return false;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(desc, i);
		const InboxColumn *column = &inbox_columns[i];

		if (attr->attisdropped ||
			attr->attgenerated != '\0' ||
			attr->attnotnull != column->not_null ||
			strcmp(NameStr(attr->attname), column->name) != 0 ||
			attr->atttypid != (OidIsValid(column->type) ?
							   column->type : objects->state_type_oid))
			return false;
	}
	return TupleDescAttr(desc, INBOX_ATT_ID - 1)->attidentity ==
		ATTRIBUTE_IDENTITY_ALWAYS;
}

/*
 * inbox_consumers_is_plain
 *		Is inbox_consumers as inbox.sql created it, so that the two-phase
 *		fast path may read a consumer's lease from its tuples?  Only the
 *		columns it reads are checked: its CHECK constraints guard writes.
 */
bool
inbox_consumers_is_plain(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Form_pg_attribute consumer = TupleDescAttr(desc, INBOX_CONSUMERS_ATT_CONSUMER - 1);
	Form_pg_attribute lease;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		desc->natts != INBOX_CONSUMERS_NATTS)
		return false;
	lease = TupleDescAttr(desc, INBOX_CONSUMERS_ATT_LEASE - 1);
	return !consumer->attisdropped && consumer->atttypid == TEXTOID &&
		strcmp(NameStr(consumer->attname), "consumer") == 0 &&
		!lease->attisdropped && lease->atttypid == INTERVALOID &&
		strcmp(NameStr(lease->attname), "lease") == 0;
}

/*
 * indexes_are_ours
 *		Has the table exactly the three indexes inbox.sql creates, and no
 *		other?
 */
static bool
indexes_are_ours(Relation heap, const InboxObjects *objects)
{
	List	   *indexes = RelationGetIndexList(heap);
	bool		ours = list_length(indexes) == 3;
	ListCell   *lc;

	foreach(lc, indexes)
	{
		Oid			index = lfirst_oid(lc);

		if (index != objects->key_index_oid &&
			index != objects->open_claims_oid && index != objects->prunable_oid)
			ours = false;
	}
	list_free(indexes);
	return ours;
}

/*
 * inbox_index_is
 *		Is this a btree index on exactly these columns, in this order, with
 *		no expressions?  The paths that write index entries themselves
 *		(marker.c) or walk an index's order (prune.c) need to know.
 */
bool
inbox_index_is(Relation index, int natts, const AttrNumber *columns)
{
	Form_pg_index form = index->rd_index;

	if (index->rd_rel->relam != BTREE_AM_OID || form->indnatts != natts ||
		!heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, NULL))
		return false;
	for (int i = 0; i < natts; i++)
	{
		if (form->indkey.values[i] != columns[i])
			return false;
	}
	return true;
}

/*
 * index_holds_compute
 *		index_holds, worked out from the index's predicate: the
 *		planner's own proof that "state = label" implies it, or refutes it.
 */
static InboxIndexHolds
index_holds_compute(Oid index_oid, const InboxObjects *objects, Oid state)
{
	Relation	index = index_open(index_oid, AccessShareLock);
	List	   *predicate = RelationGetIndexPredicate(index);
	InboxIndexHolds holds = INBOX_INDEX_HOLDS_SOME;

	if (predicate == NIL)
		holds = INBOX_INDEX_HOLDS_ALL;
	else
	{
		TypeCacheEntry *type = lookup_type_cache(objects->state_type_oid,
												 TYPECACHE_EQ_OPR);
		Expr	   *clause;

		if (OidIsValid(type->eq_opr))
		{
			clause = make_opclause(type->eq_opr, BOOLOID, false,
								   (Expr *) makeVar(1, INBOX_ATT_STATE,
													objects->state_type_oid,
													-1, InvalidOid, 0),
								   (Expr *) makeConst(objects->state_type_oid,
													  -1, InvalidOid,
													  sizeof(Oid),
													  ObjectIdGetDatum(state),
													  false, true),
								   InvalidOid, InvalidOid);
			set_opfuncid((OpExpr *) clause);
			if (predicate_implied_by(predicate, list_make1(clause), false))
				holds = INBOX_INDEX_HOLDS_ALL;
			else if (predicate_refuted_by(predicate, list_make1(clause), true))
				holds = INBOX_INDEX_HOLDS_NONE;
		}
	}
	index_close(index, AccessShareLock);
	return holds;
}

/*
 * index_holds
 *		Does this index of the table hold an entry for every row in this
 *		state (the key, or a partial index whose predicate it satisfies), for
 *		none (a partial index whose predicate excludes it), or can we not
 *		tell?  The paths that write index entries themselves (marker.c,
 *		twophase_fast.c) skip an index only when it holds none, and write
 *		one only where it holds all, so that a partial index recreated with
 *		another predicate sends them to the executor.  The table must be
 *		locked.
 *
 * A predicate cannot change without a new index, and a new index
 * invalidates the table's relcache entry, which empties the cache.
 */
static InboxIndexHolds
index_holds(Oid index_oid, const InboxObjects *objects, Oid state)
{
	InboxIndexHolds holds;

	for (int i = 0; i < index_holds_cached; i++)
	{
		if (index_holds_cache[i].index == index_oid &&
			index_holds_cache[i].state == state)
			return index_holds_cache[i].holds;
	}

	holds = index_holds_compute(index_oid, objects, state);
	if (index_holds_cached < INDEX_HOLDS_CACHE_SIZE)
	{
		index_holds_cache[index_holds_cached].index = index_oid;
		index_holds_cache[index_holds_cached].state = state;
		index_holds_cache[index_holds_cached].holds = holds;
		index_holds_cached++;
	}
	return holds;
}

/*
 * inbox_open_state_index
 *		For the paths that form a row's index entries themselves (marker.c,
 *		twophase_fast.c): the index besides the key that a row in this
 *		state enters, inbox_prunable for a processed one, inbox_open_claims
 *		for a claim, opened with RowExclusiveLock; NULL when they may not.
 *
 * They may when the table has exactly inbox.sql's three indexes, the key
 * and this one on inbox.sql's columns, and the predicates say that the
 * row belongs in both and not in the third.  The table must be locked.
 */
Relation
inbox_open_state_index(Relation heap, const InboxObjects *objects,
					   Relation key_index, Oid state)
{
	static const AttrNumber key_columns[] = {
		INBOX_ATT_MESSAGE_ID, INBOX_ATT_CONSUMER};
	static const AttrNumber prunable_columns[] = {
		INBOX_ATT_CONSUMER, INBOX_ATT_PROCESSED_AT, INBOX_ATT_ID};
	static const AttrNumber open_claims_columns[] = {
		INBOX_ATT_CONSUMER, INBOX_ATT_ID};
	bool		processed = state == objects->processed_oid;
	Oid			index_oid = processed ? objects->prunable_oid : objects->open_claims_oid;
	Oid			other_oid = processed ? objects->open_claims_oid : objects->prunable_oid;
	Relation	index;

	Assert(processed || state == objects->claimed_oid);
	if (!indexes_are_ours(heap, objects))
		return NULL;

	index = index_open(index_oid, RowExclusiveLock);
	if (inbox_index_is(key_index, lengthof(key_columns), key_columns) &&
		(processed ?
		 inbox_index_is(index, lengthof(prunable_columns), prunable_columns) :
		 inbox_index_is(index, lengthof(open_claims_columns), open_claims_columns)) &&
		index_holds(objects->key_index_oid, objects, state) == INBOX_INDEX_HOLDS_ALL &&
		index_holds(index_oid, objects, state) == INBOX_INDEX_HOLDS_ALL &&
		index_holds(other_oid, objects, state) == INBOX_INDEX_HOLDS_NONE)
		return index;
	index_close(index, NoLock);
	return NULL;
}

/*
 * inbox_is_key_violation
 *		Is this error a unique violation on the inbox key, and nothing else?
 *
 * A unique violation on any other constraint (one a DBA added, or the
 * primary key) is a real bug and must propagate, so the constraint, table
 * and schema named in the error must all be ours.
 */
bool
inbox_is_key_violation(const ErrorData *edata, const InboxObjects *objects)
{
	return edata->sqlerrcode == ERRCODE_UNIQUE_VIOLATION &&
		edata->constraint_name != NULL &&
		edata->table_name != NULL &&
		edata->schema_name != NULL &&
		strcmp(edata->constraint_name, INBOX_KEY_NAME) == 0 &&
		strcmp(edata->table_name, INBOX_TABLE_NAME) == 0 &&
		strcmp(edata->schema_name, NameStr(objects->schema_name)) == 0;
}

/*
 * inbox_plan
 *		The saved plan for a query on the extension's objects, prepared on
 *		first use and again whenever the objects change.
 *
 * query_format names the extension's schema as %1$s (positional, so it can
 * appear several times).  The caller must be connected to SPI.  ALTER TABLE
 * needs no rebuild here: the plan cache replans a saved plan whose tables
 * changed.
 *
 * The plan cache parses the query again under the caller's search_path
 * whenever that path changes, so the query text must name everything
 * explicitly: objects in %1$s, functions in pg_catalog, operators with the
 * INBOX_EQ family of macros.
 */
SPIPlanPtr
inbox_plan(InboxPlan *cached, const InboxObjects *objects,
		   const char *query_format, int nargs, Oid *argtypes)
{
	if (cached->plan == NULL || cached->generation != objects->generation)
	{
		char	   *query;
		SPIPlanPtr	plan;

		query = psprintf(query_format,
						 quote_identifier(NameStr(objects->schema_name)));
		plan = SPI_prepare(query, nargs, argtypes);
		if (plan == NULL)
			elog(ERROR, "could not prepare inbox query: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);

		/*
		 * The old plan cannot be running: it was built on objects that no
		 * longer exist, and a table in use cannot be dropped.
		 */
		if (cached->plan != NULL)
			SPI_freeplan(cached->plan);
		cached->plan = plan;
		cached->generation = objects->generation;
		pfree(query);
	}
	return cached->plan;
}
