--
-- Per-consumer configuration, the inbox.* settings, and inbox_stats
--
CREATE EXTENSION inbox;

-- The settings and their defaults.
SELECT name, setting, unit, context, short_desc
FROM pg_settings WHERE name LIKE 'inbox.%' ORDER BY name;
SHOW inbox.lease;
SHOW inbox.max_attempts;
SHOW inbox.retention;

-- inbox_configure sets what it is given and keeps the rest.
SELECT * FROM inbox_configure('email', max_attempts => 3);
SELECT * FROM inbox_configure('email', lease => interval '90 seconds');
SELECT * FROM inbox_configure('email', retention => interval '14 days', max_attempts => 4);
SELECT * FROM inbox_configure('email');
SELECT * FROM inbox_configure('audit', interval '1 day', interval '1 minute', 10);
SELECT * FROM inbox_consumers ORDER BY consumer;

-- The view has exactly the documented columns.
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = 'inbox_stats'::regclass AND attnum > 0
ORDER BY attnum;
SELECT * FROM inbox_stats;
SELECT inbox_claim('a', 'credit'), inbox_claim('b', 'credit');
SELECT inbox_begin('c', 'email') IS NOT NULL AS claimed;
SELECT consumer, processed, in_flight, expired, released, failed,
	   oldest_in_flight_age >= interval '0' AS has_in_flight_age,
	   oldest_released_age IS NULL AS no_released
FROM inbox_stats ORDER BY consumer;

-- Kept by pg_dump with the markers.
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'inbox';

TRUNCATE inbox;
DROP EXTENSION inbox;
