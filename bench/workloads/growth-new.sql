-- a new message whose id falls anywhere in the key index (like a uuid)
\set r random(1, 9223372036854775807)
SELECT inbox_claim(md5('new-' || :client_id || '-' || :r), 'credit');
