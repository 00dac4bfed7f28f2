--
-- The per-backend cache of OIDs and plans stays correct when the objects
-- change under it, all in one session.
--
CREATE EXTENSION inbox;
SELECT inbox_claim('m-1', 'credit') AS warm_cache;
SELECT * FROM inbox_claim_many(ARRAY['m-2'], 'credit');

-- Dropped and created again, in another schema: the old OIDs and plans
-- must not be used.
TRUNCATE inbox;
DROP EXTENSION inbox;
CREATE SCHEMA elsewhere;
CREATE EXTENSION inbox SCHEMA elsewhere;
SELECT elsewhere.inbox_claim('m-1', 'credit') AS new_table_new_claim;
SELECT elsewhere.inbox_claim('m-1', 'credit') AS duplicate;
SELECT * FROM elsewhere.inbox_claim_many(ARRAY['m-1', 'm-2'], 'credit');
SELECT message_id FROM elsewhere.inbox ORDER BY id;

-- ALTER TABLE: the saved plans are replanned and pick up the new default
-- (a stale plan would leave note NULL in the new rows).
ALTER TABLE elsewhere.inbox ADD COLUMN note text;
ALTER TABLE elsewhere.inbox ALTER COLUMN note SET DEFAULT 'after alter';
SELECT elsewhere.inbox_claim('m-3', 'credit') AS after_add_column;
SELECT * FROM elsewhere.inbox_claim_many(ARRAY['m-4'], 'credit');
SELECT message_id, note FROM elsewhere.inbox ORDER BY id;
ALTER TABLE elsewhere.inbox DROP COLUMN note;
SELECT elsewhere.inbox_claim('m-5', 'credit') AS after_drop_column;

-- A renamed key index is reported, not silently ignored.
ALTER INDEX elsewhere.inbox_message_id_consumer_key RENAME TO renamed_key;
SELECT elsewhere.inbox_claim('m-6', 'credit');
ALTER INDEX elsewhere.renamed_key RENAME TO inbox_message_id_consumer_key;
SELECT elsewhere.inbox_claim('m-6', 'credit') AS after_rename_back;

-- Back in the default schema, within the same transaction as the drop.
BEGIN;
TRUNCATE elsewhere.inbox;
DROP EXTENSION inbox;
CREATE EXTENSION inbox;
SELECT inbox_claim('m-1', 'credit') AS same_transaction;
SELECT inbox_claim('m-1', 'credit') AS duplicate;
COMMIT;
SELECT message_id FROM inbox ORDER BY id;

TRUNCATE inbox;
DROP EXTENSION inbox;
DROP SCHEMA elsewhere;
