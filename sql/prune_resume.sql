--
-- A pruning pass in batches resumes each batch just after the last marker
-- the previous one saw, in inbox_prunable's (consumer, processed_at, id)
-- order, however many markers tie on processed_at: the walk's batches (the
-- worker's, here all in one transaction) and the DELETE statement's.
--
CREATE EXTENSION inbox;
SELECT consumer FROM inbox_configure('ties', retention => interval '1 hour');

-- 40 markers processed at one instant, three hours ago.
CREATE FUNCTION pg_temp.load_ties() RETURNS bigint LANGUAGE sql AS $$
	TRUNCATE inbox;
	SELECT count(inbox_claim('tie-' || g, 'ties')) FROM generate_series(1, 40) g;
	UPDATE inbox SET processed_at = now() - interval '3 hours';
	SELECT count(*) FROM inbox;
$$;

-- A pass in batches of 4 reads each of their index entries once: 41 (the
-- first batch also reads one entry to find the first consumer), where
-- batches starting at the tied processed_at read 261.  All the batches run
-- in the caller's transaction, where the entries of the markers deleted by
-- earlier batches stay in place and an index scan returns them: a batch
-- that started over would read them all again.  Counted by the statistics,
-- which count every entry an index scan returns.
SET inbox.batch_size = 4;
SELECT pg_temp.load_ties() AS loaded;
SELECT pg_stat_force_next_flush();
SELECT idx_tup_read AS read_before FROM pg_stat_user_indexes
WHERE indexrelname = 'inbox_prunable' \gset
SELECT inbox_prune() AS pruned;
SELECT pg_stat_force_next_flush();
SELECT pg_stat_clear_snapshot();
SELECT idx_tup_read - :read_before AS prunable_entries_read FROM pg_stat_user_indexes
WHERE indexrelname = 'inbox_prunable';
SELECT count(*) AS left_behind FROM inbox;

-- The same with a trigger, which makes pruning take its locking DELETE
-- statement, batch after batch.  The planner is kept off sequential and
-- bitmap scans of so small a table, and plans each batch anew, so that the
-- candidates are read through the index.
CREATE FUNCTION pg_temp.noop() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RETURN OLD; END $$;
CREATE TRIGGER inbox_noop BEFORE DELETE ON inbox
	FOR EACH ROW EXECUTE FUNCTION pg_temp.noop();
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET plan_cache_mode = force_custom_plan;
SELECT pg_temp.load_ties() AS loaded;
SELECT pg_stat_force_next_flush();
SELECT pg_stat_clear_snapshot();
SELECT idx_tup_read AS read_before FROM pg_stat_user_indexes
WHERE indexrelname = 'inbox_prunable' \gset
SELECT inbox_prune() AS pruned;
SELECT pg_stat_force_next_flush();
SELECT pg_stat_clear_snapshot();
SELECT idx_tup_read - :read_before AS prunable_entries_read FROM pg_stat_user_indexes
WHERE indexrelname = 'inbox_prunable';
SELECT count(*) AS left_behind FROM inbox;

TRUNCATE inbox;
DROP EXTENSION inbox;
