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
