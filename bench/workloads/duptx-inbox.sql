-- a duplicate (already committed), claimed with inbox_claim inside an explicit transaction
\set r random(1, 100000)
BEGIN;
SELECT inbox_claim('d-' || :r, 'credit');
COMMIT;
