--
-- Settings that would stop maintenance are refused, and one consumer's
-- unusable setting never stops the pass for the others.
--
CREATE EXTENSION inbox;
\set SHOW_CONTEXT never

-- Intervals: each part (months, days, time) must be zero or positive, the
-- whole positive, a lease at most 24 hours, a retention at most 100 years.
SELECT inbox_configure('c', retention => interval '7000 years');
SELECT inbox_configure('c', retention => interval '100 years 1 day');
SELECT inbox_configure('c', retention => interval '-1 month 30 days 1 second');
SELECT inbox_configure('c', retention => interval '1 day -1 second');
SELECT inbox_configure('c', lease => interval '1 mon -29 days');
SELECT inbox_configure('c', lease => interval '1 day 1 microsecond');
SELECT inbox_configure('c', lease => interval '-1 day');
SELECT inbox_begin('m', 'c', interval '1 mon -29 days');
SELECT inbox_next('c', interval '2 days' - interval '1 hour');
-- At the limits, accepted.
SELECT consumer, retention, lease FROM inbox_configure('c', retention => interval '100 years',
	lease => interval '1 day');
SELECT consumer, lease FROM inbox_configure('c', lease => interval '24 hours');
SELECT consumer, retention FROM inbox_configure('c', retention => interval '1 mon 1 day 1 second');

-- The table's CHECK constraints hold the same rules for a row written by
-- hand.
INSERT INTO inbox_consumers (consumer, retention) VALUES ('d', interval '7000 years');
INSERT INTO inbox_consumers (consumer, lease) VALUES ('d', interval '1 mon -29 days');
INSERT INTO inbox_consumers (consumer, max_attempts) VALUES ('d', 0);

-- inbox_retention_for gives a valid retention or says why it cannot.
SELECT inbox_retention_for(interval '-1 mon 31 days', 3, interval '1 day', interval '0');
SELECT inbox_retention_for(interval '50 years', 3, interval '1 day', interval '0');
SELECT inbox_retention_for(interval '1 hour', 3, interval '0', interval '0');

-- A retention that got past the checks (a superuser dropped a constraint)
-- is its consumer's problem: a WARNING names it, its markers are kept, and
-- every other consumer is pruned in the same pass, by the walk and by the
-- DELETE statement alike.
ALTER TABLE inbox_consumers DROP CONSTRAINT inbox_consumers_retention_valid;
INSERT INTO inbox_consumers (consumer, retention) VALUES
	('bad', interval '7000 years'), ('mixed', interval '-1 month 30 days 1 second');
SELECT (inbox_configure('good', retention => interval '1 hour')).consumer;
CREATE FUNCTION pg_temp.load() RETURNS void LANGUAGE sql AS $$
	TRUNCATE inbox;
	SELECT inbox_claim('m-' || g, consumer)
	FROM generate_series(1, 3) g, unnest(ARRAY['bad', 'good', 'mixed', 'other']) consumer;
	UPDATE inbox SET processed_at = processed_at - interval '2 hours';
$$;
SELECT pg_temp.load();
SELECT inbox_prune() AS pruned;
SELECT consumer, count(*) AS kept FROM inbox GROUP BY 1 ORDER BY 1;
CREATE FUNCTION pg_temp.noop() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RETURN OLD; END $$;
CREATE TRIGGER inbox_noop BEFORE DELETE ON inbox
	FOR EACH ROW EXECUTE FUNCTION pg_temp.noop();
SELECT pg_temp.load();
SELECT inbox_prune() AS pruned_by_statement;
SELECT consumer, count(*) AS kept FROM inbox GROUP BY 1 ORDER BY 1;
DROP TRIGGER inbox_noop ON inbox;

-- A batch counts the consumers it walks through, not only the markers it
-- deletes: 30 consumers with nothing to prune before the one that has,
-- with batches of 4, take several batches (each a transaction of the
-- worker's), and the pass still reaches the last consumer.
TRUNCATE inbox;
SELECT count(inbox_claim('m-1', 'idle-' || lpad(g::text, 2, '0'))) FROM generate_series(1, 30) g;
SELECT inbox_claim('m-' || g, 'good') FROM generate_series(1, 6) g;
UPDATE inbox SET processed_at = processed_at - interval '2 hours' WHERE consumer = 'good';
SET inbox.batch_size = 4;
SELECT inbox_prune() AS pruned;
SELECT count(*) FILTER (WHERE consumer = 'good') AS good_left, count(*) AS all_left FROM inbox;
-- A consumer longer than the functions allow (only a row written by hand
-- can have one) is passed over, its markers kept (delete them by hand),
-- and the pass still ends and prunes the others, in batches of any size.
INSERT INTO inbox (message_id, consumer, processed_at)
VALUES ('long', repeat('x', 300), now() - interval '30 days');
SELECT inbox_claim('m-9', 'good');
UPDATE inbox SET processed_at = processed_at - interval '2 hours' WHERE message_id = 'm-9';
SET statement_timeout = '60s';
SELECT inbox_prune() AS pruned;
SELECT count(*) FILTER (WHERE message_id = 'long') AS long_kept,
	   count(*) FILTER (WHERE message_id = 'm-9') AS good_left FROM inbox;
RESET statement_timeout;

-- A batch counts the consumers it walks past against inbox.batch_size as
-- it counts markers, so that thousands of consumers with nothing to prune
-- do not hold one batch's transaction open: here 200 consumers, 7 rows a
-- batch, and the two markers past their retention at the 100th and the
-- 200th are found by the batches that resume after the others.
TRUNCATE inbox;
SET inbox.batch_size = 7;
SELECT count(inbox_claim('fresh-' || g, 'c-' || lpad(g::text, 4, '0'))) AS claimed
FROM generate_series(1, 200) g;
SELECT count(*) AS configured FROM (SELECT inbox_configure(c, retention => interval '1 hour')
	FROM unnest(ARRAY['c-0100', 'c-0200']) c) x;
UPDATE inbox SET processed_at = now() - interval '2 hours'
WHERE consumer IN ('c-0100', 'c-0200');
SELECT inbox_prune() AS pruned;
SELECT count(*) AS kept FROM inbox;

-- A batch of one that ends on the long consumer, after consumers with
-- nothing to prune: the pass still ends (it once started over for ever).
INSERT INTO inbox (message_id, consumer, processed_at)
VALUES ('long-2', repeat('L', 300), now());
SET inbox.batch_size = 1;
SET statement_timeout = '60s';
SELECT inbox_prune() AS pruned;
RESET statement_timeout;
RESET inbox.batch_size;

-- Long consumers count against the batch like any consumer walked past
-- (an application role can write 3 million of them, and one batch walked
-- them all), and a batch that ends on one resumes after every consumer
-- sharing its first 256 bytes: the pass ends, and 'zz', after them, is
-- pruned.
INSERT INTO inbox (message_id, consumer, processed_at)
SELECT 'long-' || g, repeat('M', 300) || g, now() - interval '30 days'
FROM generate_series(1, 50) g;
SELECT consumer FROM inbox_configure('zz', retention => interval '1 hour');
INSERT INTO inbox (message_id, consumer, processed_at) VALUES ('z-1', 'zz', now() - interval '2 hours');
SET inbox.batch_size = 7;
SELECT inbox_prune() AS pruned;
RESET inbox.batch_size;
SELECT count(*) FILTER (WHERE consumer LIKE 'MMM%') AS long_kept,
	   count(*) FILTER (WHERE consumer = 'zz') AS zz_left FROM inbox;

TRUNCATE inbox;
DROP EXTENSION inbox;
