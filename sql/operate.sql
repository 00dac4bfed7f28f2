--
-- An operator's decisions on failed claims: inbox_retry, inbox_discard,
-- inbox_retry_failed, inbox_discard_failed
--
CREATE EXTENSION inbox;
SELECT consumer, max_attempts FROM inbox_configure('email', max_attempts => 1);

-- A failed claim: one attempt, failed by its owner.
CREATE FUNCTION pg_temp.fail_once(p_message_id text, p_error text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	t bigint := inbox_begin(p_message_id, 'email');
BEGIN
	PERFORM inbox_fail(p_message_id, 'email', t, p_error);
	RETURN t;
END $$;

SELECT pg_temp.fail_once('f-1', 'smtp timeout') AS old_token \gset
SELECT state, attempts, last_error, resolved_by, resolved_at, resolution
FROM inbox WHERE message_id = 'f-1';

-- Retry: released, attempts 0, a new token above the old one, who and when.
SELECT inbox_retry('f-1', 'email');
SELECT state, attempts, token > :old_token AS token_above, last_error,
	   processed_at IS NULL AS not_final, lease_until IS NULL AS no_lease,
	   resolved_by = session_user AS by_session_user,
	   resolved_at <= clock_timestamp() AS resolved_at_set, resolution
FROM inbox WHERE message_id = 'f-1';
-- The late owner of the failed claim is fenced.
SELECT inbox_complete('f-1', 'email', :old_token) AS late_complete,
	   inbox_fail('f-1', 'email', :old_token, 'late') AS late_fail,
	   inbox_extend('f-1', 'email', :old_token) AS late_extend;
-- A fresh budget: the redelivery takes it over, as attempt 1 of 1.
SELECT outcome, token > :old_token AS token_above
FROM inbox_begin_outcome('f-1', 'email');
SELECT state, attempts FROM inbox WHERE message_id = 'f-1';
-- Refused on anything but a failed claim.
SELECT inbox_retry('f-1', 'email');
SELECT inbox_discard('f-1', 'email', 'no');
SELECT inbox_retry('never-claimed', 'email');
SELECT inbox_claim('one-phase', 'email');
SELECT inbox_retry('one-phase', 'email');

-- Discard: processed now, with the reason, a new token; a redelivery is
-- acked (processed) and the late owner's completion is false.
SELECT pg_temp.fail_once('f-2', 'bad address') AS old_token \gset
SELECT inbox_discard('f-2', 'email', 'address does not exist; customer told');
SELECT state, attempts, token > :old_token AS token_above, last_error,
	   processed_at >= resolved_at AS processed_now,
	   resolved_by = session_user AS by_session_user, resolution
FROM inbox WHERE message_id = 'f-2';
SELECT inbox_complete('f-2', 'email', :old_token) AS late_complete;
SELECT outcome, token FROM inbox_begin_outcome('f-2', 'email');
SELECT inbox_claim('f-2', 'email') AS claimed_again;
SELECT processed, failed FROM inbox_stats WHERE consumer = 'email';
SELECT inbox_discard('f-2', 'email', 'again');
SELECT inbox_retry('f-2', 'email');

-- Arguments.
SELECT inbox_retry(NULL, 'email');
SELECT inbox_retry('f-3', NULL);
SELECT inbox_retry('', 'email');
SELECT inbox_discard('f-3', 'email', NULL);
SELECT inbox_discard('f-3', 'email', '');
SELECT inbox_discard('f-3', 'email', repeat('x', 8193));
SELECT inbox_retry_failed('email', max => 0);
SELECT inbox_retry_failed('email', max => 10001);
SELECT inbox_retry_failed('email', max => NULL);
SELECT inbox_retry_failed(NULL);
SELECT inbox_discard_failed('email', NULL);

-- Bulk: by consumer, by age, by error text; oldest failure first, at most
-- max; failed claims only.
TRUNCATE inbox;
SELECT pg_temp.fail_once('b-' || i, CASE WHEN i % 2 = 0 THEN 'smtp timeout' ELSE 'bad address' END)
	IS NOT NULL AS failed
FROM generate_series(1, 6) i;
UPDATE inbox SET processed_at = now() - (7 - pg_catalog.substr(message_id, 3)::int) * interval '1 hour';
SELECT inbox_begin('b-open', 'email') IS NOT NULL AS open_claim;
SELECT inbox_claim('b-done', 'email') AS processed_marker;
SELECT inbox_retry_failed('email', error_like => '%timeout%', max => 2);
SELECT inbox_retry_failed('email', failed_before => now() - interval '3 hours');
SELECT inbox_discard_failed('email', 'unknown recipients', error_like => 'bad %');
SELECT inbox_discard_failed('email', 'nothing left');
SELECT inbox_retry_failed('other');
SELECT message_id, state, attempts, resolution
FROM inbox ORDER BY message_id;

-- Read-only transactions refuse them.
BEGIN READ ONLY;
SELECT inbox_retry('b-1', 'email');
ROLLBACK;

-- Nothing granted to PUBLIC.
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p
WHERE p.proname IN ('inbox_retry', 'inbox_discard', 'inbox_retry_failed', 'inbox_discard_failed')
ORDER BY 1;

TRUNCATE inbox;
DROP EXTENSION inbox;
