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
 * caller's search_path); later calls reuse the OIDs.  Every object found
 * by name must prove it is ours: a table, sequence or type must be a member
 * of the extension, an index must be an index of the inbox table.
 *
 * Trust: the extension runs SQL on these objects as whoever calls it, a
 * superuser included, and the background worker runs as a superuser.
 * Whoever owns the schema can rename it and put look-alike objects where
 * ours were, so the schema must be owned by a superuser, or be owned by
 * pg_database_owner (public, in PostgreSQL 15) in a database a superuser
 * owns; otherwise every function refuses to run (objects_check_trusted),
 * and the worker skips the database.  docs/architecture.md, Security.
 *
 * Invalidation: a relcache callback marks the cache stale whenever the
 * relcache entry of the inbox table, its key index or inbox_consumers is
 * invalidated (ALTER TABLE, DROP EXTENSION, ALTER EXTENSION ... SET SCHEMA,
 * or a full reset); syscache callbacks do when any schema, role, database,
 * function or type changes (a schema rename or new owner sends no relcache
 * invalidation, and a role may lose its superuser attribute).  The
 * callbacks only clear a flag: they can run at any lock acquisition, so
 * they must not free anything a caller might be using.  inbox_open_table()
 * re-resolves a stale cache and re-checks it after taking the table lock,
 * because taking that lock is exactly when pending invalidations are
 * absorbed.
 *
 * Citus: a table Citus manages (distributed, reference, or a Citus local
 * table) keeps its rows in shards, and the table itself is an empty shell,
 * on the coordinator and on every worker that has the metadata; Citus's
 * planner sends every statement on it to the shards.  The probe would read
 * an index nobody writes.  So the lookup also asks Citus's own table of the
 * relations it manages (inbox_managed_by_citus), and the probe does not run
 * while Citus manages the table.
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
#include "catalog/objectaddress.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_index.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/plancache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "inbox.h"

static InboxObjects objects_cache;
static bool objects_cache_valid = false;

/* Numbers each new description of the objects (InboxObjects.generation). */
static uint64 objects_generation = 0;

static void objects_invalidate(Datum arg, Oid relid);
static void objects_invalidate_syscache(Datum arg, int cacheid,
										uint32 hashvalue);
static AttrNumber column_of_type(Oid table, const char *name, Oid type);
static bool objects_equal(const InboxObjects *a, const InboxObjects *b);
static Oid	index_of_table(const char *name, Oid schema, Oid table);
static Oid	member_relation(const char *name, Oid schema, Oid extension);
static bool schema_is_trusted(Oid schema);
static bool key_is_proper(Oid index);
static ObjectAddress member_not_owned_by_superuser(Oid extension);
static void objects_lookup(void);
static Oid	objects_extension_schema(Oid *extension);

/*
 * inbox_objects_init
 *		Register the invalidation callback; called once from _PG_init.
 */
void
inbox_objects_init(void)
{
	CacheRegisterRelcacheCallback(objects_invalidate, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, objects_invalidate_syscache,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, objects_invalidate_syscache,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(DATABASEOID, objects_invalidate_syscache,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(PROCOID, objects_invalidate_syscache,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(TYPEOID, objects_invalidate_syscache,
								  (Datum) 0);
}

/*
 * inbox_objects_forget
 *		Forget the cached objects, so that the next use looks them up anew;
 *		for the background worker, which carries nothing across its
 *		transactions.
 */
void
inbox_objects_forget(void)
{
	objects_cache_valid = false;
}

/*
 * objects_invalidate
 *		Relcache callback: forget the cached OIDs when any relation they
 *		name changes (a renamed key must be noticed: errors name it; a
 *		sequence dropped and created again has a new OID).
 *
 * relid is InvalidOid when the whole relcache is being reset.
 */
static void
objects_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == objects_cache.table_oid ||
		relid == objects_cache.key_index_oid ||
		relid == objects_cache.id_sequence_oid ||
		relid == objects_cache.token_sequence_oid ||
		relid == objects_cache.consumers_oid)
	{
		objects_cache_valid = false;
	}
}

/*
 * objects_invalidate_syscache
 *		Syscache callback: a schema, role or database changed (renamed, new
 *		owner, superuser attribute).  Rare; look everything up again.
 */
static void
objects_invalidate_syscache(Datum arg, int cacheid, uint32 hashvalue)
{
	objects_cache_valid = false;
}

/*
 * objects_extension_schema
 *		The schema recorded for the inbox extension in this database, and
 *		the extension's OID.
 *
 * pg_extension has no syscache, so this is an index scan; it runs only when
 * the cache is rebuilt.
 */
static Oid
objects_extension_schema(Oid *extension)
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
	{
		schema = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
		*extension = ((Form_pg_extension) GETSTRUCT(tuple))->oid;
	}
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
 * schema_is_trusted
 *		Can only a superuser rename this schema, or create and drop objects
 *		in it as its owner?
 *
 * In PostgreSQL 15 public belongs to pg_database_owner, whose only member
 * is the database's owner: trusted exactly when that owner is a superuser.
 */
static bool
schema_is_trusted(Oid schema)
{
	HeapTuple	tuple;
	Oid			owner;

	tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
	if (!HeapTupleIsValid(tuple))
		return false;
	owner = ((Form_pg_namespace) GETSTRUCT(tuple))->nspowner;
	ReleaseSysCache(tuple);

	if (owner == ROLE_PG_DATABASE_OWNER)
	{
		tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
		if (!HeapTupleIsValid(tuple))
			return false;
		owner = ((Form_pg_database) GETSTRUCT(tuple))->datdba;
		ReleaseSysCache(tuple);
	}
	return superuser_arg(owner);
}

/*
 * member_not_owned_by_superuser
 *		A relation, function or type of the extension that a role that is
 *		not a superuser owns, or an invalid address.  Such an owner could
 *		add a trigger or an index expression to a table, or replace a
 *		function's body, and have a superuser's session run it.
 */
static ObjectAddress
member_not_owned_by_superuser(Oid extension)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData keys[2];
	HeapTuple	tuple;
	ObjectAddress found = {InvalidOid, InvalidOid, 0};

	rel = table_open(DependRelationId, AccessShareLock);
	ScanKeyInit(&keys[0], Anum_pg_depend_refclassid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(ExtensionRelationId));
	ScanKeyInit(&keys[1], Anum_pg_depend_refobjid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(extension));
	scan = systable_beginscan(rel, DependReferenceIndexId, true, NULL, 2, keys);
	while (!OidIsValid(found.objectId) &&
		   HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tuple);
		int			cacheid;
		AttrNumber	owner_column;
		HeapTuple	object;
		bool		isnull;
		Oid			owner;

		if (dep->deptype != DEPENDENCY_EXTENSION)
			continue;
		if (dep->classid == RelationRelationId)
		{
			cacheid = RELOID;
			owner_column = Anum_pg_class_relowner;
		}
		else if (dep->classid == ProcedureRelationId)
		{
			cacheid = PROCOID;
			owner_column = Anum_pg_proc_proowner;
		}
		else if (dep->classid == TypeRelationId)
		{
			cacheid = TYPEOID;
			owner_column = Anum_pg_type_typowner;
		}
		else
			continue;

		object = SearchSysCache1(cacheid, ObjectIdGetDatum(dep->objid));
		if (!HeapTupleIsValid(object))
			continue;
		owner = DatumGetObjectId(SysCacheGetAttr(cacheid, object, owner_column,
												 &isnull));
		ReleaseSysCache(object);
		if (!superuser_arg(owner))
			ObjectAddressSet(found, dep->classid, dep->objid);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * inbox_objects_trusted
 *		Do only superusers control the extension's schema and objects?  The
 *		check objects_lookup makes, without an error: for the background
 *		worker, which skips a database it must not serve.  The extension
 *		must be installed.
 */
bool
inbox_objects_trusted(void)
{
	Oid			extension = InvalidOid;
	Oid			schema = objects_extension_schema(&extension);

	return schema_is_trusted(schema) &&
		!OidIsValid(member_not_owned_by_superuser(extension).objectId);
}

/*
 * key_is_proper
 *		Is this index what the claims rely on: unique and checked at once,
 *		a btree on exactly (message_id, consumer) in the "C" collation,
 *		without expressions or a predicate?  A key re-created otherwise
 *		(another column order, not unique, deferrable) would make the probe
 *		miss duplicates or the insert loop on them.
 */
static bool
key_is_proper(Oid index)
{
	static const AttrNumber columns[] = {INBOX_ATT_MESSAGE_ID, INBOX_ATT_CONSUMER};
	Relation	rel = index_open(index, AccessShareLock);
	Form_pg_index form = rel->rd_index;
	bool		proper;

	proper = form->indisunique && form->indimmediate &&
		rel->rd_rel->relam == BTREE_AM_OID &&
		form->indnatts == lengthof(columns) &&
		form->indkey.values[0] == columns[0] &&
		form->indkey.values[1] == columns[1] &&
		heap_attisnull(rel->rd_indextuple, Anum_pg_index_indexprs, NULL) &&
		heap_attisnull(rel->rd_indextuple, Anum_pg_index_indpred, NULL) &&
		rel->rd_indcollation[0] == C_COLLATION_OID &&
		rel->rd_indcollation[1] == C_COLLATION_OID;
	index_close(rel, AccessShareLock);
	return proper;
}

/*
 * index_of_table
 *		The index of this name in schema, if it is an index of table;
 *		InvalidOid otherwise.  A name alone proves nothing: an index of
 *		another table can carry it.
 */
static Oid
index_of_table(const char *name, Oid schema, Oid table)
{
	Oid			index = get_relname_relid(name, schema);
	HeapTuple	tuple;
	bool		ours;

	if (!OidIsValid(index))
		return InvalidOid;
	tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(index));
	if (!HeapTupleIsValid(tuple))
		return InvalidOid;
	ours = ((Form_pg_index) GETSTRUCT(tuple))->indrelid == table;
	ReleaseSysCache(tuple);
	return ours ? index : InvalidOid;
}

/*
 * member_relation
 *		The relation of this name in schema, if it is a member of the
 *		extension; InvalidOid otherwise.
 */
static Oid
member_relation(const char *name, Oid schema, Oid extension)
{
	Oid			relation = get_relname_relid(name, schema);

	if (!OidIsValid(relation) ||
		getExtensionOfObject(RelationRelationId, relation) != extension)
		return InvalidOid;
	return relation;
}

/*
 * column_of_type
 *		The attribute number of table's column of this name, if it has
 *		this type; InvalidAttrNumber otherwise.
 */
static AttrNumber
column_of_type(Oid table, const char *name, Oid type)
{
	AttrNumber	attnum = get_attnum(table, name);

	if (attnum == InvalidAttrNumber || get_atttype(table, attnum) != type)
		return InvalidAttrNumber;
	return attnum;
}

/*
 * objects_equal
 *		Do two descriptions name the same objects?  Field by field: a
 *		struct's padding is not copied by assignment, so memcmp could see
 *		a difference where there is none.
 */
static bool
objects_equal(const InboxObjects *a, const InboxObjects *b)
{
	return a->schema_oid == b->schema_oid &&
		a->table_oid == b->table_oid &&
		a->key_index_oid == b->key_index_oid &&
		a->id_sequence_oid == b->id_sequence_oid &&
		a->token_sequence_oid == b->token_sequence_oid &&
		a->consumers_oid == b->consumers_oid &&
		a->table_in_citus == b->table_in_citus &&
		a->consumers_in_citus == b->consumers_in_citus &&
		a->result_attnum == b->result_attnum &&
		a->fingerprint_attnum == b->fingerprint_attnum &&
		strcmp(NameStr(a->schema_name), NameStr(b->schema_name)) == 0 &&
		strcmp(NameStr(a->table_name), NameStr(b->table_name)) == 0 &&
		strcmp(NameStr(a->consumers_name), NameStr(b->consumers_name)) == 0;
}

/*
 * inbox_managed_by_citus
 *		Does Citus manage this relation: a distributed table, a reference
 *		table or a Citus local table?  Then its rows are in shards, and the
 *		relation is a shell that only Citus's planner may read or write.
 *
 * Citus records each such relation in its table pg_catalog.pg_dist_partition
 * (a table of Citus's, not a catalog of PostgreSQL's; it has no syscache),
 * found here by name: the extension neither links against Citus nor needs
 * it installed.  Without that table the answer is no, for the cost of one
 * syscache lookup per rebuild of the cache.  Anything of that name other
 * than a table with Citus's column answers yes: it cannot be told apart
 * from a Citus we do not know, and the answer yes only makes the fast
 * paths decline.
 *
 * The rows are read with the latest snapshot, not the caller's: the answer
 * is cached until the next invalidation of the relation, so it must be
 * what is committed now.  Citus sends a relcache invalidation of the
 * relation whenever it adds or deletes its row (create_distributed_table,
 * create_reference_table, undistribute_table, and the metadata it syncs
 * to the workers), which empties the cache (objects_invalidate); taking
 * the inbox table's lock, as every call does, absorbs it.
 */
bool
inbox_managed_by_citus(Oid relation)
{
	Oid			citus_tables;
	Relation	rel;
	TupleDesc	desc;
	AttrNumber	column = InvalidAttrNumber;
	ScanKeyData key;
	SysScanDesc scan;
	Snapshot	snapshot;
	bool		found;

	if (!OidIsValid(relation))
		return false;
	citus_tables = get_relname_relid(INBOX_CITUS_TABLES_NAME,
									 PG_CATALOG_NAMESPACE);
	if (!OidIsValid(citus_tables))
		return false;
	if (get_rel_relkind(citus_tables) != RELKIND_RELATION)
		return true;
	rel = try_table_open(citus_tables, AccessShareLock);
	if (rel == NULL)
		return false;

	desc = RelationGetDescr(rel);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(desc, i);

		if (!attr->attisdropped &&
			(attr->atttypid == REGCLASSOID || attr->atttypid == OIDOID) &&
			strcmp(NameStr(attr->attname), INBOX_CITUS_RELATION_COLUMN) == 0)
			column = attr->attnum;
	}
	if (column == InvalidAttrNumber)
	{
		table_close(rel, AccessShareLock);
		return true;
	}

	/* A few rows, one per table Citus manages: no index needed. */
	ScanKeyInit(&key, column, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relation));
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan = systable_beginscan(rel, InvalidOid, false, snapshot, 1, &key);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * objects_lookup
 *		Resolve the extension's schema, table and key index into the cache.
 */
static void
objects_lookup(void)
{
	Oid			extension = InvalidOid;
	Oid			schema = objects_extension_schema(&extension);
	char	   *schema_name = get_namespace_name(schema);
	Oid			table;
	Oid			key_index;
	ObjectAddress untrusted;
	InboxObjects found;

	if (!schema_is_trusted(schema))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("extension \"%s\" is installed in schema \"%s\", which a role that is not a superuser controls",
						INBOX_EXTENSION_NAME, schema_name ? schema_name : "?"),
				 errdetail("Whoever owns the schema could replace the extension's objects, and have a superuser's session or the maintenance worker use them."),
				 errhint("Make a superuser the schema's owner with ALTER SCHEMA ... OWNER TO, or install the extension in a schema a superuser owns.")));

	untrusted = member_not_owned_by_superuser(extension);
	if (OidIsValid(untrusted.objectId))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s of extension \"%s\" is owned by a role that is not a superuser",
						getObjectDescription(&untrusted, false),
						INBOX_EXTENSION_NAME),
				 errdetail("Its owner could have its own code run by a superuser's session or the maintenance worker."),
				 errhint("Make a superuser its owner again.")));

	table = member_relation(INBOX_TABLE_NAME, schema, extension);
	key_index = index_of_table(INBOX_KEY_NAME, schema, table);
	if (OidIsValid(key_index) && !key_is_proper(key_index))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" of extension \"%s\" is not the table's key",
						INBOX_KEY_NAME, INBOX_EXTENSION_NAME),
				 errdetail("The claims need a unique, immediate btree index on (message_id, consumer), without expressions or a predicate."),
				 errhint("Restore the primary key as inbox.sql creates it.")));
	if (!OidIsValid(table) || !OidIsValid(key_index) || schema_name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is missing its table or key index",
						INBOX_EXTENSION_NAME),
				 errdetail("Expected table \"%s\" and its index \"%s\" in schema \"%s\".",
						   INBOX_TABLE_NAME, INBOX_KEY_NAME,
						   schema_name ? schema_name : "?"),
				 errhint("Give the table's primary key index that name again with ALTER INDEX ... RENAME TO.")));

	memset(&found, 0, sizeof(found));
	found.schema_oid = schema;
	found.table_oid = table;
	found.key_index_oid = key_index;
	namestrcpy(&found.schema_name, schema_name);
	namestrcpy(&found.table_name, INBOX_TABLE_NAME);
	namestrcpy(&found.consumers_name, INBOX_CONSUMERS_NAME);

	/* Citus draws marker ids itself (citus.c); the token sequence. */
	found.id_sequence_oid = inbox_get_identity_sequence(table, 1, true);
	found.token_sequence_oid = member_relation(INBOX_TOKEN_SEQ_NAME, schema,
											   extension);
	found.consumers_oid = member_relation(INBOX_CONSUMERS_NAME, schema,
										  extension);

	/*
	 * The columns of idempotency keys, both or neither: a table still at
	 * 1.0.0's SQL has none, and the statements that read them are not run.
	 */
	found.result_attnum = column_of_type(table, INBOX_RESULT_COLUMN, JSONBOID);
	found.fingerprint_attnum = column_of_type(table, INBOX_FINGERPRINT_COLUMN,
											  TEXTOID);
	if (found.result_attnum == InvalidAttrNumber ||
		found.fingerprint_attnum == InvalidAttrNumber)
		found.result_attnum = found.fingerprint_attnum = InvalidAttrNumber;

	/* Whether their rows are here at all, or in Citus's shards. */
	found.table_in_citus = inbox_managed_by_citus(table);
	found.consumers_in_citus = inbox_managed_by_citus(found.consumers_oid);

	/*
	 * Most invalidations (VACUUM, ANALYZE, ALTER TABLE) leave the objects as
	 * they were; only a real change starts a new generation, so that plans
	 * built on the old ones (whose text names the schema) are rebuilt.
	 */
	if (!objects_equal(&found, &objects_cache))
	{
		found.generation = ++objects_generation;
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
 * inbox_objects_of_shard
 *		The objects as a maintenance pass sees them in one shard of the
 *		table Citus manages, placed on this node: the shard as the table,
 *		with the shard's indexes, and, when consumers_shard is not 0, the
 *		placement of the reference table inbox_consumers on this node.
 *		False if the shard is not here (moved since it was looked up).
 *
 * Citus names a shard and its indexes after the table's, with "_" and the
 * shard id appended.  A shard is a plain table on its node: the passes'
 * statements on it, and on the consumers' placement, are local and Citus
 * does not reroute them.  A new generation each time, so that a plan
 * prepared for another shard is not reused.
 */
bool
inbox_objects_of_shard(const InboxObjects *objects, int64 shard,
					   int64 consumers_shard, InboxObjects *target)
{
	char		name[NAMEDATALEN];
	Oid			table;

	snprintf(name, sizeof(name), "%s_" INT64_FORMAT, INBOX_TABLE_NAME, shard);
	table = get_relname_relid(name, objects->schema_oid);
	if (!OidIsValid(table))
		return false;

	*target = *objects;
	target->table_oid = table;
	namestrcpy(&target->table_name, name);
	snprintf(name, sizeof(name), "%s_" INT64_FORMAT, INBOX_KEY_NAME, shard);
	target->key_index_oid = index_of_table(name, objects->schema_oid, table);
	target->id_sequence_oid = InvalidOid;	/* the passes insert nothing */
	target->table_in_citus = false;

	if (consumers_shard != 0)
	{
		Oid			consumers;

		snprintf(name, sizeof(name), "%s_" INT64_FORMAT,
				 INBOX_CONSUMERS_NAME, consumers_shard);
		consumers = get_relname_relid(name, objects->schema_oid);
		if (OidIsValid(consumers))
		{
			target->consumers_oid = consumers;
			namestrcpy(&target->consumers_name, name);
			target->consumers_in_citus = false;
		}
	}
	target->generation = ++objects_generation;
	return true;
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
 * objects_query_text
 *		inbox_plan's query text: query_format with %1$s, %2$s and %3$s
 *		replaced by the quoted names of the schema, the table and
 *		inbox_consumers.
 *
 * Not printf: a query that names inbox_consumers but not the table would
 * leave %2$s out, which printf's positional arguments do not allow.
 */
static char *
objects_query_text(const char *query_format, const InboxObjects *objects)
{
	StringInfoData query;

	initStringInfo(&query);
	for (const char *p = query_format; *p != '\0'; p++)
	{
		if (*p != '%')
			appendStringInfoChar(&query, *p);
		else if (strncmp(p, "%1$s", 4) == 0)
			appendStringInfoString(&query, quote_identifier(NameStr(objects->schema_name)));
		else if (strncmp(p, "%2$s", 4) == 0)
			appendStringInfoString(&query, quote_identifier(NameStr(objects->table_name)));
		else if (strncmp(p, "%3$s", 4) == 0)
			appendStringInfoString(&query, quote_identifier(NameStr(objects->consumers_name)));
		else
			elog(ERROR, "unexpected %% in inbox query: %s", query_format);
		if (*p == '%')
			p += 3;
	}
	return query.data;
}

/*
 * inbox_plan
 *		The saved plan for a query on the extension's objects, prepared on
 *		first use and again whenever the objects change.
 *
 * query_format names the extension's schema as %1$s, and, in the
 * maintenance passes' statements, which may run on a shard, the table as
 * %2$s and inbox_consumers as %3$s (objects_query_text).  The caller must
 * be connected to SPI.  ALTER TABLE needs no rebuild here: the plan cache
 * replans a saved plan whose tables changed.
 *
 * The plan cache parses the query again under the caller's search_path
 * whenever that path changes, so the query text must name everything
 * explicitly: objects in %1$s, functions in pg_catalog, operators with the
 * INBOX_EQ family of macros.  The statements of a single server read and
 * change ONLY %1$s.inbox: a table someone made inherit from it is not the
 * extension's, and a row pointer (ctid) names a row of one table only.  The
 * statements for a table Citus manages (claim.c's *_citus, twophase_citus.c)
 * name it without ONLY, because Citus routes a statement on the distributed
 * table, never one on ONLY it, to its shards.
 */
SPIPlanPtr
inbox_plan(InboxPlan *cached, const InboxObjects *objects,
		   const char *query_format, int nargs, Oid *argtypes)
{
	if (cached->plan == NULL || cached->generation != objects->generation)
	{
		char	   *query;
		SPIPlanPtr	plan;

		query = objects_query_text(query_format, objects);
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

/*
 * inbox_spi_check
 *		Raise an internal error unless an SPI call returned expected.  Only
 *		a bug or a changed table can make it fail: the statements are ours.
 */
void
inbox_spi_check(int rc, int expected, const char *statement)
{
	if (rc != expected)
		elog(ERROR, "%s statement returned %s, expected %s", statement,
			 SPI_result_code_string(rc), SPI_result_code_string(expected));
}

/*
 * spi_context_without
 *		context (an error's CONTEXT lines) without the line that SPI adds for
 *		query; NULL if nothing is left.
 */
static char *
spi_context_without(const char *context, const char *query)
{
	char	   *ours = psprintf(dgettext(PG_TEXTDOMAIN("postgres"),
										 "SQL statement \"%s\""), query);
	size_t		ours_len = strlen(ours);
	StringInfoData kept;
	const char *line = context;

	initStringInfo(&kept);
	while (*line != '\0')
	{
		const char *end = strchr(line, '\n');
		size_t		len = end ? (size_t) (end - line) : strlen(line);

		if (len != ours_len || strncmp(line, ours, len) != 0)
		{
			if (kept.len > 0)
				appendStringInfoChar(&kept, '\n');
			appendBinaryStringInfo(&kept, line, len);
		}
		line += len;
		if (*line == '\n')
			line++;
	}
	return kept.len > 0 ? kept.data : NULL;
}

/*
 * inbox_spi_run
 *		SPI_execute_plan, checked with inbox_spi_check.
 *
 * An error the statement raises (a permission, a policy, a constraint, a
 * replica identity) is the caller's to read, and reaches it as it was
 * raised, with one change: without the CONTEXT line that quotes our
 * statement, which tells a user nothing and runs to a thousand characters.
 * Nothing is caught for good: the error is re-thrown at once, its
 * SQLSTATE, message, detail, hint and every other context line unchanged.
 */
int
inbox_spi_run(SPIPlanPtr plan, Datum *values, const char *nulls,
			  bool read_only, long count, int expected, const char *statement)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	volatile int rc = 0;

	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, nulls, read_only, count);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		List	   *sources = SPI_plan_get_plan_sources(plan);

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		if (edata->context != NULL && sources != NIL)
			edata->context =
				spi_context_without(edata->context,
									((CachedPlanSource *) linitial(sources))->query_string);
		ReThrowError(edata);
	}
	PG_END_TRY();

	inbox_spi_check(rc, expected, statement);
	return rc;
}
