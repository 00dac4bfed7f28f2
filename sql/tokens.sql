--
-- Fencing tokens only ever go up: settings of inbox_token_seq that would
-- let them repeat or decrease are refused (src/tokens.c).
--
CREATE EXTENSION inbox;

SELECT inbox_begin('t-1', 'tokens') AS token;
SELECT inbox_begin('t-2', 'tokens') AS token;

-- Refused at ALTER time, with the sequence left as it was.
ALTER SEQUENCE inbox_token_seq CACHE 20;
ALTER SEQUENCE inbox_token_seq INCREMENT BY -1;
ALTER SEQUENCE inbox_token_seq CYCLE;
ALTER SEQUENCE inbox_token_seq RESTART;
ALTER SEQUENCE inbox_token_seq RESTART WITH 2;
ALTER SEQUENCE inbox_token_seq START WITH 1 RESTART;
ALTER SEQUENCE inbox_token_seq SET UNLOGGED;
ALTER SEQUENCE inbox_token_seq MAXVALUE 1000000;
ALTER SEQUENCE inbox_token_seq AS integer;
SELECT seqcache, seqincrement, seqcycle, seqmax, relpersistence
FROM pg_sequence JOIN pg_class ON oid = seqrelid
WHERE seqrelid = 'inbox_token_seq'::regclass;

-- Harmless settings pass: the tokens still increase.
ALTER SEQUENCE inbox_token_seq CACHE 1 NO CYCLE INCREMENT BY 10;
ALTER SEQUENCE inbox_token_seq RESTART WITH 100;
ALTER SEQUENCE inbox_token_seq AS bigint NO MAXVALUE MINVALUE 1;
ALTER SEQUENCE IF EXISTS no_such_seq CACHE 20;

-- Other sequences are none of our business.
CREATE SEQUENCE tokens_other;
ALTER SEQUENCE tokens_other CACHE 20 INCREMENT BY -1 CYCLE;
ALTER SEQUENCE tokens_other RESTART;
DROP SEQUENCE tokens_other;

-- Tokens increase across sessions after the attempts above.
\c
SELECT inbox_begin('t-3', 'tokens') AS token;
\c
SELECT inbox_begin('t-4', 'tokens') AS token;
\c
SELECT inbox_begin('t-5', 'tokens') AS token;
ALTER SEQUENCE inbox_token_seq INCREMENT BY 1;

-- The second line: with the event trigger disabled, an ALTER goes through,
-- but no token is drawn from the sequence while its settings are wrong,
-- by either path (a new message, a takeover, a sweeper).
UPDATE inbox SET state = 'released', lease_until = NULL WHERE message_id = 't-1';
ALTER EVENT TRIGGER inbox_token_seq_guard DISABLE;

ALTER SEQUENCE inbox_token_seq CACHE 20;
SELECT inbox_begin('t-6', 'tokens');
SELECT inbox_begin('t-1', 'tokens');
SELECT * FROM inbox_next('tokens');
ALTER SEQUENCE inbox_token_seq CACHE 1;

ALTER SEQUENCE inbox_token_seq INCREMENT BY -1;
SELECT inbox_begin('t-6', 'tokens');
SELECT * FROM inbox_next('tokens');
ALTER SEQUENCE inbox_token_seq INCREMENT BY 1;

ALTER SEQUENCE inbox_token_seq CYCLE;
SELECT inbox_begin('t-6', 'tokens');
ALTER SEQUENCE inbox_token_seq NO CYCLE;

ALTER SEQUENCE inbox_token_seq SET UNLOGGED;
SELECT inbox_begin('t-6', 'tokens');
ALTER SEQUENCE inbox_token_seq SET LOGGED;

ALTER SEQUENCE inbox_token_seq MAXVALUE 1000000;
SELECT inbox_begin('t-6', 'tokens');
ALTER SEQUENCE inbox_token_seq NO MAXVALUE;

ALTER EVENT TRIGGER inbox_token_seq_guard ENABLE;

-- Nothing was drawn meanwhile: the next tokens follow the last one.
SELECT inbox_begin('t-6', 'tokens') AS token;
SELECT message_id, token FROM inbox_next('tokens');
\c
SELECT inbox_begin('t-7', 'tokens') AS token;

-- Every claim's token in the order the claims were made.
SELECT message_id, token FROM inbox ORDER BY token;

-- Only an event trigger may call the guard.
SELECT inbox_token_seq_guard();

-- A role that does not own the sequence gets core's refusal first (42501),
-- for SET UNLOGGED as for every other ALTER.
CREATE ROLE regress_inbox_not_owner;
GRANT USAGE ON SEQUENCE inbox_token_seq TO regress_inbox_not_owner;
SET ROLE regress_inbox_not_owner;
\set VERBOSITY sqlstate
ALTER SEQUENCE inbox_token_seq SET UNLOGGED;
ALTER SEQUENCE inbox_token_seq CACHE 10;
\set VERBOSITY default
RESET ROLE;
DROP OWNED BY regress_inbox_not_owner;
DROP ROLE regress_inbox_not_owner;

-- The helper sequences are the extension's members: a look-alike created
-- where one was is not taken for it.
ALTER SEQUENCE inbox_token_reserve RENAME TO inbox_token_reserve_moved;
CREATE SEQUENCE inbox_token_reserve;
\c
SELECT inbox_begin('t-8', 'tokens') AS token;
DROP SEQUENCE inbox_token_reserve;
ALTER SEQUENCE inbox_token_reserve_moved RENAME TO inbox_token_reserve;
\c
SELECT inbox_begin('t-8', 'tokens') IS NOT NULL AS begun;

TRUNCATE inbox;
DROP EXTENSION inbox;
