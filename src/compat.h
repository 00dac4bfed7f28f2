/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every PostgreSQL version shim the inbox extension needs, in one place.
 *
 * The extension supports PostgreSQL 15 to 18.  Every difference between
 * those majors that the code meets is a named shim here, so that the rest
 * of the code reads as if written for a single version.
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
#include "catalog/dependency.h"
#include "catalog/pg_database.h"
#include "storage/lockdefs.h"

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
 * An index scan (probe.c): version 18
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
 * Ownership checks (guard.c, tokens.c) and the EXECUTE check
 * (begin_wait.c): one function for every kind of object from version 16
 * on, one per kind before.
 */
#if PG_VERSION_NUM >= 160000
#define inbox_class_ownercheck(relid, role) \
	object_ownercheck(RelationRelationId, (relid), (role))
#define inbox_namespace_ownercheck(nsp, role) \
	object_ownercheck(NamespaceRelationId, (nsp), (role))
#define inbox_extension_ownercheck(ext, role) \
	object_ownercheck(ExtensionRelationId, (ext), (role))
#define inbox_proc_aclcheck(proc, role) \
	object_aclcheck(ProcedureRelationId, (proc), (role), ACL_EXECUTE)
#else
#define inbox_class_ownercheck(relid, role) pg_class_ownercheck((relid), (role))
#define inbox_namespace_ownercheck(nsp, role) pg_namespace_ownercheck((nsp), (role))
#define inbox_extension_ownercheck(ext, role) pg_extension_ownercheck((ext), (role))
#define inbox_proc_aclcheck(proc, role) \
	pg_proc_aclcheck((proc), (role), ACL_EXECUTE)
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
