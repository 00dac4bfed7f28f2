-- examples/schema.sql: the business tables the example consumers change.
-- examples/test loads it into a fresh database per language.
CREATE EXTENSION inbox;

CREATE TABLE accounts (
	id integer PRIMARY KEY,
	balance bigint NOT NULL
);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 10) AS g;

-- One row per applied message.  Deliberately no unique key on message_id:
-- the test counts the rows of each message to see it applied exactly once.
CREATE TABLE ledger (
	message_id text NOT NULL,
	account integer NOT NULL REFERENCES accounts,
	amount bigint NOT NULL
);
