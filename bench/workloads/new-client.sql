-- a new message, the article's client-side pattern: check, then insert
-- (two round trips; a duplicate would be caught by the client)
\set r random(1, 9223372036854775807)
BEGIN;
SELECT EXISTS (SELECT FROM client_inbox
			   WHERE message_id = 'n-' || :client_id || '-' || :r AND consumer = 'credit') AS seen \gset
\if :seen
\else
INSERT INTO client_inbox (message_id, consumer, processed_at)
VALUES ('n-' || :client_id || '-' || :r, 'credit', now());
\endif
COMMIT;
