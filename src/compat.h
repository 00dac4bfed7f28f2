/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every PostgreSQL version shim the inbox extension needs, in one place.
 *
 * The extension is built and tested against PostgreSQL 15.  When support
 * for another major version is added, the differences go here, so that the
 * rest of the code reads as if written for a single version.
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_COMPAT_H
#define INBOX_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "inbox requires PostgreSQL 15 or later"
#endif

#include "access/genam.h"
#include "access/relation.h"
#include "access/tableam.h"
#include "catalog/dependency.h"
#include "catalog/pg_database.h"
#include "storage/lockdefs.h"

/*
 * The majors whose executors the fast paths were audited against, path by
 * path (docs/architecture.md, "Per major").  On any later major every fast
 * path declines and the SQL paths run, until that major is audited and
 * this bound raised: code that compiles there is not yet code that does
 * what its executor does.
 */
#define inbox_fast_paths_audited() (PG_VERSION_NUM < 190000)

/*
 * A database whose DROP DATABASE was interrupted is marked invalid (15.4
 * and later) and must not be connected to.
 */
#ifdef DATCONNLIMIT_INVALID_DB
#define inbox_database_is_invalid(form) database_is_invalid_form(form)
#else
#define inbox_database_is_invalid(form) false
#endif

/*
 * Index insertion for a speculative insert (marker.c): version 16 added an
 * argument for HOT updates of summarizing indexes, false for an insert.
 */
#if PG_VERSION_NUM >= 160000
#define inbox_insert_index_tuples(rri, slot, estate, conflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, true, (conflict), \
						  (arbiters), false)
#else
#define inbox_insert_index_tuples(rri, slot, estate, conflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, true, (conflict), \
						  (arbiters))
#endif

/*
 * What table_tuple_update says about the new version's index entries
 * (twophase_fast.c): a bool up to version 15, an enum from 16 on, where
 * TU_All is the only value that asks for new btree entries.
 */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes InboxUpdateIndexes;
#define inbox_update_needs_btree_entries(u) ((u) == TU_All)
#else
typedef bool InboxUpdateIndexes;
#define inbox_update_needs_btree_entries(u) (u)
#endif

/*
 * An index scan (probe.c, prune.c, twophase_fast.c): version 18
 * added an argument for EXPLAIN ANALYZE's index statistics, which none of
 * our scans report (NULL, as core's own catalog scans pass).
 */
#if PG_VERSION_NUM >= 180000
#define inbox_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define inbox_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * The sequence behind an identity column (objects.c), by the table's OID.
 * Version 17 takes the open relation instead (to follow a partition to its
 * root); passing an OID there compiles with a warning and crashes, hence
 * a function rather than a macro.  InvalidOid when the table is gone; the
 * lock is kept to the end of the transaction, as a table scan's would be.
 */
static inline Oid
inbox_get_identity_sequence(Oid relid, AttrNumber attnum, bool missing_ok)
{
#if PG_VERSION_NUM >= 170000
	Relation	rel = try_relation_open(relid, AccessShareLock);
	Oid			seqid;

	if (rel == NULL)
		return InvalidOid;
	seqid = getIdentitySequence(rel, attnum, missing_ok);
	relation_close(rel, NoLock);
	return seqid;
#else
	return getIdentitySequence(relid, attnum, missing_ok);
#endif
}

/*
 * Ownership checks (guard.c, tokens.c): one function for every kind of
 * object from version 16 on, one per kind before.
 */
#if PG_VERSION_NUM >= 160000
#define inbox_class_ownercheck(relid, role) \
	object_ownercheck(RelationRelationId, (relid), (role))
#define inbox_namespace_ownercheck(nsp, role) \
	object_ownercheck(NamespaceRelationId, (nsp), (role))
#define inbox_extension_ownercheck(ext, role) \
	object_ownercheck(ExtensionRelationId, (ext), (role))
#else
#define inbox_class_ownercheck(relid, role) pg_class_ownercheck((relid), (role))
#define inbox_namespace_ownercheck(nsp, role) pg_namespace_ownercheck((nsp), (role))
#define inbox_extension_ownercheck(ext, role) pg_extension_ownercheck((ext), (role))
#endif

/*
 * Every setting, to pin those the worker must not take from ALTER DATABASE
 * or ALTER ROLE ... SET (trust.c): 16 returns the count with the array.
 * Needs utils/guc_tables.h.
 */
#if PG_VERSION_NUM >= 160000
#define inbox_guc_variables(num) get_guc_variables(num)
#else
#define inbox_guc_variables(num) \
	(*(num) = GetNumConfigOptions(), get_guc_variables())
#endif

#endif							/* INBOX_COMPAT_H */
