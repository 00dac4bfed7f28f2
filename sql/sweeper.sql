--
-- inbox_next: a sweeper takes released and expired claims
--
CREATE EXTENSION inbox;

-- Simulates the passing of a lease; returns how many claims it expired.
CREATE FUNCTION pg_temp.expire(p_message_id text) RETURNS bigint
LANGUAGE sql AS $$
	WITH expired AS (
		UPDATE inbox SET lease_until = clock_timestamp() - interval '1 second'
		WHERE message_id = p_message_id
		RETURNING 1)
	SELECT count(*) FROM expired
$$;

-- Claims in every state: live, expired, released, processed, one-phase,
-- and another consumer's expired claim.
SELECT inbox_begin('live', 'email') IS NOT NULL AS live;
SELECT inbox_begin('expired-1', 'email', payload => '{"n": 1}') IS NOT NULL AS expired_1;
SELECT pg_temp.expire('expired-1');
SELECT inbox_fail('released', 'email', inbox_begin('released', 'email'), 'boom') AS released;
SELECT inbox_complete('processed', 'email', inbox_begin('processed', 'email')) AS processed;
SELECT inbox_begin('expired-2', 'email') IS NOT NULL AS expired_2;
SELECT pg_temp.expire('expired-2');
SELECT inbox_claim('one-phase', 'email') AS one_phase;
SELECT inbox_begin('other-consumer', 'audit') IS NOT NULL AS other_consumer;
SELECT pg_temp.expire('other-consumer');

SELECT consumer, processed, in_flight, expired, released, failed,
	   oldest_in_flight_age > interval '0' AS in_flight_aged,
	   oldest_released_age > interval '0' AS released_aged
FROM inbox_stats ORDER BY consumer;

-- Oldest first, at most max, with new tokens and one more attempt each.
SELECT max(token) AS before_max FROM inbox \gset
SELECT message_id, token > :before_max AS new_token, attempts, payload
FROM inbox_next('email', max => 2);
SELECT message_id, attempts FROM inbox_next('email', interval '1 minute');
SELECT count(*) AS nothing_left FROM inbox_next('email');

SELECT message_id, state, attempts FROM inbox WHERE consumer = 'email' ORDER BY id;

-- A claim the sweeper took is completed with the sweeper's token.
SELECT token AS swept_token FROM inbox WHERE message_id = 'expired-1' \gset
SELECT inbox_complete('expired-1', 'email', :swept_token) AS completed_by_sweeper;

-- Attempts left matter: with max_attempts 2, an expired second attempt is
-- not taken again.
SELECT consumer AS configured FROM inbox_configure('audit', max_attempts => 2);
SELECT message_id, attempts FROM inbox_next('audit');
SELECT pg_temp.expire('other-consumer');
SELECT count(*) AS exhausted_not_taken FROM inbox_next('audit');

SELECT consumer, processed, in_flight, expired, released, failed
FROM inbox_stats ORDER BY consumer;

TRUNCATE inbox;
DROP EXTENSION inbox;
