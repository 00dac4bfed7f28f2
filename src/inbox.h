/*-------------------------------------------------------------------------
 *
 * inbox.h
 *	  Declarations shared by the inbox extension's source files.
 *
 * Each source file owns one responsibility:
 *
 *	inbox.c		module entry point and settings
 *	objects.c	finding the extension's table and index, cached per backend
 *	validate.c	argument checks shared by every SQL-callable function
 *	claim.c		the one-phase claims, inbox_claim and inbox_claim_many
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_H
#define INBOX_H

#include "postgres.h"

#include "fmgr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

#include "compat.h"

/*
 * Documented limits on the key columns.  Together they keep a key well
 * below the btree limit of about a third of a page (2704 bytes with 8kB
 * pages), so a long id is refused with a clear message before the index
 * would refuse it with an obscure one.  The table enforces the same limits
 * with CHECK constraints; keep inbox.sql in step.
 */
#define INBOX_MESSAGE_ID_MAX_BYTES	1024
#define INBOX_CONSUMER_MAX_BYTES	256

/* Names fixed by the install script (inbox.sql). */
#define INBOX_EXTENSION_NAME	"inbox"
#define INBOX_TABLE_NAME		"inbox"
#define INBOX_KEY_NAME			"inbox_message_id_consumer_key"

/*
 * Where the extension's objects live in this database.  Found from the
 * extension's recorded schema, never from the caller's search_path.
 */
typedef struct InboxObjects
{
	Oid			schema_oid;
	Oid			table_oid;
	Oid			key_index_oid;	/* unique index on (message_id, consumer) */
	NameData	schema_name;
	uint64		generation;		/* changes whenever the above are looked up
								 * again; cached plans compare it */
} InboxObjects;

/* inbox.c */
extern void _PG_init(void);

/* objects.c */
extern void inbox_objects_init(void);
extern Relation inbox_open_table(LOCKMODE lockmode, InboxObjects *objects);
extern bool inbox_is_key_violation(const ErrorData *edata,
								   const InboxObjects *objects);

/* validate.c */
extern text *inbox_arg_message_id(FunctionCallInfo fcinfo, int argno);
extern text *inbox_arg_consumer(FunctionCallInfo fcinfo, int argno);
extern void inbox_check_message_id(text *message_id, int element);

#endif							/* INBOX_H */
