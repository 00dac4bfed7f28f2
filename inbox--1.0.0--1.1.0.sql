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
