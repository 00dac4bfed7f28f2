/* inbox.sql: install script of the inbox extension (built into inbox--1.0.sql) */

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
	-- that takes one insert per message an index nobody reads is measured
	-- cost (about 6 % of a claim; README, "Performance").
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

	-- The key the database uses to pick the winner among concurrent
	-- claimers, and the primary key: it is how every function finds a
	-- marker, and the replica identity for logical replication.  The C code
	-- finds it by this name; do not rename it.
	CONSTRAINT inbox_message_id_consumer_key PRIMARY KEY (message_id, consumer)

	-- No CHECK constraints: the functions check every key against the
	-- documented limits (src/inbox.h) before writing, and a CHECK is
	-- re-read from the catalog by every INSERT that fires it; measured,
	-- two of them cost a raw insert of this shape about a fifth of its
	-- throughput.  Write markers only through the functions.
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
-- tie (src/maintenance.c).  With id in the key no two entries are equal,
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

CREATE TABLE inbox_consumers (
	consumer		text COLLATE "C" PRIMARY KEY,
	retention		interval,
	lease			interval,
	max_attempts	integer,

	CONSTRAINT inbox_consumers_consumer_length
		CHECK (pg_catalog.octet_length(consumer) BETWEEN 1 AND 256),
	CONSTRAINT inbox_consumers_retention_positive
		CHECK (retention > interval '0'),
	CONSTRAINT inbox_consumers_lease_range
		CHECK (lease > interval '0' AND lease <= interval '24 hours'),
	CONSTRAINT inbox_consumers_max_attempts_positive
		CHECK (max_attempts >= 1)
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
'starts a two-phase claim with a lease: a new fencing token, or NULL when the message is processed, failed or held by a live claim';

CREATE FUNCTION inbox_extend(message_id text, consumer text, token bigint,
							 lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_extend'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_extend(text, text, bigint, interval) IS
'heartbeat: renews the lease from now if token is still the current claim';

CREATE FUNCTION inbox_complete(message_id text, consumer text, token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_complete'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_complete(text, text, bigint) IS
'marks the claim processed if token is current (true again for a repeat with the same token); false when ownership was lost';

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
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	result @extschema@.inbox_consumers;
BEGIN
	IF consumer IS NULL THEN
		RAISE EXCEPTION 'consumer must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF consumer = '' THEN
		RAISE EXCEPTION 'consumer must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF octet_length(consumer) > 256 THEN
		RAISE EXCEPTION 'consumer is too long'
			USING ERRCODE = 'string_data_right_truncation',
				  DETAIL = format('It is %s bytes long; the limit is 256 bytes.', octet_length(consumer));
	END IF;
	IF retention <= interval '0' THEN
		RAISE EXCEPTION 'retention must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF lease <= interval '0' THEN
		RAISE EXCEPTION 'lease must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF lease > interval '24 hours' THEN
		RAISE EXCEPTION 'lease must be at most 24 hours'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Renew the lease of a longer job with inbox_extend.';
	END IF;
	IF max_attempts < 1 THEN
		RAISE EXCEPTION 'max_attempts must be at least 1' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	INSERT INTO @extschema@.inbox_consumers AS c (consumer, retention, lease, max_attempts)
	VALUES (inbox_configure.consumer, inbox_configure.retention,
			inbox_configure.lease, inbox_configure.max_attempts)
	ON CONFLICT ON CONSTRAINT inbox_consumers_pkey DO UPDATE
	SET retention = COALESCE(excluded.retention, c.retention),
		lease = COALESCE(excluded.lease, c.lease),
		max_attempts = COALESCE(excluded.max_attempts, c.max_attempts)
	RETURNING c.* INTO result;
	RETURN result;
END
$$;

COMMENT ON FUNCTION inbox_configure(text, interval, interval, integer) IS
'sets a consumer''s retention, lease and max_attempts; arguments left out (or NULL) keep their current value';

CREATE VIEW inbox_stats AS
SELECT i.consumer,
	   count(*) FILTER (WHERE i.state = 'processed') AS processed,
	   count(*) FILTER (WHERE i.state = 'claimed'
						AND i.lease_until > pg_catalog.clock_timestamp()) AS in_flight,
	   count(*) FILTER (WHERE i.state = 'claimed'
						AND i.lease_until <= pg_catalog.clock_timestamp()) AS expired,
	   count(*) FILTER (WHERE i.state = 'released') AS released,
	   count(*) FILTER (WHERE i.state = 'failed') AS failed,
	   pg_catalog.clock_timestamp()
		 - min(i.received_at) FILTER (WHERE i.state = 'claimed') AS oldest_in_flight_age,
	   pg_catalog.clock_timestamp()
		 - min(i.received_at) FILTER (WHERE i.state = 'released') AS oldest_released_age
FROM @extschema@.inbox i
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
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF lock_timeout IS NULL OR max_deliveries IS NULL
	   OR message_ttl IS NULL OR margin IS NULL THEN
		RAISE EXCEPTION 'arguments of inbox_retention_for must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF lock_timeout <= interval '0' THEN
		RAISE EXCEPTION 'lock_timeout must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF max_deliveries < 1 THEN
		RAISE EXCEPTION 'max_deliveries must be at least 1' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF message_ttl < interval '0' THEN
		RAISE EXCEPTION 'message_ttl must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF margin < interval '0' THEN
		RAISE EXCEPTION 'margin must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- The broker can redeliver the message until its last delivery's lock
	-- or visibility timeout runs out, or until it expires unconsumed; a
	-- replay from a dead-letter queue comes later still, hence the margin.
	RETURN lock_timeout * max_deliveries + message_ttl + margin;
END
$$;

COMMENT ON FUNCTION inbox_retention_for(interval, integer, interval, interval) IS
'the smallest safe retention for a broker: lock_timeout x max_deliveries + message_ttl + margin';

CREATE FUNCTION inbox_worker_status()
RETURNS TABLE (database name, passes bigint, last_pass_start timestamptz,
			   last_pass_end timestamptz, pruned bigint, reclaimed bigint,
			   last_error text, pruned_total bigint, reclaimed_total bigint)
AS 'MODULE_PATHNAME', 'inbox_worker_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION inbox_worker_status() IS
'the maintenance worker''s last pass in each database it served (from shared memory)';

--
-- Privileges: nothing is granted to PUBLIC.  The README lists the grants an
-- application role needs.
--

REVOKE ALL ON FUNCTION inbox_claim(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim(uuid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim_many(text[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_begin(text, text, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_extend(text, text, bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_complete(text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_fail(text, text, bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_next(text, interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_configure(text, interval, interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_prune() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_reclaim() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_retention_for(interval, integer, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_worker_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_token_seq_guard() FROM PUBLIC;
REVOKE ALL ON TABLE inbox, inbox_consumers, inbox_stats FROM PUBLIC;
REVOKE ALL ON SEQUENCE inbox_token_seq FROM PUBLIC;
REVOKE ALL ON SEQUENCE inbox_token_epoch, inbox_token_reserve,
	inbox_token_lifted FROM PUBLIC;
