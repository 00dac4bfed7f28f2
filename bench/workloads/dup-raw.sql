-- a duplicate, with a raw INSERT ... ON CONFLICT DO NOTHING
\set r random(1, 100000)
INSERT INTO raw_inbox (message_id, consumer, processed_at)
VALUES ('d-' || :r, 'credit', now()) ON CONFLICT DO NOTHING;
