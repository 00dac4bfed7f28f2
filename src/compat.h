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

#include "access/tableam.h"
#include "catalog/pg_database.h"

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

#endif							/* INBOX_COMPAT_H */
