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
-- Who retried or discarded a failed claim, when, and why (inbox.sql's
-- last three columns of inbox).
--

ALTER TABLE inbox ADD COLUMN resolved_by name,
	ADD COLUMN resolved_at timestamptz,
	ADD COLUMN resolution text;

COMMENT ON COLUMN inbox.resolved_by IS 'who retried or discarded the failed claim last (session_user)';
COMMENT ON COLUMN inbox.resolved_at IS 'when the failed claim was last retried or discarded';
COMMENT ON COLUMN inbox.resolution IS 'why the failed claim was discarded (NULL after a retry)';

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
