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

SET search_path = hostile, pg_catalog;

SELECT inbox_home.inbox_claim('m-1', 'credit') AS claimed;
SELECT inbox_home.inbox_claim('m-1', 'credit') AS duplicate;
SELECT inbox_home.inbox_claim('m-2', 'credit') AS other_message;
SELECT * FROM inbox_home.inbox_claim_many(ARRAY['m-2', 'm-3', 'm-4'], 'credit')
	ORDER BY 1;

RESET search_path;
SELECT count(*) AS decoy_rows FROM hostile.inbox;
SELECT message_id, consumer, received_at > '2000-01-01' AS real_clock
FROM inbox_home.inbox ORDER BY id;

-- The extension's schema need not be on the path at all.
SET search_path = public;
SELECT inbox_home.inbox_claim('m-5', 'credit') AS claimed_off_path;
RESET search_path;

DROP EXTENSION inbox;
DROP SCHEMA hostile CASCADE;
DROP SCHEMA inbox_home;
