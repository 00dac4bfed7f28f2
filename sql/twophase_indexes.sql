--
-- inbox_begin and inbox_complete write with their statements under every
-- isolation level: the same rows under READ COMMITTED and REPEATABLE
-- READ, and an entry in every index that should have one, including
-- indexes a DBA added or recreated.
--
CREATE EXTENSION inbox;
CREATE EXTENSION amcheck;

-- Every index of the table holds an entry for each row version it should
-- index (bt_index_check with heapallindexed; for a partial index, each
-- version its predicate admits): one row per index checked, or an error.
\set check_indexes 'SELECT indexrelid::regclass AS checked FROM pg_index, bt_index_check(indexrelid, heapallindexed => true) WHERE indrelid = \'inbox\'::regclass ORDER BY 1::text;'

SELECT inbox_configure('sms', lease => interval '7 minutes');

-- The same calls under both isolation levels: 'f-' messages under READ
-- COMMITTED, 's-' under REPEATABLE READ.
CREATE FUNCTION pg_temp.calls(prefix text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	token bigint;
BEGIN
	-- A default lease, an explicit one with a payload, the consumer's own.
	token := inbox_begin(prefix || '1', 'email');
	RETURN NEXT 'complete wrong token: ' || inbox_complete(prefix || '1', 'email', token + 1000);
	RETURN NEXT 'complete: ' || inbox_complete(prefix || '1', 'email', token);
	RETURN NEXT 'complete again: ' || inbox_complete(prefix || '1', 'email', token);
	RETURN NEXT 'begin processed: ' || coalesce(inbox_begin(prefix || '1', 'email')::text, 'null');
	PERFORM inbox_begin(prefix || '2', 'email', interval '30 seconds', '{"to": "a@b"}');
	RETURN NEXT 'begin live claim: ' || coalesce(inbox_begin(prefix || '2', 'email')::text, 'null');
	PERFORM inbox_begin(prefix || '3', 'sms');
	-- Never claimed.
	RETURN NEXT 'complete never claimed: ' || inbox_complete(prefix || '4', 'email', token);
	-- A claim and its completion in one statement: the completion sees the
	-- claim written earlier in the same command.
	RETURN NEXT 'begin and complete in one statement: ' ||
		inbox_complete(prefix || '5', 'email', inbox_begin(prefix || '5', 'email'));
	-- A claim released by a failure: inbox_begin's retry is the statement's.
	token := inbox_begin(prefix || '6', 'email');
	PERFORM inbox_fail(prefix || '6', 'email', token, 'boom');
	token := inbox_begin(prefix || '6', 'email');
	RETURN NEXT 'complete the retry: ' || inbox_complete(prefix || '6', 'email', token);
END
$$;

SELECT pg_temp.calls('f-');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.calls('s-');
COMMIT;

-- The rows, side by side; and no column that differs, beyond the key, the
-- id, the token and the times (compared as the lease's length).
SELECT substr(message_id, 3) AS message, message_id, consumer, state, attempts,
	   last_error, payload, lease_until - received_at AS lease,
	   processed_at IS NOT NULL AS processed, token IS NOT NULL AS has_token
FROM inbox ORDER BY 1, 2;
SELECT count(*) AS differences
FROM inbox f JOIN inbox s ON substr(s.message_id, 3) = substr(f.message_id, 3)
	AND s.consumer = f.consumer AND s.message_id LIKE 's-%'
WHERE f.message_id LIKE 'f-%'
	AND (f.state, f.attempts, f.last_error, f.payload, f.lease_until - f.received_at,
		 f.processed_at IS NULL, f.token IS NULL)
	IS DISTINCT FROM
		(s.state, s.attempts, s.last_error, s.payload, s.lease_until - s.received_at,
		 s.processed_at IS NULL, s.token IS NULL);
:check_indexes

-- An index a DBA added: the claim's and the completion's row versions
-- both enter it.
CREATE INDEX inbox_by_lease ON inbox (lease_until);
SELECT inbox_complete('a-1', 'email', inbox_begin('a-1', 'email')) AS completed;
SELECT state, lease_until IS NULL AS lease_ended FROM inbox WHERE message_id = 'a-1';
:check_indexes
DROP INDEX inbox_by_lease;

-- The partial indexes recreated with other predicates: inbox_open_claims
-- for every row, inbox_prunable for claims too: the executor puts each
-- row version into every index whose predicate admits it.
DROP INDEX inbox_open_claims;
CREATE INDEX inbox_open_claims ON inbox (consumer, id);
DROP INDEX inbox_prunable;
CREATE INDEX inbox_prunable ON inbox (consumer, processed_at, id)
	WITH (deduplicate_items = off) WHERE state IN ('processed', 'failed', 'claimed');
SELECT inbox_claim('i-1', 'email') AS claimed,
	   inbox_complete('i-2', 'email', inbox_begin('i-2', 'email')) AS completed,
	   inbox_begin('i-3', 'email') IS NOT NULL AS begun;
:check_indexes
DROP INDEX inbox_open_claims;
CREATE INDEX inbox_open_claims ON inbox (consumer, id)
	WHERE state IN ('claimed', 'released');
DROP INDEX inbox_prunable;
CREATE INDEX inbox_prunable ON inbox (consumer, processed_at, id)
	WITH (deduplicate_items = off) WHERE state IN ('processed', 'failed');

-- Column privileges: the statements accept a role granted only the columns
-- they use.
CREATE ROLE regress_inbox_columns;
GRANT EXECUTE ON FUNCTION inbox_begin(text, text, interval, jsonb),
	inbox_complete(text, text, bigint, jsonb) TO regress_inbox_columns;
GRANT SELECT, INSERT (message_id, consumer, state, received_at, token, lease_until,
					  attempts, payload),
	UPDATE (state, token, lease_until, attempts, processed_at, last_error, payload)
	ON inbox TO regress_inbox_columns;
GRANT SELECT ON inbox_consumers TO regress_inbox_columns;
GRANT USAGE ON SEQUENCE inbox_token_seq TO regress_inbox_columns;
SET ROLE regress_inbox_columns;
SELECT inbox_complete('c-1', 'email', inbox_begin('c-1', 'email')) AS completed;
RESET ROLE;
-- Without UPDATE, neither path accepts a begin, even of a new message.
REVOKE UPDATE ON inbox FROM regress_inbox_columns;
SET ROLE regress_inbox_columns;
\set VERBOSITY terse
SELECT inbox_begin('c-2', 'email');
\set VERBOSITY default
RESET ROLE;
SELECT count(*) AS written FROM inbox WHERE message_id = 'c-2';

-- Each statement is planned once per backend and kept (a plan cache
-- context named after each statement's text): in a new session, a new
-- claim and its completion prepare three (the begin's read of the marker,
-- its upsert, the completion), and later calls none anew.
\c
SELECT inbox_complete('p-1', 'email', inbox_begin('p-1', 'email')) AS completed;
SELECT count(*) AS statements_cached FROM pg_backend_memory_contexts
WHERE name = 'CachedPlanSource' AND ident LIKE '%inbox%';
-- The same statements under REPEATABLE READ.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_complete('p-2', 'email', inbox_begin('p-2', 'email')) AS completed;
COMMIT;
SELECT count(*) AS statements_cached FROM pg_backend_memory_contexts
WHERE name = 'CachedPlanSource' AND ident LIKE '%inbox%';
:check_indexes

DROP OWNED BY regress_inbox_columns;
DROP ROLE regress_inbox_columns;
DROP EXTENSION amcheck;
TRUNCATE inbox;
DROP EXTENSION inbox;
