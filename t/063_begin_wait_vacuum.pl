# inbox_begin_wait holds no snapshot while it waits: pg_stat_activity
# shows no backend_xmin for the waiter while it sleeps, and VACUUM removes
# rows deleted after the wait began (a function that waited, holding its
# statement's snapshot, would keep them until it returned).  Then the
# holder completes and the waiter returns processed.
#
# And no holder keeps it past its bound: a completion left uncommitted
# holds the marker's row, which the waiter's look waits for, but only
# until the bound; the waiter answers busy, and its session is sound.
# Nor a lock on the whole table.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('begin_wait');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'\ninbox.naptime = '1d'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION inbox;
	CREATE TABLE scratch (n integer) WITH (autovacuum_enabled = off);
	INSERT INTO scratch SELECT generate_series(1, 1000);
	SELECT inbox_begin('m-1', 'email', interval '5 minutes');
});

# The waiter, in a psql of its own.
my ($out, $err) = ('', '');
my $waiter = IPC::Run::start(
	[ 'psql', '-XAt', '-d',
	  $node->connstr('postgres') . ' application_name=inbox-waiter', '-c',
	  "CALL inbox_begin_wait('m-1', 'email', wait => '3 minutes')" ],
	'>', \$out, '2>', \$err);

# Once it sleeps (its first look answered busy and committed), the rows of
# scratch are deleted: after the wait began.
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	WHERE application_name = 'inbox-waiter' AND wait_event_type = 'Extension'
}) or die 'the waiter never slept';
$node->safe_psql('postgres', 'DELETE FROM scratch');

# Sampled while it sleeps (its looks hold a snapshot for a moment).
is( $node->safe_psql('postgres', q{
		SELECT backend_xmin IS NULL AND backend_xid IS NULL
		FROM pg_stat_activity
		WHERE application_name = 'inbox-waiter' AND wait_event_type = 'Extension'
	}),
	't', 'the sleeping waiter shows no backend_xmin and no backend_xid');

# VACUUM removes every deleted row, so the table's pages all go.
$node->safe_psql('postgres', 'VACUUM scratch');
is($node->safe_psql('postgres', q{SELECT pg_relation_size('scratch')}),
	'0', 'VACUUM removed the rows deleted while the waiter waited');

# The holder completes; the waiter returns processed.
is( $node->safe_psql('postgres', q{
		SELECT inbox_complete('m-1', 'email', token) FROM inbox WHERE message_id = 'm-1'
	}),
	't', 'the holder completes');
$waiter->finish;
is($out, "processed|||\n", 'the waiter returns processed');
is($err, '', 'the waiter reports no error');

# A holder's completion, uncommitted, in a psql of its own.
$node->safe_psql('postgres', q{SELECT inbox_begin('m-2', 'email', interval '5 minutes')});
my ($in, $held, $held_err) = ('', '', '');
my $holder = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$held, '2>', \$held_err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
$in .= "BEGIN;\nSELECT inbox_complete('m-2', 'email', token) FROM inbox WHERE message_id = 'm-2';\n";
$holder->pump until $held =~ /^t$/m;

my $started = time;
like(
	$node->safe_psql('postgres', q{
		CALL inbox_begin_wait('m-2', 'email', wait => '500 ms');
		SELECT now() = statement_timestamp() AS own_transaction;
	}, timeout => 60),
	qr/^busy\|\|\d\d:\d\d:\d\d[.\d]*\|\nt$/,
	'a completion in flight past the bound: busy at the bound, and the next statement has a transaction of its own');
ok(time - $started < 30, 'the waiter did not wait for the holder\'s transaction');

$in .= "COMMIT;\n";
$holder->finish;
is( $node->safe_psql('postgres',
		q{CALL inbox_begin_wait('m-2', 'email', wait => '5 s')}),
	'processed|||', 'once it commits, the waiter is told processed');

# A lock on the whole table (LOCK TABLE, an ALTER TABLE) taken while the
# waiter sleeps and held past its bound: its next looks wait for it, but
# only until the bound; busy, with the lease it saw.
$node->safe_psql('postgres', q{SELECT inbox_begin('m-3', 'email', interval '5 minutes')});
($out, $err) = ('', '');
$waiter = IPC::Run::start(
	[ 'psql', '-XAt', '-d',
	  $node->connstr('postgres') . ' application_name=inbox-waiter', '-c',
	  "CALL inbox_begin_wait('m-3', 'email', wait => '2 s')" ],
	'>', \$out, '2>', \$err);
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	WHERE application_name = 'inbox-waiter' AND wait_event_type = 'Extension'
}) or die 'the waiter never slept';
($in, $held, $held_err) = ('', '', '');
$holder = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$held, '2>', \$held_err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
$in .= "BEGIN;\nLOCK TABLE inbox;\nSELECT 'locked';\n";
$holder->pump until $held =~ /^locked$/m;
$waiter->finish;
like($out, qr/^busy\|\|00:04:\d\d[.\d]*\|\n$/,
	'a table lock held past the bound: busy at the bound, with the lease it saw');
is($err, '', 'the waiter reports no error');
$in .= "COMMIT;\n";
$holder->finish;

done_testing();
