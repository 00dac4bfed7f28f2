# Issue 35, finding 6: a database owner's settings do not reach the
# worker, and one database cannot hold up the others.
# - The owner (not a superuser) sets planner methods, JIT, memory, time
#   zone, styles and search_path for its database; the worker sees the
#   server's values and its own pins instead, and so does a superuser's
#   inbox_reclaim() for what every pass pins (not the styles of dates and
#   intervals, which its messages use).  What a batch sees is noted
#   by a CHECK constraint a superuser put on the table.
# - A database with a long backlog is left after inbox.database_time, and
#   a claim that expires in another database meanwhile is reclaimed while
#   the backlog is still there; the backlog is done in later rounds.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('pinned');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
inbox.batch_delay = 0
inbox.database_time = 1s
work_mem = '8MB'
});
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE ROLE owner LOGIN;
	CREATE DATABASE shop OWNER owner;
	CREATE DATABASE big;
	CREATE EXTENSION inbox;  -- for inbox_worker_status()
});

# What a batch sees: each row a reclaim updates is checked by seen(),
# which notes the settings.
my @settings = qw(enable_tidscan enable_indexscan enable_bitmapscan
  enable_seqscan enable_nestloop jit max_parallel_workers_per_gather
  TimeZone DateStyle IntervalStyle search_path work_mem plan_cache_mode
  session_replication_role transaction_isolation);
my $noted = join(', ', map { "current_setting('$_')" } @settings);
$node->safe_psql(
	'shop', qq{
	CREATE SCHEMA ext;
	CREATE EXTENSION inbox SCHEMA ext;
	CREATE SCHEMA watch;
	CREATE TABLE watch.seen (who text, settings text[]);
	CREATE FUNCTION watch.seen(state ext.inbox_state) RETURNS boolean
		LANGUAGE plpgsql VOLATILE AS \$\$
	BEGIN
		INSERT INTO watch.seen VALUES (
			(SELECT backend_type FROM pg_catalog.pg_stat_activity
			 WHERE pid = pg_catalog.pg_backend_pid())
			  || '/' || current_setting('application_name'),
			ARRAY[$noted]);
		RETURN true;
	END
	\$\$;
	ALTER TABLE ext.inbox ADD CONSTRAINT noted CHECK (watch.seen(state));
	CREATE SCHEMA AUTHORIZATION owner;
});

# The owner's settings for every session of its database, the worker's
# included, as issue 35 reproduced them.
$node->safe_psql(
	'shop', q{
	ALTER DATABASE shop SET enable_tidscan = off;
	ALTER DATABASE shop SET enable_indexscan = off;
	ALTER DATABASE shop SET enable_bitmapscan = off;
	ALTER DATABASE shop SET enable_seqscan = off;
	ALTER DATABASE shop SET enable_nestloop = off;
	ALTER DATABASE shop SET jit = on;
	ALTER DATABASE shop SET jit_above_cost = 0;
	ALTER DATABASE shop SET max_parallel_workers_per_gather = 4;
	ALTER DATABASE shop SET work_mem = '64kB';
	ALTER DATABASE shop SET TimeZone = 'AAA+150BBB-150,J334/0,J344/0';
	ALTER DATABASE shop SET DateStyle = 'SQL, DMY';
	ALTER DATABASE shop SET IntervalStyle = 'iso_8601';
	ALTER DATABASE shop SET search_path = owner, public, pg_catalog;
	ALTER DATABASE shop SET plan_cache_mode = force_generic_plan;
	ALTER DATABASE shop SET default_transaction_isolation = 'repeatable read';
	},
	extra_params => [ '-U', 'owner' ]);

# expire($db, $id): a claim whose lease has just ended.
sub expire
{
	my ($db, $id) = @_;
	my $schema = $db eq 'shop' ? 'ext' : 'public';
	$node->safe_psql($db, qq{
		INSERT INTO $schema.inbox (message_id, consumer, state, token, lease_until)
			VALUES ('$id', 'jobs', 'claimed', 1, now() - interval '1 second');
	});
}

expire('shop', 'job-1');
ok( $node->poll_query_until('shop',
		q{SELECT state = 'released' FROM ext.inbox WHERE message_id = 'job-1'}),
	'the worker reclaims in the database');
my $expected = 'on,on,on,on,on,off,0,UTC,"ISO, MDY",postgres,"pg_catalog, pg_temp",8MB,auto,replica,"read committed"';
is( $node->safe_psql('shop',
		q{SELECT array_to_string(array_agg(DISTINCT settings::text), ' | ') FROM watch.seen
		  WHERE who LIKE 'inbox worker shop/%'}),
	"{$expected}",
	"the worker sees the server's settings and its pins, none of the owner's");

# A superuser's pass pins what every pass pins; memory is the session's.
# (The worker kept out of the database first: two rounds of the launcher
# in "postgres" after the reload, since the first may have started before.)
my $passes = $node->safe_psql('postgres',
	q{SELECT passes FROM inbox_worker_status() WHERE database = 'postgres'});
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.databases = 'postgres'});
$node->reload;
$node->poll_query_until('postgres',
	qq{SELECT passes >= $passes + 2 FROM inbox_worker_status() WHERE database = 'postgres'});
$node->safe_psql('shop', 'TRUNCATE watch.seen');
expire('shop', 'job-2');
my ($ret, $out, $err) = $node->psql('shop',
	q{SET application_name = 'dba'; SELECT ext.inbox_reclaim();});
is( $node->safe_psql('shop',
		q{SELECT array_to_string(array_agg(DISTINCT settings::text), ' | ') FROM watch.seen
		  WHERE who = 'client backend/dba'}),
	'{on,on,on,on,on,off,0,UTC,"SQL, DMY",iso_8601,"pg_catalog, pg_temp",64kB,auto,replica,"repeatable read"}',
	"a superuser's inbox_reclaim() pins them too, but the styles its messages use") or diag $err;
is($node->safe_psql('shop', 'SHOW TimeZone'), 'AAA+150BBB-150,J334/0,J344/0',
	"and leaves the session's as they were");
$node->safe_psql('postgres', q{ALTER SYSTEM RESET inbox.databases});
$node->reload;

# One database with a backlog of batches (10,000 markers past their
# retention, ten at a time, 20 ms apart: 20 seconds of work), another
# whose claim expires while the worker is in the first.
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.batch_size = 10});
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.batch_delay = 20});
$node->reload;
$node->safe_psql(
	'big', q{
	CREATE EXTENSION inbox;
	SELECT inbox_configure('short', retention => interval '1 hour');
	INSERT INTO inbox (message_id, consumer, processed_at)
		SELECT 'm-' || g, 'short', now() - interval '2 hours'
		FROM generate_series(1, 10000) g;
});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		  WHERE backend_type = 'inbox worker big' AND query = 'inbox: pruning markers'}),
	'the worker is pruning the backlog');
expire('shop', 'job-3');
ok( $node->poll_query_until('shop',
		q{SELECT state = 'released' FROM ext.inbox WHERE message_id = 'job-3'}),
	'a claim that expires meanwhile in another database is reclaimed');
cmp_ok($node->safe_psql('big', 'SELECT count(*) FROM inbox'), '>', 0,
	'while the backlog is still there: the worker left it after inbox.database_time');
ok($node->poll_query_until('big', 'SELECT count(*) = 0 FROM inbox'),
	'the backlog is done in the rounds that follow');

$node->stop;
done_testing();
