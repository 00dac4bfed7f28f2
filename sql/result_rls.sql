--
-- Idempotency keys under row-level security: a role confined to its
-- consumer's rows (docs/privileges.md's recipe) never reads another
-- consumer's result or fingerprint, through any function.
--
CREATE EXTENSION inbox;
\set SHOW_CONTEXT never

-- The README's worker grants, with the functions of idempotency keys.
CREATE ROLE regress_keys_worker NOLOGIN;
GRANT USAGE ON SCHEMA public TO regress_keys_worker;
GRANT EXECUTE ON FUNCTION inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz),
	inbox_complete(text, text, bigint, jsonb), inbox_claim_outcome(text, text, text, timestamptz),
	inbox_set_result(text, text, jsonb), inbox_result(text, text)
	TO regress_keys_worker;
GRANT SELECT, INSERT, UPDATE ON inbox TO regress_keys_worker;
GRANT SELECT ON inbox_consumers TO regress_keys_worker;
GRANT USAGE ON SEQUENCE inbox_token_seq TO regress_keys_worker;
CREATE ROLE regress_keys_credit NOLOGIN IN ROLE regress_keys_worker;
CREATE ROLE regress_keys_email NOLOGIN IN ROLE regress_keys_worker;
BEGIN;
CREATE POLICY credit_own ON inbox FOR ALL TO regress_keys_credit
	USING (consumer = 'credit') WITH CHECK (consumer = 'credit');
CREATE POLICY email_own ON inbox FOR ALL TO regress_keys_email
	USING (consumer = 'email') WITH CHECK (consumer = 'email');
ALTER TABLE inbox ENABLE ROW LEVEL SECURITY;
COMMIT;

-- email's results: a one-phase one and a two-phase one.
SET ROLE regress_keys_email;
BEGIN;
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-email');
SELECT inbox_set_result('e-1', 'email', '{"secret": "one-phase"}');
COMMIT;
SELECT token AS email_token FROM inbox_begin_outcome('e-2', 'email', fingerprint => 'fp-email') \gset
SELECT inbox_complete('e-2', 'email', :email_token, '{"secret": "two-phase"}');
-- email reads its own.
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-email');
SELECT outcome, result FROM inbox_begin_outcome('e-2', 'email', fingerprint => 'fp-email');
SELECT inbox_result('e-1', 'email'), inbox_result('e-2', 'email');
RESET ROLE;

-- credit reads nothing of email's, by any function, with or without a
-- fingerprint, right or wrong, at every isolation level.
SET ROLE regress_keys_credit;
SELECT inbox_result('e-1', 'email') IS NULL AS one_phase_hidden,
	   inbox_result('e-2', 'email') IS NULL AS two_phase_hidden;
SELECT * FROM inbox_claim_outcome('e-1', 'email');
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-email');
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-guess');
SELECT * FROM inbox_claim_outcome('e-2', 'email', 'fp-email');
SELECT * FROM inbox_begin_outcome('e-1', 'email');
SELECT * FROM inbox_begin_outcome('e-2', 'email', fingerprint => 'fp-email');
SELECT * FROM inbox_begin_outcome('e-2', 'email', fingerprint => 'fp-guess');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-email');
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-guess');
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_result('e-2', 'email') IS NULL AS hidden;
ROLLBACK;
-- Nor writes one: email's marker is not there for it.
BEGIN;
SELECT inbox_set_result('e-1', 'email', '{"forged": true}');
ROLLBACK;
SELECT inbox_complete('e-2', 'email', :email_token, '{"forged": true}');
-- Nor sees it in the table.
SELECT count(*) FROM inbox WHERE consumer = 'email';
-- credit's own work goes on as usual.
SELECT * FROM inbox_claim_outcome('c-1', 'credit', 'fp-credit');
SELECT * FROM inbox_claim_outcome('c-1', 'credit', 'fp-credit');
RESET ROLE;

-- A role whose policies let it insert any row but read only credit's (not
-- the recipe's FOR ALL): an error, never processed (which it could ack)
-- nor mismatch (which would tell it about a fingerprint).  PostgreSQL's
-- INSERT ... ON CONFLICT checks the new row against the SELECT policies
-- too; past that, the read that cannot see the marker would refuse.
CREATE ROLE regress_keys_blind NOLOGIN IN ROLE regress_keys_worker;
CREATE POLICY blind_insert ON inbox FOR INSERT TO regress_keys_blind WITH CHECK (true);
CREATE POLICY blind_select ON inbox FOR SELECT TO regress_keys_blind USING (consumer = 'credit');
SET ROLE regress_keys_blind;
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-email');
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-guess');
SELECT * FROM inbox_claim_outcome('e-1', 'email');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM inbox_claim_outcome('e-1', 'email', 'fp-guess');
ROLLBACK;
SELECT inbox_result('e-1', 'email') IS NULL AS hidden;
RESET ROLE;
DROP POLICY blind_insert ON inbox;
DROP POLICY blind_select ON inbox;

-- email's markers are as they were.
SELECT message_id, state, fingerprint, result FROM inbox WHERE consumer = 'email' ORDER BY message_id;

ALTER TABLE inbox DISABLE ROW LEVEL SECURITY;
DROP POLICY credit_own ON inbox;
DROP POLICY email_own ON inbox;
DROP OWNED BY regress_keys_worker, regress_keys_credit, regress_keys_email, regress_keys_blind;
DROP ROLE regress_keys_credit, regress_keys_email, regress_keys_blind, regress_keys_worker;
TRUNCATE inbox;
DROP EXTENSION inbox;
