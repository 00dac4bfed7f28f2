-- examples/http/schema.sql: the payments table of the HTTP example.
-- examples/http/test loads it into a fresh database.
CREATE EXTENSION inbox;

-- One row per payment made.  Deliberately no unique key on
-- idempotency_key: the test counts the rows of each key to see the
-- payment made exactly once.
CREATE TABLE payments (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	idempotency_key text NOT NULL,
	account integer NOT NULL,
	amount bigint NOT NULL
);
