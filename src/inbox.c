/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  Module entry point of the inbox extension.
 *
 * The library works both when loaded on demand by CREATE EXTENSION and when
 * listed in shared_preload_libraries.  _PG_init only hands off to the files
 * that own each piece (settings.c, objects.c, shmem.c, counters.c,
 * worker.c), and it never raises an error: a failure here would stop the
 * whole server from starting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/extension.h"
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
		inbox_counters_init();
		inbox_worker_register();
	}

	/*
	 * Loaded by CREATE EXTENSION (its C functions are checked as they are
	 * created, which loads the library): then it was not preloaded, since a
	 * preloaded library is inherited from the postmaster and not loaded
	 * again.  Everything works but maintenance, which nothing else would
	 * say: markers would be kept forever.  A WARNING, never an error.
	 */
	else if (creating_extension && !IsBinaryUpgrade)
		ereport(WARNING,
				(errmsg("inbox is not loaded through shared_preload_libraries, so its maintenance worker does not run"),
				 errdetail("Without the worker, processed markers are kept forever and claims whose lease ran out are not reclaimed, unless inbox_prune() and inbox_reclaim() are scheduled."),
				 errhint("Add inbox to shared_preload_libraries and restart the server.")));
}
