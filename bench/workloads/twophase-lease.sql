-- the same two transactions written by hand: a lease column, no token
\set r random(1, 9223372036854775807)
INSERT INTO lease_inbox (message_id, consumer, state, lease_until)
VALUES ('t-' || :client_id || '-' || :r, 'email', 'claimed', clock_timestamp() + interval '5 minutes')
ON CONFLICT (message_id, consumer) DO UPDATE
SET state = 'claimed', lease_until = excluded.lease_until, attempts = lease_inbox.attempts + 1
WHERE lease_inbox.state = 'released' OR (lease_inbox.state = 'claimed' AND lease_inbox.lease_until <= clock_timestamp())
RETURNING id;
UPDATE lease_inbox SET state = 'processed', processed_at = clock_timestamp(), lease_until = NULL
WHERE message_id = 't-' || :client_id || '-' || :r AND consumer = 'email' AND state = 'claimed';
