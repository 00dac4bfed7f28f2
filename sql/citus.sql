--
-- A table Citus manages is a shell: its rows are in shards, which Citus's
-- planner sends every statement to, so no fast path may read or write it
-- (src/objects.c, managed_by_citus).  The extension learns it from
-- pg_catalog.pg_dist_partition, Citus's table of the relations it manages,
-- without linking against Citus.  Here a table of that name stands in for
-- Citus's: with a row for inbox, the claims take the SQL path (on this
-- server the heap is the real one, so the answers stay right, which is
-- what lets the difference be seen: a duplicate then costs a
-- subtransaction and an identity value).  make test-citus runs a real
-- cluster.
--
CREATE EXTENSION inbox;

-- No pg_dist_partition: the fast path.  A duplicate costs nothing.
SELECT inbox_claim('c-1', 'credit') AS new;
SELECT last_value AS seq_before FROM inbox_id_seq \gset
BEGIN;
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_assigned;
COMMIT;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

-- Citus's table, as Citus creates it (the columns that matter here), with
-- no row for inbox yet: still the fast path.
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (
	logicalrelid regclass NOT NULL,
	partmethod "char" NOT NULL
);
RESET allow_system_table_mods;
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
BEGIN;
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_assigned;
COMMIT;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

-- create_distributed_table adds the row and invalidates the table's
-- relcache entry (an ALTER TABLE stands in for that here): the session's
-- cached objects are looked up again, and the probe and every fast path
-- decline.  The duplicate is answered by the INSERT.
INSERT INTO pg_catalog.pg_dist_partition VALUES ('inbox'::regclass, 'h');
ALTER TABLE inbox SET (fillfactor = 100);
SELECT last_value AS seq_before FROM inbox_id_seq \gset
BEGIN;
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS xid_assigned;
COMMIT;
SELECT last_value > :seq_before AS identity_consumed FROM inbox_id_seq;

-- A new claim takes a subtransaction (two transaction ids, not one).
SELECT pg_current_xact_id()::text::bigint AS xid_before \gset
SELECT inbox_claim('c-2', 'credit') AS new_claim;
SELECT pg_current_xact_id()::text::bigint - :xid_before - 1 AS xids_used;

-- A new session finds it too.  The SQL paths answer as the fast paths do.
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value > :seq_before AS identity_consumed FROM inbox_id_seq;
SELECT * FROM inbox_claim_many(ARRAY['c-1', 'c-3', 'c-2', 'c-4'], 'credit') AS claimed ORDER BY 1;
SELECT inbox_begin('t-1', 'credit', lease => '1 minute') IS NOT NULL AS begun;
SELECT inbox_complete('t-1', 'credit', (SELECT token FROM inbox WHERE message_id = 't-1')) AS completed;
SELECT inbox_complete('t-1', 'credit', (SELECT token FROM inbox WHERE message_id = 't-1')) AS repeated;
UPDATE inbox SET processed_at = now() - interval '30 days' WHERE message_id IN ('c-3', 'c-4');
SELECT inbox_prune() AS pruned;

-- inbox_consumers managed by Citus (a reference table): two-phase claims
-- still answer, by the SQL path.
INSERT INTO pg_catalog.pg_dist_partition VALUES ('inbox_consumers'::regclass, 'n');
\c
SELECT inbox_configure('credit', lease => '5 minutes');
SELECT inbox_begin('t-2', 'credit') IS NOT NULL AS begun;
SELECT lease_until - received_at AS lease FROM inbox WHERE message_id = 't-2';

-- Citus undistributed them (undistribute_table deletes the rows, and
-- invalidates): the fast path again.
DELETE FROM pg_catalog.pg_dist_partition;
ALTER TABLE inbox RESET (fillfactor);
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

-- A table of that name without Citus's column cannot be told apart from
-- a changed Citus: the fast paths decline.
DROP TABLE pg_catalog.pg_dist_partition;
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (relation oid);
RESET allow_system_table_mods;
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value > :seq_before AS identity_consumed FROM inbox_id_seq;

DROP TABLE pg_catalog.pg_dist_partition;
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

TRUNCATE inbox;
DROP EXTENSION inbox;
