-- a new message, with a raw INSERT ... ON CONFLICT DO NOTHING, into a table like inbox's own
\set r random(1, 9223372036854775807)
INSERT INTO shape_inbox (message_id, consumer, processed_at)
VALUES ('n-' || :client_id || '-' || :r, 'credit', now()) ON CONFLICT DO NOTHING;
