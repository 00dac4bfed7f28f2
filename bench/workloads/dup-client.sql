-- a duplicate, the article's client-side pattern: the check finds it
\set r random(1, 100000)
BEGIN;
SELECT EXISTS (SELECT FROM client_inbox
			   WHERE message_id = 'd-' || :r AND consumer = 'credit') AS seen \gset
\if :seen
\else
INSERT INTO client_inbox (message_id, consumer, processed_at)
VALUES ('d-' || :r, 'credit', now());
\endif
COMMIT;
