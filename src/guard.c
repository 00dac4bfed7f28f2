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
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/user.h"
#include "executor/tuptable.h"
#include "nodes/parsenodes.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_guard_drop);

static bool drop_takes_extension(Node *parsetree, Oid schema, Oid owner);
static bool table_has_markers(Oid schema);

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
		return list_member_oid(roleSpecsToIds(((DropOwnedStmt *) parsetree)->roles),
							   owner);
	return false;
}

/*
 * table_has_markers
 *		Does the extension's inbox table hold a row any snapshot could see?
 *		Read with a fresh snapshot: a marker committed a moment ago counts.
 */
static bool
table_has_markers(Oid schema)
{
	Oid			table = get_relname_relid(INBOX_TABLE_NAME, schema);
	Relation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	Snapshot	snapshot;
	bool		found;

	if (!OidIsValid(table))
		return false;
	rel = table_open(table, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	scan = table_beginscan(rel, snapshot, 0, NULL);
	found = table_scan_getnextslot(scan, ForwardScanDirection, slot);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
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
	Oid			schema;
	Oid			owner;

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
	schema = HeapTupleIsValid(tuple) ?
		((Form_pg_extension) GETSTRUCT(tuple))->extnamespace : InvalidOid;
	owner = HeapTupleIsValid(tuple) ?
		((Form_pg_extension) GETSTRUCT(tuple))->extowner : InvalidOid;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (!OidIsValid(schema))
		PG_RETURN_VOID();

	if (drop_takes_extension(trigdata->parsetree, schema, owner) &&
		table_has_markers(schema))
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop extension \"%s\" while its table holds markers",
						INBOX_EXTENSION_NAME),
				 errdetail("Without its markers, every message that a broker can still deliver again would be processed again."),
				 errhint("To delete the markers on purpose, run TRUNCATE %s.%s first.",
						 quote_identifier(get_namespace_name(schema)),
						 INBOX_TABLE_NAME)));
	PG_RETURN_VOID();
}
