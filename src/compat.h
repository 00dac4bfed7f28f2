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

#endif							/* INBOX_COMPAT_H */
