--
-- Security: the extension runs only from a schema a superuser controls,
-- finds its objects by proof of membership rather than by name, and binds
-- no operator that another role could have planted.
--
\set SHOW_CONTEXT never
CREATE ROLE regress_inbox_schema_owner;
CREATE ROLE regress_inbox_admin SUPERUSER;

-- A schema a role that is not a superuser owns: whoever owns it could
-- rename it and put look-alike objects in its place, so every function
-- refuses to run.
CREATE SCHEMA owned AUTHORIZATION regress_inbox_schema_owner;
CREATE EXTENSION inbox SCHEMA owned;
SELECT owned.inbox_claim('m-1', 'credit');
SELECT owned.inbox_begin('m-1', 'email');
SELECT owned.inbox_configure('credit', retention => interval '1 day');
SELECT owned.inbox_prune();
-- Handed to a superuser, it works (the change of owner is noticed at once).
ALTER SCHEMA owned OWNER TO regress_inbox_admin;
SELECT owned.inbox_claim('m-1', 'credit') AS claimed;
-- And refused again as soon as that role is no longer a superuser.
ALTER ROLE regress_inbox_admin NOSUPERUSER;
SELECT owned.inbox_claim('m-2', 'credit');
ALTER ROLE regress_inbox_admin SUPERUSER;
SELECT owned.inbox_claim('m-2', 'credit') AS claimed;
TRUNCATE owned.inbox;
DROP EXTENSION inbox;
DROP SCHEMA owned;

-- An operator planted in the schema before CREATE EXTENSION (by a role
-- that could create objects there) is not bound into inbox_stats, which
-- superusers read.
CREATE SCHEMA trap;
CREATE FUNCTION trap.hostile_eq(anyenum, text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	RAISE NOTICE 'the planted operator ran as %', current_user;
	RETURN true;
END
$$;
CREATE OPERATOR trap.= (LEFTARG = anyenum, RIGHTARG = text,
						FUNCTION = trap.hostile_eq);
CREATE EXTENSION inbox SCHEMA trap;
SELECT trap.inbox_claim('m-1', 'credit') AS claimed;
SELECT consumer, processed, in_flight, released, failed FROM trap.inbox_stats;
SELECT count(*) AS planted_operators_in_view
FROM pg_depend d JOIN pg_operator o ON o.oid = d.refobjid
WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_operator'::regclass
  AND o.oprnamespace = 'trap'::regnamespace;
TRUNCATE trap.inbox;
DROP EXTENSION inbox;
DROP SCHEMA trap CASCADE;

-- An index named inbox_prunable on another table is not taken for the
-- table's own.  The walk would read the other table's entries and delete
-- the markers their row pointers name, however recent.
CREATE EXTENSION inbox;
SELECT inbox_claim('m-' || g, 'credit') FROM generate_series(1, 5) g;
ALTER INDEX inbox_prunable RENAME TO inbox_prunable_real;
CREATE TABLE decoy (LIKE inbox);
-- The same rows at the same row pointers, processed a month ago.
INSERT INTO decoy
SELECT id, message_id, consumer, state, received_at,
	   processed_at - interval '30 days', token, lease_until, attempts,
	   last_error, payload
FROM inbox ORDER BY ctid;
SELECT count(*) AS same_row_pointers FROM decoy d JOIN inbox i ON i.ctid = d.ctid;
CREATE INDEX inbox_prunable ON decoy (consumer, processed_at, id)
	WHERE state IN ('processed', 'failed');
-- A new session, which looks the objects up afresh.
\c -
SELECT inbox_prune() AS pruned;
SELECT count(*) AS markers_kept FROM inbox;
-- Claims and completions take the SQL path meanwhile.
SELECT inbox_claim('m-6', 'credit') AS claimed;
SELECT inbox_complete('j-1', 'jobs', inbox_begin('j-1', 'jobs')) AS completed;
DROP TABLE decoy;
ALTER INDEX inbox_prunable_real RENAME TO inbox_prunable;
SELECT inbox_prune() AS pruned;

-- A member object handed to a role that is not a superuser: its owner could
-- add a trigger (or replace a function's body) that a superuser's claim
-- would run, so the extension refuses to run until a superuser owns it
-- again.
ALTER TABLE inbox OWNER TO regress_inbox_schema_owner;
SELECT inbox_claim('m-7', 'credit');
ALTER TABLE inbox OWNER TO CURRENT_USER;
ALTER FUNCTION inbox_retention_is_valid(interval) OWNER TO regress_inbox_schema_owner;
SELECT inbox_claim('m-7', 'credit');
ALTER FUNCTION inbox_retention_is_valid(interval) OWNER TO CURRENT_USER;
SELECT inbox_claim('m-7', 'credit') AS claimed;

-- A role with INSERT on the marker's columns only (and SELECT on the key,
-- which ON CONFLICT reads) may claim, as it may insert: the INSERT checks
-- its column privileges.
CREATE ROLE regress_inbox_columns;
GRANT EXECUTE ON FUNCTION inbox_claim(text, text) TO regress_inbox_columns;
GRANT INSERT (message_id, consumer, state, received_at, processed_at),
	SELECT (message_id, consumer) ON inbox TO regress_inbox_columns;
SET ROLE regress_inbox_columns;
SELECT inbox_claim('m-8', 'credit') AS claimed;
SELECT inbox_claim('m-8', 'credit') AS duplicate;
RESET ROLE;
REVOKE INSERT (processed_at) ON inbox FROM regress_inbox_columns;
SET ROLE regress_inbox_columns;
SELECT inbox_claim('m-9', 'credit');
RESET ROLE;
DROP OWNED BY regress_inbox_columns;
DROP ROLE regress_inbox_columns;

TRUNCATE inbox;
DROP EXTENSION inbox;
DROP ROLE regress_inbox_schema_owner;
DROP ROLE regress_inbox_admin;
