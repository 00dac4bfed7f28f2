# The counters of inbox_counters(): per database and consumer, the
# consumers past inbox.max_consumers_counted in their database's row, who
# sees which databases, and what a restart does to them: kept across a
# clean one, from zero after a crash or an immediate stop, as PostgreSQL's
# own statistics.  Without the library preloaded, claims still work and
# reading the counters says why it cannot.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('counters');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = '1d'
inbox.max_consumers_counted = 2
restart_after_crash = on
});
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE other');
for my $db ('app', 'other')
{
	$node->safe_psql($db, 'CREATE EXTENSION inbox');
}
$node->safe_psql(
	'postgres', q{
	CREATE ROLE reader LOGIN;
	CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
});
$node->safe_psql('app', q{
	GRANT EXECUTE ON FUNCTION inbox_counters() TO reader;
	GRANT SELECT ON inbox_counters TO reader;
});

# Three consumers in app, one in other: the first two counted (and the
# slots are server-wide), the rest in their database's row.
$node->safe_psql(
	'app', q{
	SELECT inbox_claim('m-1', 'a'), inbox_claim('m-2', 'a'), inbox_claim('m-1', 'a');
	SELECT inbox_claim('m-1', 'b');
	SELECT inbox_claim('m-1', 'c'), inbox_claim('m-1', 'c');
});
$node->safe_psql('other', q{SELECT inbox_claim('m-1', 'a')});

my $query = q{SELECT database, coalesce(consumer, '-'), claims, duplicates
	FROM inbox_counters ORDER BY 1, 2};
my $expected = "app|-|1|1\napp|a|2|1\napp|b|1|0\nother|-|1|0";
is($node->safe_psql('app', $query, extra_params => [ '-U', 'monitor' ]),
	$expected, 'pg_monitor sees every database; past the limit, the database row counts');
is($node->safe_psql('app', $query, extra_params => [ '-U', 'reader' ]),
	"app|-|1|1\napp|a|2|1\napp|b|1|0",
	'a reader without pg_read_all_stats sees its own database');

# A clean restart keeps them, stats_reset included.
my $full = q{SELECT * FROM inbox_counters ORDER BY database, consumer};
my $before = $node->safe_psql('app', $full);
$node->restart(mode => 'fast');
is($node->safe_psql('app', $full), $before, 'kept across a clean restart');
ok(!-e $node->data_dir . '/pg_stat/inbox_counters.stat',
	'the file is removed once read');

# A backend crash: shared memory is made again, and the counters with it.
my $session = $node->background_psql('app');
my $pid = $session->query_safe('SELECT pg_backend_pid()');
chomp $pid;
my $log_offset = -s $node->logfile;
kill 'KILL', $pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
$node->poll_query_until('app', 'SELECT true')
  or die 'the server did not come back';
eval { $session->quit };
is($node->safe_psql('app', 'SELECT count(*) FROM inbox_counters'),
	'0', 'from zero after a crash');

# An immediate stop is a crash too, even with counts to save.
$node->safe_psql('app', q{SELECT inbox_claim('m-3', 'a')});
is($node->safe_psql('app', $query), 'app|a|1|0', 'counting again');
$node->stop('immediate');
$node->start;
is($node->safe_psql('app', 'SELECT count(*) FROM inbox_counters'),
	'0', 'from zero after an immediate stop');

# A reset row is not read back: its slot is free after a clean restart.
$node->safe_psql('app', q{SELECT inbox_claim('m-4', 'a'), inbox_claim('m-4', 'b')});
$node->safe_psql('app', q{SELECT inbox_counters_reset('a')});
$node->restart(mode => 'fast');
is($node->safe_psql('app', $query), 'app|b|1|0',
	'a zeroed row is dropped at a clean restart');
$node->stop;

# Not preloaded: claims work and count nothing; reading says why not.
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION inbox');
is($plain->safe_psql('postgres', q{SELECT inbox_claim('m-1', 'a')}),
	't', 'not preloaded: a claim works');
my ($ret, $out, $err) =
  $plain->psql('postgres', 'SELECT * FROM inbox_counters');
like($err, qr/inbox counters are not available/,
	'not preloaded: reading the counters is an error');
like($err, qr/shared_preload_libraries/, 'which names the setting');
($ret, $out, $err) =
  $plain->psql('postgres', 'SELECT inbox_counters_reset()');
like($err, qr/inbox counters are not available/,
	'not preloaded: so is a reset');
$plain->stop;

done_testing();
