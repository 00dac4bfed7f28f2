--
-- A schema whose name contains a quote.  The two-phase statements name the
-- token sequence by its OID, never by a name inside a string literal, so
-- such a schema works, and a name built to inject SQL runs nothing.
--
-- CREATE EXTENSION refuses a quote in the schema's name (the install
-- script uses @extschema@), but the schema can be renamed afterwards.
-- Each rename is followed by a new session, whose cache of the
-- extension's objects starts empty.
--

CREATE SCHEMA "a'b";
CREATE EXTENSION inbox SCHEMA "a'b";
DROP SCHEMA "a'b";

-- A plain quote in the name: every call that draws a token works.
CREATE SCHEMA ab;
CREATE EXTENSION inbox SCHEMA ab;
ALTER SCHEMA ab RENAME TO "a'b";
\c -
SELECT "a'b".inbox_begin('m-1', 'email') AS token1 \gset
-- A takeover (the statement path): the lease of m-1 ran out.
UPDATE "a'b".inbox SET lease_until = clock_timestamp() - interval '1 second';
SELECT "a'b".inbox_begin('m-1', 'email') > :token1 AS took_over;
-- A new message under REPEATABLE READ takes the statement path too.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT "a'b".inbox_begin('m-2', 'email') > :token1 AS claimed_by_statement;
COMMIT;
UPDATE "a'b".inbox SET lease_until = clock_timestamp() - interval '1 second';
SELECT message_id, attempts, token > :token1 AS new_token
FROM "a'b".inbox_next('email') ORDER BY message_id;
SELECT message_id, state, attempts FROM "a'b".inbox ORDER BY message_id;
DELETE FROM "a'b".inbox;
DROP EXTENSION inbox;
DROP SCHEMA "a'b";

-- A name that would close the literal and call a function.  Had the
-- schema's name been spliced into nextval's string argument, the calls
-- below would have run inject() (it returns the text that makes the
-- spliced name resolve to the real sequence again, so they would even
-- have succeeded).
CREATE TABLE injected (called_by name);
CREATE FUNCTION inject() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.injected VALUES (current_user);
	RETURN '''||public.inject()||''';
END
$$;
CREATE SCHEMA x;
CREATE EXTENSION inbox SCHEMA x;
ALTER SCHEMA x RENAME TO "x'||public.inject()||'";
\c -
SET search_path = "x'||public.inject()||'", public;
SELECT inbox_begin('m-1', 'email') AS token1 \gset
UPDATE inbox SET lease_until = clock_timestamp() - interval '1 second';
SELECT inbox_begin('m-1', 'email') > :token1 AS took_over;
UPDATE inbox SET lease_until = clock_timestamp() - interval '1 second';
SELECT message_id, attempts FROM inbox_next('email');
SELECT count(*) AS injected_calls FROM public.injected;
RESET search_path;
DELETE FROM "x'||public.inject()||'".inbox;
DROP EXTENSION inbox;
DROP SCHEMA "x'||public.inject()||'";
DROP FUNCTION inject();
DROP TABLE injected;
