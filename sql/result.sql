--
-- Idempotency keys: the stored result a duplicate gets back, the request's
-- fingerprint (mismatch), inbox_set_result and inbox_result.
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

-- The shapes: one row, outcome and result.
SELECT pg_get_function_arguments(p.oid) AS arguments,
	   pg_get_function_result(p.oid) AS result
FROM pg_proc p WHERE proname IN ('inbox_claim_outcome', 'inbox_set_result', 'inbox_result')
ORDER BY proname;

--
-- One-phase: claimed, the result recorded in the business transaction,
-- then processed with it for every duplicate.
--
BEGIN;
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'fp-a');
SELECT inbox_set_result('order-1', 'api', '{"order": 17, "status": "created"}');
-- Twice in the claiming transaction: the last one counts.
SELECT inbox_set_result('order-1', 'api', '{"order": 17, "status": "accepted"}');
COMMIT;
SELECT state, fingerprint, result FROM inbox WHERE message_id = 'order-1';

-- The same request again: processed, with the first attempt's result.
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'fp-a');
-- Without a fingerprint: not checked, processed.
SELECT * FROM inbox_claim_outcome('order-1', 'api');
-- Another request with the same key: mismatch, no result, nothing changed.
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'fp-b');
-- The fingerprint compares byte for byte: case matters.
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'FP-A');
SELECT state, attempts, fingerprint, result FROM inbox WHERE message_id = 'order-1';
-- inbox_claim answers false, as it always did.
SELECT inbox_claim('order-1', 'api');
-- Read by key.
SELECT inbox_result('order-1', 'api');
-- NULL: no marker, or a marker without a result.
SELECT inbox_result('order-none', 'api') IS NULL AS no_marker;
SELECT inbox_claim('order-2', 'api');
SELECT inbox_result('order-2', 'api') IS NULL AS no_result;
-- A marker stored without a fingerprint is not checked against.
SELECT * FROM inbox_claim_outcome('order-2', 'api', 'fp-x');
-- Each consumer has its own marker, result and fingerprint.
SELECT * FROM inbox_claim_outcome('order-1', 'billing', 'fp-b');

-- Under REPEATABLE READ and SERIALIZABLE alike.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'fp-a');
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'fp-b');
SELECT * FROM inbox_claim_outcome('order-3', 'api', 'fp-c');
SELECT inbox_set_result('order-3', 'api', '[3]');
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM inbox_claim_outcome('order-3', 'api', 'fp-c');
SELECT * FROM inbox_claim_outcome('order-3', 'api', 'fp-d');
COMMIT;

-- A claim that rolls back leaves nothing: the next one is claimed.
BEGIN;
SELECT * FROM inbox_claim_outcome('order-4', 'api', 'fp-a');
SELECT inbox_set_result('order-4', 'api', '"lost"');
ROLLBACK;
SELECT * FROM inbox_claim_outcome('order-4', 'api', 'fp-b');
SELECT inbox_result('order-4', 'api') IS NULL AS no_result;

--
-- inbox_set_result only for a marker this transaction wrote.
--
-- A duplicate's transaction: refused, and the first result stays.
BEGIN;
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'fp-a');
SELECT inbox_set_result('order-1', 'api', '{"overwritten": true}');
ROLLBACK;
SELECT inbox_result('order-1', 'api');
-- No marker at all.
SELECT inbox_set_result('order-none', 'api', '{}');
-- Written in a subtransaction of this transaction: its own.
BEGIN;
SAVEPOINT s;
SELECT inbox_claim('order-5', 'api');
RELEASE SAVEPOINT s;
SELECT inbox_set_result('order-5', 'api', '5');
COMMIT;
SELECT inbox_result('order-5', 'api');
-- Under REPEATABLE READ, the claim's own subtransaction.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('order-6', 'api');
SELECT inbox_set_result('order-6', 'api', '6');
COMMIT;
SELECT inbox_result('order-6', 'api');
-- A large result (stored out of line, compressed or not) comes back whole.
BEGIN;
SELECT * FROM inbox_claim_outcome('order-big', 'api', 'fp-big');
SELECT inbox_set_result('order-big', 'api',
	(SELECT jsonb_agg(md5(g::text)) FROM generate_series(1, 20000) g));
COMMIT;
SELECT octet_length(result::text) > 500000 AS large,
	   md5(result::text) = (SELECT md5(jsonb_agg(md5(g::text))::text) FROM generate_series(1, 20000) g) AS whole
FROM inbox_claim_outcome('order-big', 'api', 'fp-big');
SELECT md5(inbox_result('order-big', 'api')::text) = md5(result::text) AS same_by_key
FROM inbox WHERE message_id = 'order-big';
SELECT md5(b.result::text) = md5(i.result::text) AS same_by_begin
FROM inbox_begin_outcome('order-big', 'api', fingerprint => 'fp-big') b, inbox i
WHERE i.message_id = 'order-big';
-- Bad arguments.
SELECT inbox_set_result('order-5', 'api', NULL);
SELECT inbox_set_result('order-5', 'api', jsonb_build_object('big', repeat('x', 1024 * 1024)));
SELECT inbox_set_result(NULL, 'api', '{}');
SELECT inbox_result('order-1', NULL);
SELECT * FROM inbox_claim_outcome('order-7', 'api', '');
SELECT * FROM inbox_claim_outcome('order-7', 'api', repeat('f', 257));
SELECT * FROM inbox_claim_outcome('order-7', 'api', sent_at => 'infinity');
SELECT * FROM inbox_claim_outcome('order-7', 'api', NULL, NULL);
SELECT * FROM inbox_claim_outcome('order-7', NULL);
SELECT fingerprint IS NULL AS no_fingerprint FROM inbox WHERE message_id = 'order-7';
-- A fingerprint at the limit, and a message's sent_at (no floor yet).
SELECT * FROM inbox_claim_outcome('order-8', 'api', repeat('f', 256), now());
SELECT * FROM inbox_claim_outcome('order-8', 'api', repeat('f', 256), now());

--
-- Two-phase: the result is stored with the completion.
--
SELECT outcome, token > 0 AS has_token, result
FROM inbox_begin_outcome('pay-1', 'api', fingerprint => 'fp-a');
SELECT token AS token1 FROM inbox WHERE message_id = 'pay-1' \gset
-- While it runs: busy for the same request, mismatch for another.
SELECT outcome, retry_after IS NOT NULL AS has_retry, result
FROM inbox_begin_outcome('pay-1', 'api', fingerprint => 'fp-a');
SELECT outcome, token, retry_after, result
FROM inbox_begin_outcome('pay-1', 'api', fingerprint => 'fp-b');
-- A one-phase claim meets the two-phase claim: processed, as inbox_claim
-- answers false; no result yet.
SELECT * FROM inbox_claim_outcome('pay-1', 'api', 'fp-a');
SELECT inbox_complete('pay-1', 'api', :token1, '{"charge": "ch_1"}');
-- The repeat of the completion answers true, and changes nothing.
SELECT inbox_complete('pay-1', 'api', :token1, '{"charge": "ch_other"}');
SELECT state, fingerprint, result FROM inbox WHERE message_id = 'pay-1';
SELECT outcome, token, retry_after, result
FROM inbox_begin_outcome('pay-1', 'api', fingerprint => 'fp-a');
SELECT outcome, token, retry_after, result
FROM inbox_begin_outcome('pay-1', 'api');
SELECT outcome, token, retry_after, result
FROM inbox_begin_outcome('pay-1', 'api', fingerprint => 'fp-b');
SELECT * FROM inbox_claim_outcome('pay-1', 'api', 'fp-a');
SELECT inbox_result('pay-1', 'api');
-- A stale token stores nothing.
SELECT inbox_complete('pay-1', 'api', :token1 + 1000, '{"stale": true}');
SELECT inbox_result('pay-1', 'api');
-- Completion without a result: processed, result NULL; the three-argument
-- form of 1.0.0 still works.
SELECT token AS token2 FROM inbox_begin_outcome('pay-2', 'api') \gset
SELECT inbox_complete('pay-2', 'api', :token2);
SELECT outcome, result FROM inbox_begin_outcome('pay-2', 'api');
SELECT inbox_complete('pay-3', 'api', 1, jsonb_build_object('big', repeat('x', 1024 * 1024)));

-- A mismatch changes nothing, whatever the marker's state: a released
-- claim is not taken, an expired one not taken over nor failed.
SELECT token AS token4 FROM inbox_begin_outcome('pay-4', 'api', fingerprint => 'fp-a') \gset
SELECT inbox_fail('pay-4', 'api', :token4, 'timeout');
SELECT outcome, token, result FROM inbox_begin_outcome('pay-4', 'api', fingerprint => 'fp-b');
SELECT state, attempts, token = :token4 AS same_token FROM inbox WHERE message_id = 'pay-4';
-- The same request takes it over.
SELECT outcome FROM inbox_begin_outcome('pay-4', 'api', fingerprint => 'fp-a');
SELECT pg_temp.expire('pay-4');
SELECT outcome, token FROM inbox_begin_outcome('pay-4', 'api', fingerprint => 'fp-b');
SELECT state, attempts FROM inbox WHERE message_id = 'pay-4';
-- Its attempts used up: the mismatch still changes nothing (the same
-- request's begin marks it failed).
SELECT inbox_configure('api-once', max_attempts => 1);
SELECT outcome FROM inbox_begin_outcome('pay-5', 'api-once', fingerprint => 'fp-a');
SELECT pg_temp.expire('pay-5');
SELECT outcome FROM inbox_begin_outcome('pay-5', 'api-once', fingerprint => 'fp-b');
SELECT state FROM inbox WHERE message_id = 'pay-5';
SELECT outcome FROM inbox_begin_outcome('pay-5', 'api-once', fingerprint => 'fp-a');
SELECT outcome FROM inbox_begin_outcome('pay-5', 'api-once', fingerprint => 'fp-b');
-- A begin with a fingerprint meets a one-phase marker with another one.
SELECT outcome, result FROM inbox_begin_outcome('order-1', 'api', fingerprint => 'fp-b');
SELECT outcome, result FROM inbox_begin_outcome('order-1', 'api', fingerprint => 'fp-a');
-- inbox_begin takes no fingerprint: it is not checked, and takes the
-- expired claim over.
SELECT inbox_begin('pay-4', 'api') IS NOT NULL AS begin_took_it;
-- Bad fingerprints and sent_at.
SELECT * FROM inbox_begin_outcome('pay-6', 'api', fingerprint => '');
SELECT * FROM inbox_begin_outcome('pay-6', 'api', sent_at => '-infinity');

--
-- The result lives and is pruned with its marker.
--
BEGIN;
UPDATE inbox SET processed_at = now() - interval '30 days' WHERE message_id = 'order-1';
SELECT inbox_configure('api', retention => '1 day');
SELECT inbox_prune() >= 1 AS pruned;
SELECT inbox_result('order-1', 'api') IS NULL AS gone;
SELECT * FROM inbox_claim_outcome('order-1', 'api', 'fp-b');
ROLLBACK;

--
-- Privileges: the result and fingerprint are read with the caller's.
--
-- Monitoring roles read neither.
SELECT has_column_privilege('pg_monitor', 'inbox', 'result', 'SELECT') AS monitor_result,
	   has_column_privilege('pg_monitor', 'inbox', 'fingerprint', 'SELECT') AS monitor_fingerprint;
-- A role with inbox_claim's column grants: inbox_claim_outcome's duplicate
-- needs SELECT on result and fingerprint too (the probe does not read
-- past it), inbox_result on result.
CREATE ROLE regress_inbox_keys;
GRANT USAGE ON SCHEMA public TO regress_inbox_keys;
GRANT EXECUTE ON FUNCTION inbox_claim_outcome(text, text, text, timestamptz),
	inbox_result(text, text), inbox_set_result(text, text, jsonb) TO regress_inbox_keys;
GRANT INSERT, SELECT (message_id, consumer) ON inbox TO regress_inbox_keys;
SET ROLE regress_inbox_keys;
SELECT * FROM inbox_claim_outcome('pay-1', 'api');
SELECT inbox_result('pay-1', 'api');
RESET ROLE;
GRANT SELECT (result, fingerprint) ON inbox TO regress_inbox_keys;
SET ROLE regress_inbox_keys;
SELECT * FROM inbox_claim_outcome('pay-1', 'api', 'fp-a');
SELECT * FROM inbox_claim_outcome('pay-1', 'api', 'fp-b');
SELECT inbox_result('pay-1', 'api');
-- inbox_set_result needs UPDATE on result.
BEGIN;
SELECT * FROM inbox_claim_outcome('keys-1', 'api');
SELECT inbox_set_result('keys-1', 'api', '1');
ROLLBACK;
RESET ROLE;
GRANT UPDATE (result) ON inbox TO regress_inbox_keys;
SET ROLE regress_inbox_keys;
BEGIN;
SELECT * FROM inbox_claim_outcome('keys-1', 'api');
SELECT inbox_set_result('keys-1', 'api', '1');
COMMIT;
SELECT * FROM inbox_claim_outcome('keys-1', 'api');
RESET ROLE;

DROP OWNED BY regress_inbox_keys;
DROP ROLE regress_inbox_keys;
TRUNCATE inbox;
DROP EXTENSION inbox;
