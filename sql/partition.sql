--
-- The inbox table made a partition of another table: a plain INSERT must
-- meet the partition's constraint, and so must a claim.  PostgreSQL 17 and
-- later refuse to attach a table with an identity column as a partition
-- (expected/partition_1.out).
--
CREATE EXTENSION inbox;
BEGIN;
CREATE TABLE all_inbox (LIKE inbox) PARTITION BY LIST (consumer);
ALTER TABLE all_inbox ATTACH PARTITION inbox FOR VALUES IN ('credit');
SELECT inbox_claim('p-1', 'credit') AS in_partition;
\set VERBOSITY terse
SELECT inbox_claim('p-2', 'email');
\set VERBOSITY default
ROLLBACK;

TRUNCATE inbox;
DROP EXTENSION inbox;
