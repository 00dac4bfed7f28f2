--
-- inbox_claim: one-phase claims in the caller's transaction
--
CREATE EXTENSION inbox;

-- A new message is claimed; a repeat, in a later statement, is not; another
-- consumer of the same message is independent.
SELECT inbox_claim('m-1', 'credit') AS first;
SELECT inbox_claim('m-1', 'credit') AS repeat;
SELECT inbox_claim('m-1', 'audit') AS other_consumer;

-- A one-phase marker is processed at once: it commits with the work.
SELECT message_id, consumer, state, attempts, token, lease_until,
	   received_at = processed_at AS same_time,
	   processed_at > now() - interval '1 minute' AS recent
FROM inbox ORDER BY id;

-- A rolled-back claim leaves nothing behind: the message can be claimed again.
BEGIN;
SELECT inbox_claim('m-2', 'credit') AS claimed_then_rolled_back;
ROLLBACK;
SELECT inbox_claim('m-2', 'credit') AS claimed_again;

-- A committed duplicate is answered by the index alone: no transaction id
-- (so no insert was attempted and no dead tuple left), no identity value
-- consumed.
SELECT last_value AS seq_before FROM inbox_id_seq \gset
BEGIN;
SELECT inbox_claim('m-1', 'credit') AS dup1, inbox_claim('m-1', 'credit') AS dup2;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_assigned;
COMMIT;
SELECT last_value = :seq_before AS no_identity_consumed FROM inbox_id_seq;

-- Under READ COMMITTED a new claim costs one transaction id, its
-- transaction's: the marker is written without a subtransaction.  Under
-- REPEATABLE READ it costs two, the second for the subtransaction of the
-- SQL path.  (Each difference below also counts the id that the
-- measuring statement itself takes.)
SELECT pg_current_xact_id()::text::bigint AS xid_before \gset
SELECT inbox_claim('m-3', 'credit') AS new_claim;
SELECT pg_current_xact_id()::text::bigint - :xid_before - 1 AS xids_used;

-- Under REPEATABLE READ each new message keeps its subtransaction until
-- the end of the transaction; the 65th would overflow the backend's cache
-- of 64 (and slow every snapshot in the cluster), so it is refused.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FILTER (WHERE inbox_claim('sub-' || g, 'credit')) AS claimed
FROM generate_series(1, 64) g;
SELECT inbox_claim('sub-1', 'credit') AS duplicate_needs_none;
SELECT inbox_claim('sub-65', 'credit');
ROLLBACK;

SELECT pg_current_xact_id()::text::bigint AS xid_before \gset
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT inbox_claim('m-3-rr', 'credit') AS new_claim_repeatable_read;
COMMIT;
SELECT pg_current_xact_id()::text::bigint - :xid_before - 1 AS xids_used;

-- Inside one transaction: a marker written by an earlier statement, or
-- earlier in the same statement, is seen by the probe.  Either way the
-- answer is false and the transaction stays usable.
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts VALUES (42, 0);
BEGIN;
SELECT inbox_claim('m-4', 'credit') AS first_in_xact;
UPDATE accounts SET balance = balance + 100 WHERE id = 42;
SELECT inbox_claim('m-4', 'credit') AS later_statement;
SELECT inbox_claim('m-5', 'credit') AS same_statement_1,
	   inbox_claim('m-5', 'credit') AS same_statement_2;
UPDATE accounts SET balance = balance + 100 WHERE id = 42;
COMMIT;
SELECT balance FROM accounts;
SELECT message_id, count(*) FROM inbox
WHERE message_id IN ('m-4', 'm-5') GROUP BY 1 ORDER BY 1;

-- The caught duplicate does not disturb the caller's own exception blocks.
DO $$
BEGIN
	BEGIN
		PERFORM inbox_claim('m-6', 'credit'), inbox_claim('m-6', 'credit');
		RAISE EXCEPTION 'business failure';
	EXCEPTION WHEN raise_exception THEN
		RAISE NOTICE 'caught: %', SQLERRM;
	END;
	RAISE NOTICE 'm-6 claimable again: %', inbox_claim('m-6', 'credit');
END
$$;

-- The uuid overload stores the canonical text form, so a uuid in any
-- spelling meets the same marker as its lower-case text.
SELECT inbox_claim('3F6C0F4E-6D2B-4F7E-9B1A-2A3B4C5D6E7F'::uuid, 'credit') AS uuid_claim;
SELECT inbox_claim('3f6c0f4e-6d2b-4f7e-9b1a-2a3b4c5d6e7f', 'credit') AS text_same_id;
SELECT inbox_claim('{3f6c0f4e6d2b4f7e9b1a2a3b4c5d6e7f}'::uuid, 'credit') AS uuid_other_spelling;
SELECT message_id FROM inbox WHERE message_id LIKE '3f6c%';

-- Text ids are compared exactly: another spelling is another message.
SELECT inbox_claim('3F6C0F4E-6D2B-4F7E-9B1A-2A3B4C5D6E7F', 'credit') AS upper_case_text;

-- Only the inbox key's violation means "duplicate".  A violation of any
-- other unique constraint is a real error and propagates.
CREATE UNIQUE INDEX inbox_one_channel_per_message ON inbox (message_id)
	WHERE consumer IN ('email', 'sms');
SELECT inbox_claim('m-1', 'email') AS first_channel;
SELECT inbox_claim('m-1', 'sms');
DROP INDEX inbox_one_channel_per_message;

DROP TABLE accounts;
TRUNCATE inbox;
DROP EXTENSION inbox;
