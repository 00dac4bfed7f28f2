--
-- Bad input to the two-phase and configuration functions
--
CREATE EXTENSION inbox;
\set SHOW_CONTEXT never

CREATE FUNCTION pg_temp.error_of(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE query;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

SELECT inbox_begin('m', 'email') AS token \gset

-- NULL anywhere but an omitted lease or payload is an error (22004).
SELECT q, pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_begin(NULL, 'email')$$),
	($$SELECT inbox_begin('m', NULL)$$),
	($$SELECT inbox_extend(NULL, 'email', 1)$$),
	($$SELECT inbox_extend('m', NULL, 1)$$),
	($$SELECT inbox_extend('m', 'email', NULL)$$),
	($$SELECT inbox_complete(NULL, 'email', 1)$$),
	($$SELECT inbox_complete('m', NULL, 1)$$),
	($$SELECT inbox_complete('m', 'email', NULL)$$),
	($$SELECT inbox_fail(NULL, 'email', 1, 'e')$$),
	($$SELECT inbox_fail('m', NULL, 1, 'e')$$),
	($$SELECT inbox_fail('m', 'email', NULL, 'e')$$),
	($$SELECT inbox_fail('m', 'email', 1, NULL)$$),
	($$SELECT inbox_next(NULL)$$),
	($$SELECT inbox_next('email', max => NULL)$$),
	($$SELECT inbox_configure(NULL)$$)) v(q);

-- Empty and over-long keys, as for inbox_claim.
SELECT q, pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_begin('', 'email')$$),
	($$SELECT inbox_begin('m', '')$$),
	($$SELECT inbox_begin(repeat('x', 1025), 'email')$$),
	($$SELECT inbox_complete('m', repeat('c', 257), 1)$$),
	($$SELECT inbox_next('')$$),
	($$SELECT inbox_configure('')$$),
	($$SELECT inbox_configure(repeat('c', 257))$$)) v(q);

-- Leases: zero, negative and absurd ones are refused (22023).
SELECT q, pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_begin('m2', 'email', interval '0')$$),
	($$SELECT inbox_begin('m2', 'email', interval '-5 minutes')$$),
	($$SELECT inbox_begin('m2', 'email', interval '1 day 1 second')$$),
	($$SELECT inbox_begin('m2', 'email', interval '1 month')$$),
	($$SELECT inbox_begin('m2', 'email', interval '1 month -40 days')$$),
	($$SELECT inbox_extend('m', 'email', 1, interval '0')$$),
	($$SELECT inbox_extend('m', 'email', 1, interval '100 years')$$),
	($$SELECT inbox_next('email', interval '-1 second')$$),
	($$SELECT inbox_configure('email', lease => interval '0')$$),
	($$SELECT inbox_configure('email', lease => interval '25 hours')$$),
	($$SELECT inbox_configure('email', retention => interval '0')$$),
	($$SELECT inbox_configure('email', retention => interval '-1 day')$$)) v(q);
SELECT inbox_begin('m2', 'email', interval '0');
SELECT inbox_begin('m2', 'email', interval '2 days');
SELECT inbox_begin('m2', 'email', interval '24 hours') IS NOT NULL AS at_limit;

-- Counts out of range (22023).
SELECT q, pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_next('email', max => 0)$$),
	($$SELECT inbox_next('email', max => -1)$$),
	($$SELECT inbox_next('email', max => 10001)$$),
	($$SELECT inbox_configure('email', max_attempts => 0)$$)) v(q);
SELECT inbox_configure('email', max_attempts => 0);
SET inbox.max_attempts = 0;
-- inbox.lease out of its range (22023).  How core words the bounds
-- changed in 18 (it gives their units), so the message is cut there.
SELECT q, split_part(pg_temp.error_of(q), ' (', 1) AS error FROM (VALUES
	($$SET inbox.lease = 0$$),
	($$SET inbox.lease = '25h'$$)) v(q);

-- Wrong and stale tokens are answers (false), not errors.
SELECT inbox_extend('m', 'email', -1) AS negative_token,
	   inbox_complete('m', 'email', 0) AS zero_token,
	   inbox_fail('m', 'email', 9223372036854775807, 'x') AS huge_token;
SELECT inbox_complete('m', 'email', :token) AS still_completes;

-- Read-only transactions cannot change claims (25006).
BEGIN READ ONLY;
SELECT pg_temp.error_of($$SELECT inbox_begin('m3', 'email')$$);
SELECT pg_temp.error_of($$SELECT inbox_complete('m', 'email', 1)$$);
SELECT pg_temp.error_of($$SELECT inbox_next('email')$$);
ROLLBACK;

-- Nothing above created a configuration or a claim it should not have.
SELECT count(*) AS configurations FROM inbox_consumers;
SELECT message_id, state FROM inbox ORDER BY id;

TRUNCATE inbox;
DROP EXTENSION inbox;
