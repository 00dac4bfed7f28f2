-- demo/race.sql: two consumers handle the same message at the same time.
--
-- Run by "make demo".  Session a is this psql; sessions b and c are dblink
-- connections, so one script can interleave them exactly: b's blocking
-- statements are sent asynchronously, and the script waits until b is
-- blocked before going on.  (dblink_get_result is called once more after
-- each asynchronous result, as dblink requires, to free the connection.)

\pset format unaligned
\pset tuples_only on
\set QUIET on

CREATE EXTENSION inbox;
CREATE EXTENSION dblink;
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
-- The naive handler's own marker table: no unique key.
CREATE TABLE naive_processed (message_id text, consumer text);

-- Waits (polling, for at most 10 seconds) until a session is blocked on a
-- lock, so the demo shows the interleaving it describes.
CREATE FUNCTION wait_until_blocked(conn text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1..1000 LOOP
		IF EXISTS (SELECT FROM pg_stat_activity
				   WHERE application_name = conn AND wait_event_type = 'Lock') THEN
			RETURN;
		END IF;
		PERFORM pg_sleep(0.01);
	END LOOP;
	RAISE EXCEPTION 'session % never blocked', conn;
END
$$;

SELECT dblink_connect('a', :'connstr' || ' application_name=a') \g /dev/null
SELECT dblink_connect('b', :'connstr' || ' application_name=b') \g /dev/null

\echo '1. The naive handler: "if already processed, return", then credit and record.'
\echo ''
INSERT INTO accounts VALUES (42, 0);
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('b', 'BEGIN') \g /dev/null
SELECT '   a checks msg-1: ' || CASE WHEN seen THEN 'already processed' ELSE 'not processed yet' END
FROM dblink('a', $$SELECT EXISTS (SELECT FROM naive_processed WHERE message_id = 'msg-1' AND consumer = 'credit')$$) AS t(seen boolean);
SELECT '   b checks msg-1: ' || CASE WHEN seen THEN 'already processed' ELSE 'not processed yet' END
FROM dblink('b', $$SELECT EXISTS (SELECT FROM naive_processed WHERE message_id = 'msg-1' AND consumer = 'credit')$$) AS t(seen boolean);
SELECT dblink_exec('a', $$UPDATE accounts SET balance = balance + 100 WHERE id = 42$$) \g /dev/null
SELECT dblink_exec('a', $$INSERT INTO naive_processed VALUES ('msg-1', 'credit')$$) \g /dev/null
\echo '   a credits 100 and records msg-1'
SELECT dblink_send_query('b', $$UPDATE accounts SET balance = balance + 100 WHERE id = 42$$) \g /dev/null
SELECT wait_until_blocked('b') \g /dev/null
\echo '   b credits 100 too, and waits for a''s row lock'
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
\echo '   a commits'
SELECT 1 FROM dblink_get_result('b') AS t(r text) \g /dev/null
SELECT 1 FROM dblink_get_result('b') AS t(r text) \g /dev/null
SELECT dblink_exec('b', $$INSERT INTO naive_processed VALUES ('msg-1', 'credit')$$) \g /dev/null
SELECT dblink_exec('b', 'COMMIT') \g /dev/null
\echo '   b records msg-1 and commits'
SELECT format('   => balance %s, %s markers for msg-1: credited %s',
			  balance, (SELECT count(*) FROM naive_processed),
			  CASE balance WHEN 100 THEN 'once' ELSE 'TWICE' END)
FROM accounts;
\echo ''

\echo '2. The inbox handler: inbox_claim in the same transaction as the credit.'
\echo ''
UPDATE accounts SET balance = 0;
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('b', 'BEGIN') \g /dev/null
SELECT '   a: inbox_claim(''msg-2'', ''credit'') = ' || claimed
FROM dblink('a', $$SELECT inbox_claim('msg-2', 'credit')$$) AS t(claimed boolean);
SELECT dblink_exec('a', $$UPDATE accounts SET balance = balance + 100 WHERE id = 42$$) \g /dev/null
\echo '   a credits 100'
SELECT dblink_send_query('b', $$SELECT inbox_claim('msg-2', 'credit')$$) \g /dev/null
SELECT wait_until_blocked('b') \g /dev/null
\echo '   b: inbox_claim(''msg-2'', ''credit'') waits for a''s transaction'
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
\echo '   a commits'
SELECT '   b: inbox_claim returns ' || claimed
	   || CASE WHEN claimed THEN ', so b credits' ELSE ': b skips the credit, acks the message' END
FROM dblink_get_result('b') AS t(claimed boolean);
SELECT 1 FROM dblink_get_result('b') AS t(r boolean) \g /dev/null
SELECT dblink_exec('b', 'COMMIT') \g /dev/null
\echo '   b commits'
SELECT format('   => balance %s, %s marker for msg-2: credited %s',
			  balance, (SELECT count(*) FROM inbox WHERE message_id = 'msg-2'),
			  CASE balance WHEN 100 THEN 'once' ELSE 'TWICE' END)
FROM accounts;
\echo ''

SELECT dblink_disconnect('a') \g /dev/null
SELECT dblink_disconnect('b') \g /dev/null
