-- a duplicate (already committed), claimed with inbox_claim
\set r random(1, 100000)
SELECT inbox_claim('d-' || :r, 'credit');
