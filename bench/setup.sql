-- bench/setup.sql: tables and functions the claim benchmarks compare.
--
-- Every alternative uses a table of exactly the inbox table's shape (same
-- columns, identity, key and constraints), so the figures compare the claim
-- paths, not the tables.

CREATE EXTENSION inbox;

-- What a user would write by hand: a raw INSERT ... ON CONFLICT DO NOTHING.
CREATE TABLE raw_inbox (LIKE inbox INCLUDING ALL);

-- ...or a PL/pgSQL function with an EXCEPTION block.
CREATE TABLE plpgsql_inbox (LIKE inbox INCLUDING ALL);
CREATE FUNCTION plpgsql_claim(p_message_id text, p_consumer text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO plpgsql_inbox (message_id, consumer) VALUES (p_message_id, p_consumer);
	RETURN true;
EXCEPTION WHEN unique_violation THEN
	RETURN false;
END
$$;

-- Markers the duplicate workloads claim again.
INSERT INTO inbox (message_id, consumer)
	SELECT 'd-' || g, 'credit' FROM generate_series(1, 100000) g;
INSERT INTO raw_inbox (message_id, consumer)
	SELECT 'd-' || g, 'credit' FROM generate_series(1, 100000) g;
INSERT INTO plpgsql_inbox (message_id, consumer)
	SELECT 'd-' || g, 'credit' FROM generate_series(1, 100000) g;
VACUUM ANALYZE;

-- The two-phase pattern written by hand: a lease column and no token, on a
-- table of the same shape.
CREATE TABLE lease_inbox (LIKE inbox INCLUDING ALL);
