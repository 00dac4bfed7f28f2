--
-- Claims write markers with INSERT statements run by the executor, under
-- READ COMMITTED with ON CONFLICT DO NOTHING, under REPEATABLE READ in a
-- subtransaction: either way the row, and an entry in every index that
-- should have one, including indexes a DBA added or recreated.
--
CREATE EXTENSION inbox;
CREATE EXTENSION amcheck;

-- Every index of the table holds an entry for each row it should index:
-- bt_index_check with heapallindexed finds a row missing from an index (for
-- a partial index, a row its predicate admits).
CREATE FUNCTION check_indexes() RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	index regclass;
BEGIN
	FOR index IN SELECT indexrelid::regclass FROM pg_index
				 WHERE indrelid = 'inbox'::regclass ORDER BY 1::text
	LOOP
		PERFORM bt_index_check(index, heapallindexed => true);
		RETURN NEXT index::text || ': ok';
	END LOOP;
END
$$;

-- Single claims, a batch with a repeat, duplicates, two-phase
-- claims next to them, and a claim that waits for nothing but its own
-- earlier marker in the same statement.
SELECT inbox_claim('f-1', 'credit') AS new, inbox_claim('f-1', 'credit') AS same_statement;
SELECT inbox_claim('f-1', 'credit') AS duplicate;
SELECT * FROM inbox_claim_many(ARRAY['f-3', 'f-2', 'f-3', 'f-1'], 'credit') ORDER BY 1;
SELECT inbox_begin('f-4', 'credit') > 0 AS begun;
SELECT inbox_claim('f-4', 'credit') AS open_claim_is_a_marker;

-- The SQL path writes the same row: REPEATABLE READ takes it.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('g-1', 'credit') AS general_path;
COMMIT;
SELECT message_id, state, received_at = processed_at AS processed_when_received,
	   token, lease_until, attempts, last_error, payload
FROM inbox WHERE message_id IN ('f-1', 'f-2', 'g-1') ORDER BY message_id;
SELECT (SELECT id FROM inbox WHERE message_id = 'g-1') >
	   (SELECT max(id) FROM inbox WHERE message_id LIKE 'f-%') AS ids_keep_increasing;
SELECT * FROM check_indexes();

-- A rolled-back claim leaves the key free.
BEGIN;
SELECT inbox_claim('f-5', 'credit') AS claimed;
ROLLBACK;
SELECT inbox_claim('f-5', 'credit') AS claimed_again;

-- An index a DBA added gets its entries too (the executor inserts them).
CREATE INDEX inbox_by_received_at ON inbox (received_at);
SELECT inbox_claim('f-6', 'credit') AS with_extra_index;
SELECT * FROM inbox_claim_many(ARRAY['f-7', 'f-8'], 'credit') ORDER BY 1;
SELECT inbox_claim('f-6', 'credit') AS duplicate_with_extra_index;
SELECT * FROM check_indexes();
DROP INDEX inbox_by_received_at;

-- One of the extension's indexes recreated on other columns gets its
-- entries from the executor too.
DROP INDEX inbox_prunable;
CREATE INDEX inbox_prunable ON inbox (consumer, id)
	WHERE state IN ('processed', 'failed');
SELECT inbox_claim('f-9', 'credit') AS with_other_columns;
SELECT * FROM inbox_claim_many(ARRAY['f-10', 'f-11'], 'credit') ORDER BY 1;
SELECT * FROM check_indexes();
DROP INDEX inbox_prunable;
CREATE INDEX inbox_prunable ON inbox (consumer, processed_at, id)
	WITH (deduplicate_items = off) WHERE state IN ('processed', 'failed');

-- A trigger fires, and a new column gets its default: the SQL path ran.
CREATE FUNCTION inbox_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE NOTICE 'trigger saw %', NEW.message_id;
	RETURN NEW;
END
$$;
CREATE TRIGGER inbox_audit BEFORE INSERT ON inbox
	FOR EACH ROW EXECUTE FUNCTION inbox_audit();
SELECT inbox_claim('t-1', 'credit') AS with_trigger;
SELECT * FROM inbox_claim_many(ARRAY['t-2'], 'credit');
DROP TRIGGER inbox_audit ON inbox;
DROP FUNCTION inbox_audit();
ALTER TABLE inbox ADD COLUMN note text DEFAULT 'SQL path';
SELECT inbox_claim('t-3', 'credit') AS with_extra_column;
SELECT * FROM inbox_claim_many(ARRAY['t-4'], 'credit');
SELECT message_id, note FROM inbox WHERE message_id IN ('t-3', 't-4') ORDER BY 1;
ALTER TABLE inbox DROP COLUMN note;
SELECT inbox_claim('t-5', 'credit') AS after_drop_column;
SELECT * FROM check_indexes();

DROP FUNCTION check_indexes();
DROP EXTENSION amcheck;
TRUNCATE inbox;
DROP EXTENSION inbox;
