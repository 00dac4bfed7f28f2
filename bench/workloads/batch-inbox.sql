-- a batch of 1000 new messages with inbox_claim_many
\set r random(1, 9223372036854775807)
SELECT count(*) FROM inbox_claim_many(
	ARRAY(SELECT 'b-' || :client_id || '-' || :r || '-' || g FROM generate_series(1, 1000) g),
	'credit');
