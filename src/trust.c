/*-------------------------------------------------------------------------
 *
 * trust.c
 *	  What a maintenance pass runs, and with which settings: only what a
 *	  superuser wrote, with settings a superuser chose.
 *
 * Autovacuum is the model (docs/security.md).  A pass by the background
 * worker, or by a superuser's inbox_prune() or inbox_reclaim(), and a
 * superuser's inbox_configure() or operator decision (operate.c), runs with
 * session_replication_role = replica, so that no ordinary trigger fires: a
 * role with the TRIGGER privilege on the table (GRANT ALL includes it) could
 * otherwise attach its own function and have it run as a superuser.  What
 * would still fire in that mode (a trigger or rule enabled ALWAYS or
 * REPLICA), and what the mode would silently skip that the data relies on (a
 * foreign key's triggers) or that changes what the statement does (a rule),
 * make the pass refuse to run instead (inbox_replica_refusal), on the inbox
 * table and on inbox_floors, which a prune writes too.  Only the table's
 * owner, a superuser, can enable a trigger ALWAYS or add a rule, and a
 * foreign key needs the REFERENCES privilege; refusing them all keeps the
 * rule short: in a pass, nothing fires.
 *
 * Settings: every pass pins the settings its statements depend on
 * (inbox_pin_pass_settings), so that neither a session's nor a database's
 * choice of time zone, date style, planner methods or JIT changes what a
 * pass does or how long it takes.  The worker also drops every value that
 * came from ALTER DATABASE or ALTER ROLE ... SET, keeping the server's
 * configuration instead (inbox_settings_snapshot, then
 * inbox_settings_drop_local): those belong to the database's owner.
 *
 * Locking: inbox_replica_refusal reads the table's relcache entry, whose
 * triggers and rules cannot change while the caller holds RowExclusiveLock
 * (CREATE TRIGGER, ALTER TABLE ... ENABLE and CREATE RULE all conflict).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_rewrite.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "rewrite/prs2lock.h"
#include "rewrite/rewriteDefine.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "inbox.h"

/*
 * What every pass pins, whoever runs it: the text of its statements and
 * the values they compute do not depend on these, and a pass should take as
 * long as its work.  Planner methods (enable_*) are pinned to their
 * defaults besides (pin_planner_methods).  The styles of dates and
 * intervals are left to the caller (its messages quote values in them);
 * the worker pins those too (worker.c).
 */
typedef struct InboxPin
{
	const char *name;
	const char *value;
} InboxPin;

static const InboxPin pass_pins[] = {
	{"search_path", "pg_catalog, pg_temp"},
	{"TimeZone", "UTC"},
	{"standard_conforming_strings", "on"},
	{"transform_null_equals", "off"},
	{"jit", "off"},
	{"max_parallel_workers_per_gather", "0"},
	{"plan_cache_mode", "auto"},
};

/*
 * Settings the worker keeps as the database gives them, or sets itself
 * (worker.c): default_transaction_read_only is respected (a read-only
 * database is skipped), the role and session user are pinned by their own
 * code, and the transaction_* ones belong to each transaction.
 */
static const char *const local_kept[] = {
	"default_transaction_read_only",
	"session_authorization",
	"role",
	"transaction_isolation",
	"transaction_read_only",
	"transaction_deferrable",
	"client_encoding",
	"application_name",
};

/* The server's settings, as the worker had them before it connected. */
typedef struct InboxSetting
{
	char	   *name;
	char	   *value;
} InboxSetting;

static InboxSetting *server_settings = NULL;
static int	server_settings_count = 0;

static void pin_planner_methods(GucSource source, GucAction action);

/*
 * pin_planner_methods
 *		Set every planner method (enable_*) to its default.
 */
static void
pin_planner_methods(GucSource source, GucAction action)
{
	int			count;
	struct config_generic **vars = inbox_guc_variables(&count);

	for (int i = 0; i < count; i++)
	{
		struct config_generic *var = vars[i];

		if (var->vartype != PGC_BOOL || var->context != PGC_USERSET ||
			strncmp(var->name, "enable_", 7) != 0)
			continue;
		(void) set_config_option(var->name,
								 ((struct config_bool *) var)->boot_val ? "on" : "off",
								 PGC_SUSET, source, action, true, 0, false);
	}
}

/*
 * inbox_pin_pass_settings
 *		Pin what a pass's statements depend on.
 *
 * The worker pins them for its life (PGC_S_OVERRIDE, GUC_ACTION_SET); a
 * pass in the caller's transaction for the pass only (PGC_S_SESSION,
 * GUC_ACTION_SAVE, under a GUC nest level the caller undoes).
 */
void
inbox_pin_pass_settings(GucSource source, GucAction action)
{
	for (int i = 0; i < lengthof(pass_pins); i++)
		(void) set_config_option(pass_pins[i].name, pass_pins[i].value,
								 PGC_SUSET, source, action, true, 0, false);
	pin_planner_methods(source, action);
}

/*
 * inbox_settings_snapshot
 *		Keep every setting as it is now: in a background worker before it
 *		connects, the server's configuration (files, command line, ALTER
 *		SYSTEM), and nothing of a database's or a role's.
 */
void
inbox_settings_snapshot(void)
{
	int			count;
	struct config_generic **vars = inbox_guc_variables(&count);
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	server_settings = palloc0(sizeof(InboxSetting) * Max(count, 1));
	server_settings_count = 0;
	for (int i = 0; i < count; i++)
	{
		const char *value = GetConfigOption(vars[i]->name, true, false);

		if (value == NULL)
			continue;
		server_settings[server_settings_count].name = pstrdup(vars[i]->name);
		server_settings[server_settings_count].value = pstrdup(value);
		server_settings_count++;
	}
	MemoryContextSwitchTo(old);
}

/*
 * inbox_settings_drop_local
 *		Give every setting that ALTER DATABASE or ALTER ROLE ... SET chose
 *		the value the server's configuration gives it (as kept by
 *		inbox_settings_snapshot), for the rest of the worker's life, except
 *		those in local_kept.  Called in a transaction (some settings check
 *		their value against the catalogs).
 *
 * A setting of a library that is not loaded yet (a placeholder) has no
 * server value to go back to; none of the worker's own statements reads
 * one (docs/security.md).
 */
void
inbox_settings_drop_local(void)
{
	int			count;
	struct config_generic **vars = inbox_guc_variables(&count);
	List	   *names = NIL;
	ListCell   *lc;

	/* Collect first: setting a value may reorder the array. */
	for (int i = 0; i < count; i++)
	{
		struct config_generic *var = vars[i];
		bool		kept = false;

		if (var->source != PGC_S_DATABASE && var->source != PGC_S_USER &&
			var->source != PGC_S_DATABASE_USER)
			continue;
		if (var->context != PGC_USERSET && var->context != PGC_SUSET)
			continue;
		for (int k = 0; k < lengthof(local_kept); k++)
			kept |= (pg_strcasecmp(var->name, local_kept[k]) == 0);
		if (!kept)
			names = lappend(names, pstrdup(var->name));
	}

	foreach(lc, names)
	{
		const char *name = (const char *) lfirst(lc);
		const char *value = NULL;

		for (int i = 0; i < server_settings_count; i++)
		{
			if (pg_strcasecmp(server_settings[i].name, name) == 0)
				value = server_settings[i].value;
		}
		if (value == NULL)
		{
			elog(DEBUG1, "inbox worker keeps the database's \"%s\": the server has no value for it",
				 name);
			continue;
		}
		(void) set_config_option(name, value, PGC_SUSET, PGC_S_OVERRIDE,
								 GUC_ACTION_SET, true, WARNING, false);
	}
}

/*
 * relation_refusal
 *		inbox_replica_refusal for one relation.
 */
static char *
relation_refusal(Relation rel)
{
	TriggerDesc *triggers = rel->trigdesc;
	char	   *found = NULL;

	if (triggers != NULL)
	{
		for (int i = 0; i < triggers->numtriggers && found == NULL; i++)
		{
			Trigger    *trigger = &triggers->triggers[i];

			if (RI_FKey_trigger_type(trigger->tgfoid) != RI_TRIGGER_NONE)
			{
				char	   *constraint = get_constraint_name(trigger->tgconstraint);

				found = psprintf("foreign key \"%s\" involves table \"%s\"",
								 constraint ? constraint : "?",
								 RelationGetRelationName(rel));
			}
			else if (trigger->tgenabled == TRIGGER_FIRES_ALWAYS ||
					 trigger->tgenabled == TRIGGER_FIRES_ON_REPLICA)
				found = psprintf("trigger \"%s\" on table \"%s\" is enabled %s",
								 trigger->tgname, RelationGetRelationName(rel),
								 trigger->tgenabled == TRIGGER_FIRES_ALWAYS ?
								 "ALWAYS" : "REPLICA");
		}
	}

	if (found == NULL && rel->rd_rules != NULL)
	{
		Relation	rewrite = table_open(RewriteRelationId, AccessShareLock);
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tuple;

		ScanKeyInit(&key, Anum_pg_rewrite_ev_class, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(RelationGetRelid(rel)));
		scan = systable_beginscan(rewrite, RewriteRelRulenameIndexId, true,
								  NULL, 1, &key);
		while (found == NULL && (tuple = systable_getnext(scan)) != NULL)
		{
			Form_pg_rewrite rule = (Form_pg_rewrite) GETSTRUCT(tuple);

			if (rule->ev_enabled != RULE_DISABLED)
				found = psprintf("rule \"%s\" on table \"%s\" is enabled",
								 NameStr(rule->rulename),
								 RelationGetRelationName(rel));
		}
		systable_endscan(scan);
		table_close(rewrite, AccessShareLock);
	}
	return found;
}

/*
 * inbox_replica_refusal
 *		Why a pass must not run on the table with session_replication_role
 *		= replica, or NULL if it may: a trigger or rule that would fire
 *		anyway (enabled ALWAYS or REPLICA), a rule of any kind (it changes
 *		what the statement does), or a foreign key (whose checks that mode
 *		skips), on the table or on inbox_floors beside it, which a prune
 *		writes too (floor.c).  The caller holds RowExclusiveLock on the
 *		table; inbox_floors is locked so until the transaction ends.
 */
char *
inbox_replica_refusal(Relation rel)
{
	char	   *found = relation_refusal(rel);
	Oid			floors;

	if (found != NULL)
		return found;
	floors = get_relname_relid(INBOX_FLOORS_NAME, RelationGetNamespace(rel));
	if (OidIsValid(floors))
	{
		Relation	floors_rel = table_open(floors, RowExclusiveLock);

		found = relation_refusal(floors_rel);
		table_close(floors_rel, NoLock);
	}
	return found;
}

/*
 * inbox_superuser_write_begin
 *		For a call that writes a table of the extension (rel, locked by the
 *		caller in RowExclusiveLock or stronger) on behalf of a superuser:
 *		refuse what would fire anyway (inbox_replica_refusal), and fire no
 *		trigger until inbox_superuser_write_end.  Returns the GUC nest level
 *		to pass it, or -1 when the caller is not a superuser: its writes
 *		fire the table's triggers with its own rights.
 */
int
inbox_superuser_write_begin(Relation rel, const char *caller)
{
	char	   *refusal;
	int			nestlevel;

	if (!superuser())
		return -1;

	refusal = inbox_replica_refusal(rel);
	if (refusal != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s refuses to run as a superuser: %s", caller, refusal),
				 errdetail("A superuser's call runs with session_replication_role = replica, so that no trigger fires in it; a trigger or rule that fires anyway, a rule, or a foreign key, whose checks would not run, stops it."),
				 errhint("Drop it, or make the trigger fire on origin only (ALTER TABLE ... ENABLE TRIGGER); or make the call as the role whose triggers should fire.")));

	nestlevel = NewGUCNestLevel();
	(void) set_config_option("session_replication_role", "replica",
							 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	return nestlevel;
}

/*
 * inbox_superuser_write_end
 *		Undo inbox_superuser_write_begin.
 */
void
inbox_superuser_write_end(int nestlevel)
{
	if (nestlevel >= 0)
		AtEOXact_GUC(true, nestlevel);
}
