-- a new message, with a PL/pgSQL EXCEPTION block
\set r random(1, 9223372036854775807)
SELECT plpgsql_claim('n-' || :client_id || '-' || :r, 'credit');
