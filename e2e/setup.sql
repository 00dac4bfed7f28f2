-- e2e/setup.sql: the database the end-to-end consumers work in.
-- e2e/run loads it into a fresh database with psql -v accounts=N.

-- As the README's Quick start: the extension in a schema a superuser owns,
-- on the search_path of every session (also those PgBouncer opens).
CREATE SCHEMA inbox;
CREATE EXTENSION inbox SCHEMA inbox;
SELECT set_config('search_path', '"$user", public, inbox', false);
ALTER DATABASE e2e SET search_path = "$user", public, inbox;

-- The one-phase consumer's business change: a credit to an account, and a
-- ledger row.  Deliberately no unique key on ledger.message_id: a message
-- applied twice must show up as two rows, not as an error.
CREATE TABLE accounts (
	id integer PRIMARY KEY,
	balance bigint NOT NULL
);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, :accounts) AS g;

CREATE TABLE ledger (
	message_id text NOT NULL,
	account integer NOT NULL REFERENCES accounts,
	amount bigint NOT NULL
);

-- The chaos kills one owner of a message several times over in a long
-- run; the default of 5 attempts would then turn it "failed" on purpose.
-- Twenty keeps that policy out of the way: a failed marker is reported.
SELECT consumer, max_attempts FROM inbox_configure('notify', max_attempts => 20);
