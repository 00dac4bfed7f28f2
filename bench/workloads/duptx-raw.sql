-- a duplicate, with a raw INSERT ... ON CONFLICT DO NOTHING inside an explicit transaction
\set r random(1, 100000)
BEGIN;
INSERT INTO raw_inbox (message_id, consumer, processed_at)
VALUES ('d-' || :r, 'credit', now()) ON CONFLICT DO NOTHING;
COMMIT;
