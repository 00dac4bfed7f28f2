--
-- The maintenance passes as SQL functions: inbox_prune, inbox_reclaim,
-- inbox_retention_for
--
CREATE EXTENSION inbox;

-- Ages a marker: as if it had been processed (or had failed) that long ago.
CREATE FUNCTION pg_temp.age(p_message_id text, p_age interval) RETURNS bigint
LANGUAGE sql AS $$
	WITH aged AS (
		UPDATE inbox SET received_at = clock_timestamp() - p_age,
						 processed_at = CASE WHEN processed_at IS NOT NULL
											 THEN clock_timestamp() - p_age END,
						 lease_until = CASE WHEN lease_until IS NOT NULL
											THEN clock_timestamp() - p_age END
		WHERE message_id = p_message_id
		RETURNING 1)
	SELECT count(*) FROM aged
$$;

-- Markers for the walks below: five of each consumer, three hours old,
-- where prefix-short-1..3 share a processed_at and 4 and 5 are older.
CREATE FUNCTION pg_temp.walk_markers(p_prefix text) RETURNS bigint
LANGUAGE sql AS $$
	SELECT count(inbox_claim(p_prefix || c || '-' || g, c))
	FROM unnest(ARRAY['short', 'short_two_phase', 'default']) c,
		 generate_series(1, 5) g;
	UPDATE inbox SET processed_at = now() - interval '3 hours'
		- CASE WHEN right(message_id, 1) IN ('4', '5') THEN interval '1 minute'
			   ELSE interval '0' END
	WHERE message_id LIKE p_prefix || '%';
	SELECT count(*) FROM inbox WHERE message_id LIKE p_prefix || '%';
$$;

SELECT consumer FROM inbox_configure('short', retention => interval '1 hour');
SELECT consumer FROM inbox_configure('short_two_phase', retention => interval '1 hour',
									 max_attempts => 2);

-- Markers of every kind, old and new.
SELECT inbox_claim('old-processed', 'short') AS claimed;
SELECT inbox_claim('new-processed', 'short') AS claimed;
SELECT inbox_claim('old-default', 'default') AS claimed;
SELECT inbox_complete('old-two-phase', 'short_two_phase',
					  inbox_begin('old-two-phase', 'short_two_phase')) AS completed;
SELECT inbox_begin('old-live', 'short_two_phase', interval '24 hours') IS NOT NULL AS live;
SELECT inbox_fail('old-released', 'short_two_phase',
				  inbox_begin('old-released', 'short_two_phase'), 'boom') AS released;
SELECT consumer FROM inbox_configure('short_two_phase', max_attempts => 1);
SELECT inbox_fail('old-failed', 'short_two_phase',
				  inbox_begin('old-failed', 'short_two_phase'), 'gave up') AS failed;
SELECT consumer FROM inbox_configure('short_two_phase', max_attempts => 2);
SELECT state, processed_at IS NOT NULL AS final_time FROM inbox WHERE message_id = 'old-failed';

SELECT pg_temp.age(m, interval '2 hours')
FROM unnest(ARRAY['old-processed', 'old-two-phase', 'old-released', 'old-failed']) m;
SELECT pg_temp.age('old-default', interval '6 days');
-- A live claim's received_at is old, but its lease runs.
UPDATE inbox SET received_at = clock_timestamp() - interval '2 hours' WHERE message_id = 'old-live';

-- Pruning deletes processed and failed markers past their consumer's
-- retention, and nothing else: not new ones, not ones whose consumer keeps
-- them longer (the 7-day inbox.retention), not live or released claims.
SELECT inbox_prune() AS pruned;
SELECT message_id, consumer, state FROM inbox ORDER BY id;
SELECT inbox_prune() AS pruned_again;

-- inbox.retention is the default for consumers without one.
SET inbox.retention = '1d';
SELECT inbox_prune() AS pruned_with_shorter_default;
RESET inbox.retention;

-- Reclaiming: an expired claim with attempts left is released, one without
-- is failed; both with the lease expiry as last error; the old tokens die.
SELECT inbox_begin('expired-1', 'short_two_phase') AS t1 \gset
SELECT inbox_begin('expired-2', 'short_two_phase') AS t2 \gset
SELECT pg_temp.age('expired-1', interval '1 minute');
SELECT pg_temp.age('expired-2', interval '1 minute');
UPDATE inbox SET attempts = 2 WHERE message_id = 'expired-2';
SELECT inbox_reclaim() AS reclaimed;
SELECT message_id, state, attempts, last_error, lease_until IS NULL AS no_lease,
	   processed_at IS NOT NULL AS final_time
FROM inbox WHERE message_id LIKE 'expired-%' ORDER BY 1;
SELECT inbox_complete('expired-1', 'short_two_phase', :t1) AS old_token_dead;
SELECT inbox_extend('expired-2', 'short_two_phase', :t2) AS old_token_dead;
SELECT inbox_begin('expired-1', 'short_two_phase') > :t1 AS released_is_claimable;
SELECT inbox_begin('expired-2', 'short_two_phase') IS NULL AS failed_is_not;
SELECT inbox_reclaim() AS nothing_left;

-- Batches: a pass goes on until a batch comes back short.
SET inbox.batch_size = 3;
SELECT count(*) FROM (SELECT inbox_claim('bulk-' || g, 'short') FROM generate_series(1, 10) g) c;
UPDATE inbox SET processed_at = processed_at - interval '2 hours' WHERE message_id LIKE 'bulk-%';
SELECT inbox_prune() AS pruned_in_batches;
RESET inbox.batch_size;

-- A pass resumes each batch where the last one ended, in (consumer,
-- processed_at, id) order, across consumers, ties and retentions: every
-- expired marker goes, and nothing else.  A trigger makes pruning take its
-- locking DELETE statement, which runs in batches (inbox_prune() on the
-- plain table is one walk, without batches).  The worker's walk keeps the
-- same position between its batches; t/005_worker.pl checks that it
-- prunes every expired marker and reads each entry once, and
-- prune_resume.sql that the statement does.
CREATE FUNCTION pg_temp.noop() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RETURN OLD; END $$;
CREATE TRIGGER inbox_noop BEFORE DELETE ON inbox
	FOR EACH ROW EXECUTE FUNCTION pg_temp.noop();
SET inbox.batch_size = 2;
SELECT pg_temp.walk_markers('walk-') AS claimed;
-- A consumer longer than the documented limit, as only a hand-inserted
-- marker can have: pruning passes over it, its marker kept, and ends.
INSERT INTO inbox (message_id, consumer, processed_at)
VALUES ('walk-long', repeat('x', 300), now() - interval '8 days');
SELECT inbox_prune() AS pruned_walk;
SELECT left(consumer, 20) AS consumer, count(*) AS kept FROM inbox
WHERE message_id LIKE 'walk-%' GROUP BY consumer ORDER BY consumer;
DELETE FROM inbox WHERE message_id = 'walk-long';
RESET inbox.batch_size;
DROP TRIGGER inbox_noop ON inbox;

-- The walk's batches, without the trigger, resume the same way.  Three
-- markers of a consumer too long for the position, which sorts first: the
-- walk passes that consumer over with a WARNING and keeps its markers (a
-- batch that ended among them could not say where the next one starts,
-- and every batch would start over and end there again: the timeout turns
-- that into an error), and prunes the others.  Deleted by hand afterwards,
-- as the hint says.
SET inbox.batch_size = 2;
SET statement_timeout = '60s';
SELECT pg_temp.walk_markers('walk2-') AS claimed;
INSERT INTO inbox (message_id, consumer, processed_at)
SELECT 'walk2-long-' || g, repeat('a', 300), now() - interval '8 days'
FROM generate_series(1, 3) g;
SELECT inbox_prune() AS pruned_walk;
SELECT left(consumer, 20) AS consumer, count(*) AS kept FROM inbox
WHERE message_id LIKE 'walk2-%' GROUP BY consumer ORDER BY consumer;
DELETE FROM inbox WHERE consumer = repeat('a', 300);
RESET statement_timeout;
RESET inbox.batch_size;

-- The walk relies on inbox_prunable's order, not on its predicate: it
-- checks each marker's state itself.  With the index recreated without the
-- predicate, so that it also holds a claim given a processed_at by hand,
-- the claim is kept and the processed marker beside it goes.
BEGIN;
DROP INDEX inbox_prunable;
CREATE INDEX inbox_prunable ON inbox (consumer, processed_at, id);
INSERT INTO inbox (message_id, consumer, state, processed_at)
VALUES ('claimed-by-hand', 'short', 'claimed', now() - interval '3 hours'),
	   ('processed-by-hand', 'short', 'processed', now() - interval '3 hours');
SELECT inbox_prune() AS pruned;
SELECT message_id, state FROM inbox WHERE message_id LIKE '%-by-hand';
ROLLBACK;

-- A table changed from what inbox.sql created (a column added) is pruned
-- by the statement, and just the same: this shows the result, not which
-- way was taken.
BEGIN;
ALTER TABLE inbox ADD COLUMN note text;
INSERT INTO inbox (message_id, consumer, processed_at)
VALUES ('old-changed', 'short', now() - interval '3 hours'),
	   ('new-changed', 'short', now());
SELECT inbox_prune() AS pruned;
SELECT message_id FROM inbox WHERE message_id LIKE '%-changed';
ROLLBACK;

-- inbox_retention_for: lock timeout x deliveries + time-to-live + margin.
SELECT inbox_retention_for(interval '5 minutes', 10, interval '14 days', interval '1 day');
SELECT inbox_retention_for(lock_timeout => interval '30 seconds', max_deliveries => 5,
						   message_ttl => interval '0', margin => interval '1 hour');
SELECT consumer, retention FROM inbox_configure('sqs',
	retention => inbox_retention_for(interval '30 seconds', 3, interval '4 days', interval '3 days'));

-- Bad input.
\set SHOW_CONTEXT never
SELECT inbox_retention_for(NULL, 10, interval '1 day', interval '1 day');
SELECT inbox_retention_for(interval '0', 10, interval '1 day', interval '1 day');
SELECT inbox_retention_for(interval '1 minute', 0, interval '1 day', interval '1 day');
SELECT inbox_retention_for(interval '1 minute', 3, interval '-1 day', interval '1 day');
SELECT inbox_retention_for(interval '1 minute', 3, interval '1 day', interval '-1 second');
SET inbox.batch_size = 0;
BEGIN READ ONLY;
SELECT inbox_prune();
ROLLBACK;
BEGIN READ ONLY;
SELECT inbox_reclaim();
ROLLBACK;

TRUNCATE inbox;
DROP EXTENSION inbox;
