--
-- A table Citus manages is a shell: its rows are in shards, which Citus's
-- planner sends every statement to, so the probe must not read it
-- (src/objects.c, inbox_managed_by_citus).  The extension learns it from
-- pg_catalog.pg_dist_partition, Citus's table of the relations it manages,
-- without linking against Citus.  Here tables of Citus's names stand in
-- for Citus's own: with a row for inbox, the claims take the statements
-- written for Citus (src/claim.c, src/twophase_citus.c), which on this
-- server run on the real heap, so their answers can be checked, and the
-- maintenance passes run over the shards "placed" here (src/citus.c).
-- make test-citus runs a real cluster.
--
CREATE EXTENSION inbox;

-- No pg_dist_partition: the probe answers.  A duplicate costs nothing.
SELECT inbox_claim('c-1', 'credit') AS new;
SELECT last_value AS seq_before FROM inbox_id_seq \gset
BEGIN;
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_assigned;
COMMIT;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

-- Citus's tables, as Citus creates them (the columns that matter here),
-- with no row for inbox yet: still the probe.  This node is group 3.
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (
	logicalrelid regclass NOT NULL,
	partmethod "char" NOT NULL,
	repmodel "char" NOT NULL
);
CREATE TABLE pg_catalog.pg_dist_local_group (groupid integer NOT NULL);
CREATE TABLE pg_catalog.pg_dist_shard (
	logicalrelid regclass NOT NULL,
	shardid bigint NOT NULL
);
CREATE TABLE pg_catalog.pg_dist_placement (
	shardid bigint NOT NULL,
	groupid integer NOT NULL
);
RESET allow_system_table_mods;
INSERT INTO pg_catalog.pg_dist_local_group VALUES (3);
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
BEGIN;
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_assigned;
COMMIT;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

-- create_distributed_table adds the row and invalidates the table's
-- relcache entry (an ALTER TABLE stands in for that here): the session's
-- cached objects are looked up again, and the probe does not run.  The
-- duplicate is answered by INSERT ... ON CONFLICT DO NOTHING, which draws
-- the marker's id first.
INSERT INTO pg_catalog.pg_dist_partition VALUES ('inbox'::regclass, 'h', 's');
ALTER TABLE inbox SET (fillfactor = 100);
SELECT last_value AS seq_before FROM inbox_id_seq \gset
BEGIN;
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT 'usable' AS transaction;
COMMIT;
SELECT last_value > :seq_before AS identity_consumed FROM inbox_id_seq;

-- A new claim: no subtransaction (one transaction id), and an id with
-- the node's group id above bit 48.
SELECT pg_current_xact_id()::text::bigint AS xid_before \gset
SELECT inbox_claim('c-2', 'credit') AS new_claim;
SELECT pg_current_xact_id()::text::bigint - :xid_before - 1 AS xids_used;
SELECT id >> 48 AS group_of_id, id & ((1::bigint << 48) - 1) > 0 AS count_of_id
FROM inbox WHERE message_id = 'c-2';

-- A new session finds it too.  The statements answer as the others do;
-- the batch returns its ids sorted.
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value > :seq_before AS identity_consumed FROM inbox_id_seq;
SELECT * FROM inbox_claim_many(ARRAY['c-4', 'c-1', 'c-3', 'c-2', 'c-4'], 'credit') AS claimed;
SELECT count(DISTINCT id) AS distinct_ids, count(*) FILTER (WHERE id >> 48 = 3) AS in_group_3
FROM inbox WHERE message_id IN ('c-2', 'c-3', 'c-4');

-- Two-phase calls and maintenance read the consumers' settings, which on
-- a distributed inbox only a reference table gives every node alike:
-- refused until inbox_consumers is one.
SELECT inbox_begin('t-1', 'credit');
SELECT inbox_prune();
INSERT INTO pg_catalog.pg_dist_partition VALUES ('inbox_consumers'::regclass, 'n', 't');
ALTER TABLE inbox_consumers SET (fillfactor = 100);

-- Two-phase: a token has the group id in its low 10 bits.
SELECT inbox_begin('t-1', 'credit', lease => '1 minute') & 1023 AS group_of_token;
SELECT inbox_extend('t-1', 'credit', (SELECT token FROM inbox WHERE message_id = 't-1'), '2 minutes') AS extended;
SELECT inbox_extend('t-1', 'credit', 12345, '2 minutes') AS stale_extended;
SELECT inbox_complete('c-2', 'credit', 0) AS one_phase_marker_completed;
SELECT inbox_complete('t-1', 'credit', (SELECT token FROM inbox WHERE message_id = 't-1')) AS completed;
SELECT inbox_complete('t-1', 'credit', (SELECT token FROM inbox WHERE message_id = 't-1')) AS repeated;
SELECT * FROM inbox_begin_outcome('t-1', 'credit');

-- Idempotency keys: a result or a fingerprint is refused on a table Citus
-- manages (0A000), without changing anything; without them the functions
-- answer as elsewhere, with no result.
SELECT * FROM inbox_begin_outcome('t-9', 'credit', fingerprint => 'fp');
SELECT inbox_complete('t-1', 'credit', (SELECT token FROM inbox WHERE message_id = 't-1'), '{}');
SELECT * FROM inbox_claim_outcome('c-9', 'credit', 'fp');
BEGIN;
SELECT * FROM inbox_claim_outcome('c-9', 'credit');
SELECT inbox_set_result('c-9', 'credit', '{}');
ROLLBACK;
SELECT count(*) AS untouched FROM inbox WHERE message_id IN ('t-9', 'c-9');
SELECT * FROM inbox_claim_outcome('c-1', 'credit');
SELECT inbox_result('t-1', 'credit') IS NULL AS no_result;

-- A takeover draws above the token it replaces, however far ahead that
-- one is (drawn on another node, or written by hand), and the node's
-- sequence stays where it was: a token a consumer role wrote into its row
-- must not use the sequence up for every consumer (docs/security.md).
SELECT inbox_begin('t-3', 'credit', lease => '1 minute') IS NOT NULL AS begun;
UPDATE inbox SET token = (5000::bigint << 10) | 1, lease_until = now() - interval '1 second'
WHERE message_id = 't-3';
SELECT outcome, token > (5000::bigint << 10) | 1 AS above, token & 1023 AS group_of_token
FROM inbox_begin_outcome('t-3', 'credit');
SELECT inbox_fail('t-3', 'credit', (SELECT token FROM inbox WHERE message_id = 't-3'), 'boom') AS failed;
SELECT state, attempts, last_error FROM inbox WHERE message_id = 't-3';
SELECT message_id, attempts, token > (5000::bigint << 10) AS above FROM inbox_next('credit', max => 5);
SELECT last_value < 5000 AS sequence_not_moved FROM inbox_token_seq;
SELECT inbox_fail('t-3', 'credit', (SELECT token FROM inbox WHERE message_id = 't-3'), 'boom') AS failed;

-- Attempts used up: a begin marks it failed, with the reclaimer's words.
SELECT inbox_configure('credit', max_attempts => 3);
UPDATE inbox SET state = 'claimed', lease_until = now() - interval '1 second' WHERE message_id = 't-3';
SELECT * FROM inbox_begin_outcome('t-3', 'credit');
SELECT state, attempts, last_error FROM inbox WHERE message_id = 't-3';

-- Maintenance: the table itself is a shell, so a pass works on the shards
-- placed on this node.  None yet: nothing to do, however old the markers.
UPDATE inbox SET processed_at = now() - interval '30 days' WHERE message_id IN ('c-3', 'c-4');
SELECT inbox_prune() AS pruned;

-- A shard here (Citus names it and its indexes after the table's, with the
-- shard id), and one placed on another node (group 4): only this node's is
-- pruned and reclaimed.
CREATE TABLE inbox_102008 (LIKE inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE inbox_102008 ADD CONSTRAINT inbox_message_id_consumer_key_102008
	PRIMARY KEY (message_id, consumer);
CREATE INDEX inbox_prunable_102008 ON inbox_102008 (consumer, processed_at, id)
	WHERE state IN ('processed', 'failed');
INSERT INTO inbox_102008 (id, message_id, consumer, state, received_at, processed_at)
SELECT i, 's-' || i, 'credit', 'processed', now() - interval '30 days', now() - interval '30 days'
FROM generate_series(1, 3) i;
INSERT INTO inbox_102008 (id, message_id, consumer, state, received_at, token, lease_until)
VALUES (4, 's-claim', 'credit', 'claimed', now(), 7, now() - interval '1 second');
CREATE TABLE inbox_102009 (LIKE inbox_102008 INCLUDING ALL);
INSERT INTO inbox_102009 SELECT * FROM inbox_102008;
INSERT INTO pg_catalog.pg_dist_shard VALUES ('inbox', 102008), ('inbox', 102009);
INSERT INTO pg_catalog.pg_dist_placement VALUES (102008, 3), (102009, 4);
SELECT inbox_prune() AS pruned;
SELECT inbox_reclaim() AS reclaimed;
SELECT 'here' AS shard, message_id, state FROM inbox_102008
UNION ALL SELECT 'elsewhere', message_id, state FROM inbox_102009 ORDER BY 1, 2;
SELECT count(*) AS markers_left_in_the_shell FROM inbox WHERE message_id IN ('c-3', 'c-4');
DELETE FROM pg_catalog.pg_dist_placement;
DELETE FROM pg_catalog.pg_dist_shard;
DROP TABLE inbox_102008, inbox_102009;

-- A maintenance pass refuses shards Citus keeps several copies of (a
-- reference table, or a replication factor above 1): each node would
-- change its own copy.
UPDATE pg_catalog.pg_dist_partition SET repmodel = 't' WHERE logicalrelid = 'inbox'::regclass;
ALTER TABLE inbox SET (fillfactor = 100);
SELECT inbox_reclaim();
UPDATE pg_catalog.pg_dist_partition SET repmodel = 's' WHERE logicalrelid = 'inbox'::regclass;

-- Two-phase claims take the consumer's lease from the reference table.
\c
SELECT inbox_configure('credit', lease => '5 minutes');
SELECT inbox_begin('t-2', 'credit') IS NOT NULL AS begun;
SELECT lease_until - received_at AS lease FROM inbox WHERE message_id = 't-2';

-- Citus undistributed them (undistribute_table deletes the rows, and
-- invalidates): the probe again.
DELETE FROM pg_catalog.pg_dist_partition;
ALTER TABLE inbox RESET (fillfactor);
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

-- A table of that name without Citus's column cannot be told apart from
-- a changed Citus: the probe does not run.
DROP TABLE pg_catalog.pg_dist_partition;
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (relation oid);
RESET allow_system_table_mods;
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value > :seq_before AS identity_consumed FROM inbox_id_seq;

DROP TABLE pg_catalog.pg_dist_partition, pg_catalog.pg_dist_local_group,
	pg_catalog.pg_dist_shard, pg_catalog.pg_dist_placement;
\c
SELECT last_value AS seq_before FROM inbox_id_seq \gset
SELECT inbox_claim('c-1', 'credit') AS duplicate;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

TRUNCATE inbox;
DROP EXTENSION inbox;
