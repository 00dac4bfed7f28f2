-- a new message, claimed with inbox_claim inside an explicit transaction, as a consumer claims next to its business change
\set r random(1, 9223372036854775807)
BEGIN;
SELECT inbox_claim('n-' || :client_id || '-' || :r, 'credit');
COMMIT;
