--
-- inbox_claim_many: a batch in one statement, without subtransactions
--
CREATE EXTENSION inbox;

SELECT inbox_claim('b', 'credit') AS claimed_alone;

-- Returns the ids this call claimed: 'b' was already claimed, and the
-- repeated 'a' counts once.
SELECT * FROM inbox_claim_many(ARRAY['a', 'b', 'c', 'a'], 'credit') ORDER BY 1;
SELECT message_id, state FROM inbox WHERE consumer = 'credit' ORDER BY 1;

-- Nothing left to claim, another consumer, an empty batch.
SELECT * FROM inbox_claim_many(ARRAY['a', 'b', 'c'], 'credit') ORDER BY 1;
SELECT * FROM inbox_claim_many(ARRAY['a', 'b', 'c'], 'audit') ORDER BY 1;
SELECT count(*) AS empty_batch FROM inbox_claim_many('{}', 'credit');

-- An all-duplicate batch is answered by the index: no transaction id.
BEGIN;
SELECT count(*) AS claimed FROM inbox_claim_many(ARRAY['a', 'b', 'c'], 'credit');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_assigned;
COMMIT;

-- A large batch uses no subtransaction per element: claiming 1000 new ids
-- costs the transaction's own id and nothing more (the subtransaction of a
-- single claim would cost one each).
SELECT pg_current_xact_id()::text::bigint AS xid_before \gset
SELECT count(*) AS claimed
FROM inbox_claim_many(ARRAY(SELECT 'bulk-' || g FROM generate_series(1, 1000) g), 'credit');
SELECT pg_current_xact_id()::text::bigint - :xid_before - 1 AS xids_used;
SELECT count(*) AS bulk_markers FROM inbox WHERE message_id LIKE 'bulk-%';

-- A partly claimed batch returns only the new ids.
SELECT * FROM inbox_claim_many(ARRAY['bulk-999', 'bulk-1000', 'bulk-1001'], 'credit');

-- Rolled back with the caller's transaction.
BEGIN;
SELECT * FROM inbox_claim_many(ARRAY['r1', 'r2'], 'credit') ORDER BY 1;
ROLLBACK;
SELECT * FROM inbox_claim_many(ARRAY['r1', 'r2'], 'credit') ORDER BY 1;

-- Usable in a join, as a set-returning function in FROM.
SELECT count(*) AS claimed_in_join
FROM (VALUES ('j1'), ('j2')) v(id)
JOIN inbox_claim_many(ARRAY['j1', 'j2', 'j3'], 'credit') c ON c = v.id;

-- A violation of another unique constraint propagates here too.
CREATE UNIQUE INDEX inbox_one_channel_per_message ON inbox (message_id)
	WHERE consumer IN ('email', 'sms');
SELECT * FROM inbox_claim_many(ARRAY['x1', 'x2'], 'email') ORDER BY 1;
SELECT * FROM inbox_claim_many(ARRAY['x3', 'x2'], 'sms');
DROP INDEX inbox_one_channel_per_message;

TRUNCATE inbox;
DROP EXTENSION inbox;
