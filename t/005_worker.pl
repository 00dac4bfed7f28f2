# The maintenance worker on a primary: it prunes and reclaims in every
# database that has the extension, with no configuration; it follows
# reloads, comes back when terminated, gives way to DROP EXTENSION and to
# table locks, and reports its last pass from shared memory.
#
# Every wait polls a query until the worker has done what is expected; no
# test sleeps.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('worker');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
inbox.batch_size = 1000
inbox.lock_timeout = 200
inbox.batch_delay = 10
});
$node->start;

# Two databases: one with the extension, one without.
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE plain');
$node->safe_psql('app', 'CREATE EXTENSION inbox');

ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'inbox launcher'}),
	'the launcher runs');

# Markers to prune and claims to reclaim, aged by hand.
$node->safe_psql(
	'app', q{
	SELECT inbox_configure('short', retention => interval '1 hour');
	SELECT inbox_configure('short2', retention => interval '1 hour');
	SELECT inbox_configure('short3', retention => interval '1 hour');
	SELECT inbox_configure('jobs', max_attempts => 2);
	SELECT inbox_claim('old-' || g, 'short') FROM generate_series(1, 2500) g;
	SELECT inbox_claim('old2-' || g, 'short2') FROM generate_series(1, 1500) g;
	SELECT inbox_claim('old3-' || g, 'short3') FROM generate_series(1, 2500) g;
	SELECT inbox_claim('new-' || g, 'short') FROM generate_series(1, 10) g;
	SELECT inbox_claim('kept-' || g, 'other') FROM generate_series(1, 10) g;
	UPDATE inbox SET processed_at = processed_at - interval '2 hours'
		WHERE message_id LIKE 'old-%' OR message_id LIKE 'kept-%';
	UPDATE inbox SET processed_at = processed_at - interval '2 hours'
		- substr(message_id, 6)::int * interval '1 second'
		WHERE message_id LIKE 'old2-%';
	-- All processed at one instant: the walk prunes a tie that spans
	-- several batches (that each starts where the last one ended is for
	-- sql/prune_resume.sql to count: later passes here read again the
	-- entries of markers pruned before, until they are marked dead).
	UPDATE inbox SET processed_at = now() - interval '2 hours'
		WHERE message_id LIKE 'old3-%';
	SELECT inbox_begin('job-1', 'jobs'), inbox_begin('job-2', 'jobs'), inbox_begin('job-live', 'jobs');
	UPDATE inbox SET lease_until = clock_timestamp() - interval '1 second'
		WHERE message_id IN ('job-1', 'job-2');
	UPDATE inbox SET attempts = 2 WHERE message_id = 'job-2';
});

ok( $node->poll_query_until('app',
		q{SELECT count(*) = 0 FROM inbox WHERE message_id LIKE 'old%'}),
	'markers past their retention are pruned, in several batches, ties too');
is( $node->safe_psql(
		'app', q{
		SELECT count(*) FILTER (WHERE message_id LIKE 'new-%'),
			   count(*) FILTER (WHERE message_id LIKE 'kept-%')
		FROM inbox}),
	'10|10', 'markers within their retention are kept');
ok( $node->poll_query_until('app',
		q{SELECT string_agg(message_id || ':' || state, ',' ORDER BY message_id)
			  = 'job-1:released,job-2:failed,job-live:claimed'
		  FROM inbox WHERE consumer = 'jobs'}),
	'an expired claim is released, an exhausted one failed, a live one kept');
is( $node->safe_psql('app',
		q{SELECT last_error FROM inbox WHERE message_id = 'job-2'}),
	'lease expired after attempt 2 of 2', 'the failed claim says why');

# The figures, from shared memory.
ok( $node->poll_query_until('app',
		q{SELECT pruned_total = 6500 AND reclaimed_total = 2 AND last_error IS NULL
			AND last_pass_end >= last_pass_start AND passes > 0
		  FROM inbox_worker_status() WHERE database = 'app'}),
	'inbox_worker_status reports the passes and their totals')
  or diag $node->safe_psql('app', 'SELECT * FROM inbox_worker_status()');
is($node->safe_psql('app', q{SELECT count(*) FROM inbox_worker_status() WHERE database = 'plain'}),
	'0', 'a database without the extension is left alone');

# A reload changes the naptime: with an hour's nap no pass comes, and the
# new setting makes one come at once.
$node->safe_psql('postgres', 'ALTER SYSTEM SET inbox.naptime = 3600');
$node->reload;
my $passes = passes_after_current($node);
$node->safe_psql('app', q{SELECT inbox_claim('late-1', 'short');
	UPDATE inbox SET processed_at = processed_at - interval '2 hours' WHERE message_id = 'late-1'});
$node->safe_psql('postgres', 'ALTER SYSTEM SET inbox.naptime = 1');
$node->reload;
ok( $node->poll_query_until('app',
		qq{SELECT passes > $passes FROM inbox_worker_status() WHERE database = 'app'}),
	'after a reload to a short naptime, the next pass comes');
ok( $node->poll_query_until('app',
		q{SELECT count(*) = 0 FROM inbox WHERE message_id = 'late-1'}),
	'and prunes');

# pg_terminate_backend: the postmaster starts a new launcher.
my $launcher = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'inbox launcher'});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($launcher)");
ok( $node->poll_query_until('postgres',
		qq{SELECT count(*) = 1 FROM pg_stat_activity
		   WHERE backend_type = 'inbox launcher' AND pid <> $launcher}),
	'a terminated launcher comes back');

# A database created later, with the extension, is served without any
# configuration.
$node->safe_psql('postgres', 'CREATE DATABASE later');
$node->safe_psql('later', q{
	CREATE EXTENSION inbox;
	SELECT inbox_configure('short', retention => interval '1 hour');
	SELECT inbox_claim('old', 'short');
	UPDATE inbox SET processed_at = processed_at - interval '2 hours';
});
ok($node->poll_query_until('later', 'SELECT count(*) = 0 FROM inbox'),
	'a database created later is served');

# inbox.databases restricts the worker to the databases listed.
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.databases = 'later'});
$node->reload;
my $app_passes = passes_after_current($node);
my $later_passes = $node->safe_psql('later',
	q{SELECT passes FROM inbox_worker_status() WHERE database = 'later'});
ok( $node->poll_query_until('later',
		qq{SELECT passes >= $later_passes + 2 FROM inbox_worker_status() WHERE database = 'later'}),
	'with inbox.databases set, the listed database is still served');
is( $node->safe_psql('app',
		q{SELECT passes FROM inbox_worker_status() WHERE database = 'app'}),
	$app_passes, 'and the others are not');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET inbox.databases');
$node->reload;

# A lock held by another session makes a pass give up after
# inbox.lock_timeout, and the next pass succeed once the lock is gone.
my $locker = $node->background_psql('app');
$locker->query_safe('BEGIN; LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE;');
ok( $node->poll_query_until('app',
		q{SELECT last_error LIKE '%lock timeout%' FROM inbox_worker_status()
		  WHERE database = 'app'}),
	'a pass gives up on a lock held by another session')
  or diag $node->safe_psql('app', 'SELECT * FROM inbox_worker_status()');
$locker->query_safe('COMMIT;');
$locker->quit;
ok( $node->poll_query_until('app',
		q{SELECT last_error IS NULL FROM inbox_worker_status() WHERE database = 'app'}),
	'the next pass succeeds');

# DROP EXTENSION while the worker is busy pruning a large backlog waits for
# at most one batch (a lock_timeout far above one batch bounds it).
$node->safe_psql('app', q{
	SELECT inbox_configure('bulk', retention => interval '1 hour');
	SELECT count(*) FROM inbox_claim_many(
		ARRAY(SELECT 'bulk-' || g FROM generate_series(1, 200000) g), 'bulk');
	UPDATE inbox SET processed_at = processed_at - interval '2 hours' WHERE consumer = 'bulk';
});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		  WHERE backend_type = 'inbox worker app' AND query = 'inbox: pruning markers'}),
	'the worker is busy pruning');
my ($ret, $out, $err) = $node->psql('app', q{
	SET lock_timeout = '20s';
	BEGIN;
	TRUNCATE inbox;
	DROP EXTENSION inbox;
	COMMIT;
});
is($ret, 0, 'DROP EXTENSION completes while the worker is busy') or diag $err;
ok( $node->poll_query_until('app',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'inbox worker app'}),
	'and the worker leaves the database alone');
ok(!$node->log_contains('is not installed in this database', 0),
	'the worker did not trip over the dropped extension');

$node->stop;
done_testing();

# passes_after_current: the pass count of app once no pass is running.
sub passes_after_current
{
	my ($node) = @_;
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'inbox worker app'});
	return $node->safe_psql('app',
		q{SELECT passes FROM inbox_worker_status() WHERE database = 'app'});
}
