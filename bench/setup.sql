-- bench/setup.sql: tables and functions the benchmarks compare.
--
-- inbox_claim runs on the extension's own table.  The alternatives a user
-- would write by hand run on the seed article's inbox table: an identity
-- key, message_id, consumer, received_at, processed_at, and the unique key
-- on (message_id, consumer), and nothing else.

CREATE EXTENSION inbox;

CREATE TABLE article_inbox (
	id				bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id		text NOT NULL,
	consumer		text NOT NULL,
	received_at		timestamptz NOT NULL DEFAULT now(),
	processed_at	timestamptz,
	UNIQUE (message_id, consumer)
);

-- One table per alternative, so none inherits another's dead tuples.
CREATE TABLE raw_inbox (LIKE article_inbox INCLUDING ALL);
CREATE TABLE plpgsql_inbox (LIKE article_inbox INCLUDING ALL);
CREATE TABLE client_inbox (LIKE article_inbox INCLUDING ALL);
CREATE TABLE batch_inbox (LIKE article_inbox INCLUDING ALL);

-- The article's table with the index a user needs to prune it by age: the
-- counterpart of inbox's own inbox_prunable.
CREATE TABLE rawidx_inbox (LIKE article_inbox INCLUDING ALL);
CREATE INDEX ON rawidx_inbox (consumer, processed_at);
CREATE TABLE batchidx_inbox (LIKE rawidx_inbox INCLUDING ALL);

-- A PL/pgSQL function with an EXCEPTION block.
CREATE FUNCTION plpgsql_claim(p_message_id text, p_consumer text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO plpgsql_inbox (message_id, consumer, processed_at)
	VALUES (p_message_id, p_consumer, now());
	RETURN true;
EXCEPTION WHEN unique_violation THEN
	RETURN false;
END
$$;

-- The two-phase pattern written by hand: a lease column and no token.
CREATE TABLE lease_inbox (LIKE inbox INCLUDING ALL);

-- Markers the duplicate workloads claim again.
INSERT INTO inbox (message_id, consumer)
	SELECT 'd-' || g, 'credit' FROM generate_series(1, 100000) g;
INSERT INTO raw_inbox (message_id, consumer)
	SELECT 'd-' || g, 'credit' FROM generate_series(1, 100000) g;
INSERT INTO plpgsql_inbox (message_id, consumer)
	SELECT 'd-' || g, 'credit' FROM generate_series(1, 100000) g;
INSERT INTO client_inbox (message_id, consumer)
	SELECT 'd-' || g, 'credit' FROM generate_series(1, 100000) g;
VACUUM ANALYZE;
