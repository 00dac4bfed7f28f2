-- a two-phase claim with inbox_begin and inbox_complete (two transactions)
\set r random(1, 9223372036854775807)
SELECT inbox_begin('t-' || :client_id || '-' || :r, 'email') AS token \gset
SELECT inbox_complete('t-' || :client_id || '-' || :r, 'email', :token);
