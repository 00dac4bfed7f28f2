--
-- The floor of late duplicates: pruning raises it, a claim given the
-- message's send time that finds no marker answers expired below it.
--
CREATE EXTENSION inbox;
SET timezone = 'UTC';
SELECT consumer, retention FROM inbox_configure('credit', retention => '1 hour');
SELECT consumer, retention FROM inbox_configure('email', retention => '1 hour');

-- Markers processed long ago, one still kept (processed recently, though
-- its message was sent long ago).
SELECT count(*) FILTER (WHERE c) AS claimed FROM (
	SELECT inbox_claim(m, 'credit') AS c FROM unnest(ARRAY['old-1', 'old-2', 'kept']) m) x;
UPDATE inbox SET processed_at = CASE message_id
	WHEN 'old-1' THEN timestamptz '2020-01-01 10:00:00+00'
	WHEN 'old-2' THEN timestamptz '2020-01-02 10:00:00+00'
	ELSE now() END;
SELECT count(*) AS floors_before FROM inbox_floors;

-- Pruning deletes both old markers and raises the floor to the latest.
SELECT inbox_prune() AS pruned;
SELECT consumer, floor FROM inbox_floors ORDER BY consumer;

-- A redelivery of a pruned message: expired, one-phase and two-phase,
-- writing nothing.
SELECT * FROM inbox_claim_outcome('old-1', 'credit', sent_at => '2020-01-01 09:59:00+00');
SELECT outcome, token FROM inbox_begin_outcome('old-2', 'credit', sent_at => '2020-01-02 09:00:00+00');
SELECT count(*) AS markers_written FROM inbox WHERE message_id LIKE 'old-%';
-- Sent before the floor, but its marker is still there: a duplicate.
SELECT * FROM inbox_claim_outcome('kept', 'credit', sent_at => '2020-01-01 00:00:00+00');
SELECT outcome FROM inbox_begin_outcome('kept', 'credit', sent_at => '2020-01-01 00:00:00+00');
-- The broker's clock may run ahead by up to a minute: a message stamped
-- within a minute after the floor is expired too; later, it is new.
SELECT outcome FROM inbox_claim_outcome('skew-1', 'credit', sent_at => '2020-01-02 10:00:59+00');
SELECT outcome FROM inbox_claim_outcome('skew-2', 'credit', sent_at => '2020-01-02 10:01:01+00');
SELECT outcome FROM inbox_begin_outcome('skew-3', 'credit', sent_at => '2020-01-02 10:01:01+00');
-- Without a send time, as before: claimed.
SELECT outcome FROM inbox_claim_outcome('old-1', 'credit');
-- Another consumer has no floor.
SELECT outcome FROM inbox_claim_outcome('old-1', 'email', sent_at => '2020-01-01 09:59:00+00');
SELECT outcome FROM inbox_begin_outcome('old-2', 'email', sent_at => '2020-01-01 09:59:00+00');

-- The floor only moves forward: pruning markers older than it leaves it.
INSERT INTO inbox (message_id, consumer, processed_at)
VALUES ('older', 'credit', '2019-06-01 00:00:00+00');
SELECT inbox_prune() AS pruned;
SELECT consumer, floor FROM inbox_floors ORDER BY consumer;
-- Failed markers raise it too; the other consumer gets its own.
UPDATE inbox SET processed_at = '2020-03-01 00:00:00+00'
WHERE message_id IN ('old-1', 'skew-2') AND consumer = 'credit';
UPDATE inbox SET state = 'failed', processed_at = '2020-02-01 00:00:00+00'
WHERE message_id = 'old-2' AND consumer = 'email';
SELECT inbox_prune() AS pruned;
SELECT consumer, floor FROM inbox_floors ORDER BY consumer;

-- Arguments.
SELECT * FROM inbox_claim_outcome('x', 'credit', sent_at => 'infinity');
SELECT outcome FROM inbox_begin_outcome('x', 'credit', sent_at => '-infinity');

-- A superuser's prune writes inbox_floors too: a trigger there that fires
-- anyway, or a rule, stops it, as on the inbox table (docs/security.md).
CREATE FUNCTION floors_spy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'spy ran'; RETURN NEW; END $$;
CREATE TRIGGER spy BEFORE INSERT OR UPDATE ON inbox_floors
	FOR EACH ROW EXECUTE FUNCTION floors_spy();
ALTER TABLE inbox_floors ENABLE ALWAYS TRIGGER spy;
SELECT inbox_prune();
DROP TRIGGER spy ON inbox_floors;
CREATE RULE floors_rule AS ON UPDATE TO inbox_floors DO ALSO NOTIFY floors;
SELECT inbox_prune();
DROP RULE floors_rule ON inbox_floors;
SELECT inbox_prune() AS pruned;
DROP FUNCTION floors_spy();

TRUNCATE inbox, inbox_floors;
DROP EXTENSION inbox;
