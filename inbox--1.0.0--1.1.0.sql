/* inbox--1.0.0--1.1.0.sql: update of the inbox extension from 1.0.0 to 1.1.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION inbox UPDATE TO '1.1.0'" to load this file. \quit

--
-- inbox_worker_status(): a tenth column, start_failures (the launcher found
-- no worker slot for the database).  A changed result type is a new
-- function: drop the old one and create it as inbox.sql does.
--

DROP FUNCTION inbox_worker_status();

CREATE FUNCTION inbox_worker_status()
RETURNS TABLE (database name, passes bigint, last_pass_start timestamptz,
			   last_pass_end timestamptz, pruned bigint, reclaimed bigint,
			   last_error text, pruned_total bigint, reclaimed_total bigint,
			   start_failures bigint)
AS 'MODULE_PATHNAME', 'inbox_worker_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION inbox_worker_status() IS
'the maintenance worker''s last pass in each database it served (from shared memory)';

REVOKE ALL ON FUNCTION inbox_worker_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION inbox_worker_status() TO pg_monitor;

--
-- inbox_begin_wait: a begin that waits, up to a bound, for a live claim to
-- finish.  A procedure, so that it can commit between its looks and hold
-- no snapshot while it sleeps (src/begin_wait.c); CALL it in autocommit
-- mode.  The INOUT arguments are its output; their defaults let a caller
-- leave them out.
--

CREATE PROCEDURE inbox_begin_wait(message_id text, consumer text, wait interval,
								  lease interval DEFAULT NULL, payload jsonb DEFAULT NULL,
								  INOUT outcome text DEFAULT NULL,
								  INOUT token bigint DEFAULT NULL,
								  INOUT retry_after interval DEFAULT NULL,
								  INOUT result jsonb DEFAULT NULL)
AS 'MODULE_PATHNAME', 'inbox_begin_wait'
LANGUAGE C;

COMMENT ON PROCEDURE inbox_begin_wait(text, text, interval, interval, jsonb, text, bigint, interval, jsonb) IS
'inbox_begin_outcome, waiting up to wait while a live claim holds the message: returns the first answer that is not busy, or busy at the bound; CALL in autocommit mode';

REVOKE ALL ON PROCEDURE inbox_begin_wait(text, text, interval, interval, jsonb, text, bigint, interval, jsonb) FROM PUBLIC;
