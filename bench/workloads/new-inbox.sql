-- a new message, claimed with inbox_claim
\set r random(1, 9223372036854775807)
SELECT inbox_claim('n-' || :client_id || '-' || :r, 'credit');
