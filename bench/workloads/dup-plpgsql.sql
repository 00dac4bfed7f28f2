-- a duplicate, with a PL/pgSQL EXCEPTION block
\set r random(1, 100000)
SELECT plpgsql_claim('d-' || :r, 'credit');
