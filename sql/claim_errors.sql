--
-- Bad input to the claim functions: a clear error with the right SQLSTATE,
-- never a NULL answer or a crash.
--
CREATE EXTENSION inbox;

-- Shows the SQLSTATE and message of an error (psql's default verbosity
-- shows the message and detail, not the code).
CREATE FUNCTION pg_temp.error_of(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE query;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- NULLs (22004)
SELECT inbox_claim(NULL, 'credit');
SELECT inbox_claim('m', NULL);
SELECT inbox_claim(NULL::uuid, 'credit');
SELECT inbox_claim('3f6c0f4e-6d2b-4f7e-9b1a-2a3b4c5d6e7f'::uuid, NULL);
SELECT * FROM inbox_claim_many(NULL, 'credit');
SELECT * FROM inbox_claim_many(ARRAY['a', NULL, 'c'], 'credit');
SELECT * FROM inbox_claim_many(ARRAY['a'], NULL);
SELECT pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_claim(NULL, 'credit')$$),
	($$SELECT inbox_claim('m', NULL)$$),
	($$SELECT inbox_claim(NULL::uuid, 'credit')$$),
	($$SELECT inbox_claim_many(NULL, 'credit')$$),
	($$SELECT inbox_claim_many(ARRAY[NULL::text], 'credit')$$)) v(q);

-- Empty strings (22023)
SELECT inbox_claim('', 'credit');
SELECT inbox_claim('m', '');
SELECT * FROM inbox_claim_many(ARRAY['a', ''], 'credit');
SELECT pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_claim('', 'credit')$$),
	($$SELECT inbox_claim('m', '')$$),
	($$SELECT inbox_claim_many(ARRAY[''], 'credit')$$)) v(q);

-- Longer than the documented limits, counted in bytes (22001): at the
-- limit is fine, one byte over is not, and a huge string is refused
-- without touching the index.
SELECT inbox_claim(repeat('x', 1024), 'credit') AS at_limit;
SELECT inbox_claim(repeat('x', 1025), 'credit');
SELECT inbox_claim(repeat('é', 513), 'credit');
SELECT inbox_claim(repeat('x', 10000000), 'credit');
SELECT inbox_claim('m', repeat('c', 256)) AS consumer_at_limit;
SELECT inbox_claim('m', repeat('c', 257));
SELECT * FROM inbox_claim_many(ARRAY['a', repeat('x', 2000)], 'credit');
SELECT pg_temp.error_of(q) FROM (VALUES
	($$SELECT inbox_claim(repeat('x', 1025), 'credit')$$),
	($$SELECT inbox_claim('m', repeat('c', 257))$$),
	($$SELECT inbox_claim_many(ARRAY[repeat('x', 1025)], 'credit')$$)) v(q);

-- Arrays of more than one dimension (2202E)
SELECT * FROM inbox_claim_many('{{a,b},{c,d}}', 'credit');
SELECT pg_temp.error_of($$SELECT inbox_claim_many('{{a,b},{c,d}}', 'credit')$$);

-- A read-only transaction cannot claim (25006), even a duplicate.
BEGIN READ ONLY;
SELECT inbox_claim('m', 'credit');
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM inbox_claim_many(ARRAY['m'], 'credit');
ROLLBACK;
BEGIN READ ONLY;
SELECT pg_temp.error_of($$SELECT inbox_claim('m', 'credit')$$);
ROLLBACK;

-- Nothing above wrote a marker except the two at-limit claims.
SELECT octet_length(message_id), octet_length(consumer) FROM inbox ORDER BY 1, 2;

TRUNCATE inbox;
DROP EXTENSION inbox;
