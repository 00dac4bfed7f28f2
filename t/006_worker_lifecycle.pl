# The maintenance worker and the server's life: it never runs on a standby
# and starts after promotion; a fast shutdown in the middle of a large
# prune completes promptly; too few worker slots give a clear warning.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $launcher_running =
  q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'inbox launcher'};

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
inbox.batch_size = 500
inbox.batch_delay = 10
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION inbox');
ok($primary->poll_query_until('postgres', $launcher_running),
	'the primary runs the launcher');

# A standby: it has the library preloaded but no worker.
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
$primary->safe_psql('postgres', q{
	SELECT inbox_configure('short', retention => interval '1 hour');
	SELECT inbox_claim('old', 'short');
	UPDATE inbox SET processed_at = processed_at - interval '2 hours';
});
$primary->wait_for_catchup($standby);
# Wait for the primary to prune the marker, and the standby to replay that.
ok($primary->poll_query_until('postgres', 'SELECT count(*) = 0 FROM inbox'),
	'the primary prunes');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'inbox%'}),
	'0', 'the standby runs no inbox worker');
my ($ret, $out, $err) = $standby->psql('postgres', q{SELECT inbox_claim('x', 'short')});
like($err, qr/cannot execute inbox_claim\(\) in a read-only transaction/,
	'claims on the standby are refused clearly');

# Promotion starts the worker on the new primary.
$primary->stop;
$standby->promote;
ok($standby->poll_query_until('postgres', $launcher_running),
	'the promoted standby runs the launcher');
$standby->safe_psql('postgres', q{
	SELECT inbox_claim('old-2', 'short');
	UPDATE inbox SET processed_at = processed_at - interval '2 hours';
});
ok($standby->poll_query_until('postgres', 'SELECT count(*) = 0 FROM inbox'),
	'and prunes');

# A fast shutdown while the worker works through a large backlog, in small
# batches, is not held up: pg_ctl must finish within its own timeout.
$standby->safe_psql('postgres', q{
	SELECT count(*) FROM inbox_claim_many(
		ARRAY(SELECT 'bulk-' || g FROM generate_series(1, 300000) g), 'short');
	UPDATE inbox SET processed_at = processed_at - interval '2 hours';
});
ok( $standby->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		  WHERE backend_type = 'inbox worker postgres' AND query = 'inbox: pruning markers'}),
	'the worker is pruning the backlog');
{
	# pg_ctl gives up after PGCTLTIMEOUT seconds, and then stop() bails out.
	local $ENV{PGCTLTIMEOUT} = 30;
	$standby->stop('fast');
}
pass('a fast shutdown during the prune completes within 30 seconds');

# Too few worker slots: the launcher starts, its database worker cannot,
# and the log says what to change.  (The logical replication launcher
# takes the other slot.)
my $small = PostgreSQL::Test::Cluster->new('small');
$small->init;
$small->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
max_worker_processes = 2
});
$small->start;
ok( $small->wait_for_log(qr/could not start the inbox worker for database "postgres"/),
	'a clear warning when max_worker_processes is too small');
ok($small->log_contains('Raise "max_worker_processes"'), 'with a hint');
$small->stop;

done_testing();
