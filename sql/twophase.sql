--
-- Two-phase claims: inbox_begin, inbox_extend, inbox_complete, inbox_fail
--
CREATE EXTENSION inbox;

-- Simulates the passing of a lease, as if the owner had died or paused.
-- Returns how many claims it expired.
CREATE FUNCTION pg_temp.expire(p_message_id text, p_consumer text) RETURNS bigint
LANGUAGE sql AS $$
	WITH expired AS (
		UPDATE inbox SET lease_until = clock_timestamp() - interval '1 second'
		WHERE message_id = p_message_id AND consumer = p_consumer
		RETURNING 1)
	SELECT count(*) FROM expired
$$;

-- A new message: a token, a running lease, the first attempt.
SELECT inbox_begin('m-1', 'email') AS token1 \gset
SELECT :token1 > 0 AS got_token;
SELECT state, attempts, token = :token1 AS token_stored,
	   lease_until > clock_timestamp() + interval '4 minutes' AS default_lease_5min,
	   processed_at IS NULL AS not_processed
FROM inbox WHERE message_id = 'm-1';

-- Held by a live claim: no token for anyone else.
SELECT inbox_begin('m-1', 'email') IS NULL AS held_by_live_claim;

-- Heartbeat: only the current token extends, and only a claim.
SELECT inbox_extend('m-1', 'email', :token1, interval '10 minutes') AS extended;
SELECT lease_until > clock_timestamp() + interval '9 minutes' AS lease_renewed
FROM inbox WHERE message_id = 'm-1';
SELECT inbox_extend('m-1', 'email', :token1 + 1000) AS wrong_token;
SELECT inbox_extend('never-claimed', 'email', :token1) AS never_claimed;

-- Completion: a wrong token changes nothing; the right one processes; a
-- repeat of the right one (its first reply was lost) is true again.
SELECT inbox_complete('m-1', 'email', :token1 + 1000) AS wrong_token;
SELECT inbox_complete('never-claimed', 'email', :token1) AS never_claimed;
SELECT inbox_complete('m-1', 'email', :token1) AS completed;
SELECT inbox_complete('m-1', 'email', :token1) AS repeated;
SELECT state, attempts, lease_until IS NULL AS lease_cleared,
	   processed_at >= received_at AS processed_after_received
FROM inbox WHERE message_id = 'm-1';
SELECT inbox_begin('m-1', 'email') IS NULL AS processed_is_not_claimable;
SELECT inbox_extend('m-1', 'email', :token1) AS processed_is_not_extendable;
SELECT inbox_fail('m-1', 'email', :token1, 'late') AS processed_cannot_fail;

-- One-phase and two-phase claims of one (message, consumer) exclude each
-- other: inbox_claim answers false for any marker.
SELECT inbox_begin('m-2', 'email') AS token2 \gset
SELECT inbox_claim('m-2', 'email') AS claim_of_live_claim;
SELECT inbox_claim('m-1', 'email') AS claim_of_processed;
SELECT inbox_claim('m-3', 'email') AS one_phase;
SELECT inbox_begin('m-3', 'email') IS NULL AS begin_of_one_phase_marker;

-- Takeover of an expired claim: a new, larger token and another attempt;
-- the old token is dead for every step.
SELECT pg_temp.expire('m-2', 'email');
SELECT inbox_begin('m-2', 'email') AS token2b \gset
SELECT :token2b > :token2 AS token_increases;
SELECT state, attempts, token = :token2b AS new_token_stored FROM inbox WHERE message_id = 'm-2';
SELECT inbox_extend('m-2', 'email', :token2) AS stale_extend;
SELECT inbox_complete('m-2', 'email', :token2) AS stale_complete;
SELECT inbox_fail('m-2', 'email', :token2, 'stale') AS stale_fail;
SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-2';
SELECT inbox_complete('m-2', 'email', :token2b) AS current_complete;

-- An expired claim that nobody took over can still be extended or
-- completed by its owner: its token is still current.
SELECT inbox_begin('m-4', 'email') AS token4 \gset
SELECT pg_temp.expire('m-4', 'email');
SELECT inbox_extend('m-4', 'email', :token4) AS extend_expired_not_taken;
SELECT pg_temp.expire('m-4', 'email');
SELECT inbox_complete('m-4', 'email', :token4) AS complete_expired_not_taken;

-- Failing: released for another attempt while attempts remain, then failed
-- with the last error.  The consumer allows 3 attempts.
SELECT consumer, max_attempts FROM inbox_configure('sms', max_attempts => 3);
SELECT inbox_begin('m-5', 'sms') AS t1 \gset
SELECT inbox_fail('m-5', 'sms', :t1, 'gateway timeout') AS failed_attempt_1;
SELECT state, attempts, last_error, lease_until IS NULL AS no_lease FROM inbox WHERE message_id = 'm-5';
SELECT inbox_complete('m-5', 'sms', :t1) AS released_token_is_dead;
SELECT inbox_begin('m-5', 'sms') AS t2 \gset
SELECT :t2 > :t1 AS new_token;
SELECT inbox_fail('m-5', 'sms', :t2, 'gateway timeout again') AS failed_attempt_2;
SELECT inbox_begin('m-5', 'sms') AS t3 \gset
SELECT inbox_fail('m-5', 'sms', :t3, 'card declined') AS failed_attempt_3;
SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-5';
SELECT inbox_begin('m-5', 'sms') IS NULL AS failed_is_not_claimable;

-- An operator retries a failed message by hand (README, "Retrying a failed
-- message by hand"): released with one more attempt allowed.
UPDATE inbox SET state = 'released', attempts = attempts - 1
WHERE message_id = 'm-5' AND consumer = 'sms' AND state = 'failed' AND attempts > 1;
SELECT inbox_begin('m-5', 'sms') AS t4 \gset
SELECT inbox_complete('m-5', 'sms', :t4) AS retried_and_completed;
SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-5';

-- An expired claim with no attempts left is failed by the next begin.
SELECT consumer AS configured FROM inbox_configure('push', max_attempts => 1);
SELECT inbox_begin('m-6', 'push') IS NOT NULL AS first_attempt;
SELECT pg_temp.expire('m-6', 'push');
SELECT inbox_begin('m-6', 'push') IS NULL AS no_more_attempts;
SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-6';

-- Payload: stored by begin, kept across a takeover without one.
SELECT inbox_begin('m-7', 'email', payload => '{"to": "a@example.com"}') IS NOT NULL AS with_payload;
SELECT pg_temp.expire('m-7', 'email');
SELECT inbox_begin('m-7', 'email') IS NOT NULL AS taken_over;
SELECT payload FROM inbox WHERE message_id = 'm-7';

-- Explicit leases, and the consumer's configured lease.
SELECT inbox_begin('m-8', 'email', interval '30 seconds') IS NOT NULL AS short_lease;
SELECT lease_until BETWEEN clock_timestamp() + interval '20 seconds'
					   AND clock_timestamp() + interval '30 seconds' AS lease_30s
FROM inbox WHERE message_id = 'm-8';
SELECT consumer AS configured FROM inbox_configure('report', lease => interval '2 hours');
SELECT inbox_begin('m-9', 'report') IS NOT NULL AS configured_lease;
SELECT lease_until > clock_timestamp() + interval '119 minutes' AS lease_2h
FROM inbox WHERE message_id = 'm-9';
SET inbox.lease = '45s';
SELECT inbox_begin('m-10', 'email') IS NOT NULL AS setting_lease;
SELECT lease_until < clock_timestamp() + interval '46 seconds' AS lease_45s
FROM inbox WHERE message_id = 'm-10';
RESET inbox.lease;

-- Tokens strictly increase across every claim, whatever the consumer.
SELECT count(*) = count(DISTINCT token) AS tokens_unique
FROM inbox WHERE token IS NOT NULL;

-- A step on a claim finds it by its key, one lookup however many claims
-- are open: no statement may use the partial indexes, which hold every open
-- (or processed) marker of the consumer.  Counted by the statistics: one
-- lookup per statement (a completion that changed nothing reads the marker
-- again; a refused extend or fail reads it to find out whose counter the
-- refusal raises: twophase_refused_for).
CREATE FUNCTION index_scans(index_name name) RETURNS bigint
LANGUAGE sql AS $$
	SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = index_name
$$;
SELECT inbox_begin('s-' || g, 'scans') IS NOT NULL AS open_claim
FROM generate_series(1, 3) g;
SELECT inbox_begin('s-4', 'scans') AS token \gset
SELECT pg_stat_force_next_flush();
SELECT index_scans('inbox_open_claims') AS open_claims_before,
	index_scans('inbox_prunable') AS prunable_before,
	index_scans('inbox_message_id_consumer_key') AS key_before \gset
SELECT inbox_extend('s-4', 'scans', :token) AS extended;
SELECT inbox_complete('s-4', 'scans', :token) AS completed;
SELECT inbox_complete('s-4', 'scans', :token) AS repeated;
SELECT inbox_complete('s-4', 'scans', :token - 1) AS stale;
SELECT inbox_fail('s-4', 'scans', :token, 'late') AS failed_after_completion;
SELECT pg_stat_force_next_flush();
SELECT pg_stat_clear_snapshot();
SELECT index_scans('inbox_open_claims') - :open_claims_before AS open_claims_scans,
	index_scans('inbox_prunable') - :prunable_before AS prunable_scans,
	index_scans('inbox_message_id_consumer_key') - :key_before AS key_scans;
DROP FUNCTION index_scans(name);

TRUNCATE inbox;
DROP EXTENSION inbox;
