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
-- Idempotency keys (docs/idempotency-keys.md): the result a duplicate gets
-- back, and the fingerprint of the request that made the marker, as
-- inbox.sql makes them.  inbox_begin_outcome's result type changes (a
-- result column) and inbox_complete gains an argument: both are dropped and
-- created again.
--

ALTER TABLE inbox ADD COLUMN result jsonb, ADD COLUMN fingerprint text COLLATE "C";

-- The roles granted EXECUTE on the two functions dropped below keep it on
-- the functions that replace them: a worker role that lost inbox_complete
-- would leave every claim to run out its lease and be taken again.  The
-- grants are noted here, before the drop, and made again after the
-- functions are created.
DO $$
DECLARE
	grants text;
BEGIN
	SELECT pg_catalog.string_agg(pg_catalog.format(
			'GRANT EXECUTE ON FUNCTION %s TO %s%s', f.successor,
			CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				 ELSE pg_catalog.quote_ident(r.rolname) END,
			CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END), E'\n')
	  INTO grants
	  FROM (VALUES ('inbox_begin_outcome(text, text, interval, jsonb)'::pg_catalog.regprocedure,
					'inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz)'),
				   ('inbox_complete(text, text, bigint)'::pg_catalog.regprocedure,
					'inbox_complete(text, text, bigint, jsonb)')) AS f(old, successor)
	  JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) f.old
	  CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
	  LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
	 WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
	   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner;
	PERFORM pg_catalog.set_config('inbox_update.grants', COALESCE(grants, ''), true);
END
$$;

COMMENT ON COLUMN inbox.result IS 'optional result of the processing, returned to a duplicate';
COMMENT ON COLUMN inbox.fingerprint IS 'optional fingerprint of the request that made the marker: a claim with another one is a mismatch';

DROP FUNCTION inbox_begin_outcome(text, text, interval, jsonb);

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

DROP FUNCTION inbox_complete(text, text, bigint);

CREATE FUNCTION inbox_complete(message_id text, consumer text, token bigint,
							   result jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'inbox_complete'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION inbox_complete(text, text, bigint, jsonb) IS
'marks the claim processed, with its result if given, if token is current (true again for a repeat with the same token); false when ownership was lost';

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

REVOKE ALL ON FUNCTION inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_complete(text, text, bigint, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_claim_outcome(text, text, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_set_result(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION inbox_result(text, text) FROM PUBLIC;

-- The grants noted before the drop (above).
DO $$
DECLARE
	grant_statement text;
BEGIN
	FOREACH grant_statement IN ARRAY
		pg_catalog.string_to_array(pg_catalog.current_setting('inbox_update.grants'), E'\n')
	LOOP
		EXECUTE grant_statement;
	END LOOP;
	PERFORM pg_catalog.set_config('inbox_update.grants', '', true);
END
$$;

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
