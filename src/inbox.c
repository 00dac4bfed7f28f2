/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Module entry point of the inbox extension.
 *
 * The library works both when loaded on demand by CREATE EXTENSION and when
 * listed in shared_preload_libraries.  _PG_init only hands off to the files
 * that own each piece (settings.c, objects.c, shmem.c, worker.c), and it
 * never raises an error: a failure here would stop the whole server from
 * starting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

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
	inbox_settings_define();

	/*
	 * The worker and its shared memory exist only when the library is
	 * preloaded, and never during a binary upgrade, when nothing must
	 * write to the databases being upgraded.
	 */
	if (process_shared_preload_libraries_in_progress && !IsBinaryUpgrade)
	{
		inbox_tokens_note_start();
		inbox_shmem_init();
		inbox_worker_register();
	}
}
