--
-- Every write to inbox goes through the executor (docs/architecture.md),
-- so every function is refused, or not, exactly as the statement it runs
-- would be: the checks below are the executor's own, not repeated by hand.
--
CREATE EXTENSION inbox;

-- What a statement, run by EXECUTE, did: 'accepted', or its SQLSTATE.
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE statement;
	RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END
$$;

-- A publication that replicates updates, and a table without a replica
-- identity: PostgreSQL 18's executor refuses INSERT ... ON CONFLICT DO
-- UPDATE (the statement inbox_begin runs) outright, earlier majors only
-- once a row is updated.  inbox_begin does what its statement does on
-- each, and so does every other function.
SET client_min_messages = error;	-- wal_level = replica here: a warning
CREATE PUBLICATION inbox_pub FOR TABLE inbox;
RESET client_min_messages;
SELECT inbox_claim('old-1', 'credit');
UPDATE inbox SET processed_at = now() - interval '30 days';
ALTER TABLE inbox REPLICA IDENTITY NOTHING;
SELECT pg_temp.outcome($$SELECT inbox_begin('r-1', 'jobs')$$)
	= pg_temp.outcome($$INSERT INTO inbox (message_id, consumer, state, token, lease_until)
		VALUES ('r-2', 'jobs', 'claimed', 1, now() + interval '1 minute')
		ON CONFLICT ON CONSTRAINT inbox_message_id_consumer_key
		DO UPDATE SET state = 'claimed'$$) AS begin_as_its_statement;
-- An update without a replica identity is refused on every major.
SELECT pg_temp.outcome($$SELECT inbox_complete('r-1', 'jobs', 1)$$) AS complete;
SELECT pg_temp.outcome($$SELECT inbox_fail('r-1', 'jobs', 1, 'x')$$) AS fail;
SELECT pg_temp.outcome($$SELECT inbox_claim('r-3', 'credit')$$) AS new_claim;
SELECT pg_temp.outcome($$SELECT inbox_prune()$$) AS prune;
ALTER TABLE inbox REPLICA IDENTITY DEFAULT;
SELECT inbox_prune() AS pruned_with_identity;
DROP PUBLICATION inbox_pub;
TRUNCATE inbox;

-- A unique index a DBA made in place of inbox_open_claims: the executor
-- checks it on every write, so it never holds duplicates, and REINDEX
-- (or restoring a dump) works.
\set VERBOSITY terse
DROP INDEX inbox_open_claims;
CREATE UNIQUE INDEX inbox_open_claims ON inbox (consumer)
	WHERE state IN ('claimed', 'released');
SELECT inbox_begin('u-1', 'jobs') IS NOT NULL AS claimed;
SELECT inbox_begin('u-2', 'jobs') IS NOT NULL AS claimed;
SELECT message_id FROM inbox WHERE consumer = 'jobs';
REINDEX INDEX inbox_open_claims;
-- The same with inbox.sql's columns, (consumer, id), and ids repeated (an
-- identity restarted by hand): the second claim of id 1 is refused.
DROP INDEX inbox_open_claims;
CREATE UNIQUE INDEX inbox_open_claims ON inbox (consumer, id)
	WHERE state IN ('claimed', 'released');
TRUNCATE inbox;
ALTER TABLE inbox ALTER COLUMN id RESTART WITH 1;
SELECT inbox_begin('v-1', 'jobs') IS NOT NULL AS claimed;
ALTER TABLE inbox ALTER COLUMN id RESTART WITH 1;
SELECT inbox_begin('v-2', 'jobs') IS NOT NULL AS claimed;
SELECT id, message_id FROM inbox WHERE consumer = 'jobs';
REINDEX INDEX inbox_open_claims;
DROP INDEX inbox_open_claims;
CREATE INDEX inbox_open_claims ON inbox (consumer, id)
	WHERE state IN ('claimed', 'released');

-- And in place of inbox_prunable, for one-phase claims: a unique violation
-- on any index but the key propagates (it is not "claimed before").
DROP INDEX inbox_prunable;
CREATE UNIQUE INDEX inbox_prunable ON inbox (consumer)
	WHERE state IN ('processed', 'failed');
SELECT inbox_claim('p-1', 'credit') AS claimed;
SELECT inbox_claim('p-1', 'credit') AS duplicate;
SELECT inbox_claim('p-2', 'credit') AS claimed;
SELECT * FROM inbox_claim_many(ARRAY['p-3', 'p-4'], 'credit');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('p-5', 'credit') AS claimed;
ROLLBACK;
SELECT message_id FROM inbox WHERE consumer = 'credit';
REINDEX INDEX inbox_prunable;
\set VERBOSITY default

-- A trigger a DBA added fires for the functions' writes, as for any
-- statement's.
CREATE TABLE pg_temp.audit (op text, message_id text);
CREATE FUNCTION pg_temp.audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO pg_temp.audit VALUES (TG_OP, NEW.message_id);
	RETURN NEW;
END
$$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE ON inbox
	FOR EACH ROW EXECUTE FUNCTION pg_temp.audit();
SELECT inbox_claim('t-1', 'other');
SELECT inbox_complete('t-2', 'mail', inbox_begin('t-2', 'mail'));
SELECT * FROM pg_temp.audit ORDER BY op, message_id;
DROP TRIGGER audit ON inbox;

-- A BEFORE INSERT trigger that returns NULL writes no marker: the claim
-- is refused, never answered false (the caller would ack a message nobody
-- processed), under every isolation level, single or batched.
CREATE FUNCTION pg_temp.skip() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RETURN CASE WHEN NEW.consumer = 'skipped' THEN NULL ELSE NEW END;
END
$$;
CREATE TRIGGER skip BEFORE INSERT ON inbox
	FOR EACH ROW EXECUTE FUNCTION pg_temp.skip();
SELECT inbox_claim('s-1', 'skipped');
SELECT * FROM inbox_claim_many(ARRAY['s-2', 's-3'], 'skipped');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('s-4', 'skipped');
ROLLBACK;
SELECT inbox_claim('s-5', 'kept') AS claimed;
DROP TRIGGER skip ON inbox;

-- A trigger whose own insert violates the key for another marker: that
-- violation is not "claimed before" for the message being claimed.
CREATE FUNCTION pg_temp.copy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.consumer = 'billing' THEN
		INSERT INTO inbox (message_id, consumer) VALUES (NEW.message_id, 'audit');
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER copy AFTER INSERT ON inbox
	FOR EACH ROW EXECUTE FUNCTION pg_temp.copy();
SELECT inbox_claim('c-1', 'audit') AS claimed;
\set VERBOSITY terse
SELECT inbox_claim('c-1', 'billing');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('c-1', 'billing');
ROLLBACK;
\set VERBOSITY default
SELECT count(*) AS billing_markers FROM inbox WHERE consumer = 'billing';
DROP TRIGGER copy ON inbox;

-- A token at the top of bigint (written by hand) blocks that message's
-- takeover only: a sweeper passes over it and takes the others.
SELECT inbox_begin('f-1', 'sweep', lease => '1 hour') IS NOT NULL AS begun,
	   inbox_begin('f-2', 'sweep', lease => '1 hour') IS NOT NULL AS begun;
UPDATE inbox SET token = 9223372036854775807 WHERE message_id = 'f-1';
UPDATE inbox SET lease_until = now() - interval '1 second' WHERE consumer = 'sweep';
SELECT message_id, attempts FROM inbox_next('sweep');

TRUNCATE inbox;
DROP EXTENSION inbox;
