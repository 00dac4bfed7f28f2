/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Module entry point of the inbox extension.
 *
 * The library works both when loaded on demand by CREATE EXTENSION and when
 * listed in shared_preload_libraries.  _PG_init only hands off to the files
 * that own each piece, and it never raises an error: a failure here would
 * stop the whole server from starting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "inbox.h"

PG_MODULE_MAGIC;

/*
 * _PG_init
 *		Module load callback.
 */
void
_PG_init(void)
{
	inbox_objects_init();

	/* Settings will be named inbox.*; claim the prefix now. */
	MarkGUCPrefixReserved("inbox");
}
