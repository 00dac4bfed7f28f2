-- a new message, with a raw INSERT ... ON CONFLICT DO NOTHING inside an explicit transaction
\set r random(1, 9223372036854775807)
BEGIN;
INSERT INTO raw_inbox (message_id, consumer, processed_at)
VALUES ('n-' || :client_id || '-' || :r, 'credit', now()) ON CONFLICT DO NOTHING;
COMMIT;
