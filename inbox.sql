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
	-- Sequential, so markers append to the end of the table and its primary
	-- key; the broker's (often random) message id is never the primary key.
	id				bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id		text NOT NULL,
	consumer		text NOT NULL,
	state			inbox_state NOT NULL DEFAULT 'processed',
	received_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	processed_at	timestamptz,
	token			bigint,
	lease_until		timestamptz,
	attempts		integer NOT NULL DEFAULT 1,
	last_error		text,
	payload			jsonb,

	-- The key the database uses to pick the winner among concurrent
	-- claimers.  The C code finds it by this name; do not rename it.
	CONSTRAINT inbox_message_id_consumer_key UNIQUE (message_id, consumer),

	-- The documented limits (src/inbox.h), enforced for rows written by
	-- hand too, so no key can exceed what the btree accepts.
	CONSTRAINT inbox_message_id_length
		CHECK (pg_catalog.octet_length(message_id) BETWEEN 1 AND 1024),
	CONSTRAINT inbox_consumer_length
		CHECK (pg_catalog.octet_length(consumer) BETWEEN 1 AND 256),
	CONSTRAINT inbox_attempts_positive CHECK (attempts >= 1)
);

COMMENT ON TABLE inbox IS
'inbox markers: one row per (message_id, consumer) that was claimed';
COMMENT ON COLUMN inbox.id IS 'sequential identity; never the message id';
COMMENT ON COLUMN inbox.message_id IS 'the broker''s stable message id';
COMMENT ON COLUMN inbox.consumer IS 'the handler''s identity; unique together with message_id';
COMMENT ON COLUMN inbox.state IS 'processed, claimed, released or failed';
COMMENT ON COLUMN inbox.received_at IS 'when the message was first claimed';
COMMENT ON COLUMN inbox.processed_at IS 'when the message was processed (NULL until then)';
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
-- Privileges: nothing is granted to PUBLIC.  The README lists the grants an
-- application role needs.
--

REVOKE ALL ON FUNCTION inbox_claim(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim(uuid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim_many(text[], text) FROM PUBLIC;
REVOKE ALL ON TABLE inbox FROM PUBLIC;
