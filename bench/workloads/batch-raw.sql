-- a batch of 1000 new messages with one INSERT ... SELECT ... ON CONFLICT
\set r random(1, 9223372036854775807)
WITH claimed AS (
	INSERT INTO batch_inbox (message_id, consumer, processed_at)
	SELECT 'b-' || :client_id || '-' || :r || '-' || g, 'credit', now()
	FROM generate_series(1, 1000) g
	ON CONFLICT DO NOTHING
	RETURNING message_id)
SELECT count(*) FROM claimed;
