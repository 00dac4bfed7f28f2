/* inbox.sql: install script of the inbox extension (built into inbox--<default_version>.sql) */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION inbox" to load this file. \quit

--
-- The inbox table: one marker row per (message, consumer).
--

CREATE TYPE inbox_state AS ENUM ('processed', 'claimed', 'released', 'failed');

COMMENT ON TYPE inbox_state IS
'state of an inbox marker: processed, claimed (two-phase, lease running), released (may be taken again) or failed (attempts exhausted)';

CREATE TABLE inbox (
	-- Sequential: the order markers were written in, for sweepers taking
	-- the oldest open claims first and for people reading the table.  Not
	-- indexed on its own: nothing looks a marker up by id, and on a table
	-- that takes one insert per message an index nobody reads is a cost
	-- every claim pays.
	id				bigint GENERATED ALWAYS AS IDENTITY,
	-- Keys compare byte for byte ("C"): ids are opaque, equal only when
	-- identical, and the key index then neither depends on the operating
	-- system's collation library (whose upgrades have silently corrupted
	-- unique indexes on text) nor pays for locale-aware comparisons.
	message_id		text COLLATE "C" NOT NULL,
	consumer		text COLLATE "C" NOT NULL,
	state			inbox_state NOT NULL DEFAULT 'processed',
	received_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	processed_at	timestamptz,
	token			bigint,
	lease_until		timestamptz,
	attempts		integer NOT NULL DEFAULT 1,
	last_error		text,
	payload			jsonb,
	-- Idempotency keys (docs/idempotency-keys.md): the result a duplicate
	-- gets back, and the client's fingerprint of the request that made the
	-- marker; NULL when unused.
	result			jsonb,
	fingerprint		text COLLATE "C",
	-- An operator's decision on a failed claim (inbox_retry, inbox_discard):
	-- who (session_user), when, and a discard's reason.
	resolved_by		name,
	resolved_at		timestamptz,
	resolution		text,

	-- The key the database uses to pick the winner among concurrent
	-- claimers, and the primary key: it is how every function finds a
	-- marker, and the replica identity for logical replication.  The C code
	-- finds it by this name; do not rename it.
	CONSTRAINT inbox_message_id_consumer_key PRIMARY KEY (message_id, consumer)

	-- No CHECK constraints: the functions check every key against the
	-- documented limits (src/inbox.h) before writing, and a CHECK is
	-- re-read from the catalog by every INSERT that fires it, a cost every
	-- claim would pay.  Write markers only through the functions.
);

COMMENT ON TABLE inbox IS
'inbox markers: one row per (message_id, consumer) that was claimed';
COMMENT ON COLUMN inbox.id IS 'sequential identity: the order markers were written in';
COMMENT ON COLUMN inbox.message_id IS 'the broker''s stable message id';
COMMENT ON COLUMN inbox.consumer IS 'the handler''s identity; unique together with message_id';
COMMENT ON COLUMN inbox.state IS 'processed, claimed, released or failed';
COMMENT ON COLUMN inbox.received_at IS 'when the message was first claimed';
COMMENT ON COLUMN inbox.processed_at IS 'when the message was processed, or failed for good (NULL until then)';
COMMENT ON COLUMN inbox.token IS 'fencing token of the current or last two-phase claim';
COMMENT ON COLUMN inbox.lease_until IS 'end of the current two-phase lease';
COMMENT ON COLUMN inbox.attempts IS 'how many times the message was claimed';
COMMENT ON COLUMN inbox.last_error IS 'the last recorded failure';
COMMENT ON COLUMN inbox.payload IS 'optional message payload kept for retries without the broker';
COMMENT ON COLUMN inbox.result IS 'optional result of the processing, returned to a duplicate';
COMMENT ON COLUMN inbox.fingerprint IS 'optional fingerprint of the request that made the marker: a claim with another one is a mismatch';
COMMENT ON COLUMN inbox.resolved_by IS 'who retried or discarded the failed claim last (session_user)';
COMMENT ON COLUMN inbox.resolved_at IS 'when the failed claim was last retried or discarded';
COMMENT ON COLUMN inbox.resolution IS 'why the failed claim was discarded (NULL after a retry)';

-- pg_dump must keep every marker: a restore that lost them would let every
-- message be processed again.  The identity sequence is dumped too, so ids
-- continue past the highest restored one.
SELECT pg_catalog.pg_extension_config_dump('inbox', '');
SELECT pg_catalog.pg_extension_config_dump('inbox_id_seq', '');

COMMENT ON SEQUENCE inbox_id_seq IS 'identity of inbox.id';

-- Two-phase claims and sweepers look for open claims of one consumer.  The
-- index is partial, so one-phase markers (processed at once) never enter it.
CREATE INDEX inbox_open_claims ON inbox (consumer, id)
	WHERE state IN ('claimed', 'released');

-- Pruning reads each consumer's oldest final markers, and nothing else.
-- (processed_at is when a marker became processed or failed.)  id orders
-- markers processed at the same instant, so that each batch of a pass can
-- start exactly after the last marker the previous one saw, however many
-- tie (src/prune.c).  With id in the key no two entries are equal,
-- so deduplication could only waste a pass over each full page before it
-- splits.
CREATE INDEX inbox_prunable ON inbox (consumer, processed_at, id)
	WITH (deduplicate_items = off)
	WHERE state IN ('processed', 'failed');

-- Fencing tokens: every change of ownership of a two-phase claim draws the
-- next value, so tokens strictly increase across all claims.  Each drawn
-- token is made durable before it is returned, whatever synchronous_commit
-- says (src/tokens.c), and the sequence is dumped with its position, so a
-- restore continues past it.  CACHE 1 (the default) is required: with a
-- cache, each session draws from its own range.
CREATE SEQUENCE inbox_token_seq AS bigint CACHE 1 NO CYCLE;
SELECT pg_catalog.pg_extension_config_dump('inbox_token_seq', '');

COMMENT ON SEQUENCE inbox_token_seq IS 'fencing tokens of two-phase claims';

-- The lineage of this database's tokens (src/tokens.c): the top bits of a
-- token are an epoch, base + timeline - 1, so a standby promoted while it
-- lagged hands out tokens above the old primary's.  Written by the first
-- draw of a new lineage (a new database, a restore, pg_upgrade), never
-- dumped, so that a restore starts a new lineage above the old one.
CREATE SEQUENCE inbox_token_epoch AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;

COMMENT ON SEQUENCE inbox_token_epoch IS
'lineage of the fencing tokens: a hash of the system identifier and database, and the base epoch';

-- A durable ceiling above every token handed out, raised 1024 tokens at a
-- time, and the checkpoint (its redo LSN) after which the token sequence
-- was last moved up to it: the first draw after each checkpoint does, and
-- recovery from a crash ends with one, so a crash that lost the sequence's
-- last WAL repeats no token.
CREATE SEQUENCE inbox_token_reserve AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;
CREATE SEQUENCE inbox_token_lifted AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;

COMMENT ON SEQUENCE inbox_token_reserve IS
'a durable ceiling above every fencing token handed out';
COMMENT ON SEQUENCE inbox_token_lifted IS
'redo LSN of the checkpoint after which the fencing tokens were last moved above the ceiling';

-- Refuses an ALTER of inbox_token_seq that would let tokens repeat or
-- decrease: CACHE > 1, INCREMENT <= 0, CYCLE, a RESTART at or below a value
-- already handed out, SET UNLOGGED.  The functions check the sequence's
-- settings again at every draw, for an ALTER this trigger did not see.
CREATE FUNCTION inbox_token_seq_guard()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'inbox_token_seq_guard'
LANGUAGE C;

COMMENT ON FUNCTION inbox_token_seq_guard() IS
'event trigger: refuses settings of inbox_token_seq that would break the order of fencing tokens';

CREATE EVENT TRIGGER inbox_token_seq_guard ON ddl_command_start
	WHEN TAG IN ('ALTER SEQUENCE', 'ALTER TABLE')
	EXECUTE FUNCTION inbox_token_seq_guard();

COMMENT ON EVENT TRIGGER inbox_token_seq_guard IS
'refuses settings of inbox_token_seq that would break the order of fencing tokens';

--
-- Per-consumer settings; a NULL column falls back to the inbox.* setting.
--

-- The rules of inbox_configure (src/configure.c), for the CHECK constraints
-- below: each part of the interval (months, days, time) zero or positive,
-- the whole positive, a lease at most 24 hours, a retention at most 100
-- years.  Pure functions of their argument; PUBLIC may call them, so that
-- a row written by any role that may write it is checked the same way.
CREATE FUNCTION inbox_lease_is_valid(lease interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_lease_is_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION inbox_lease_is_valid(interval) IS
'whether an interval is a valid lease: every part zero or positive, the whole positive, at most 24 hours';

CREATE FUNCTION inbox_retention_is_valid(retention interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_retention_is_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION inbox_retention_is_valid(interval) IS
'whether an interval is a valid retention: every part zero or positive, the whole positive, at most 100 years';

CREATE TABLE inbox_consumers (
	consumer		text COLLATE "C" PRIMARY KEY,
	retention		interval,
	lease			interval,
	max_attempts	integer,

	CONSTRAINT inbox_consumers_consumer_length
		CHECK (pg_catalog.octet_length(consumer) OPERATOR(pg_catalog.>=) 1
			   AND pg_catalog.octet_length(consumer) OPERATOR(pg_catalog.<=) 256),
	CONSTRAINT inbox_consumers_retention_valid
		CHECK (@extschema@.inbox_retention_is_valid(retention)),
	CONSTRAINT inbox_consumers_lease_valid
		CHECK (@extschema@.inbox_lease_is_valid(lease)),
	CONSTRAINT inbox_consumers_max_attempts_positive
		CHECK (max_attempts OPERATOR(pg_catalog.>=) 1)
);
SELECT pg_catalog.pg_extension_config_dump('inbox_consumers', '');

COMMENT ON TABLE inbox_consumers IS
'per-consumer settings, written by inbox_configure; NULL means the inbox.* setting';

--
-- One-phase claims, inside the caller's business transaction.
--
-- Not STRICT: a NULL argument raises an error rather than returning a NULL
-- that a caller could mistake for "already processed".  No SET search_path:
-- the C code resolves every object from the extension's own schema, and a
-- SET clause would cost a GUC save and restore on every message.
--

CREATE FUNCTION inbox_claim(message_id text, consumer text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_claim(text, text) IS
'claims message_id for consumer in the current transaction: true to process it, false if it was already claimed';

CREATE FUNCTION inbox_claim(message_id uuid, consumer text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_claim_uuid'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_claim(uuid, text) IS
'claims a uuid message id (stored in canonical text form) for consumer in the current transaction';

CREATE FUNCTION inbox_claim_many(message_ids text[], consumer text)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'inbox_claim_many'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 100;

COMMENT ON FUNCTION inbox_claim_many(text[], text) IS
'claims a batch of message ids for consumer in the current transaction; returns the ids this call claimed';

--
-- Two-phase claims, each call in its own short transaction.
--

CREATE FUNCTION inbox_begin(message_id text, consumer text,
							lease interval DEFAULT NULL, payload jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_begin'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_begin(text, text, interval, jsonb) IS
'starts a two-phase claim with a lease: a new fencing token, or NULL when this call holds no claim (the message is processed, failed, or held by a live claim: use inbox_begin_outcome to tell which)';

-- inbox_begin with what it found, so that a broker's consumer knows from
-- one answer whether to work, ack, or have the message delivered again:
-- one row of plain types (text, bigint, interval, jsonb), which every
-- client library reads without registering a type.  fingerprint and
-- sent_at: see "Idempotency keys" below.
CREATE FUNCTION inbox_begin_outcome(message_id text, consumer text,
									lease interval DEFAULT NULL, payload jsonb DEFAULT NULL,
									fingerprint text DEFAULT NULL,
									sent_at timestamptz DEFAULT NULL,
									OUT outcome text, OUT token bigint,
									OUT retry_after interval, OUT result jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'inbox_begin_outcome'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz) IS
'starts a two-phase claim like inbox_begin and says what it found: outcome claimed or taken_over (work with token), processed (ack; result is the stored result) or failed (ack), busy (a live claim holds it: deliver again after retry_after), mismatch (the key was claimed with another fingerprint: nothing changed), expired (sent before the consumer''s floor)';

CREATE FUNCTION inbox_extend(message_id text, consumer text, token bigint,
							 lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_extend'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_extend(text, text, bigint, interval) IS
'heartbeat: renews the lease from now if token is still the current claim';

CREATE FUNCTION inbox_complete(message_id text, consumer text, token bigint,
							   result jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_complete'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_complete(text, text, bigint, jsonb) IS
'marks the claim processed, with its result if given, if token is current (true again for a repeat with the same token); false when ownership was lost';

CREATE FUNCTION inbox_fail(message_id text, consumer text, token bigint, error text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_fail'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_fail(text, text, bigint, text) IS
'records error and releases the claim for retry, or marks it failed when attempts are used up; false when ownership was lost';

CREATE FUNCTION inbox_next(consumer text, lease interval DEFAULT NULL,
						   max integer DEFAULT 10)
RETURNS TABLE (message_id text, token bigint, attempts integer, payload jsonb)
AS 'MODULE_PATHNAME', 'inbox_next'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 10;

COMMENT ON FUNCTION inbox_next(text, interval, integer) IS
'for a sweeper: takes released and expired claims, oldest first, with new tokens; concurrent sweepers get disjoint claims';

--
-- Configuration and monitoring.
--

CREATE FUNCTION inbox_configure(consumer text,
								retention interval DEFAULT NULL,
								lease interval DEFAULT NULL,
								max_attempts integer DEFAULT NULL)
RETURNS inbox_consumers
AS 'MODULE_PATHNAME', 'inbox_configure'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_configure(text, interval, interval, integer) IS
'sets a consumer''s retention, lease and max_attempts; arguments left out (or NULL) keep their current value';

-- Every operator is pg_catalog's, and every literal typed: an operator
-- that another role created in this schema before the extension was
-- installed must not be bound into the view, whose readers include
-- superusers.  security_invoker: a reader sees the rows row-level security
-- lets it see, not the view owner's.
CREATE VIEW inbox_stats WITH (security_invoker = true) AS
SELECT i.consumer,
	   pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'processed'::@extschema@.inbox_state) AS processed,
	   pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'claimed'::@extschema@.inbox_state
						AND i.lease_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) AS in_flight,
	   pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'claimed'::@extschema@.inbox_state
						AND i.lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()) AS expired,
	   pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'released'::@extschema@.inbox_state) AS released,
	   pg_catalog.count(*) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'failed'::@extschema@.inbox_state) AS failed,
	   pg_catalog.clock_timestamp()
		 OPERATOR(pg_catalog.-) pg_catalog.min(i.received_at) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'claimed'::@extschema@.inbox_state) AS oldest_in_flight_age,
	   pg_catalog.clock_timestamp()
		 OPERATOR(pg_catalog.-) pg_catalog.min(i.received_at) FILTER (WHERE i.state OPERATOR(pg_catalog.=) 'released'::@extschema@.inbox_state) AS oldest_released_age
FROM ONLY @extschema@.inbox i
GROUP BY i.consumer;

COMMENT ON VIEW inbox_stats IS
'per consumer: markers by state, and the age of the oldest open claims (reads the whole table)';

--
-- Maintenance: pruning and reclaiming, run by the background worker when
-- the library is preloaded, or by these functions from any scheduler.
--

CREATE FUNCTION inbox_prune()
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_prune'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_prune() IS
'one pruning pass: deletes processed and failed markers older than their consumer''s retention; returns the rows deleted';

CREATE FUNCTION inbox_reclaim()
RETURNS bigint
AS 'MODULE_PATHNAME', 'inbox_reclaim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_reclaim() IS
'one reclaim pass: releases claims whose lease expired, or fails them when their attempts are used up; returns the claims changed';

CREATE FUNCTION inbox_retention_for(lock_timeout interval, max_deliveries integer,
									message_ttl interval, margin interval)
RETURNS interval
AS 'MODULE_PATHNAME', 'inbox_retention_for'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION inbox_retention_for(interval, integer, interval, interval) IS
'the smallest safe retention for a broker: lock_timeout x max_deliveries + message_ttl + margin';

CREATE FUNCTION inbox_worker_status()
RETURNS TABLE (database name, passes bigint, last_pass_start timestamptz,
			   last_pass_end timestamptz, pruned bigint, reclaimed bigint,
			   last_error text, pruned_total bigint, reclaimed_total bigint,
			   start_failures bigint)
AS 'MODULE_PATHNAME', 'inbox_worker_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION inbox_worker_status() IS
'the maintenance worker''s last pass in each database it served (from shared memory)';

--
-- Markers are never dropped by accident: DROP EXTENSION inbox (or a DROP
-- SCHEMA ... CASCADE or DROP OWNED BY that would take it along) is refused
-- while the table holds markers; TRUNCATE inbox first to drop them on
-- purpose (src/guard.c).
--

CREATE FUNCTION inbox_guard_drop()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'inbox_guard_drop'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_guard_drop() IS
'event trigger: refuses to drop the extension while its table holds markers';

CREATE EVENT TRIGGER inbox_guard_drop ON ddl_command_start
	WHEN TAG IN ('DROP EXTENSION', 'DROP SCHEMA', 'DROP OWNED')
	EXECUTE FUNCTION inbox_guard_drop();

COMMENT ON EVENT TRIGGER inbox_guard_drop IS
'refuses to drop the extension inbox while its table holds markers';

--
-- Idempotency keys (docs/idempotency-keys.md): a duplicate gets the first
-- attempt's result back, and a claim of a key with another request's
-- fingerprint gets mismatch.  inbox_begin_outcome and inbox_complete take
-- part too (above).
--

CREATE FUNCTION inbox_claim_outcome(message_id text, consumer text,
									fingerprint text DEFAULT NULL,
									sent_at timestamptz DEFAULT NULL)
RETURNS TABLE (outcome text, result jsonb)
AS 'MODULE_PATHNAME', 'inbox_claim_outcome'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 1;

COMMENT ON FUNCTION inbox_claim_outcome(text, text, text, timestamptz) IS
'claims message_id for consumer in the current transaction like inbox_claim and says what it found: claimed (do the work), processed (a marker exists: result is its stored result), mismatch (claimed with another fingerprint: nothing changed), expired (sent before the consumer''s floor)';

CREATE FUNCTION inbox_set_result(message_id text, consumer text, result jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_set_result'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_set_result(text, text, jsonb) IS
'records the result of a one-phase claim made in the current transaction; refused for a marker this transaction did not write';

CREATE FUNCTION inbox_result(message_id text, consumer text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'inbox_result'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION inbox_result(text, text) IS
'the stored result of message_id for consumer: NULL when there is no marker, or no result';

--
-- Failed claims: an operator retries them or discards them with a reason
-- (src/operate.c).  For an operator role, not for consumers: nothing is
-- granted; docs/operations.md has the grants.
--

CREATE FUNCTION inbox_retry(message_id text, consumer text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_retry'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_retry(text, text) IS
'puts a failed claim back as released, with a fresh budget of attempts and a new token; an error on anything but a failed claim';

CREATE FUNCTION inbox_discard(message_id text, consumer text, reason text)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_discard'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_discard(text, text, text) IS
'closes a failed claim as processed, with reason and a new token; an error on anything but a failed claim';

CREATE FUNCTION inbox_retry_failed(consumer text,
								   failed_before timestamptz DEFAULT NULL,
								   error_like text DEFAULT NULL,
								   max integer DEFAULT 1000)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'inbox_retry_failed'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 100;

COMMENT ON FUNCTION inbox_retry_failed(text, timestamptz, text, integer) IS
'inbox_retry for up to max failed claims of consumer (failed before failed_before, last_error LIKE error_like), oldest first; returns their message ids';

CREATE FUNCTION inbox_discard_failed(consumer text, reason text,
									 failed_before timestamptz DEFAULT NULL,
									 error_like text DEFAULT NULL,
									 max integer DEFAULT 1000)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'inbox_discard_failed'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 100;

COMMENT ON FUNCTION inbox_discard_failed(text, text, timestamptz, text, integer) IS
'inbox_discard for up to max failed claims of consumer (failed before failed_before, last_error LIKE error_like), oldest first; returns their message ids';

REVOKE ALL ON FUNCTION inbox_retry(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_discard(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_retry_failed(text, timestamptz, text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_discard_failed(text, text, timestamptz, text, integer) FROM PUBLIC;

--
-- The floor of late duplicates (src/floor.c): per consumer, the latest
-- processed_at of the markers pruning deleted, raised by the statement
-- that deletes them (src/prune.c) and never lowered.  A claim given the
-- message's send time that finds no marker answers expired when the
-- message was sent at or before it.  Dumped: a restore that lost it would
-- let every pruned message be claimed again.
--

CREATE TABLE inbox_floors (
	consumer		text COLLATE "C" PRIMARY KEY,
	floor			timestamptz NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('inbox_floors', '');

COMMENT ON TABLE inbox_floors IS
'per consumer, the latest processed_at of the markers pruning deleted: a message sent at or before it that has no marker is expired';

REVOKE ALL ON TABLE inbox_floors FROM PUBLIC;

--
-- Counters (src/counters.c): what the functions answered, per database and
-- consumer, from shared memory, so reading them scans nothing (inbox_stats
-- reads the whole table).  They need the library preloaded.  The row with
-- a NULL consumer is the database's own: what maintenance passes did, and
-- the consumers beyond inbox.max_consumers_counted.
--

CREATE FUNCTION inbox_counters()
RETURNS TABLE (database name, consumer text,
			   claims bigint, duplicates bigint,
			   begins_claimed bigint, begins_taken_over bigint,
			   begins_processed bigint, begins_failed bigint,
			   begins_busy bigint, next_taken bigint,
			   completions bigint, completions_refused bigint,
			   extends bigint, extends_refused bigint,
			   fails_released bigint, fails_failed bigint,
			   fails_refused bigint, retries bigint, discards bigint,
			   mismatches bigint, expired bigint,
			   pruned bigint, reclaimed bigint,
			   stats_reset timestamptz)
AS 'MODULE_PATHNAME', 'inbox_counters'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION inbox_counters() IS
'what the functions answered since the counters were last reset, per database and consumer (from shared memory)';

CREATE VIEW inbox_counters WITH (security_invoker = true) AS
SELECT * FROM @extschema@.inbox_counters();

COMMENT ON VIEW inbox_counters IS
'what the functions answered, per database and consumer: inbox_counters() (reads no table)';

CREATE FUNCTION inbox_counters_reset(consumer text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'inbox_counters_reset'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_counters_reset(text) IS
'zeroes the current database''s counters, or those of one consumer';

-- Read like pg_stat_statements: pg_monitor sees every database's rows,
-- other grantees their own database's.  Reset like pg_stat_reset():
-- superusers, and whom they grant it.
REVOKE ALL ON FUNCTION inbox_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_counters_reset(text) FROM PUBLIC;
REVOKE ALL ON TABLE inbox_counters FROM PUBLIC;
GRANT EXECUTE ON FUNCTION inbox_counters() TO pg_monitor;
GRANT SELECT ON inbox_counters TO pg_monitor;

--
-- inbox_begin_wait: a begin that waits, up to a bound, for a live claim to
-- finish.  A procedure, so that it can commit between its looks and hold
-- no snapshot while it sleeps (src/begin_wait.c); CALL it in autocommit
-- mode.  The INOUT arguments are its output; their defaults let a caller
-- leave them out.
--

CREATE PROCEDURE inbox_begin_wait(message_id text, consumer text, wait interval,
								  lease interval DEFAULT NULL, payload jsonb DEFAULT NULL,
								  fingerprint text DEFAULT NULL,
								  INOUT outcome text DEFAULT NULL,
								  INOUT token bigint DEFAULT NULL,
								  INOUT retry_after interval DEFAULT NULL,
								  INOUT result jsonb DEFAULT NULL)
AS 'MODULE_PATHNAME', 'inbox_begin_wait'
LANGUAGE C;

COMMENT ON PROCEDURE inbox_begin_wait(text, text, interval, interval, jsonb, text, text, bigint, interval, jsonb) IS
'inbox_begin_outcome, waiting up to wait while a live claim holds the message: returns the first answer that is not busy, or busy at the bound; CALL in autocommit mode';

REVOKE ALL ON PROCEDURE inbox_begin_wait(text, text, interval, interval, jsonb, text, text, bigint, interval, jsonb) FROM PUBLIC;

--
-- Privileges: nothing is granted to PUBLIC.  The README lists the grants an
-- application role needs.
--

REVOKE ALL ON FUNCTION inbox_claim(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim(uuid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim_many(text[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_begin(text, text, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_extend(text, text, bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_complete(text, text, bigint, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_fail(text, text, bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_next(text, interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_configure(text, interval, interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_prune() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_reclaim() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_retention_for(interval, integer, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_worker_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_guard_drop() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_token_seq_guard() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim_outcome(text, text, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_set_result(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_result(text, text) FROM PUBLIC;
-- The CHECK constraints' functions stay callable by PUBLIC (see above).
REVOKE ALL ON TABLE inbox, inbox_consumers, inbox_stats FROM PUBLIC;
REVOKE ALL ON SEQUENCE inbox_token_seq FROM PUBLIC;
REVOKE ALL ON SEQUENCE inbox_token_epoch, inbox_token_reserve,
	inbox_token_lifted FROM PUBLIC;

-- Monitoring roles read the figures, as they read pg_stat_statements'.
-- inbox_worker_status() shows them every database's (pg_monitor has the
-- privileges of pg_read_all_stats); other grantees, their own database's.
GRANT EXECUTE ON FUNCTION inbox_worker_status() TO pg_monitor;
GRANT SELECT ON inbox_stats TO pg_monitor;
-- inbox_stats runs with its reader's rights (security_invoker), so the
-- monitoring roles may read the columns it counts: consumers and states,
-- never message ids, payloads or errors.
GRANT SELECT (consumer, state, received_at, lease_until) ON inbox TO pg_monitor;
