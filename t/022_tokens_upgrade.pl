# Fencing tokens keep increasing across pg_upgrade, which keeps the
# sequence but starts the new cluster at timeline 1: the upgraded database
# starts a new lineage above its tokens, so that a later failover of the
# new cluster onto a lagging standby is still covered.
#
# The old cluster is itself a promoted standby (timeline 2), so its
# tokens are in a higher epoch than a timeline-1 cluster's would be.
use strict;
use warnings;

use Cwd;
use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = q{
shared_preload_libraries = 'inbox'
inbox.naptime = '1d'
synchronous_commit = off
};

my $round = 0;
sub max_token
{
	my ($node, $count) = @_;
	$round++;
	return $node->safe_psql(
		'postgres', qq{
		SELECT max(inbox_begin('u$round-' || g, 'email'))
		FROM generate_series(1, $count) g});
}

sub min_token
{
	my ($node, $count) = @_;
	$round++;
	return $node->safe_psql(
		'postgres', qq{
		SELECT min(inbox_begin('u$round-' || g, 'email'))
		FROM generate_series(1, $count) g});
}

# The old cluster: a primary whose standby is promoted (timeline 2).
my $first = PostgreSQL::Test::Cluster->new('first');
$first->init(allows_streaming => 1);
$first->append_conf('postgresql.conf', $conf);
$first->start;
$first->safe_psql('postgres', 'CREATE EXTENSION inbox');
max_token($first, 10);
$first->backup('base');
my $old = PostgreSQL::Test::Cluster->new('old');
$old->init_from_backup($first, 'base', has_streaming => 1);
$old->start;
$first->wait_for_catchup($old);
$first->stop;
$old->promote;
$old->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';
my $old_max = max_token($old, 20);
ok($old_max > 10, "the promoted old cluster draws from a higher epoch ($old_max)");
$old->stop;

# pg_upgrade into a new cluster.
my $new = PostgreSQL::Test::Cluster->new('new');
$new->init(allows_streaming => 1);
$new->append_conf('postgresql.conf', $conf);
my $bindir = $new->config_data('--bindir');
my $workdir = PostgreSQL::Test::Utils::tempdir;
my $cwd = getcwd();
chdir $workdir;
command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-d', $old->data_dir,
		'-D', $new->data_dir,
		'-b', $bindir,
		'-B', $bindir,
		'-s', $new->host,
		'-p', $old->port,
		'-P', $new->port
	],
	'pg_upgrade');
chdir $cwd;
$new->start;

is( $new->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'),
	'1', 'the upgraded cluster starts at timeline 1');
is($new->safe_psql('postgres', q{SELECT count(*) FROM inbox}),
	'30', 'the markers were upgraded');

# A standby of the upgraded cluster, which falls behind before the
# cluster's first token; the primary then draws and dies.
$new->backup('new_base');
my $standby = PostgreSQL::Test::Cluster->new('new_standby');
$standby->init_from_backup($new, 'new_base', has_streaming => 1);
$standby->start;
$new->wait_for_catchup($standby);
$standby->stop;

my $new_min = min_token($new, 20);
ok($new_min > $old_max,
	"after pg_upgrade, tokens ($new_min and up) exceed the old cluster's ($old_max)");
my $new_max = max_token($new, 20);
$new->stop('immediate');

$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';
my $promoted = min_token($standby, 20);
ok($promoted > $new_max,
	"after a failover of the upgraded cluster, tokens ($promoted and up) exceed those the lost primary drew ($new_max)"
);

done_testing();
