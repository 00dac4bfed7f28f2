--
-- Every function with bad values in each argument, one argument at a time:
-- NULLs, empty, huge and non-ASCII strings, negative, zero, huge and
-- mixed-sign intervals, extreme numbers.  Each call must end in a clear
-- error with a SQLSTATE of its class, or in an answer: never in a NULL
-- answer, an internal error (XX000) or a lost connection.
--
CREATE EXTENSION inbox;
\set SHOW_CONTEXT never

CREATE TABLE pg_temp.bad (type text, label text, value text);
INSERT INTO pg_temp.bad VALUES
	('text', 'null', 'NULL'),
	('text', 'empty', $$''$$),
	('text', '1 MB', $$repeat('x', 1048576)$$),
	('text', 'multibyte', $$repeat('é', 600)$$),
	('interval', 'null', 'NULL'),
	('interval', 'zero', $$interval '0'$$),
	('interval', 'negative', $$interval '-1 second'$$),
	('interval', 'mixed month/day', $$interval '1 mon -29 days'$$),
	('interval', 'mixed day/time', $$interval '-1 month 30 days 1 second'$$),
	('interval', 'microsecond', $$interval '1 microsecond'$$),
	('interval', 'month', $$interval '1 month'$$),
	('interval', 'huge', $$interval '178000000 years'$$),
	('bigint', 'null', 'NULL'),
	('bigint', 'negative', '-1'),
	('bigint', 'max', '9223372036854775807'),
	('integer', 'null', 'NULL'),
	('integer', 'negative', '-1'),
	('integer', 'zero', '0'),
	('integer', 'max', '2147483647'),
	('jsonb', 'null', 'NULL'),
	('jsonb', '2 MB', $$pg_catalog.to_jsonb(repeat('x', 2097152))$$),
	('text[]', 'null', 'NULL'),
	('text[]', 'empty', $$'{}'::text[]$$),
	('text[]', 'null element', $$ARRAY[NULL]::text[]$$),
	('text[]', 'empty element', $$ARRAY['']$$),
	('text[]', 'two-dimensional', $$ARRAY[['a'], ['b']]$$),
	('uuid', 'null', 'NULL::uuid'),
	('timestamptz', 'null', 'NULL::timestamptz'),
	('timestamptz', 'infinity', $$timestamptz 'infinity'$$),
	('timestamptz', '-infinity', $$timestamptz '-infinity'$$);

-- Each function with valid arguments, and the types of its arguments.
CREATE TABLE pg_temp.calls (fn text, args text[], types text[]);
INSERT INTO pg_temp.calls VALUES
	('inbox_claim', ARRAY[$$'m'$$, $$'c'$$], ARRAY['text', 'text']),
	('inbox_claim', ARRAY[$$gen_random_uuid()$$, $$'c'$$], ARRAY['uuid', 'text']),
	('inbox_claim_many', ARRAY[$$ARRAY['m']$$, $$'c'$$], ARRAY['text[]', 'text']),
	('inbox_begin', ARRAY[$$'m2'$$, $$'c2'$$, $$interval '1 minute'$$, $$'{}'::jsonb$$],
		ARRAY['text', 'text', 'interval', 'jsonb']),
	('inbox_begin_outcome', ARRAY[$$'m2'$$, $$'c2'$$, $$interval '1 minute'$$, $$'{}'::jsonb$$,
		$$'fp'$$, $$now()$$],
		ARRAY['text', 'text', 'interval', 'jsonb', 'text', 'timestamptz']),
	('inbox_claim_outcome', ARRAY[$$'m4'$$, $$'c4'$$, $$'fp'$$, $$now()$$],
		ARRAY['text', 'text', 'text', 'timestamptz']),
	('inbox_result', ARRAY[$$'m'$$, $$'c'$$], ARRAY['text', 'text']),
	('inbox_extend', ARRAY[$$'m2'$$, $$'c2'$$, '1', $$interval '1 minute'$$],
		ARRAY['text', 'text', 'bigint', 'interval']),
	('inbox_complete', ARRAY[$$'m2'$$, $$'c2'$$, '1', $$'{}'::jsonb$$],
		ARRAY['text', 'text', 'bigint', 'jsonb']),
	('inbox_fail', ARRAY[$$'m2'$$, $$'c2'$$, '1', $$'boom'$$],
		ARRAY['text', 'text', 'bigint', 'text']),
	('inbox_next', ARRAY[$$'c2'$$, $$interval '1 minute'$$, '10'],
		ARRAY['text', 'interval', 'integer']),
	('inbox_configure', ARRAY[$$'c3'$$, $$interval '1 day'$$, $$interval '1 minute'$$, '3'],
		ARRAY['text', 'interval', 'interval', 'integer']),
	('inbox_retention_for', ARRAY[$$interval '1 minute'$$, '3', $$interval '1 day'$$, $$interval '1 day'$$],
		ARRAY['interval', 'integer', 'interval', 'interval']);

-- What a call gives: its SQLSTATE, or 'answer', or 'NULL answer'.  In a
-- subtransaction that is always rolled back, so that every call meets the
-- same table.
CREATE FUNCTION pg_temp.outcome(query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	nulls bigint;
BEGIN
	BEGIN
		EXECUTE format('SELECT count(*) FILTER (WHERE r IS NULL) FROM (SELECT %s AS r) s',
					   query) INTO nulls;
		RAISE EXCEPTION USING ERRCODE = 'P0099',
			MESSAGE = CASE WHEN nulls > 0 THEN 'NULL answer' ELSE 'answer' END;
	EXCEPTION
		WHEN SQLSTATE 'P0099' THEN
			RETURN SQLERRM;
		WHEN OTHERS THEN
			RETURN SQLSTATE;
	END;
END
$$;

-- Every call, one bad argument at a time.
CREATE TEMP TABLE results AS
SELECT c.fn, c.types, i AS arg, b.label, b.type, NULL::text AS outcome,
	   format('%s(%s)', c.fn,
			  array_to_string(c.args[1:i - 1] || b.value || c.args[i + 1:], ', ')) AS query
FROM pg_temp.calls c, generate_subscripts(c.args, 1) i, pg_temp.bad b
WHERE b.type = c.types[i];

DO $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT ctid, query FROM results LOOP
		UPDATE results SET outcome = pg_temp.outcome(r.query) WHERE ctid = r.ctid;
	END LOOP;
END
$$;

-- Never an internal error, never a NULL that reads as an answer (inbox_next
-- returns a set: no rows is its answer; its columns are never NULL).
-- inbox_result's NULL is its answer for a key without a result.
SELECT fn, arg, label, outcome, query FROM results
WHERE outcome = 'XX000' OR outcome IS NULL
   OR (outcome = 'NULL answer' AND fn <> 'inbox_result');

-- The outcomes, per function and argument.
SELECT fn || '(' || array_to_string(types, ', ') || ')' AS function, arg,
	   string_agg(label || ': ' || outcome, ', ' ORDER BY label) AS outcomes
FROM results GROUP BY fn, types, arg ORDER BY 1, arg;

SELECT count(*) AS calls FROM results;
SELECT count(*) AS markers_left FROM inbox;

TRUNCATE inbox;
DROP EXTENSION inbox;
