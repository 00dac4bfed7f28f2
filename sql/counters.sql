--
-- Counters: what the functions answered, per database and consumer, from
-- shared memory (inbox_counters), and their reset.
--
CREATE EXTENSION inbox;

-- The server of the regression tests is shared by every test of the
-- suite, and counters outlive the extension: start from zero.
-- (The rows of the consumers the tests before counted stay, zeroed.)
SELECT inbox_counters_reset();
SELECT coalesce(sum(claims + duplicates + begins_claimed + completions + pruned), 0) AS counted
FROM inbox_counters;

-- One-phase: new claims and duplicates, single and batched (an id
-- repeated in the array counts once).
SELECT inbox_claim('c-1', 'count-a'), inbox_claim('c-1', 'count-a'),
	   inbox_claim('c-2', 'count-a');
SELECT inbox_claim('3f6c0f4e-6d2b-4f7e-9b1a-2a3b4c5d6e7f'::uuid, 'count-b');
SELECT * FROM inbox_claim_many(ARRAY['c-1', 'c-3', 'c-3', 'c-4'], 'count-a');

-- A rolled-back claim was still answered: it counts.
BEGIN;
SELECT inbox_claim('c-5', 'count-a');
ROLLBACK;

-- Two-phase: begins by outcome, completions, stale tokens, failures.
SELECT inbox_configure('count-t', max_attempts => 2);
SELECT inbox_begin('t-1', 'count-t') AS t1 \gset
SELECT outcome FROM inbox_begin_outcome('t-1', 'count-t');
SELECT inbox_extend('t-1', 'count-t', :t1),
	   inbox_extend('t-1', 'count-t', :t1 + 1000) AS stale;
-- A repeated completion is true again: it counts as a completion.
SELECT inbox_complete('t-1', 'count-t', :t1), inbox_complete('t-1', 'count-t', :t1),
	   inbox_complete('t-1', 'count-t', :t1 + 1000) AS stale;
SELECT outcome FROM inbox_begin_outcome('t-1', 'count-t');
SELECT inbox_begin('t-2', 'count-t') AS t2 \gset
SELECT inbox_fail('t-2', 'count-t', :t2, 'first'), inbox_fail('t-2', 'count-t', :t2, 'again');
SELECT token AS t2 FROM inbox_next('count-t') \gset
SELECT inbox_fail('t-2', 'count-t', :t2, 'second');
SELECT outcome FROM inbox_begin_outcome('t-2', 'count-t');
SELECT inbox_begin('t-3', 'count-t') IS NOT NULL;
UPDATE inbox SET lease_until = now() - interval '1 second' WHERE message_id = 't-3';
SELECT outcome FROM inbox_begin_outcome('t-3', 'count-t');

-- An operator's retry and discard of failed claims.
SELECT inbox_retry('t-2', 'count-t');
SELECT inbox_configure('count-d', max_attempts => 1);
SELECT inbox_begin('d-1', 'count-d') AS d1 \gset
SELECT inbox_fail('d-1', 'count-d', :d1, 'broken');
SELECT inbox_discard('d-1', 'count-d', 'bad data');

-- A key reused with another request: one-phase and two-phase mismatches.
SELECT outcome FROM inbox_claim_outcome('k-1', 'count-k', 'fp-a');
SELECT outcome FROM inbox_claim_outcome('k-1', 'count-k', 'fp-b');
SELECT outcome FROM inbox_begin_outcome('k-2', 'count-k', fingerprint => 'fp-a');
SELECT outcome FROM inbox_begin_outcome('k-2', 'count-k', fingerprint => 'fp-b');

-- A refusal counts for its consumer only when the caller can see the
-- marker; naming a consumer that has none (or whose markers policies
-- hide) adds no entry for it: the refusals count in the database's row.
SELECT inbox_complete('x-1', 'count-nobody', 1) AS completed,
	   inbox_extend('x-1', 'count-nobody', 1) AS extended,
	   inbox_fail('x-1', 'count-nobody', 1, 'no') AS failed;
SELECT count(*) AS nobody_rows FROM inbox_counters WHERE consumer = 'count-nobody';

-- Maintenance counts in the database's own row (consumer NULL).
UPDATE inbox SET lease_until = now() - interval '1 second' WHERE message_id = 't-3';
SELECT inbox_reclaim();
SELECT inbox_configure('count-a', retention => interval '1 minute');
UPDATE inbox SET processed_at = now() - interval '1 hour'
	WHERE consumer = 'count-a' AND message_id IN ('c-1', 'c-2');
SELECT inbox_prune();
-- A late duplicate, sent before the floor that prune left: expired.
SELECT outcome FROM inbox_claim_outcome('c-9', 'count-a', sent_at => now() - interval '2 hours');

-- Columns in one row per consumer, for reading (zeros left out).
SELECT c.consumer, x.key AS counter, x.value
FROM inbox_counters c,
	 LATERAL jsonb_each(to_jsonb(c) - 'database' - 'consumer' - 'stats_reset') x
WHERE c.database = current_database() AND x.value::bigint <> 0
ORDER BY c.consumer NULLS FIRST, x.key;

-- Every column, in order.
SELECT attname, atttypid::regtype FROM pg_attribute
WHERE attrelid = 'inbox_counters'::regclass AND attnum > 0 ORDER BY attnum;

-- Reset: one consumer, then every row of the database.
SELECT max(stats_reset) FILTER (WHERE consumer = 'count-a') AS before_a,
	   max(stats_reset) FILTER (WHERE consumer = 'count-b') AS before_b
FROM inbox_counters \gset
SELECT inbox_counters_reset('count-a');
SELECT consumer, claims, duplicates,
	   stats_reset > CASE consumer WHEN 'count-a' THEN :'before_a'::timestamptz
				ELSE :'before_b'::timestamptz END AS reset_since
FROM inbox_counters WHERE consumer IN ('count-a', 'count-b') ORDER BY consumer;
SELECT inbox_counters_reset();
SELECT count(*) > 0 AS rows_kept,
	   sum(claims + duplicates + begins_claimed + completions + pruned) AS total
FROM inbox_counters;

-- Bad input: a consumer argument is checked like the claim's.
SELECT inbox_counters_reset('');

-- Who may: nobody by default, pg_monitor reads.
SELECT has_function_privilege('public', 'inbox_counters()', 'EXECUTE') AS public_reads,
	   has_function_privilege('public', 'inbox_counters_reset(text)', 'EXECUTE') AS public_resets,
	   has_table_privilege('pg_monitor', 'inbox_counters', 'SELECT') AS monitor_reads,
	   has_function_privilege('pg_monitor', 'inbox_counters()', 'EXECUTE') AS monitor_executes,
	   has_function_privilege('pg_monitor', 'inbox_counters_reset(text)', 'EXECUTE') AS monitor_resets;

-- More consumers than a backend's cache keeps names of (1024), and than
-- the server counts apart (1000): every answer is still counted once.
SELECT inbox_counters_reset();
SELECT count(*) FROM generate_series(1, 1100) g WHERE inbox_claim('k-1', 'many-' || g);
SELECT inbox_claim('k-2', 'many-1'), inbox_claim('k-1', 'many-1100');
SELECT sum(claims) AS claims, sum(duplicates) AS duplicates
FROM inbox_counters WHERE database = current_database();

TRUNCATE inbox;
DROP EXTENSION inbox;
