/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  Refusing to drop the markers by accident.
 *
 * The markers are what make a message's second delivery a no-op.  Dropping
 * the extension drops its table, so every message the broker can still
 * redeliver (for as long as the retention) would be processed again, and
 * the fencing tokens would start over.  So a DROP EXTENSION inbox, and a
 * DROP SCHEMA ... CASCADE or DROP OWNED BY that would take the extension
 * with it, is refused while the table holds a marker.  The way to do it on
 * purpose is explicit and documented: TRUNCATE inbox, then drop.
 *
 * How: an event trigger on ddl_command_start (inbox.sql), which runs
 * before the command has done anything and sees its parse tree.  A C
 * function, because a PL/pgSQL one cannot see which objects a DROP names.
 * A superuser who sets session_replication_role = replica skips event
 * triggers, and with them this guard; that too is a deliberate act.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/user.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_guard_drop);

static bool drop_takes_extension(Node *parsetree, Oid schema, Oid owner);
static bool drop_is_allowed(Node *parsetree, Oid extension, Oid schema,
							Oid owner);
static Oid	markers_table(HeapTuple extension);
static bool distributed_table_has_markers(Oid table);
static bool table_has_markers(Oid table);

/*
 * drop_takes_extension
 *		Would this command drop the extension?  DROP EXTENSION naming it;
 *		DROP SCHEMA ... CASCADE of its schema; DROP OWNED BY its owner.
 */
static bool
drop_takes_extension(Node *parsetree, Oid schema, Oid owner)
{
	ListCell   *lc;

	if (IsA(parsetree, DropStmt))
	{
		DropStmt   *stmt = (DropStmt *) parsetree;

		if (stmt->removeType == OBJECT_EXTENSION)
		{
			foreach(lc, stmt->objects)
			{
				if (strcmp(strVal(lfirst(lc)), INBOX_EXTENSION_NAME) == 0)
					return true;
			}
		}
		else if (stmt->removeType == OBJECT_SCHEMA &&
				 stmt->behavior == DROP_CASCADE)
		{
			foreach(lc, stmt->objects)
			{
				if (get_namespace_oid(strVal(lfirst(lc)), true) == schema)
					return true;
			}
		}
	}
	else if (IsA(parsetree, DropOwnedStmt))
	{
		List	   *roles = roleSpecsToIds(((DropOwnedStmt *) parsetree)->roles);
		HeapTuple	tuple;
		Oid			schema_owner = InvalidOid;

		tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
		if (HeapTupleIsValid(tuple))
		{
			schema_owner = ((Form_pg_namespace) GETSTRUCT(tuple))->nspowner;
			ReleaseSysCache(tuple);
		}
		/* The extension's owner, or its schema's: that drops the schema. */
		return list_member_oid(roles, owner) ||
			list_member_oid(roles, schema_owner);
	}
	return false;
}

/*
 * drop_is_allowed
 *		Would core let the current role run this command, as far as the
 *		extension is concerned?  It checks ownership only after this
 *		trigger has run, so the guard checks first what core will.
 */
static bool
drop_is_allowed(Node *parsetree, Oid extension, Oid schema, Oid owner)
{
	Oid			role = GetUserId();

	if (IsA(parsetree, DropOwnedStmt))
	{
		ListCell   *lc;

		foreach(lc, roleSpecsToIds(((DropOwnedStmt *) parsetree)->roles))
		{
			if (!has_privs_of_role(role, lfirst_oid(lc)))
				return false;
		}
		return true;
	}
	if (((DropStmt *) parsetree)->removeType == OBJECT_SCHEMA)
		return inbox_namespace_ownercheck(schema, role);
	return inbox_extension_ownercheck(extension, role);
}

/*
 * markers_table
 *		The extension's table of markers: among the tables it registered for
 *		pg_dump (pg_extension.extconfig), the one with a message_id column.
 *		Found by membership, not by name: a renamed or moved table is still
 *		dropped with the extension.
 */
static Oid
markers_table(HeapTuple extension)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	Datum		datum;
	bool		isnull;
	Oid		   *tables;
	int			ntables;
	Oid			found = InvalidOid;

	datum = heap_getattr(extension, Anum_pg_extension_extconfig,
						 RelationGetDescr(rel), &isnull);
	table_close(rel, AccessShareLock);
	if (isnull)
		return InvalidOid;
	tables = (Oid *) ARR_DATA_PTR(DatumGetArrayTypeP(datum));
	ntables = ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(datum)),
							 ARR_DIMS(DatumGetArrayTypeP(datum)));
	for (int i = 0; i < ntables && !OidIsValid(found); i++)
	{
		if (get_rel_relkind(tables[i]) == RELKIND_RELATION &&
			get_attnum(tables[i], "message_id") != InvalidAttrNumber)
			found = tables[i];
	}
	return found;
}

/*
 * distributed_table_has_markers
 *		table_has_markers for a table Citus manages, whose heap here is an
 *		empty shell: a SELECT, which Citus sends to every shard.
 *
 * The lock on the shell waits for the claims made through this node; a
 * claim in progress through another node is not waited for, and counts
 * only once it commits, which the SELECT may miss.
 */
static bool
distributed_table_has_markers(Oid table)
{
	char	   *query;
	bool		found;

	query = psprintf("SELECT 1 FROM %s LIMIT 1",
					 quote_qualified_identifier(get_namespace_name(get_rel_namespace(table)),
												get_rel_name(table)));
	SPI_connect();
	if (SPI_execute(query, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the markers of a distributed inbox");
	found = SPI_processed > 0;
	SPI_finish();
	return found;
}

/*
 * table_has_markers
 *		Does the table hold a row?  Locked first, as the DROP will lock it:
 *		a claim still in progress then commits (and counts) or rolls back
 *		before we look, with a fresh snapshot.
 */
static bool
table_has_markers(Oid table)
{
	Relation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	Snapshot	snapshot;
	bool		found;

	rel = table_open(table, AccessExclusiveLock);
	if (inbox_managed_by_citus(table))
	{
		table_close(rel, NoLock);
		return distributed_table_has_markers(table);
	}
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	scan = table_beginscan(rel, snapshot, 0, NULL);
	found = table_scan_getnextslot(scan, ForwardScanDirection, slot);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	table_close(rel, NoLock);
	return found;
}

/*
 * inbox_guard_drop() returns event_trigger
 *
 * Refuses a command that would drop the extension while its table holds
 * markers.
 */
Datum
inbox_guard_drop(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata;
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	Oid			extension = InvalidOid;
	Oid			schema = InvalidOid;
	Oid			owner = InvalidOid;
	Oid			table = InvalidOid;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("inbox_guard_drop() must be called as an event trigger")));
	trigdata = (EventTriggerData *) fcinfo->context;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum(INBOX_EXTENSION_NAME));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		extension = ((Form_pg_extension) GETSTRUCT(tuple))->oid;
		schema = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
		owner = ((Form_pg_extension) GETSTRUCT(tuple))->extowner;
		table = markers_table(tuple);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (!OidIsValid(table))
		PG_RETURN_VOID();

	/*
	 * Only for a role the DROP would let through: anyone else gets core's
	 * refusal at once, without waiting here for the table's lock (which
	 * would queue every claim behind it) or learning whether it is empty.
	 */
	if (drop_takes_extension(trigdata->parsetree, schema, owner) &&
		drop_is_allowed(trigdata->parsetree, extension, schema, owner) &&
		table_has_markers(table))
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop extension \"%s\" while its table holds markers",
						INBOX_EXTENSION_NAME),
				 errdetail("Without its markers, every message that a broker can still deliver again would be processed again."),
				 errhint("To delete the markers on purpose, run SET session_replication_role = replica; TRUNCATE %s.%s; first, without CASCADE (docs/security.md).",
						 quote_identifier(get_namespace_name(get_rel_namespace(table))),
						 quote_identifier(get_rel_name(table)))));
	PG_RETURN_VOID();
}
