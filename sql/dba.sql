--
-- Routine DBA work: publications, read-only transactions, schema renames.
-- The functions behave as the statements they stand for would.
--
CREATE EXTENSION inbox;
SELECT inbox_claim('m-1', 'credit');
SELECT inbox_begin('job-1', 'jobs') IS NOT NULL AS begun;
SELECT inbox_claim('old-' || g, 'credit') FROM generate_series(1, 3) g;
UPDATE inbox SET processed_at = processed_at - interval '30 days'
WHERE message_id LIKE 'old-%';

-- A publication that replicates updates and deletes needs a replica
-- identity.  Without one, a plain DELETE or UPDATE is refused, and so are
-- the functions that update or delete, with the same error; claims only
-- insert, which needs none.
-- (Its warning about wal_level, which core words differently from 17 on,
-- is not shown.)
SET client_min_messages = error;
CREATE PUBLICATION inbox_pub FOR TABLE inbox;
RESET client_min_messages;
ALTER TABLE inbox REPLICA IDENTITY NOTHING;
DELETE FROM inbox WHERE message_id = 'nothing';
UPDATE inbox SET attempts = attempts WHERE message_id = 'nothing';
SELECT inbox_complete('job-1', 'jobs', (SELECT token FROM inbox WHERE message_id = 'job-1'));
SELECT inbox_complete('job-1', 'jobs', -1);
SELECT inbox_prune();
SELECT inbox_claim('m-2', 'credit');
SELECT * FROM inbox_claim_many(ARRAY['m-3', 'm-4'], 'credit');
SELECT count(*) AS old_markers_kept FROM inbox WHERE message_id LIKE 'old-%';
-- With the replica identity back, both work.
ALTER TABLE inbox REPLICA IDENTITY DEFAULT;
SELECT inbox_complete('job-1', 'jobs', (SELECT token FROM inbox WHERE message_id = 'job-1'));
SELECT inbox_prune();
DROP PUBLICATION inbox_pub;

-- A read-only transaction refuses every function that writes.
BEGIN READ ONLY;
SELECT inbox_claim('m-5', 'credit');
ROLLBACK;
BEGIN READ ONLY;
SELECT inbox_prune();
ROLLBACK;
BEGIN READ ONLY;
SELECT inbox_complete('job-1', 'jobs', 1);
ROLLBACK;
SET default_transaction_read_only = on;
SELECT inbox_reclaim();
RESET default_transaction_read_only;

-- Dropping the extension drops every marker, and each message a broker
-- can still deliver again would be processed again: refused while the
-- table holds markers, whatever way the drop comes.  Deleting them is
-- explicit: TRUNCATE first.
DROP EXTENSION inbox;
DROP EXTENSION inbox CASCADE;
DROP EXTENSION IF EXISTS dblink, inbox;
DROP SCHEMA public CASCADE;
SELECT count(*) AS markers_kept FROM inbox;
-- No longer once the markers are gone, or when they never were.
TRUNCATE inbox;
DROP EXTENSION inbox;
CREATE EXTENSION inbox;
DROP EXTENSION inbox;

-- A superuser renames the extension's schema: sessions that used the
-- extension before keep working, in the schema's new name.
CREATE SCHEMA app;
CREATE EXTENSION inbox SCHEMA app;
SELECT app.inbox_claim('m-6', 'credit');
SELECT app.inbox_begin('job-2', 'jobs') IS NOT NULL AS begun;
SELECT app.inbox_configure('credit', retention => interval '10 days');
SELECT app.inbox_prune();
ALTER SCHEMA app RENAME TO app2;
SELECT app2.inbox_claim('m-7', 'credit');
SELECT app2.inbox_claim('m-6', 'credit') AS again;
SELECT app2.inbox_begin('job-3', 'jobs') IS NOT NULL AS begun;
SELECT app2.inbox_complete('job-2', 'jobs', (SELECT token FROM app2.inbox WHERE message_id = 'job-2'));
SELECT app2.inbox_configure('credit', retention => interval '20 days');
SELECT app2.inbox_prune(), app2.inbox_reclaim();
SELECT message_id, state FROM app2.inbox ORDER BY id;

TRUNCATE app2.inbox;
DROP EXTENSION inbox;
DROP SCHEMA app2;

-- The key must be what the claims rely on.  Re-created in another column
-- order (or not unique, or with an expression), it is refused with a clear
-- error, rather than letting a duplicate claim loop on it.
CREATE EXTENSION inbox;
SELECT inbox_claim('k-1', 'credit');
BEGIN;
ALTER TABLE inbox DROP CONSTRAINT inbox_message_id_consumer_key;
CREATE UNIQUE INDEX inbox_message_id_consumer_key ON inbox (consumer, message_id);
SELECT inbox_claim('k-1', 'credit');
ROLLBACK;
BEGIN;
ALTER TABLE inbox DROP CONSTRAINT inbox_message_id_consumer_key;
CREATE INDEX inbox_message_id_consumer_key ON inbox (message_id, consumer);
SELECT inbox_claim('k-1', 'credit');
ROLLBACK;

-- A table that inherits from inbox is not the extension's: the statements
-- (reclaim, and pruning by statement) change rows of inbox only, though a
-- child's row may sit at the same row pointer as a marker.
BEGIN;
CREATE TABLE inbox_archive () INHERITS (inbox);
INSERT INTO inbox_archive (id, message_id, consumer, state, processed_at)
SELECT -g, 'arch-' || g, 'jobs', 'processed', now() - interval '30 days'
FROM generate_series(1, 5) g;
SELECT inbox_begin('j-1', 'jobs') IS NOT NULL AS begun;
UPDATE ONLY inbox SET lease_until = now() - interval '1 second' WHERE message_id = 'j-1';
SELECT count(*) AS at_same_row_pointer FROM inbox_archive a JOIN ONLY inbox i ON i.ctid = a.ctid
WHERE i.message_id = 'j-1';
SELECT inbox_reclaim() AS reclaimed;
SELECT state, count(*) FROM inbox_archive GROUP BY 1;
ROLLBACK;

-- inbox_prunable re-created so that it no longer holds failed markers: the
-- walk, which finds the markers it deletes there, steps aside for the
-- statement, which prunes them.
BEGIN;
DROP INDEX inbox_prunable;
CREATE INDEX inbox_prunable ON inbox (consumer, processed_at, id)
	WHERE state = 'processed';
INSERT INTO inbox (message_id, consumer, state, processed_at)
VALUES ('f-1', 'jobs', 'failed', now() - interval '30 days');
SELECT inbox_prune() AS pruned;
SELECT count(*) AS failed_left FROM inbox WHERE message_id = 'f-1';
ROLLBACK;

-- The guard finds the markers through the extension, not by name: a
-- renamed table, or the owner of the schema dropping what it owns.
CREATE ROLE regress_inbox_schema_admin SUPERUSER;
ALTER TABLE inbox RENAME TO markers;
DROP EXTENSION inbox;
ALTER TABLE markers RENAME TO inbox;
CREATE SCHEMA owned_by_admin AUTHORIZATION regress_inbox_schema_admin;
TRUNCATE inbox;
DROP EXTENSION inbox;
CREATE EXTENSION inbox SCHEMA owned_by_admin;
SELECT owned_by_admin.inbox_claim('o-1', 'credit');
DROP OWNED BY regress_inbox_schema_admin CASCADE;
TRUNCATE owned_by_admin.inbox;
DROP OWNED BY regress_inbox_schema_admin CASCADE;
DROP ROLE regress_inbox_schema_admin;
