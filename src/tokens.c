/*-------------------------------------------------------------------------
 *
 * tokens.c
 *	  Fencing tokens only ever go up: making each drawn token durable before
 *	  any client sees it, and keeping inbox_token_seq's settings from
 *	  breaking the order.
 *
 * A downstream system fences with "reject any token lower than the last
 * one seen", so a token must never be handed out twice, and never below
 * one handed out before.  inbox_token_seq provides the order; this file
 * guards what a plain sequence does not:
 *
 *	Durability.  nextval logs SEQ_LOG_VALS values ahead in one WAL record
 *	and relies on the commit to flush it.  Under synchronous_commit = off
 *	the commit does not flush, and inside an explicit transaction the
 *	token reaches the client before any commit: a crash then loses the
 *	record, the sequence restarts below tokens already seen, and the same
 *	token goes to two owners.  So every function that hands tokens out
 *	calls inbox_tokens_drawn after drawing them and before returning,
 *	which keeps a durable ceiling above every token handed out
 *	(inbox_token_reserve), and the first draw after each checkpoint moves
 *	the sequence up to that ceiling (inbox_token_lifted records the
 *	checkpoint).  Recovery from a crash, with or without a restart of the
 *	postmaster, ends with a checkpoint, so the first draw after it does.
 *
 *	Settings.  CACHE > 1 gives each session its own range (tokens then go
 *	down from one session to the next), INCREMENT <= 0 and CYCLE make them
 *	decrease, RESTART below the last value repeats them, an unlogged
 *	sequence starts over after a crash, and a MAXVALUE below bigint's (or
 *	a smaller type) leaves no room for the epochs described below.  The
 *	event trigger inbox_token_seq_guard refuses each of these at ALTER
 *	time; because an event trigger can be disabled (or skipped under
 *	session_replication_role = replica), every function that draws tokens
 *	first calls inbox_tokens_check, which reads the catalog again and
 *	refuses to draw from a sequence in such a state.
 *
 *	Failover and restores.  A standby promoted while it lagged has not
 *	received the old primary's last tokens, so its sequence resumes below
 *	them.  Every promotion starts a new timeline, and timeline IDs only
 *	grow along a cluster's history, so tokens are lifted into epochs: the
 *	top bits of a token (above TOKENS_EPOCH_SHIFT) are an epoch, base +
 *	timeline - 1, and before the first draw on a timeline the sequence is
 *	moved up to the start of its epoch if it is below.  A promoted standby
 *	is on a higher timeline than the primary it followed, so its tokens
 *	start above every token the old primary drew, received or not.  A
 *	restore (pg_dump, into any database or cluster) and pg_upgrade start
 *	over at timeline 1, so base belongs to a lineage: it is chosen once,
 *	at the first draw of a database that has none recorded, as one above
 *	the epoch of the sequence's current value, and recorded in the
 *	sequence inbox_token_epoch together with a hash of the system
 *	identifier and the database OID.  That sequence is not dumped and
 *	pg_upgrade changes the system identifier, so both start a new lineage,
 *	above every token of the old one; so does a start from a base backup,
 *	whose identity is salted (inbox_tokens_note_start).  A standby, an
 *	archive recovery and a crash keep the lineage.  The lineage is written with setval, which is
 *	not undone by a rollback, before the first token is drawn in it, so
 *	any standby that has a token of the lineage has its base too, and one
 *	that has neither computes the same base from the same sequence value.
 *
 *	All of this is about the sequence, which keeps tokens unique across
 *	messages.  What fencing needs, a token above the token it replaces,
 *	does not rest on it: a takeover draws GREATEST(nextval, token + 1) in
 *	the statement that holds the row (twophase.c).
 *
 * Concurrency: inbox_tokens_check takes the sequence's RowExclusiveLock,
 * as nextval does, which excludes ALTER SEQUENCE until the transaction
 * ends; so the settings it read are those of the draws that follow.  The
 * event trigger takes the lock ALTER SEQUENCE itself takes before reading
 * the current value, so no token can be drawn between its check and the
 * change.  Choosing the lineage and moving the sequence up (to its epoch,
 * and above the ceiling after a checkpoint) happen under a session
 * ShareUpdateExclusiveLock on inbox_token_epoch, and raising the ceiling
 * under one on inbox_token_reserve: each serializes its writers, so none
 * undoes another's, and is released as soon as the write is durable, so
 * that a long transaction holds up no one (the mode does not conflict
 * with the RowExclusiveLock that setval keeps until the transaction
 * ends).  A session that finds the work done takes no lock; these sequences
 * are written only here, with setval as their owner.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xlog.h"
#include "utils/acl.h"
#include "common/hashfn.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parse_type.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "inbox.h"

PG_FUNCTION_INFO_V1(inbox_token_seq_guard);

/*
 * A token is epoch * 2^TOKENS_EPOCH_SHIFT + a count within the epoch: 2^44
 * (about 1.7e13) tokens per epoch, and 2^19 epochs, each promotion and each
 * restore using one.  A count that outgrows its epoch runs into the next
 * one: tokens still increase, but a failover in that epoch is no longer
 * covered.
 */
#define TOKENS_EPOCH_SHIFT	44
#define TOKENS_MAX_EPOCH	((INT64CONST(1) << (63 - TOKENS_EPOCH_SHIFT)) - 1)

/*
 * inbox_token_epoch's value: the lineage's identity (31 bits of a hash)
 * above its base (32 bits).
 */
#define TOKENS_IDENTITY_SHIFT	32
#define TOKENS_BASE_MASK		((INT64CONST(1) << TOKENS_IDENTITY_SHIFT) - 1)

/*
 * The sequence and timeline this session has found lifted to their epoch:
 * until either changes, a draw needs no further look.  The sequence only
 * moves up, so once reached, an epoch's start stays behind it.
 */
static Oid	lifted_sequence = InvalidOid;
static TimeLineID lifted_timeline = 0;

/*
 * Tokens are made durable by raising a ceiling above them, this many at a
 * time (inbox_tokens_drawn), and the ceiling this session last saw durable.
 */
#define TOKENS_RESERVE		1024
static Oid	reserved_sequence = InvalidOid;
static int64 reserved_below = 0;

/*
 * Nonzero when this server started from a base backup (a backup_label file
 * was there when the postmaster loaded the library): mixed into every
 * lineage's identity, so that each database starts a new lineage at its
 * first draw, above the tokens handed out after the backup was taken,
 * which the backup lacks (inbox_tokens_note_start).  Set in the postmaster,
 * inherited by every process it starts.
 */
static uint32 tokens_start_salt = 0;

/* The sequence's current position, read from its page. */
typedef struct InboxTokensPosition
{
	int64		last_value;
	bool		is_called;
	XLogRecPtr	lsn;			/* of the last WAL record that changed it */
} InboxTokensPosition;

/* The sequences that keep the token sequence's state, beside it. */
typedef struct InboxTokensSiblings
{
	Oid			lineage;		/* inbox_token_epoch */
	Oid			reserve;		/* inbox_token_reserve */
	Oid			lifted;			/* inbox_token_lifted */
} InboxTokensSiblings;

static void tokens_read_position(Relation seqrel, InboxTokensPosition *position);
static void tokens_lift(Oid sequence);
static bool tokens_lift_pass(Oid sequence, const InboxTokensSiblings *siblings,
							 TimeLineID timeline, bool write);
static uint32 tokens_identity(void);
static Oid	tokens_sibling(Oid sequence, const char *name);
static void tokens_setval(Oid sequence, int64 value, bool is_called);
static int64 tokens_raise_reserve(Oid sequence, int64 largest);
static bool tokens_is_ours(Oid relid);
static void tokens_check_alter(Oid relid, List *options);

/*
 * tokens_read_position
 *		Read the sequence's last value and page LSN.  The caller holds a
 *		lock on the sequence.
 */
static void
tokens_read_position(Relation seqrel, InboxTokensPosition *position)
{
	Buffer		buf = ReadBuffer(seqrel, 0);
	Page		page;
	ItemId		lp;
	HeapTupleHeader tuple;
	Form_pg_sequence_data seq;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	lp = PageGetItemId(page, FirstOffsetNumber);
	tuple = (HeapTupleHeader) PageGetItem(page, lp);
	seq = (Form_pg_sequence_data) ((char *) tuple + tuple->t_hoff);
	position->last_value = seq->last_value;
	position->is_called = seq->is_called;
	position->lsn = PageGetLSN(page);
	UnlockReleaseBuffer(buf);
}

/*
 * inbox_tokens_check
 *		Called before drawing tokens from sequence: refuses to draw when its
 *		settings would break the tokens' order.  The event trigger refuses
 *		these at ALTER time; this is the second line, for an ALTER it did
 *		not see (disabled, or session_replication_role = replica).
 *
 * Before the draw, not after it: a draw with a negative increment, or one
 * that caches values in this session, would already have done the harm.
 * The sequence is locked first, as nextval will lock it, so that no ALTER
 * can change what we read until the transaction ends (taking the lock also
 * processes pending invalidations, so the catalog we read is current).
 *
 * ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE: the call is right, the
 * sequence is not, and the hint says how to put it back.
 */
void
inbox_tokens_check(Oid sequence)
{
	HeapTuple	tuple;
	Form_pg_sequence form;
	int64		cache;
	int64		increment;
	int64		max;
	bool		cycle;
	const char *name = INBOX_TOKEN_SEQ_NAME;

	if (!OidIsValid(sequence))
		return;
	LockRelationOid(sequence, RowExclusiveLock);

	tuple = SearchSysCache1(SEQRELID, ObjectIdGetDatum(sequence));
	if (!HeapTupleIsValid(tuple))
		return;					/* dropped meanwhile: nextval will say so */
	form = (Form_pg_sequence) GETSTRUCT(tuple);
	cache = form->seqcache;
	increment = form->seqincrement;
	max = form->seqmax;
	cycle = form->seqcycle;
	ReleaseSysCache(tuple);

	if (cache > 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"%s\" cannot issue fencing tokens", name),
				 errdetail("Its CACHE is " INT64_FORMAT ": each session would hand out tokens from its own range, so they would not increase across sessions.",
						   cache),
				 errhint("Run ALTER SEQUENCE %s CACHE 1.", name)));
	if (increment != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"%s\" cannot issue fencing tokens", name),
				 errdetail("Its INCREMENT is " INT64_FORMAT ": tokens must go up one by one.",
						   increment),
				 errhint("Run ALTER SEQUENCE %s INCREMENT BY 1.", name)));
	if (cycle)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"%s\" cannot issue fencing tokens", name),
				 errdetail("It is set to CYCLE: after its maximum, tokens would start over."),
				 errhint("Run ALTER SEQUENCE %s NO CYCLE.", name)));
	if (max != PG_INT64_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"%s\" cannot issue fencing tokens", name),
				 errdetail("Its MAXVALUE is " INT64_FORMAT ": the top bits of a token hold its epoch, which needs the whole bigint range.",
						   max),
				 errhint("Run ALTER SEQUENCE %s AS bigint NO MAXVALUE.", name)));
	if (get_rel_persistence(sequence) != RELPERSISTENCE_PERMANENT)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"%s\" cannot issue fencing tokens", name),
				 errdetail("It is unlogged: after a crash it would start over, below tokens already handed out."),
				 errhint("Run ALTER SEQUENCE %s SET LOGGED.", name)));

	tokens_lift(sequence);
}

/*
 * tokens_lift
 *		Make sure the next token is in this timeline's epoch of this
 *		database's lineage (see the file's banner).  The caller holds the
 *		sequence's RowExclusiveLock.
 */
static void
tokens_lift(Oid sequence)
{
	TimeLineID	timeline;
	InboxTokensSiblings siblings;

	/* a standby draws no tokens: nextval will refuse */
	if (RecoveryInProgress())
		return;
	timeline = GetWALInsertionTimeLine();
	if (sequence == lifted_sequence && timeline == lifted_timeline)
		return;

	siblings.lineage = tokens_sibling(sequence, INBOX_TOKEN_EPOCH_NAME);
	siblings.reserve = tokens_sibling(sequence, INBOX_TOKEN_RESERVE_NAME);
	siblings.lifted = tokens_sibling(sequence, INBOX_TOKEN_LIFTED_NAME);

	/*
	 * Usually all is done: a look, without a lock.  Otherwise, under a lock
	 * that serializes the choice, look again and do it; a session lock,
	 * released at once, so that the first claim after a checkpoint, if it
	 * is in a long transaction, does not hold up the others.
	 */
	if (!tokens_lift_pass(sequence, &siblings, timeline, false))
	{
		LockRelId	lockid;

		lockid.relId = siblings.lineage;
		lockid.dbId = MyDatabaseId;
		LockRelationIdForSession(&lockid, ShareUpdateExclusiveLock);
		PG_TRY();
		{
			tokens_lift_pass(sequence, &siblings, timeline, true);

			/*
			 * Durable now, before any draw: a lineage, once recorded, is
			 * never chosen again differently.
			 */
			XLogFlush(XactLastRecEnd);
		}
		PG_FINALLY();
		{
			UnlockRelationIdForSession(&lockid, ShareUpdateExclusiveLock);
		}
		PG_END_TRY();
	}

	lifted_sequence = sequence;
	lifted_timeline = timeline;
}

/*
 * tokens_lift_pass
 *		Read the lineage, the last lift and the sequence; true if the
 *		lineage is recorded, the sequence was lifted above the reserve since
 *		the last checkpoint, and its next value is at or above its epoch's
 *		start.  Otherwise false, or, when write is true (the caller holds
 *		the lock that serializes this), record the lineage, move the
 *		sequence up (to its epoch, and above the reserve), record the lift,
 *		and true.
 */
static bool
tokens_lift_pass(Oid sequence, const InboxTokensSiblings *siblings,
				 TimeLineID timeline, bool write)
{
	Relation	rel;
	InboxTokensPosition recorded;
	InboxTokensPosition lifted;
	InboxTokensPosition position;
	uint32		identity = tokens_identity();
	XLogRecPtr	redo = GetRedoRecPtr();
	bool		checkpointed;
	int64		base;
	int64		epoch;
	int64		floor;

	rel = relation_open(siblings->lineage, AccessShareLock);
	tokens_read_position(rel, &recorded);
	relation_close(rel, NoLock);
	rel = relation_open(siblings->lifted, AccessShareLock);
	tokens_read_position(rel, &lifted);
	relation_close(rel, NoLock);
	rel = relation_open(sequence, NoLock);
	tokens_read_position(rel, &position);
	relation_close(rel, NoLock);

	checkpointed = !lifted.is_called || lifted.last_value != (int64) redo;
	if (checkpointed && !write)
		return false;

	if (recorded.is_called &&
		(recorded.last_value >> TOKENS_IDENTITY_SHIFT) == identity)
		base = recorded.last_value & TOKENS_BASE_MASK;
	else if (!write)
		return false;
	else
	{
		/*
		 * A new lineage: a new database, a restore, pg_upgrade.  Its base is
		 * the epoch above the sequence's current value (0 for a sequence
		 * that never handed out a token).  It depends on that value alone,
		 * never on the timeline, so that a standby that did not receive
		 * this record, and so no token of the lineage either, would choose
		 * the same base.
		 */
		base = position.is_called ?
			(position.last_value >> TOKENS_EPOCH_SHIFT) + 1 : 0;
		tokens_setval(siblings->lineage,
					  ((int64) identity << TOKENS_IDENTITY_SHIFT) | base, true);
	}

	epoch = base + (int64) timeline - 1;
	if (epoch > TOKENS_MAX_EPOCH)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("fencing tokens have used all their epochs"),
				 errdetail("Each promotion and each restore uses one of " INT64_FORMAT " epochs.",
						   TOKENS_MAX_EPOCH + 1)));
	floor = epoch << TOKENS_EPOCH_SHIFT;

	/*
	 * Up to the epoch's start with setval: nobody draws below it, since
	 * every session checks this before its first draw on the timeline.
	 */
	if (position.last_value < floor)
	{
		if (!write)
			return false;
		tokens_setval(sequence, floor, false);
		position.last_value = floor;
	}

	/*
	 * The first draw since the last checkpoint, which may have ended a
	 * crash's recovery: the sequence may have lost its last WAL, but every
	 * token handed out is below the reserve's durable ceiling
	 * (inbox_tokens_drawn), so draw up to it.  With nextval, not setval:
	 * sessions that lifted before the checkpoint draw meanwhile, and a
	 * setval could move the sequence back below one of their draws.  The
	 * distance is at most about TOKENS_RESERVE (plus the tokens a crash
	 * lost, which the last raise's flush bounds alike), so without a
	 * crash this skips at most that many values once per checkpoint.
	 */
	if (checkpointed)
	{
		InboxTokensPosition reserve;
		int64		value = position.last_value;

		rel = relation_open(siblings->reserve, AccessShareLock);
		tokens_read_position(rel, &reserve);
		relation_close(rel, NoLock);
		while (value < reserve.last_value)
		{
			CHECK_FOR_INTERRUPTS();
			value = nextval_internal(sequence, false);
		}

		/* after the sequence is up: in WAL order, a recorded lift is done */
		tokens_setval(siblings->lifted, (int64) redo, true);
	}
	return true;
}

/*
 * tokens_sibling
 *		The extension's sequence named name, beside sequence.
 */
static Oid
tokens_sibling(Oid sequence, const char *name)
{
	Oid			relid = get_relname_relid(name, get_rel_namespace(sequence));

	/*
	 * A member of the extension, as the token sequence is (objects.c): a
	 * sequence of this name that someone else created where ours was must
	 * not decide lineages or ceilings.
	 */
	if (OidIsValid(relid) &&
		(get_rel_relkind(relid) != RELKIND_SEQUENCE ||
		 getExtensionOfObject(RelationRelationId, relid) !=
		 getExtensionOfObject(RelationRelationId, sequence)))
		relid = InvalidOid;
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"%s\" is missing its sequence \"%s\"",
						INBOX_EXTENSION_NAME, name),
				 errhint("Rename it back if it was renamed.")));
	return relid;
}

/*
 * tokens_identity
 *		31 bits that tell this database of this cluster from another one.
 *
 * A standby shares its primary's system identifier; initdb makes a new one
 * (so a restore into another cluster, and pg_upgrade, start a new lineage),
 * and a restore into another database of the same cluster has a new OID.
 * Two lineages whose hashes collide (one chance in 2^31) would share a
 * base: tokens still increase, but that lineage's first failovers may not
 * be covered.
 */
static uint32
tokens_identity(void)
{
	struct
	{
		uint64		system_identifier;
		Oid			database;
	}			key;

	memset(&key, 0, sizeof(key));
	key.system_identifier = GetSystemIdentifier();
	key.database = MyDatabaseId;
	return hash_combine(hash_bytes((const unsigned char *) &key, sizeof(key)),
						tokens_start_salt) & 0x7FFFFFFF;
}

/*
 * inbox_tokens_note_start
 *		In the postmaster, while it loads the library: does this start
 *		restore a base backup?
 *
 * A base backup (pg_basebackup, or the files copied between
 * pg_backup_start and pg_backup_stop) has a backup_label, which the
 * startup process reads and renames; the postmaster loads the preloaded
 * libraries before it starts that process.  Started as is, such a backup
 * stays on its timeline, with its system identifier and database OIDs, so
 * nothing else tells it from a crash; and unlike a crash it lacks WAL that
 * the server it was taken from wrote after it, with the raises of the
 * durable ceiling among it.  A new lineage per database puts its tokens in
 * a new epoch, above all of those.  A disk or VM snapshot has no
 * backup_label and looks exactly like a crash: docs/tokens.md says what
 * holds then.
 *
 * A backup started with standby.signal or recovery.signal is a standby or
 * an archive recovery: it draws no token before its recovery ends, and
 * that end always selects a new timeline, whose epoch is above the
 * source's.  Salting it too would move it one epoch further than its
 * timeline says, where a standby promoted later onto the next timeline
 * ID, unsalted, would draw the same tokens (t/024_tokens_timeline_reuse.pl).
 */
void
inbox_tokens_note_start(void)
{
	struct stat st;

	if (stat("backup_label", &st) != 0)
		return;
	if (stat("standby.signal", &st) == 0 || stat("recovery.signal", &st) == 0)
		return;
	if (!pg_strong_random(&tokens_start_salt, sizeof(tokens_start_salt)))
		tokens_start_salt = (uint32) GetCurrentTimestamp();
	tokens_start_salt |= 1;		/* never 0: 0 means not restored */
}

/*
 * tokens_setval
 *		setval as the sequence's owner: the extension moves its own
 *		sequences forward, whatever the caller may do with them.
 */
static void
tokens_setval(Oid sequence, int64 value, bool is_called)
{
	HeapTuple	tuple;
	Oid			owner;
	Oid			save_userid;
	int			save_sec_context;

	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(sequence));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", sequence);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(sequence),
						Int64GetDatum(value), BoolGetDatum(is_called));
	SetUserIdAndSecContext(save_userid, save_sec_context);
}

/*
 * inbox_tokens_drawn
 *		Called after tokens were drawn from sequence with nextval in this
 *		transaction (inbox_tokens_check first), before any of them is
 *		returned: makes sure no crash can hand them out again.  largest is
 *		the largest token drawn, or 0 when the caller does not know it (the
 *		sequence's last value, which is at least that, is read instead).
 *
 * Why.  A token is seen by its client when the function returns, which
 * inside an explicit transaction is before any commit, and under
 * synchronous_commit = off before the commit's WAL is flushed; after a
 * crash, the sequence would resume from its last durable WAL record, below
 * tokens already seen.  Core's ForceSyncCommit (used by CREATE DATABASE)
 * makes only the commit synchronous: too late for the first case, and an
 * fsync for every claim in the second.
 *
 * How, cheaply.  Flushing the WAL up to the token sequence's page LSN at
 * each draw would be exact, but the sequence logs only SEQ_LOG_VALS (32)
 * values ahead, so that costs an fsync every 32 tokens, which measurably
 * slowed a begin + complete cycle under synchronous_commit = off
 * (bench/HISTORY.md, Hardening).  Instead, inbox_token_reserve holds a
 * ceiling above every token handed out, made durable before a token at or
 * above the old ceiling is returned, and raised TOKENS_RESERVE tokens at a
 * time: an fsync every 1024 tokens.  After a crash, the first draw
 * after the checkpoint that ends recovery (tokens_lift) moves the token
 * sequence up to the ceiling, above every token handed out before the
 * crash.  A draw below the ceiling this session last saw durable costs
 * one comparison.
 */
void
inbox_tokens_drawn(Oid sequence, int64 largest)
{
	Relation	rel;
	InboxTokensPosition position;

	if (!OidIsValid(sequence))
		return;
	if (sequence == reserved_sequence && largest > 0 && largest < reserved_below)
		return;

	/*
	 * The ceiling covers what the sequence handed out, and no more.  A
	 * takeover's token above the sequence's position came from the token of
	 * the row it replaced (one more, twophase.c), a column a consumer role
	 * may write: raising the ceiling to it would let that role move every
	 * consumer's sequence to its end.  nextval holds RowExclusiveLock until
	 * the transaction ends.
	 */
	rel = relation_open(sequence, NoLock);
	tokens_read_position(rel, &position);
	relation_close(rel, NoLock);
	if (largest <= 0 || largest > position.last_value)
		largest = position.last_value;
	if (sequence == reserved_sequence && largest < reserved_below)
		return;

	/* only once it is durable */
	reserved_below = tokens_raise_reserve(sequence, largest);
	reserved_sequence = sequence;
}

/*
 * tokens_raise_reserve
 *		Make the ceiling above largest durable, raising it if it is not
 *		above; returns the ceiling.
 *
 * Under a lock that serializes the raises, so that none lowers another's;
 * a session lock, released at once, so that a long transaction that raised
 * it does not hold up the others.
 */
static int64
tokens_raise_reserve(Oid sequence, int64 largest)
{
	Oid			reserve = tokens_sibling(sequence, INBOX_TOKEN_RESERVE_NAME);
	LockRelId	lockid;
	volatile int64 ceiling = 0;

	lockid.relId = reserve;
	lockid.dbId = MyDatabaseId;
	LockRelationIdForSession(&lockid, ShareUpdateExclusiveLock);
	PG_TRY();
	{
		Relation	rel;
		InboxTokensPosition position;

		rel = relation_open(reserve, AccessShareLock);
		tokens_read_position(rel, &position);
		relation_close(rel, NoLock);
		if (position.last_value <= largest)
		{
			position.last_value = largest > PG_INT64_MAX - TOKENS_RESERVE ?
				PG_INT64_MAX : largest + TOKENS_RESERVE;
			tokens_setval(reserve, position.last_value, true);
			position.lsn = XactLastRecEnd;
		}
		if (XLogNeedsFlush(position.lsn))
			XLogFlush(position.lsn);
		ceiling = position.last_value;
	}
	PG_FINALLY();
	{
		UnlockRelationIdForSession(&lockid, ShareUpdateExclusiveLock);
	}
	PG_END_TRY();
	return ceiling;
}

/*
 * tokens_is_ours
 *		Is relid the inbox extension's token sequence?
 */
static bool
tokens_is_ours(Oid relid)
{
	char	   *name;
	Oid			extension;

	if (!OidIsValid(relid))
		return false;
	name = get_rel_name(relid);
	if (name == NULL || strcmp(name, INBOX_TOKEN_SEQ_NAME) != 0)
		return false;
	extension = get_extension_oid(INBOX_EXTENSION_NAME, true);
	return OidIsValid(extension) &&
		getExtensionOfObject(RelationRelationId, relid) == extension;
}

/*
 * tokens_check_alter
 *		Refuse the options of an ALTER SEQUENCE of the token sequence that
 *		would break the tokens' order.
 *
 * ERRCODE_INVALID_PARAMETER_VALUE, as core uses for the sequence options
 * it refuses itself ("INCREMENT must not be zero", a RESTART value below
 * MINVALUE): the statement gave a value this sequence cannot take.
 */
static void
tokens_check_alter(Oid relid, List *options)
{
	const char *name = INBOX_TOKEN_SEQ_NAME;
	DefElem    *restart = NULL;
	DefElem    *start = NULL;
	ListCell   *cell;

	foreach(cell, options)
	{
		DefElem    *option = lfirst_node(DefElem, cell);

		if (strcmp(option->defname, "cache") == 0 &&
			defGetInt64(option) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sequence \"%s\" must have CACHE 1", name),
					 errdetail("Fencing tokens must increase across sessions; with a cache, each session hands out values from its own range.")));
		else if (strcmp(option->defname, "increment") == 0 &&
				 defGetInt64(option) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sequence \"%s\" must have INCREMENT 1", name),
					 errdetail("Fencing tokens must increase, one by one: the durable ceiling above them is raised every 1024 values, and a larger step would make every draw raise it.")));
		else if (strcmp(option->defname, "cycle") == 0 &&
				 boolVal(option->arg))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sequence \"%s\" must not CYCLE", name),
					 errdetail("Fencing tokens must increase; a cycling sequence starts over after its maximum.")));
		else if ((strcmp(option->defname, "maxvalue") == 0 &&
				  option->arg != NULL && defGetInt64(option) != PG_INT64_MAX) ||
				 (strcmp(option->defname, "as") == 0 &&
				  typenameTypeId(NULL, defGetTypeName(option)) != INT8OID))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sequence \"%s\" must keep the whole bigint range", name),
					 errdetail("The top bits of a fencing token hold its epoch, which grows at every promotion and restore.")));
		else if (strcmp(option->defname, "restart") == 0)
			restart = option;
		else if (strcmp(option->defname, "start") == 0)
			start = option;
	}

	if (restart != NULL)
	{
		Relation	seqrel;
		InboxTokensPosition position;
		int64		target;

		/*
		 * ALTER SEQUENCE's own lock, taken now: no token can be drawn
		 * between this check and the change.
		 */
		seqrel = relation_open(relid, ShareRowExclusiveLock);
		tokens_read_position(seqrel, &position);
		relation_close(seqrel, NoLock);

		if (restart->arg != NULL)
			target = defGetInt64(restart);
		else if (start != NULL)
			target = defGetInt64(start);
		else
		{
			HeapTuple	tuple;

			tuple = SearchSysCache1(SEQRELID, ObjectIdGetDatum(relid));
			if (!HeapTupleIsValid(tuple))
				elog(ERROR, "cache lookup failed for sequence %u", relid);
			target = ((Form_pg_sequence) GETSTRUCT(tuple))->seqstart;
			ReleaseSysCache(tuple);
		}

		if (target < position.last_value ||
			(position.is_called && target == position.last_value))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cannot restart sequence \"%s\" at " INT64_FORMAT,
							name, target),
					 errdetail("Fencing tokens must increase, and " INT64_FORMAT " may have been handed out already.",
							   position.last_value),
					 errhint("Restart it above " INT64_FORMAT ", or leave it as it is.",
							 position.last_value)));
	}
}

/*
 * inbox_token_seq_guard() returns event_trigger
 *
 * At ddl_command_start of ALTER SEQUENCE and ALTER TABLE (which can also
 * name a sequence): refuses a change of inbox_token_seq that would let
 * tokens repeat or decrease.  Every other statement passes untouched.
 */
Datum
inbox_token_seq_guard(PG_FUNCTION_ARGS)
{
	Node	   *parsetree;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("inbox_token_seq_guard() must be called as an event trigger")));
	parsetree = ((EventTriggerData *) fcinfo->context)->parsetree;

	if (IsA(parsetree, AlterSeqStmt))
	{
		AlterSeqStmt *stmt = (AlterSeqStmt *) parsetree;
		Oid			relid = RangeVarGetRelid(stmt->sequence, NoLock, true);

		/*
		 * Only for a role ALTER SEQUENCE would let through: anyone else gets
		 * core's refusal at once, without waiting here for a lock that
		 * would queue every claim behind it.
		 */
		if (tokens_is_ours(relid) && inbox_class_ownercheck(relid, GetUserId()))
			tokens_check_alter(relid, stmt->options);
	}
	else if (IsA(parsetree, AlterTableStmt))
	{
		AlterTableStmt *stmt = (AlterTableStmt *) parsetree;
		ListCell   *cell;
		Oid			relid = InvalidOid;
		bool		looked_up = false;

		foreach(cell, stmt->cmds)
		{
			AlterTableCmd *cmd = lfirst_node(AlterTableCmd, cell);

			if (cmd->subtype != AT_SetUnLogged)
				continue;
			if (!looked_up)
			{
				relid = RangeVarGetRelid(stmt->relation, NoLock, true);
				looked_up = true;
			}
			/* a non-owner gets core's refusal (42501) first, as above */
			if (tokens_is_ours(relid) &&
				inbox_class_ownercheck(relid, GetUserId()))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("sequence \"%s\" must not be unlogged",
								INBOX_TOKEN_SEQ_NAME),
						 errdetail("Fencing tokens must survive a crash; an unlogged sequence starts over after one.")));
		}
	}

	PG_RETURN_NULL();
}
