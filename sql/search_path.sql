--
-- A hostile search_path cannot redirect the claim functions
--
CREATE SCHEMA inbox_home;
CREATE EXTENSION inbox SCHEMA inbox_home;

-- Decoys that a name resolved through the caller's search_path would find
-- first, even ahead of pg_catalog.
CREATE SCHEMA hostile;
CREATE TABLE hostile.inbox (message_id text, consumer text, state text,
	received_at timestamptz, processed_at timestamptz);
CREATE FUNCTION hostile.texteq_always(text, text) RETURNS boolean
	LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR hostile.= (LEFTARG = text, RIGHTARG = text,
	FUNCTION = hostile.texteq_always);
CREATE FUNCTION hostile.unnest(text[]) RETURNS SETOF text
	LANGUAGE sql AS $$SELECT 'decoy'::text$$;
CREATE FUNCTION hostile.now() RETURNS timestamptz
	LANGUAGE sql AS $$SELECT 'epoch'::timestamptz$$;
-- A token "equal" to every other, and a clock that makes every lease live.
CREATE FUNCTION hostile.int8eq_always(bigint, bigint) RETURNS boolean
	LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR hostile.= (LEFTARG = bigint, RIGHTARG = bigint,
	FUNCTION = hostile.int8eq_always);
CREATE FUNCTION hostile.tstz_le_never(timestamptz, timestamptz) RETURNS boolean
	LANGUAGE sql IMMUTABLE AS 'SELECT false';
CREATE OPERATOR hostile.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz,
	FUNCTION = hostile.tstz_le_never);

SET search_path = hostile, pg_catalog;

SELECT inbox_home.inbox_claim('m-1', 'credit') AS claimed;
SELECT inbox_home.inbox_claim('m-1', 'credit') AS duplicate;
SELECT inbox_home.inbox_claim('m-2', 'credit') AS other_message;
SELECT * FROM inbox_home.inbox_claim_many(ARRAY['m-2', 'm-3', 'm-4'], 'credit')
	ORDER BY 1;

-- Two-phase calls: a stale token stays stale, an expired lease expired.
SELECT inbox_home.inbox_begin('t-1', 'email') AS token \gset
SELECT inbox_home.inbox_complete('t-1', 'email', :token + 1) AS wrong_token;
SELECT inbox_home.inbox_extend('t-1', 'email', :token + 1) AS wrong_token;
UPDATE inbox_home.inbox SET lease_until = pg_catalog.clock_timestamp() - interval '1 second'
	WHERE message_id OPERATOR(pg_catalog.=) 't-1';
SELECT inbox_home.inbox_begin('t-1', 'email') OPERATOR(pg_catalog.>) :token AS took_over_expired;
SELECT inbox_home.inbox_fail('t-1', 'email', :token, 'stale') AS stale_fail;
SELECT inbox_home.inbox_begin('t-2', 'email') IS NOT NULL AS claimed;
UPDATE inbox_home.inbox SET lease_until = pg_catalog.clock_timestamp() - interval '1 second'
	WHERE message_id OPERATOR(pg_catalog.=) 't-2';
SELECT message_id, attempts FROM inbox_home.inbox_next('email');

RESET search_path;
SELECT count(*) AS decoy_rows FROM hostile.inbox;
SELECT message_id, consumer, received_at > '2000-01-01' AS real_clock
FROM inbox_home.inbox ORDER BY id;
SELECT message_id, state, attempts FROM inbox_home.inbox
WHERE message_id LIKE 't-%' ORDER BY id;

-- The extension's schema need not be on the path at all.
SET search_path = public;
SELECT inbox_home.inbox_claim('m-5', 'credit') AS claimed_off_path;
RESET search_path;

TRUNCATE inbox_home.inbox;
DROP EXTENSION inbox;
DROP SCHEMA hostile CASCADE;
DROP SCHEMA inbox_home;
