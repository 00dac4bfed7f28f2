# The maintenance worker gives way to DBA work on a database: a plain DROP
# DATABASE (no FORCE), CREATE DATABASE ... TEMPLATE and ALTER DATABASE ...
# RENAME succeed within a few seconds while the worker works through a large backlog there, whether it
# is pausing between batches or running them, and the worker comes back at
# the next pass.  (Core's DROP DATABASE waits only 5 seconds for other
# connections to go, and signals only autovacuum workers.)
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('dba');
$node->init;
# Small batches and a pause far longer than DROP DATABASE waits: a pass
# over the backlog below would take hours.
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
inbox.batch_size = 10
inbox.batch_delay = '60s'
});
$node->start;

# A database with the extension and $count markers past their retention.
sub make_backlog
{
	my ($db, $count) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql(
		$db, qq{
		CREATE EXTENSION inbox;
		SELECT inbox_configure('old', retention => interval '1 hour');
		SELECT count(*) FROM inbox_claim_many(
			ARRAY(SELECT 'm-' || g FROM generate_series(1, $count) g), 'old');
		UPDATE inbox SET processed_at = processed_at - interval '2 hours';
	});
}

# Wait until the worker of $db has pruned a batch and is still there.
sub wait_for_busy_worker
{
	my ($db, $count) = @_;
	ok( $node->poll_query_until(
			'postgres', qq{
			SELECT count(*) > 0 FROM pg_stat_activity
			WHERE backend_type = 'inbox worker $db' AND datname = '$db'}),
		"the worker is connected to $db");
	ok( $node->poll_query_until(
			$db, "SELECT count(*) < $count FROM inbox"),
		"and has pruned part of its backlog");
}

# Run $sql in the postgres database; its result and how long it took.
sub timed
{
	my ($sql) = @_;
	my $start = time;
	my ($ret, $out, $err) = $node->psql('postgres', $sql);
	return ($ret, $err, time - $start);
}

# DROP DATABASE while the worker pauses between two batches.
make_backlog('victim', 1000);
wait_for_busy_worker('victim', 1000);
my ($ret, $err, $elapsed) = timed('DROP DATABASE victim');
is($ret, 0, 'a plain DROP DATABASE succeeds while the worker is there')
  or diag $err;
# Success alone shows the worker left within the 5 seconds DROP DATABASE
# waits; the bound is loose for a loaded machine (DROP DATABASE also waits
# for a checkpoint).
cmp_ok($elapsed, '<', 15, 'within seconds');
note sprintf('DROP DATABASE took %.2f s', $elapsed);
# (Should it have failed, the rest of the test still needs it gone.)
$node->safe_psql('postgres', 'DROP DATABASE IF EXISTS victim WITH (FORCE)');

# CREATE DATABASE ... TEMPLATE while the worker runs batch after batch (a
# short pause; 20,000 markers ten at a time take it many seconds).
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.batch_delay = '10ms'});
$node->reload;
make_backlog('source', 20000);
wait_for_busy_worker('source', 20000);
($ret, $err, $elapsed) = timed('CREATE DATABASE copy TEMPLATE source');
is($ret, 0, 'CREATE DATABASE ... TEMPLATE succeeds while the worker is busy there')
  or diag $err;
cmp_ok($elapsed, '<', 15, 'within seconds');
note sprintf('CREATE DATABASE ... TEMPLATE took %.2f s', $elapsed);

# ALTER DATABASE ... RENAME, once the worker is back at its backlog.
wait_for_busy_worker('source', 20000);
($ret, $err, $elapsed) = timed('ALTER DATABASE source RENAME TO renamed');
is($ret, 0, 'ALTER DATABASE ... RENAME succeeds while the worker is busy there')
  or diag $err;
note sprintf('ALTER DATABASE ... RENAME took %.2f s', $elapsed);

# The worker comes back to both databases and finishes the work.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET inbox.batch_size = 10000;
	ALTER SYSTEM SET inbox.batch_delay = 0;
});
$node->reload;
ok($node->poll_query_until('renamed', 'SELECT count(*) = 0 FROM inbox'),
	'the worker comes back to the template database at a later pass');
ok($node->poll_query_until('copy', 'SELECT count(*) = 0 FROM inbox'),
	'and serves the copy');

$node->stop;
done_testing();
