--
-- Privileges: nothing for PUBLIC, the grants the README documents, and
-- per-consumer row-level security for one-phase claims
--
CREATE EXTENSION inbox;
CREATE ROLE regress_inbox_nobody;
CREATE ROLE regress_inbox_app;

-- The grants an application role needs (README, "Privileges").
GRANT EXECUTE ON FUNCTION inbox_claim(text, text), inbox_claim(uuid, text),
	inbox_claim_many(text[], text) TO regress_inbox_app;
GRANT INSERT, SELECT (message_id, consumer) ON inbox TO regress_inbox_app;

-- An ungranted role is refused, whatever the marker's state.
SELECT inbox_claim('m-1', 'credit') AS claimed_by_owner;
SET ROLE regress_inbox_nobody;
SELECT inbox_claim('m-1', 'credit');
SELECT inbox_claim('m-2', 'credit');
SELECT * FROM inbox_claim_many(ARRAY['m-2'], 'credit');
RESET ROLE;

-- EXECUTE alone is not enough: the probe answers only for roles that may
-- write markers, so a duplicate and a new message get the same refusal.
GRANT EXECUTE ON FUNCTION inbox_claim(text, text) TO regress_inbox_nobody;
SET ROLE regress_inbox_nobody;
SELECT inbox_claim('m-1', 'credit');
SELECT inbox_claim('m-2', 'credit');
RESET ROLE;

-- The granted role works on every path.
SET ROLE regress_inbox_app;
SELECT inbox_claim('m-1', 'credit') AS duplicate;
SELECT inbox_claim('m-2', 'credit') AS new_message;
SELECT inbox_claim('m-2', 'credit') AS new_then_duplicate_same_xact;
SELECT * FROM inbox_claim_many(ARRAY['m-2', 'm-3'], 'credit');
RESET ROLE;

-- Both claims need the key columns' SELECT as well (README,
-- "Privileges"), under every isolation level alike: INSERT ... ON CONFLICT
-- reads its arbiter's columns, and inbox_claim_many returns the ids it
-- inserted.  With it, they work.
CREATE ROLE regress_inbox_insert_only;
GRANT EXECUTE ON FUNCTION inbox_claim(text, text),
	inbox_claim_many(text[], text) TO regress_inbox_insert_only;
GRANT INSERT ON inbox TO regress_inbox_insert_only;
SET ROLE regress_inbox_insert_only;
\set VERBOSITY terse
SELECT inbox_claim('m-4', 'credit') AS insert_is_not_enough;
SELECT * FROM inbox_claim_many(ARRAY['m-5'], 'credit');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('m-4', 'credit') AS insert_is_not_enough;
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM inbox_claim_many(ARRAY['m-5'], 'credit');
ROLLBACK;
\set VERBOSITY default
RESET ROLE;
GRANT SELECT (message_id, consumer) ON inbox TO regress_inbox_insert_only;
SET ROLE regress_inbox_insert_only;
SELECT inbox_claim('m-4', 'credit') AS claimed, inbox_claim('m-4', 'credit') AS duplicate;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('m-5', 'credit') AS claimed, inbox_claim('m-5', 'credit') AS duplicate;
COMMIT;
RESET ROLE;
DROP OWNED BY regress_inbox_insert_only;
DROP ROLE regress_inbox_insert_only;

-- A two-phase worker role needs (README, "Privileges").
CREATE ROLE regress_inbox_worker;
GRANT EXECUTE ON FUNCTION inbox_begin(text, text, interval, jsonb),
	inbox_extend(text, text, bigint, interval), inbox_complete(text, text, bigint, jsonb),
	inbox_fail(text, text, bigint, text), inbox_next(text, interval, integer)
	TO regress_inbox_worker;
GRANT SELECT, INSERT, UPDATE ON inbox TO regress_inbox_worker;
GRANT SELECT ON inbox_consumers TO regress_inbox_worker;
GRANT USAGE ON SEQUENCE inbox_token_seq TO regress_inbox_worker;
SET ROLE regress_inbox_worker;
SELECT inbox_begin('w-1', 'email') AS token \gset
SELECT inbox_extend('w-1', 'email', :token) AS extended;
SELECT inbox_complete('w-1', 'email', :token) AS completed;
SELECT inbox_fail('w-2', 'email', inbox_begin('w-2', 'email'), 'boom') AS failed;
SELECT message_id, attempts FROM inbox_next('email');
-- ...but not the configuration, which is the DBA's.
SELECT inbox_configure('email', max_attempts => 10);
RESET ROLE;
-- Without the sequence, no token can be drawn.
REVOKE USAGE ON SEQUENCE inbox_token_seq FROM regress_inbox_worker;
SET ROLE regress_inbox_worker;
\set VERBOSITY terse
SELECT inbox_begin('w-3', 'email');
\set VERBOSITY default
RESET ROLE;

-- A role that runs the maintenance passes from its own scheduler needs
-- (README, "Privileges") what the statements would: pruning reads and
-- deletes markers, reclaiming reads and updates claims, both read the
-- consumers' settings.  Without one of them it is refused (by the
-- statement, whose text the context would show: left out).
\set SHOW_CONTEXT never
CREATE ROLE regress_inbox_maintainer;
GRANT EXECUTE ON FUNCTION inbox_prune(), inbox_reclaim() TO regress_inbox_maintainer;
GRANT SELECT ON inbox_consumers TO regress_inbox_maintainer;
GRANT DELETE ON inbox TO regress_inbox_maintainer;
SET ROLE regress_inbox_maintainer;
SELECT inbox_prune();
RESET ROLE;
REVOKE DELETE ON inbox FROM regress_inbox_maintainer;
GRANT SELECT, UPDATE ON inbox TO regress_inbox_maintainer;
SET ROLE regress_inbox_maintainer;
SELECT inbox_prune();
SELECT inbox_reclaim() AS reclaimed;
RESET ROLE;
GRANT DELETE ON inbox TO regress_inbox_maintainer;
REVOKE SELECT ON inbox_consumers FROM regress_inbox_maintainer;
SET ROLE regress_inbox_maintainer;
SELECT inbox_prune();
RESET ROLE;
GRANT SELECT ON inbox_consumers TO regress_inbox_maintainer;
UPDATE inbox SET processed_at = processed_at - interval '8 days' WHERE message_id = 'm-1';
SET ROLE regress_inbox_maintainer;
SELECT inbox_prune() AS pruned;
RESET ROLE;
SELECT count(*) AS m_1_left FROM inbox WHERE message_id = 'm-1';
\set SHOW_CONTEXT errors

-- What each two-phase function needs, besides EXECUTE (README,
-- "Privileges", the table under the worker role): a role that completes
-- only needs SELECT and UPDATE on inbox, on both paths (the fast one under
-- READ COMMITTED, the statement under REPEATABLE READ); extend and fail
-- also read inbox_consumers; next also draws tokens; begin also inserts.
CREATE ROLE regress_inbox_fn;
GRANT EXECUTE ON FUNCTION inbox_extend(text, text, bigint, interval),
	inbox_complete(text, text, bigint, jsonb), inbox_fail(text, text, bigint, text),
	inbox_next(text, interval, integer), inbox_begin(text, text, interval, jsonb)
	TO regress_inbox_fn;
GRANT SELECT, UPDATE ON inbox TO regress_inbox_fn;
SELECT inbox_begin('f-1', 'fn') AS f1, inbox_begin('f-2', 'fn') AS f2,
	inbox_begin('f-3', 'fn') AS f3 \gset
SET ROLE regress_inbox_fn;
SELECT inbox_complete('f-1', 'fn', :f1) AS completed_read_committed;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_complete('f-2', 'fn', :f2) AS completed_repeatable_read;
COMMIT;
\set VERBOSITY terse
SELECT inbox_extend('f-3', 'fn', :f3);
SELECT inbox_fail('f-3', 'fn', :f3, 'boom');
RESET ROLE;
GRANT SELECT ON inbox_consumers TO regress_inbox_fn;
SET ROLE regress_inbox_fn;
SELECT inbox_extend('f-3', 'fn', :f3) AS extended;
SELECT inbox_fail('f-3', 'fn', :f3, 'boom') AS failed;
SELECT message_id FROM inbox_next('fn');
SELECT inbox_begin('f-4', 'fn');
RESET ROLE;
GRANT USAGE ON SEQUENCE inbox_token_seq TO regress_inbox_fn;
SET ROLE regress_inbox_fn;
SELECT message_id, attempts FROM inbox_next('fn');
SELECT inbox_begin('f-4', 'fn');
RESET ROLE;
GRANT INSERT ON inbox TO regress_inbox_fn;
SET ROLE regress_inbox_fn;
SELECT inbox_begin('f-4', 'fn') IS NOT NULL AS begun;
RESET ROLE;
REVOKE UPDATE ON inbox FROM regress_inbox_fn;
SET ROLE regress_inbox_fn;
SELECT inbox_begin('f-5', 'fn');
RESET ROLE;
\set VERBOSITY default
DROP OWNED BY regress_inbox_fn;
DROP ROLE regress_inbox_fn;

-- One role per consumer (README, "One role per consumer"): row-level
-- security with one FOR ALL policy per role.  With policies in force,
-- every claim goes through the INSERT, so the policy decides, for a
-- duplicate too; another consumer's message is refused whether or not it
-- has a marker.  t/040_readme_privileges.pl checks the same policies on
-- every two-phase path.
CREATE ROLE regress_inbox_credit;
CREATE ROLE regress_inbox_email;
GRANT regress_inbox_app TO regress_inbox_credit, regress_inbox_email;
ALTER TABLE inbox ENABLE ROW LEVEL SECURITY;
CREATE POLICY inbox_credit_own ON inbox FOR ALL TO regress_inbox_credit
	USING (consumer = 'credit') WITH CHECK (consumer = 'credit');
CREATE POLICY inbox_email_own ON inbox FOR ALL TO regress_inbox_email
	USING (consumer = 'email') WITH CHECK (consumer = 'email');

SET ROLE regress_inbox_credit;
SELECT inbox_claim('p-1', 'credit') AS own_consumer;
SELECT inbox_claim('p-1', 'credit') AS own_duplicate;
SELECT inbox_claim('p-1', 'email');
SELECT * FROM inbox_claim_many(ARRAY['p-2'], 'email');
SELECT * FROM inbox_claim_many(ARRAY['p-2', 'p-1'], 'credit');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('p-3', 'credit') AS own_repeatable_read;
SELECT inbox_claim('p-1', 'credit') AS own_duplicate_repeatable_read;
COMMIT;
RESET ROLE;

SET ROLE regress_inbox_email;
SELECT inbox_claim('p-1', 'email') AS own_consumer;
SELECT inbox_claim('p-1', 'credit');
SELECT inbox_claim('p-4', 'credit');
SELECT * FROM inbox_claim_many(ARRAY['p-1', 'p-4'], 'credit');
-- Its SELECT sees its own markers only.
SELECT message_id, consumer FROM inbox WHERE message_id LIKE 'p-%' ORDER BY 1, 2;
RESET ROLE;

SELECT message_id, consumer FROM inbox WHERE message_id LIKE 'p-%' ORDER BY 1, 2;

TRUNCATE inbox;
DROP EXTENSION inbox;
DROP ROLE regress_inbox_credit, regress_inbox_email, regress_inbox_app,
	regress_inbox_nobody, regress_inbox_worker, regress_inbox_maintainer;
