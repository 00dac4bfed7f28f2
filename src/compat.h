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

#endif							/* INBOX_COMPAT_H */
