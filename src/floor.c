/*-------------------------------------------------------------------------
 *
 * floor.c
 *	  The floor below which a late duplicate is refused.
 *
 * A claim that says when its message was sent (sent_at) and would make a
 * new marker asks inbox_floor_refuses first: a message sent before the
 * consumer's floor may be a duplicate whose marker was already pruned, and
 * is answered expired, changing nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "inbox.h"

/*
 * inbox_floor_refuses
 *		Should a new claim of a message consumer's broker sent at sent_at
 *		be refused?
 *
 * Issue 38 fills this in; until then no message is below a floor.
 */
bool
inbox_floor_refuses(const char *consumer, TimestampTz sent_at)
{
	return false;
}
