# What the maintenance worker takes from a database's settings, and how a
# pass ends:
# - a read-only database is skipped, with one log line per pass;
# - the worker's transactions are READ COMMITTED whatever the database says;
# - ALTER DATABASE ... SET role or session_authorization does not stop
#   maintenance, and a database's inbox.max_attempts and inbox.retention do
#   not change what the worker does (it takes them from the server's
#   configuration);
# - a pass that fails is recorded, ends like any other (no "exit code 1"
#   that reads like a crash), and does not stop the other pass or the
#   other databases;
# - an inbox.databases entry that matches no database is reported.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('settings');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
inbox.batch_size = 10
inbox.batch_delay = 0
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE ROLE nobody NOLOGIN;
	CREATE EXTENSION inbox;  -- for inbox_worker_status()
});

# Each database gets the extension, 30 markers of consumer "short" (whose
# retention is an hour), one marker of consumer "long" (7 days, the
# server's inbox.retention), and a claim at its first attempt; they are
# aged and expired below, once the settings are in place.  A CHECK
# constraint notes the isolation level and user of whoever updates the
# table (no trigger fires in the worker: t/031).
foreach my $db (qw(ro iso pinrole pinsession pininbox bad good))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql(
		$db, qq{
		CREATE EXTENSION inbox;
		SELECT inbox_configure('short', retention => interval '1 hour');
		SELECT count(*) FROM inbox_claim_many(
			ARRAY(SELECT 'm-' || g FROM generate_series(1, 30) g), 'short');
		SELECT inbox_claim('kept', 'long');
		SELECT inbox_begin('job', 'jobs', interval '1 hour');
		CREATE TABLE seen (isolation text, who name);
		CREATE FUNCTION note(s inbox_state) RETURNS boolean
			LANGUAGE plpgsql VOLATILE AS \$\$
		BEGIN
			INSERT INTO public.seen
				VALUES (current_setting('transaction_isolation'), current_user);
			RETURN true;
		END
		\$\$;
	});
}
$node->safe_psql('bad', q{
	CREATE FUNCTION fail(s inbox_state) RETURNS boolean
		LANGUAGE plpgsql VOLATILE AS $$
	BEGIN
		RAISE EXCEPTION 'no update today';
	END
	$$;
});
# (Our own sessions in pinrole are nobody too: let them read.)
$node->safe_psql('pinrole', 'GRANT SELECT ON inbox, seen TO nobody');
my $ro_before = passes('ro');
$node->safe_psql('postgres', q{
	ALTER DATABASE ro SET default_transaction_read_only = on;
	ALTER DATABASE iso SET default_transaction_isolation = serializable;
	ALTER DATABASE pinrole SET role = nobody;
	ALTER DATABASE pinsession SET session_authorization = nobody;
	ALTER DATABASE pininbox SET inbox.max_attempts = 1;
	ALTER DATABASE pininbox SET inbox.retention = '1min';
});
my $launcher = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'inbox launcher'});

# Age the markers and expire the claims: from now on, with the settings
# in place, the worker has work to do.  The CHECK constraints come in the
# same transaction, NOT VALID, so that the aging runs none of them and the
# worker finds them all.  (The read-only database keeps a plain table,
# which prune walks without SQL.)
foreach my $db (qw(ro iso pinrole pinsession pininbox bad good))
{
	my $checks = '';
	$checks .= 'ALTER TABLE inbox ADD CONSTRAINT note CHECK (note(state)) NOT VALID;'
	  if $db ne 'ro';
	$checks .= 'ALTER TABLE inbox ADD CONSTRAINT fail CHECK (fail(state)) NOT VALID;'
	  if $db eq 'bad';
	$node->safe_psql($db, qq{
		SET ROLE NONE;
		BEGIN READ WRITE;
		UPDATE inbox SET processed_at = processed_at - interval '2 hours'
			WHERE state = 'processed';
		UPDATE inbox SET lease_until = now() - interval '1 second' WHERE message_id = 'job';
		$checks
		COMMIT;
	});
}
my $ro_passes = passes('ro');

# passes($db): the passes the worker recorded in $db so far.
sub passes
{
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(max(passes), 0) FROM inbox_worker_status() WHERE database = '$db'");
}

# pruned($db): wait until the markers past their retention are gone.
sub pruned
{
	my ($db) = @_;
	return $node->poll_query_until($db,
		q{SELECT count(*) = 0 FROM inbox WHERE consumer = 'short'});
}

# reclaimed($db): wait until the claim is no longer claimed; its state.
sub reclaimed
{
	my ($db) = @_;
	$node->poll_query_until($db,
		q{SELECT state <> 'claimed' FROM inbox WHERE message_id = 'job'})
	  or diag $node->safe_psql('postgres',
		"SELECT * FROM inbox_worker_status() WHERE database = '$db'");
	return $node->safe_psql($db,
		q{SELECT state FROM inbox WHERE message_id = 'job'});
}

# A database whose settings the worker does not inherit is maintained as
# usual, as the table's owner, under READ COMMITTED.
foreach my $db (qw(iso pinrole pinsession good))
{
	is(reclaimed($db), 'released', "$db: the expired claim is released");
	ok(pruned($db), "$db: the markers past their retention are pruned");
	is($node->safe_psql($db, q{SELECT count(*) FROM inbox WHERE consumer = 'long'}),
		'1', "$db: the others are kept");
	is($node->safe_psql($db, q{SELECT DISTINCT isolation || ' ' || who FROM seen}),
		'read committed '
		  . $node->safe_psql($db,
			q{SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'inbox'::regclass}),
		"$db: as the table's owner, under READ COMMITTED");
}

# inbox.max_attempts and inbox.retention come from the server's
# configuration: the claim at its first attempt is released (of 5), not
# failed (of the database's 1), and the two-hour-old marker of "long" is
# kept (7 days, not the database's minute).
is(reclaimed('pininbox'), 'released',
	"the worker ignores the database's inbox.max_attempts");
ok(pruned('pininbox'), 'pininbox: the markers past their retention are pruned');
is($node->safe_psql('pininbox', q{SELECT count(*) FROM inbox WHERE consumer = 'long'}),
	'1', "the worker ignores the database's inbox.retention");

# The read-only database: nothing pruned or reclaimed, one log line per
# pass: no more lines than passes since it was made read-only (plus the
# one a pass logs before it records itself).
ok( $node->poll_query_until('postgres',
		qq{SELECT passes >= $ro_passes + 2 FROM inbox_worker_status() WHERE database = 'ro'}),
	'the worker passes through the read-only database');
my $lines = () = slurp_file($node->logfile) =~
  /LOG:  skipping maintenance of database "ro" because it is read-only/g;
my $passes = passes('ro');
ok($lines >= 1 && $lines <= $passes - $ro_before + 1,
	"one log line per pass ($lines lines, "
	  . ($passes - $ro_before) . " passes since read-only)");
is( $node->safe_psql('ro',
		q{SELECT count(*) || ' ' || count(*) FILTER (WHERE state = 'claimed') FROM inbox}),
	'32 1', 'nothing pruned or reclaimed in the read-only database');
is( $node->safe_psql('postgres',
		q{SELECT last_error FROM inbox_worker_status() WHERE database = 'ro'}),
	'skipping maintenance of database "ro" because it is read-only',
	'and its status says why');

# A pass that fails: recorded, the other pass done all the same (the
# reclaim fails, the prune after it runs), and neither a crash-like exit
# nor a new launcher.
ok( $node->poll_query_until('postgres',
		q{SELECT passes >= 2 AND last_error LIKE '%no update today%'
		  FROM inbox_worker_status() WHERE database = 'bad'}),
	'a failing pass is recorded, pass after pass');
ok(pruned('bad'), 'the prune after the failed reclaim is done');
is($node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'inbox launcher'}),
	$launcher, 'the launcher keeps running');
ok(!$node->log_contains(qr/background worker "inbox worker \w+" \(PID \d+\) exited with exit code/),
	'no database worker exits like a crash');

# inbox.databases: an entry that matches no database is reported, with the
# reason when it is a mixed-case name left unquoted.
$node->safe_psql('postgres', q{CREATE DATABASE "MyApp"});
$node->safe_psql('MyApp', q{CREATE EXTENSION inbox});
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.databases = 'MyApp, good'});
$node->reload;
ok($node->wait_for_log(
		qr/WARNING:  database "myapp" named in "inbox.databases" does not exist/),
	'an entry that matches no database is reported');
ok($node->log_contains(qr/HINT:  .*"MyApp".*double-quote/),
	'with a hint when a mixed-case name was left unquoted');
my $good = passes('good');
ok( $node->poll_query_until('postgres',
		qq{SELECT passes >= $good + 2 FROM inbox_worker_status() WHERE database = 'good'}),
	'the other database listed is served');
my $warnings = () = slurp_file($node->logfile) =~
  /WARNING:  database "myapp" named in "inbox.databases" does not exist/g;
is($warnings, 1, 'the entry is reported once, not at every pass');
$node->safe_psql('postgres', q{ALTER SYSTEM SET inbox.databases = '"MyApp", good'});
$node->reload;
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM inbox_worker_status() WHERE database = 'MyApp'}),
	'a double-quoted mixed-case name is served');

$node->stop;
done_testing();
