/*-------------------------------------------------------------------------
 *
 * inbox.h
 *	  Declarations shared by the inbox extension's source files.
 *
 * Each source file owns one responsibility:
 *
 *	inbox.c		module entry point: _PG_init hands off to the files below
 *	settings.c	the inbox.* settings
 *	objects.c	finding the extension's objects and the plans built on them,
 *				cached per backend; whether they are as inbox.sql made them
 *	validate.c	argument checks shared by every SQL-callable function
 *	configure.c	per-consumer settings: inbox_configure, inbox_retention_for
 *	guard.c		refusing a DROP that would take the markers with it
 *	probe.c		the probe: the one read of the key index on (message_id,
 *				consumer) made without the executor
 *	claim.c		the one-phase claims, inbox_claim, inbox_claim_outcome and
 *				inbox_claim_many
 *	result.c	idempotency keys: a marker's stored result and request
 *				fingerprint, inbox_set_result and inbox_result
 *	floor.c		the floor below which a late duplicate is refused
 *	twophase.c	two-phase claims with leases and fencing tokens
 *	twophase_citus.c	their statements on a table Citus manages:
 *				read the marker, then change it if its token is unchanged
 *	tokens.c	fencing tokens only ever go up: durable before they are
 *				seen, and inbox_token_seq kept from settings that break
 *				their order
 *	citus.c		marker ids and tokens unique across the nodes of a Citus
 *				cluster
 *	prune.c		one batch of a prune pass: deleting old markers
 *	reclaim.c	one batch of a reclaim pass: releasing or failing the
 *				claims whose lease expired
 *	pass.c		a pass in the caller's transaction: inbox_prune(),
 *				inbox_reclaim()
 *	worker.c	the background worker: a launcher and one worker per
 *				database, whose passes are a transaction per batch
 *	shmem.c		the worker's last-pass figures in shared memory
 *	trust.c		what a maintenance pass runs, and with which settings
 *
 * Calls between the files form no cycle.  In layers, each file calling
 * only files of the layers above it:
 *
 *	0	settings, validate, objects, tokens, shmem, probe, trust, floor
 *	1	prune, reclaim, configure, guard, citus, result
 *	2	claim, twophase_citus, pass, worker
 *	3	twophase, inbox
 *
 *-------------------------------------------------------------------------
 */
#ifndef INBOX_H
#define INBOX_H

/* Each source file includes postgres.h first, as PostgreSQL's own do. */
#include "access/genam.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "storage/lockdefs.h"
#include "utils/guc.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

#include "compat.h"

/*
 * Documented limits on the key columns.  Together they keep a key well
 * below the btree limit of about a third of a page (2704 bytes with 8kB
 * pages), so a long id is refused with a clear message before the index
 * would refuse it with an obscure one.  The functions are the only check:
 * the table has no CHECK constraints (see inbox.sql).
 */
#define INBOX_MESSAGE_ID_MAX_BYTES	1024
#define INBOX_CONSUMER_MAX_BYTES	256

/*
 * Longest request fingerprint (a hash the client computes: 64 bytes as hex
 * SHA-256, 128 as hex SHA-512); like a consumer, an identifier, not data.
 */
#define INBOX_FINGERPRINT_MAX_BYTES	256

/*
 * Longest lease a claim may ask for.  A longer job renews its lease with
 * inbox_extend (a heartbeat) instead: an owner that dies is then noticed
 * within one lease.  Keep inbox.sql's CHECK on inbox_consumers in step.
 */
#define INBOX_LEASE_MAX_SECONDS		(24 * 60 * 60)
#define INBOX_LEASE_MAX_TEXT		"24 hours"

/*
 * Longest retention a consumer may have.  Far beyond any broker's
 * redelivery window, and short enough that now minus it is always a valid
 * timestamp (a retention of 7000 years once made every pruning pass fail).
 * Keep inbox.sql's CHECK on inbox_consumers in step.
 */
#define INBOX_RETENTION_MAX_SECONDS	((int64) 100 * 12 * 30 * 24 * 60 * 60)
#define INBOX_RETENTION_MAX_TEXT	"100 years"

/*
 * Largest payload inbox_begin keeps (a message body for a sweeper to
 * retry; a larger one belongs in object storage, with its key here), and
 * longest last_error inbox_fail keeps (longer ones are cut, at a character
 * boundary: a failure is always recorded).
 */
#define INBOX_PAYLOAD_MAX_BYTES		(1024 * 1024)
#define INBOX_RESULT_MAX_BYTES		INBOX_PAYLOAD_MAX_BYTES
#define INBOX_LAST_ERROR_MAX_BYTES	8192

/* Most claims one inbox_next call may take. */
#define INBOX_NEXT_MAX				10000

/* Databases whose last-pass figures shared memory keeps. */
#define INBOX_MAX_DATABASES			128

/* Longest error message kept in a database's last-pass figures. */
#define INBOX_ERROR_LEN				256

/* Names fixed by the install script (inbox.sql). */
#define INBOX_EXTENSION_NAME	"inbox"
#define INBOX_TABLE_NAME		"inbox"
#define INBOX_STATE_TYPE_NAME	"inbox_state"
#define INBOX_KEY_NAME			"inbox_message_id_consumer_key"
#define INBOX_OPEN_CLAIMS_NAME	"inbox_open_claims"
#define INBOX_PRUNABLE_NAME		"inbox_prunable"
#define INBOX_TOKEN_SEQ_NAME	"inbox_token_seq"
#define INBOX_TOKEN_EPOCH_NAME	"inbox_token_epoch"
#define INBOX_TOKEN_RESERVE_NAME "inbox_token_reserve"
#define INBOX_TOKEN_LIFTED_NAME	"inbox_token_lifted"
#define INBOX_CONSUMERS_NAME	"inbox_consumers"
#define INBOX_CONSUMERS_KEY_NAME "inbox_consumers_pkey"

/* Citus's table of the relations it manages, if Citus is installed. */
#define INBOX_CITUS_TABLES_NAME	"pg_dist_partition"
#define INBOX_CITUS_RELATION_COLUMN "logicalrelid"

/*
 * The inbox table's columns as inbox.sql creates them: how many, and the
 * attribute numbers (1-based) of those the C code reads or writes.  Valid
 * only while inbox_table_is_plain says the table is unchanged.
 */
#define INBOX_NATTS				11
#define INBOX_ATT_ID			1
#define INBOX_ATT_MESSAGE_ID	2
#define INBOX_ATT_CONSUMER		3
#define INBOX_ATT_STATE			4
#define INBOX_ATT_RECEIVED_AT	5
#define INBOX_ATT_PROCESSED_AT	6
#define INBOX_ATT_TOKEN			7
#define INBOX_ATT_LEASE_UNTIL	8
#define INBOX_ATT_ATTEMPTS		9
#define INBOX_ATT_PAYLOAD		11

/*
 * Columns added by 1.1.0 (result, fingerprint), found by name: a database
 * still at 1.0.0's SQL has none until ALTER EXTENSION UPDATE.
 */
#define INBOX_RESULT_COLUMN		"result"
#define INBOX_FINGERPRINT_COLUMN	"fingerprint"

/* inbox_consumers' columns, likewise (see inbox_consumers_is_plain). */
#define INBOX_CONSUMERS_NATTS		4
#define INBOX_CONSUMERS_ATT_CONSUMER 1
#define INBOX_CONSUMERS_ATT_LEASE	3

/*
 * Operators for the SQL text the extension runs through SPI.  Qualified,
 * because the plan cache parses a saved plan again whenever the caller's
 * search_path differs from the last one, and that path may put a schema
 * with look-alike operators before pg_catalog.  OPERATOR() syntax gives
 * every operator the same precedence, left to right: parenthesize.
 */
#define INBOX_EQ		" OPERATOR(pg_catalog.=) "
#define INBOX_LT		" OPERATOR(pg_catalog.<) "
#define INBOX_LE		" OPERATOR(pg_catalog.<=) "
#define INBOX_GE		" OPERATOR(pg_catalog.>=) "
#define INBOX_GT		" OPERATOR(pg_catalog.>) "
#define INBOX_MINUS		" OPERATOR(pg_catalog.-) "
#define INBOX_PLUS		" OPERATOR(pg_catalog.+) "
#define INBOX_CONCAT	" OPERATOR(pg_catalog.||) "

/*
 * A timestamptz plus or minus an interval, computed in UTC: the session's
 * time zone (a database owner's ALTER DATABASE ... SET timezone reaches
 * every session, and POSIX zones accept offsets of days) must not move a
 * lease's end or a retention's cutoff.  A day is then always 24 hours.
 */
#define INBOX_UTC_PLUS(t, i) \
	"pg_catalog.timezone('UTC', pg_catalog.timezone('UTC', " t ")" INBOX_PLUS "(" i "))"
#define INBOX_UTC_MINUS(t, i) \
	"pg_catalog.timezone('UTC', pg_catalog.timezone('UTC', " t ")" INBOX_MINUS "(" i "))"

/*
 * Where the extension's objects live in this database.  Found from the
 * extension's recorded schema, never from the caller's search_path.
 */
typedef struct InboxObjects
{
	Oid			schema_oid;
	Oid			table_oid;
	Oid			key_index_oid;	/* unique index on (message_id, consumer) */
	/* The rest may be InvalidOid on an altered table. */
	Oid			id_sequence_oid;	/* identity sequence of inbox.id (Citus) */
	Oid			token_sequence_oid; /* inbox_token_seq */
	Oid			consumers_oid;	/* inbox_consumers */
	/*
	 * Citus manages the table (or inbox_consumers): its rows are in shards,
	 * and the local heap is an empty shell that the probe must not read.
	 */
	bool		table_in_citus;
	bool		consumers_in_citus;
	/*
	 * The table's result (jsonb) and fingerprint (text) columns, or
	 * InvalidAttrNumber, both, on a table still at 1.0.0's SQL.
	 */
	AttrNumber	result_attnum;
	AttrNumber	fingerprint_attnum;
	NameData	schema_name;

	/*
	 * The names plans give the table and inbox_consumers (%2$s and %3$s in
	 * inbox_plan's query text): "inbox" and "inbox_consumers", or, for a
	 * maintenance pass over a shard that Citus placed on this node, the
	 * shard's and the local placement's (inbox_objects_of_shard).
	 */
	NameData	table_name;
	NameData	consumers_name;
	uint64		generation;		/* changes whenever the above are looked up
								 * again; cached plans compare it */
} InboxObjects;

/*
 * A saved SPI plan, valid for one generation of the extension's objects
 * (their schema is part of the query text).
 */
typedef struct InboxPlan
{
	struct _SPI_plan *plan;
	uint64		generation;
} InboxPlan;

/*
 * An open probe of the key index for the markers of one consumer
 * (probe.c), with the snapshot its caller chose.
 */
typedef struct InboxKeyProbe
{
	IndexScanDesc scan;
	TupleTableSlot *slot;		/* the marker found */
	ScanKeyData keys[2];
} InboxKeyProbe;

/* The maintenance worker's last pass in one database (shmem.c). */
typedef struct InboxDatabaseStatus
{
	Oid			dboid;			/* InvalidOid: a free slot */
	int64		passes;
	TimestampTz pass_start;
	TimestampTz pass_end;
	int64		pruned;			/* by the last pass */
	int64		reclaimed;
	int64		pruned_total;	/* since the server started */
	int64		reclaimed_total;
	char		last_error[INBOX_ERROR_LEN];
	int64		start_failures; /* the launcher found no worker slot for
								 * it, since the server started */
	bool		left_more;		/* the last pass ran out of time */
} InboxDatabaseStatus;

/*
 * Where a maintenance pass stands between its batches (prune.c).  Pruning
 * walks inbox_prunable in (consumer, processed_at, id) order, and each
 * batch starts just after the last marker the previous one saw: the
 * entries of markers a batch deleted stay in the index until vacuum, and a
 * batch that started over would read them all again.  Kept inline (no
 * allocation to outlive the batch's transaction); of a consumer too long
 * for it (only a hand-inserted marker can be) it keeps the first bytes
 * (past_prefix).  Reclaiming needs no position.
 *
 * On a table Citus manages, a pass runs over each shard placed on this
 * node in turn, in shard id order (citus.c, inbox_pass_target), and shard
 * says which.
 */
#define INBOX_PASS_NO_SHARD (-1)

typedef struct InboxPassPosition
{
	int64		shard;			/* 0: the table itself, or no shard yet;
								 * INBOX_PASS_NO_SHARD: past the last */
	bool		valid;			/* false: start from the first consumer */
	bool		warned;			/* the pass named the consumers whose
								 * retention is not valid (prune.c) */
	bool		past_prefix;	/* consumer is the first
								 * INBOX_CONSUMER_MAX_BYTES bytes of a longer
								 * one walked past: resume after every
								 * consumer that starts with them */
	TimestampTz processed_at;	/* the last marker seen: its processed_at, */
	int64		id;				/* its id, */
	union						/* ... and its consumer, a text datum */
	{
		char		data[VARHDRSZ + INBOX_CONSUMER_MAX_BYTES];
		int32		align;
	}			consumer;
} InboxPassPosition;

/*
 * What one batch of a maintenance pass did.  examined is how much of its
 * limit (batch_size) the batch used: the rows it changed or passed over
 * (held by another transaction) and, for pruning, the consumers it walked
 * to their end.  changed is the rows it deleted, released or failed.
 */
typedef struct InboxBatchResult
{
	int64		examined;
	int64		changed;
} InboxBatchResult;

/*
 * One batch of a maintenance pass (inbox_prune_batch, inbox_reclaim_batch),
 * run by both drivers: pass.c's, in the caller's transaction, and the
 * worker's, a transaction per batch (worker.c).  The caller is connected to
 * SPI and has an active snapshot; objects were resolved in this
 * transaction.
 */
typedef InboxBatchResult (*InboxBatchFunction) (const InboxObjects *objects,
												TimestampTz now,
												int batch_size,
												InboxPassPosition *position);

/*
 * The one stop condition of both drivers: a batch that used its whole
 * limit may have left work behind, so the pass runs another; a batch that
 * did not has reached the end.
 */
static inline bool
inbox_batch_left_more(const InboxBatchResult *result, int batch_size)
{
	return result->examined >= batch_size;
}

/* inbox.c */
extern void _PG_init(void);

/* settings.c */
extern void inbox_settings_define(void);
extern int	inbox_lease;
extern int	inbox_max_attempts;
extern int	inbox_retention;
extern int	inbox_naptime;
extern int	inbox_batch_size;
extern int	inbox_lock_timeout;
extern int	inbox_batch_delay;
extern int	inbox_database_time;
extern char *inbox_databases;
extern Interval *inbox_default_lease(void);

/* probe.c */
extern bool inbox_probe_applies(Relation heap, Relation key_index,
								const InboxObjects *objects);
extern bool inbox_row_security_applies(Relation rel);
extern void inbox_key_scankeys(ScanKeyData *keys, Relation key_index,
							   text *consumer);
extern void inbox_key_probe_begin(InboxKeyProbe *probe, Relation heap,
								  Relation key_index, text *consumer,
								  Snapshot snapshot);
extern bool inbox_key_probe_found(InboxKeyProbe *probe, text *message_id);
extern void inbox_key_probe_end(InboxKeyProbe *probe);

/* tokens.c */
extern void inbox_tokens_check(Oid sequence);
extern void inbox_tokens_drawn(Oid sequence, int64 largest);
extern void inbox_tokens_note_start(void);

/*
 * What a begin found, and what the consumer should do about it.  Every
 * answer comes from one version of the row: the one the statement that
 * decided held locked (or, on Citus, changed conditionally on), or a final
 * state (processed, failed) that no claim leaves again.  See
 * inbox_begin_outcome.
 */
typedef enum InboxTwophaseOutcome
{
	INBOX_OUTCOME_CLAIMED,		/* this call holds the first attempt */
	INBOX_OUTCOME_TAKEN_OVER,	/* this call holds a later attempt */
	INBOX_OUTCOME_PROCESSED,	/* done: ack */
	INBOX_OUTCOME_FAILED,		/* attempts used up: ack, and report */
	INBOX_OUTCOME_BUSY,			/* a live claim holds it: try again later */
	INBOX_OUTCOME_MISMATCH,		/* claimed with another fingerprint */
	INBOX_OUTCOME_EXPIRED		/* new, but sent before the floor */
} InboxTwophaseOutcome;

typedef struct InboxTwophaseBegin
{
	InboxTwophaseOutcome outcome;
	int64		token;			/* claimed, taken_over: the claim's token */
	Interval	retry_after;	/* busy: the lease the holder has left */
	Datum		result;			/* processed: the stored result, or 0 */
} InboxTwophaseBegin;

/*
 * A marker as an idempotency key sees it (result.c): whether the caller
 * sees one, the fingerprint it was claimed with and its stored result
 * (NULL and (Datum) 0 when it has none).
 */
typedef struct InboxMarker
{
	bool		found;
	text	   *fingerprint;
	Datum		result;
} InboxMarker;

/* twophase_citus.c */
extern void inbox_citus_begin(const InboxObjects *objects, text *message_id,
							  text *consumer, Interval *lease, Datum payload,
							  InboxTwophaseBegin *result);
extern bool inbox_citus_extend(const InboxObjects *objects, text *message_id,
							   text *consumer, int64 token, Interval *lease);
extern bool inbox_citus_complete(const InboxObjects *objects,
								 text *message_id, text *consumer,
								 int64 token);
extern bool inbox_citus_fail(const InboxObjects *objects, text *message_id,
							 text *consumer, int64 token, text *error);
extern void inbox_citus_next(const InboxObjects *objects, text *consumer,
							 Interval *lease, int32 max,
							 ReturnSetInfo *rsinfo);

/* floor.c */
extern bool inbox_floor_refuses(const char *consumer, TimestampTz sent_at);

/* result.c */
extern bool inbox_has_results(const InboxObjects *objects);
extern void inbox_results_refused_on_citus(const InboxObjects *objects,
										   const char *what);
extern void inbox_marker_read(const InboxObjects *objects, text *message_id,
							  text *consumer, bool latest,
							  InboxMarker *marker);
extern bool inbox_fingerprints_differ(text *claimed, text *asked);
extern Datum inbox_result_transfer(Datum value);

/* citus.c */
extern int32 inbox_citus_group(void);
extern int64 inbox_citus_marker_id(const InboxObjects *objects, int32 group);
extern int64 inbox_citus_token(const InboxObjects *objects, int32 group,
							   int64 above);
extern void inbox_citus_check_consumers(const InboxObjects *objects);
extern bool inbox_pass_target(const InboxObjects *objects,
							  InboxPassPosition *position,
							  InboxObjects *target);
extern bool inbox_pass_next_relation(InboxPassPosition *position);

/* prune.c */
extern InboxBatchResult inbox_prune_batch(const InboxObjects *objects,
										  TimestampTz now, int batch_size,
										  InboxPassPosition *position);

/* reclaim.c */
extern InboxBatchResult inbox_reclaim_batch(const InboxObjects *objects,
											TimestampTz now, int batch_size,
											InboxPassPosition *position);

/* worker.c */
extern void inbox_worker_register(void);
extern PGDLLEXPORT void inbox_launcher_main(Datum main_arg);
extern PGDLLEXPORT void inbox_database_worker_main(Datum main_arg);

/* shmem.c */
extern void inbox_shmem_init(void);
extern void inbox_shmem_report(Oid dboid, TimestampTz start, int64 pruned,
							   int64 reclaimed, const char *error,
							   bool left_more);
extern int64 inbox_shmem_start_failed(Oid dboid);
extern bool inbox_shmem_left_more(Oid dboid);

/* trust.c */
extern void inbox_pin_pass_settings(GucSource source, GucAction action);
extern void inbox_settings_snapshot(void);
extern void inbox_settings_drop_local(void);
extern char *inbox_replica_refusal(Relation rel);
extern int	inbox_superuser_write_begin(Relation rel, const char *caller);
extern void inbox_superuser_write_end(int nestlevel);

/* objects.c */
extern void inbox_objects_init(void);
extern void inbox_objects_forget(void);
extern bool inbox_objects_trusted(void);
extern Relation inbox_open_table(LOCKMODE lockmode, InboxObjects *objects);
extern bool inbox_is_key_violation(const ErrorData *edata,
								   const InboxObjects *objects);
extern bool inbox_objects_of_shard(const InboxObjects *objects, int64 shard,
								   int64 consumers_shard,
								   InboxObjects *target);
extern bool inbox_managed_by_citus(Oid relation);
extern struct _SPI_plan *inbox_plan(InboxPlan *cached,
									const InboxObjects *objects,
									const char *query_format, int nargs,
									Oid *argtypes);
extern void inbox_spi_check(int rc, int expected, const char *statement);
extern int	inbox_spi_run(struct _SPI_plan *plan, Datum *values,
						  const char *nulls, bool read_only, long count,
						  int expected, const char *statement);

/* validate.c */
extern void inbox_arg_not_null(FunctionCallInfo fcinfo, int argno,
							   const char *name);
extern text *inbox_arg_message_id(FunctionCallInfo fcinfo, int argno);
extern text *inbox_arg_consumer(FunctionCallInfo fcinfo, int argno);
extern void inbox_check_message_id(text *message_id, int element);
extern int64 inbox_arg_token(FunctionCallInfo fcinfo, int argno);
extern Interval *inbox_arg_lease(FunctionCallInfo fcinfo, int argno);
extern Interval *inbox_arg_retention(FunctionCallInfo fcinfo, int argno);
extern Datum inbox_arg_payload(FunctionCallInfo fcinfo, int argno);
extern Datum inbox_arg_result(FunctionCallInfo fcinfo, int argno);
extern text *inbox_arg_fingerprint(FunctionCallInfo fcinfo, int argno);
extern bool inbox_arg_sent_at(FunctionCallInfo fcinfo, int argno,
							  TimestampTz *sent_at);
extern text *inbox_arg_last_error(FunctionCallInfo fcinfo, int argno);
extern const char *inbox_interval_problem(const Interval *value,
										  int64 max_seconds);
extern void inbox_check_interval(const Interval *value, const char *what,
								 int64 max_seconds, const char *max_text);

#endif							/* INBOX_H */
