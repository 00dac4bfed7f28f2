--
-- inbox_begin_outcome: the begin that says what it found, so that a
-- consumer knows whether to work (claimed, taken_over), ack (processed,
-- failed) or have the message delivered again later (busy).
--
CREATE EXTENSION inbox;
\set SHOW_CONTEXT never

-- Simulates the passing of a lease, as if the owner had died or paused.
CREATE FUNCTION pg_temp.expire(p_message_id text) RETURNS bigint
LANGUAGE sql AS $$
	WITH expired AS (
		UPDATE inbox SET lease_until = clock_timestamp() - interval '1 second'
		WHERE message_id = p_message_id RETURNING 1)
	SELECT count(*) FROM expired
$$;

-- The shape: one row, whatever the outcome.
SELECT pg_get_function_arguments(p.oid) AS arguments, p.proretset AS returns_set
FROM pg_proc p WHERE proname = 'inbox_begin_outcome';

-- claimed: a new message, the first attempt; a token and no retry_after.
SELECT outcome, token > 0 AS has_token, retry_after
FROM inbox_begin_outcome('m-1', 'email', lease => '2 minutes', payload => '{"n": 1}');
SELECT token AS token1 FROM inbox WHERE message_id = 'm-1' \gset
SELECT state, attempts, payload FROM inbox WHERE message_id = 'm-1';

-- busy: a live claim holds it, here the same consumer's own earlier call
-- (the token is the owner's only identity).  No token; retry_after is the
-- lease the holder has left.  Nothing is written, nothing taken.
SELECT outcome, token, retry_after > interval '1 minute 50 seconds' AND
	   retry_after <= interval '2 minutes' AS lease_left
FROM inbox_begin_outcome('m-1', 'email');
SELECT state, attempts, token = :token1 AS same_token FROM inbox WHERE message_id = 'm-1';
-- inbox_begin answers NULL, as for processed and failed.
SELECT inbox_begin('m-1', 'email') IS NULL AS begin_is_null;
-- Twice in one transaction: the second call is busy too.
BEGIN;
SELECT outcome FROM inbox_begin_outcome('t-1', 'email');
SELECT outcome, token, retry_after > interval '4 minutes' AS lease_left
FROM inbox_begin_outcome('t-1', 'email');
COMMIT;

-- taken_over: the lease ran out; a new, larger token for a later attempt,
-- and the old owner's token is dead.
SELECT pg_temp.expire('m-1');
SELECT outcome, token > :token1 AS larger_token, retry_after
FROM inbox_begin_outcome('m-1', 'email');
SELECT token AS token1b FROM inbox WHERE message_id = 'm-1' \gset
SELECT state, attempts FROM inbox WHERE message_id = 'm-1';
SELECT inbox_complete('m-1', 'email', :token1) AS stale_complete;

-- taken_over: a claim released by inbox_fail is a later attempt too.
SELECT token AS token2 FROM inbox_begin_outcome('m-2', 'email') \gset
SELECT inbox_fail('m-2', 'email', :token2, 'smtp down') AS released;
SELECT outcome, token > :token2 AS larger_token, retry_after
FROM inbox_begin_outcome('m-2', 'email');
SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-2';

-- processed: completed two-phase, and a one-phase marker.  No token.
SELECT inbox_complete('m-1', 'email', :token1b) AS completed;
SELECT outcome, token, retry_after FROM inbox_begin_outcome('m-1', 'email');
SELECT inbox_claim('m-3', 'email') AS one_phase;
SELECT outcome, token, retry_after FROM inbox_begin_outcome('m-3', 'email');
SELECT state, attempts FROM inbox WHERE message_id IN ('m-1', 'm-3') ORDER BY message_id;

-- failed: inbox_fail used the last attempt.
SELECT consumer, max_attempts FROM inbox_configure('sms', max_attempts => 2);
SELECT token AS t FROM inbox_begin_outcome('m-4', 'sms') \gset
SELECT inbox_fail('m-4', 'sms', :t, 'bounced') AS released;
SELECT outcome FROM inbox_begin_outcome('m-4', 'sms');
SELECT token AS t FROM inbox WHERE message_id = 'm-4' \gset
SELECT inbox_fail('m-4', 'sms', :t, 'bounced again') AS failed;
SELECT outcome, token, retry_after FROM inbox_begin_outcome('m-4', 'sms');
SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-4';

-- failed: the lease of the last attempt ran out; this call marks it failed.
SELECT token AS t FROM inbox_begin_outcome('m-5', 'sms') \gset
SELECT pg_temp.expire('m-5');
SELECT outcome FROM inbox_begin_outcome('m-5', 'sms');
SELECT pg_temp.expire('m-5');
SELECT outcome, token, retry_after FROM inbox_begin_outcome('m-5', 'sms');
SELECT state, attempts, last_error, processed_at IS NOT NULL AS failed_at
FROM inbox WHERE message_id = 'm-5';
-- And stays failed, answered without a write.
SELECT outcome FROM inbox_begin_outcome('m-5', 'sms');

-- failed: a released claim whose consumer's max_attempts was lowered.
SELECT token AS t FROM inbox_begin_outcome('m-6', 'push') \gset
SELECT inbox_fail('m-6', 'push', :t, 'timeout') AS released;
SELECT consumer, max_attempts FROM inbox_configure('push', max_attempts => 1);
SELECT outcome, token, retry_after FROM inbox_begin_outcome('m-6', 'push');
SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-6';

-- Under REPEATABLE READ the same answers: claimed for a new message, then
-- busy, taken_over, processed.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outcome, token > 0 AS has_token, retry_after FROM inbox_begin_outcome('r-1', 'email');
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outcome, token, retry_after > interval '4 minutes' AS lease_left
FROM inbox_begin_outcome('r-1', 'email');
COMMIT;
SELECT pg_temp.expire('r-1');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outcome, token IS NOT NULL AS has_token FROM inbox_begin_outcome('r-1', 'email');
COMMIT;
SELECT token AS t FROM inbox WHERE message_id = 'r-1' \gset
SELECT inbox_complete('r-1', 'email', :t) AS completed;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outcome, token, retry_after FROM inbox_begin_outcome('r-1', 'email');
COMMIT;

-- inbox_begin and inbox_begin_outcome are one claim: the simple form's
-- token is the outcome's.
SELECT inbox_begin('b-1', 'email') AS tb \gset
SELECT pg_temp.expire('b-1');
SELECT outcome, token > :tb AS larger_token FROM inbox_begin_outcome('b-1', 'email');
SELECT pg_temp.expire('b-1');
SELECT inbox_begin('b-1', 'email') > :tb AS begin_takes_over;
SELECT attempts FROM inbox WHERE message_id = 'b-1';

-- Bad arguments are refused as by inbox_begin, never answered.
CREATE FUNCTION pg_temp.error_of(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE query;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
SELECT q, pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_begin_outcome(NULL, 'email')$$),
	($$SELECT inbox_begin_outcome('m', NULL)$$),
	($$SELECT inbox_begin_outcome('', 'email')$$),
	($$SELECT inbox_begin_outcome('m', repeat('c', 257))$$),
	($$SELECT inbox_begin_outcome('m', 'email', interval '0')$$),
	($$SELECT inbox_begin_outcome('m', 'email', interval '1 day 1 second')$$)) v(q);
BEGIN READ ONLY;
SELECT pg_temp.error_of($$SELECT inbox_begin_outcome('m', 'email')$$);
ROLLBACK;

-- Privileges: not granted to PUBLIC.  A worker role with the two-phase
-- grants (README, "Privileges") and EXECUTE on the function gets its
-- answers on both paths.
CREATE ROLE regress_inbox_outcome;
GRANT SELECT, INSERT, UPDATE ON inbox TO regress_inbox_outcome;
GRANT SELECT ON inbox_consumers TO regress_inbox_outcome;
GRANT USAGE ON SEQUENCE inbox_token_seq TO regress_inbox_outcome;
SET ROLE regress_inbox_outcome;
SELECT pg_temp.error_of($$SELECT inbox_begin_outcome('w-1', 'email')$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz)
	TO regress_inbox_outcome;
SET ROLE regress_inbox_outcome;
SELECT outcome, token IS NOT NULL AS has_token FROM inbox_begin_outcome('w-1', 'email');
SELECT outcome, token IS NOT NULL AS has_token FROM inbox_begin_outcome('w-1', 'email');
SELECT outcome, token IS NOT NULL AS has_token FROM inbox_begin_outcome('m-1', 'email');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outcome, token IS NOT NULL AS has_token FROM inbox_begin_outcome('w-2', 'email');
COMMIT;
RESET ROLE;
DROP OWNED BY regress_inbox_outcome;
DROP ROLE regress_inbox_outcome;

-- A claim written by hand without a lease has no answer: a clear error,
-- never an internal one.
INSERT INTO inbox (message_id, consumer, state, token)
VALUES ('no-lease', 'email', 'claimed', 1);
SELECT * FROM inbox_begin_outcome('no-lease', 'email');

DELETE FROM inbox;
DROP EXTENSION inbox;
