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

#include <limits.h>

#include "fmgr.h"
#include "utils/guc.h"

#include "inbox.h"

PG_MODULE_MAGIC;

/* Settings; each is the default a consumer gets without inbox_configure. */
int			inbox_lease = 300;		/* seconds */
int			inbox_max_attempts = 5;
int			inbox_retention = 7 * 24 * 60;	/* minutes */

static void define_settings(void);

/*
 * _PG_init
 *		Module load callback.
 */
void
_PG_init(void)
{
	inbox_objects_init();
	define_settings();
}

/*
 * define_settings
 *		Define the inbox.* settings and reserve the prefix.
 *
 * The per-claim defaults are USERSET: a session may choose its own, and
 * inbox_configure overrides them per consumer.  Retention is SIGHUP: it
 * governs maintenance, which must not depend on one session's choice.
 */
static void
define_settings(void)
{
	DefineCustomIntVariable("inbox.lease",
							"Default lease of a two-phase claim.",
							"Used when neither the call nor inbox_configure gives one.",
							&inbox_lease,
							300, 1, INBOX_LEASE_MAX_SECONDS,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.max_attempts",
							"Default number of attempts before a two-phase claim fails.",
							"Used when inbox_configure gives none for the consumer.",
							&inbox_max_attempts,
							5, 1, INT_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("inbox.retention",
							"Default time processed and failed markers are kept.",
							"Used when inbox_configure gives none for the consumer.",
							&inbox_retention,
							7 * 24 * 60, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MIN,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("inbox");
}
