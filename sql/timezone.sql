--
-- Retention cutoffs and lease ends are computed in UTC: no session time
-- zone moves them.  A database owner's ALTER DATABASE ... SET timezone
-- reaches every session, a superuser's inbox_prune() among them, and
-- PostgreSQL accepts POSIX zones with offsets of up to 167 hours: in the
-- zone below, whose offset changes by 300 hours between three days ago and
-- now, now() - interval '3 days' lies days in the future, and a cutoff
-- computed that way would delete markers written a minute ago.
--
CREATE EXTENSION inbox;
SELECT consumer, retention FROM inbox_configure('credit', retention => interval '3 days');
SELECT count(inbox_claim('m-' || g, 'credit')) AS claimed FROM generate_series(1, 50) g;
UPDATE inbox SET processed_at = now() - interval '1 minute';

-- Standard time UTC-150h, summer time UTC+150h, from one J-day (1 to 365)
-- to ten days later: the first start day, around today, that puts three
-- days ago in the future.
DO $$
DECLARE
	today int := extract(doy FROM now() AT TIME ZONE 'UTC')::int;
BEGIN
	FOR k IN -20..20 LOOP
		PERFORM set_config('timezone',
			format('AAA+150BBB-150,J%s/0,J%s/0',
				   (today + k + 729) % 365 + 1, (today + k + 739) % 365 + 1),
			false);
		EXIT WHEN now() - interval '3 days' > now();
	END LOOP;
END
$$;
SELECT current_setting('timezone') LIKE 'AAA+150BBB-150,J%' AS zone_set,
	   now() - interval '3 days' > now() AS three_days_ago_is_in_the_future_here;

SELECT inbox_prune() AS pruned;
SELECT count(*) AS kept FROM inbox;

-- Markers past their retention in UTC are pruned, in this zone as in any.
UPDATE inbox SET processed_at = now() - interval '3 days 1 minute'
WHERE message_id IN ('m-1', 'm-2');
SELECT inbox_prune() AS pruned;

-- A lease of a day is 24 hours, whatever the zone.
SELECT inbox_begin('l-1', 'email', lease => interval '1 day') IS NOT NULL AS begun;
SELECT lease_until - received_at AS lease FROM inbox WHERE message_id = 'l-1';
SELECT inbox_extend('l-1', 'email', token, interval '1 day') AS extended FROM inbox WHERE message_id = 'l-1';
SELECT lease_until - now() BETWEEN interval '23 hours 59 minutes' AND interval '24 hours 1 minute' AS extended_by_a_day
FROM inbox WHERE message_id = 'l-1';
RESET timezone;

TRUNCATE inbox;
DROP EXTENSION inbox;
