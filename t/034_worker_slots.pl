# Issue 35, finding 8: when a parallel query has taken every free
# background worker slot, the launcher cannot start a database worker.  It
# says so with a warning, counts it for each database in
# inbox_worker_status() (in last_error until a column exists for it), and
# maintains the databases again as soon as a slot is free.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('slots');
$node->init;
# Four slots: inbox's launcher, the logical replication launcher, and two
# free.  The launcher naps until the query holds the free ones.
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 3600
max_worker_processes = 4
max_parallel_workers = 4
});
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION inbox;
	CREATE TABLE big (x int) WITH (parallel_workers = 2);
	INSERT INTO big SELECT g FROM generate_series(1, 10000) g;
	CREATE FUNCTION slow(x int) RETURNS boolean LANGUAGE plpgsql
		PARALLEL SAFE AS $$
	BEGIN
		PERFORM pg_sleep(0.01);
		RETURN true;
	END
	$$;
});

# Any role can do this: a parallel query whose workers take every free
# slot, for as long as it runs.
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_until(qr/started/, q{
	SET parallel_setup_cost = 0;
	SET parallel_tuple_cost = 0;
	SET min_parallel_table_scan_size = 0;
	SET max_parallel_workers_per_gather = 2;
	SET parallel_leader_participation = off;
	\echo started
	SELECT count(*) FROM big WHERE slow(x);
});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'parallel worker'}),
	'a parallel query holds the free slots');

my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.naptime = 1});
$node->reload;
ok( $node->wait_for_log(
		qr/WARNING:  could not start the inbox worker for database "postgres"/, $offset),
	'the launcher warns that it could not start a worker');
ok($node->log_contains(qr/HINT:  Raise "max_worker_processes".* keep "max_parallel_workers" below it/, $offset),
	'with the setting that prevents it');
ok( $node->poll_query_until('postgres',
		q{SELECT last_error ~ '^could not start the inbox worker: no background worker slot was free \(([2-9]|[1-9][0-9]+) times since the server started\)$'
		  FROM inbox_worker_status() WHERE database = 'postgres'}),
	'inbox_worker_status() counts each database it could not serve, pass after pass');
is( $node->safe_psql('postgres',
		q{SELECT passes || ' ' || (last_pass_end IS NULL) FROM inbox_worker_status() WHERE database = 'postgres'}),
	'0 true', 'and records no pass');

# Once the query ends, the next round serves the database.
$node->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	  WHERE query LIKE '%FROM big WHERE slow%' AND backend_type = 'client backend' AND pid <> pg_backend_pid()});
ok( $node->poll_query_until('postgres',
		q{SELECT passes > 0 AND last_error IS NULL FROM inbox_worker_status() WHERE database = 'postgres'}),
	'the database is maintained again once a slot is free');
$bg->quit;

$node->stop;
done_testing();
