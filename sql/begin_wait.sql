-- inbox_begin_wait: its answers without a holder, the bound, its
-- arguments, and where it refuses to run.  The waits themselves are
-- specs/begin-wait.spec and t/063_begin_wait_vacuum.pl.
CREATE EXTENSION inbox;

-- No holder: the answers of inbox_begin_outcome, at once.  The INOUT
-- arguments may be left out, or passed as NULL.
CALL inbox_begin_wait('w-1', 'email', '5 s');
CALL inbox_begin_wait('w-1', 'email', '0', outcome => NULL, token => NULL) \gset
SELECT :'outcome' AS outcome;
SELECT inbox_complete('w-1', 'email', token, result => '{"status": 201}') FROM inbox WHERE message_id = 'w-1';
CALL inbox_begin_wait('w-1', 'email', '5 s');

-- A fingerprint: another request's is a mismatch, at once.
CALL inbox_begin_wait('w-7', 'api', '5 s', fingerprint => 'sha-a');
CALL inbox_begin_wait('w-7', 'api', '5 s', fingerprint => 'sha-b');

-- A live claim and a bound that runs out first: busy, with the lease the
-- holder has left, after the bound.
SELECT outcome FROM inbox_begin_outcome('w-2', 'email', lease => '1 minute');
SELECT clock_timestamp() AS started \gset
CALL inbox_begin_wait('w-2', 'email', wait => '300 ms') \gset
SELECT :'outcome' AS outcome, NOT :{?token} AS no_token,
	   :'retry_after'::interval BETWEEN '50 s' AND '1 minute' AS lease_left,
	   clock_timestamp() - :'started'::timestamptz >= '300 ms' AS waited;
-- A bound of zero does not wait.
CALL inbox_begin_wait('w-2', 'email', '0') \gset
SELECT :'outcome' AS outcome;

-- The lease and payload reach the claim.
CALL inbox_begin_wait('w-3', 'email', '1 s', lease => '42 s', payload => '{"to": "a@example.com"}');
SELECT lease_until - received_at AS lease, payload FROM inbox WHERE message_id = 'w-3';

-- Arguments.
CALL inbox_begin_wait(NULL, 'email', '1 s');
CALL inbox_begin_wait('w-4', NULL, '1 s');
CALL inbox_begin_wait('', 'email', '1 s');
CALL inbox_begin_wait('w-4', 'email', NULL);
CALL inbox_begin_wait('w-4', 'email', '-1 s');
CALL inbox_begin_wait('w-4', 'email', '1 day -1 s');
CALL inbox_begin_wait('w-4', 'email', '2 hours');
CALL inbox_begin_wait('w-4', 'email', '1 s', lease => '0');
CALL inbox_begin_wait('w-4', 'email', '1 s', fingerprint => '');
SELECT count(*) AS w4_markers FROM inbox WHERE message_id = 'w-4';

-- It commits between its looks, so it refuses to run where it cannot
-- (25001): in a transaction block, a multi-statement query, a function.
-- A DO block outside a transaction may call it.
BEGIN;
CALL inbox_begin_wait('w-5', 'email', '1 s');
ROLLBACK;
SELECT 1 \; CALL inbox_begin_wait('w-5', 'email', '1 s');
CREATE FUNCTION wait_in_function() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	outcome text;
	token bigint;
	retry_after interval;
	result jsonb;
BEGIN
	CALL inbox_begin_wait('w-5', 'email', '1 s', NULL, NULL, NULL, outcome, token, retry_after, result);
END $$;
SELECT wait_in_function();
DROP FUNCTION wait_in_function();
DO $$
DECLARE
	outcome text;
	token bigint;
	retry_after interval;
	result jsonb;
BEGIN
	CALL inbox_begin_wait('w-5', 'email', '1 s', NULL, NULL, NULL, outcome, token, retry_after, result);
	RAISE NOTICE 'from a DO block: %', outcome;
END $$;
SELECT count(*) AS w5_markers FROM inbox WHERE message_id = 'w-5';

-- Privileges: EXECUTE on the procedure, and on inbox_begin_outcome, whose
-- answer it waits for.
CREATE ROLE wait_app;
GRANT SELECT, INSERT, UPDATE ON inbox TO wait_app;
GRANT SELECT ON inbox_consumers TO wait_app;
GRANT USAGE ON SEQUENCE inbox_token_seq TO wait_app;
SET ROLE wait_app;
CALL inbox_begin_wait('w-6', 'email', '1 s');
RESET ROLE;
GRANT EXECUTE ON PROCEDURE inbox_begin_wait TO wait_app;
SET ROLE wait_app;
CALL inbox_begin_wait('w-6', 'email', '1 s');
RESET ROLE;
GRANT EXECUTE ON FUNCTION inbox_begin_outcome TO wait_app;
SET ROLE wait_app;
CALL inbox_begin_wait('w-6', 'email', '1 s');
RESET ROLE;
REVOKE ALL ON inbox, inbox_consumers, inbox_token_seq FROM wait_app;
REVOKE ALL ON PROCEDURE inbox_begin_wait FROM wait_app;
REVOKE ALL ON FUNCTION inbox_begin_outcome FROM wait_app;
DROP ROLE wait_app;

DELETE FROM inbox;
DROP EXTENSION inbox;
