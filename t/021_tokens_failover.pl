# Fencing tokens keep increasing across what a database lives through,
# as the README ("The token downstream") promises:
#
#  - failover onto a lagging asynchronous standby: the old primary handed
#    out tokens the standby never received, and the new primary's tokens
#    must still exceed them (each timeline draws from a higher epoch);
#  - a crash with synchronous_commit = off on the new primary;
#  - a dump restored into a new database and into a new cluster, whose
#    timeline starts over at 1, and then a failover of that cluster onto
#    a standby that had not yet received its first tokens.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = q{
shared_preload_libraries = 'inbox'
inbox.naptime = '1d'
synchronous_commit = off
};

# Draws count tokens on node through inbox_begin (new messages) and
# inbox_next (released ones); checks that they increase in the order
# drawn, and returns them.
my $round = 0;
sub draw_tokens
{
	my ($node, $db, $count, $what) = @_;
	$round++;
	my @tokens = split /\n/, $node->safe_psql(
		$db, qq{
		SELECT inbox_begin('f$round-' || g, 'email') FROM generate_series(1, $count) g;
		UPDATE inbox SET state = 'released', lease_until = NULL
		WHERE message_id LIKE 'f$round-%';
		SELECT token FROM inbox_next('email', max => $count) ORDER BY token;
	});
	my @sorted = sort { $a <=> $b } @tokens;
	is(scalar(@tokens), 2 * $count, "$what: every claim got a token");
	is("@tokens", "@sorted", "$what: tokens increase in the order drawn");
	return @sorted;
}

sub max_of { my $max = shift; for (@_) { $max = $_ if $_ > $max } return $max; }
sub min_of { my $min = shift; for (@_) { $min = $_ if $_ < $min } return $min; }

# A primary and an asynchronous standby.
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', $conf);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION inbox');
my @before = draw_tokens($primary, 'postgres', 20, 'primary');
is($before[0], 1, 'a new cluster hands out tokens from 1');

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
draw_tokens($primary, 'postgres', 20, 'primary, streaming');
$primary->wait_for_catchup($standby);

# The standby falls behind (here: it is down), the primary hands out more
# tokens and dies; the standby is promoted without them.
$standby->stop;
my @lost = draw_tokens($primary, 'postgres', 50, 'primary, standby down');
$primary->stop('immediate');
$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';
my @promoted = draw_tokens($standby, 'postgres', 20, 'promoted standby');
ok( min_of(@promoted) > max_of(@lost),
	'after failover onto a lagging standby, every token ('
	  . min_of(@promoted)
	  . ' and up) exceeds those the old primary handed out ('
	  . max_of(@lost) . ')');

# A crash of the new primary, with synchronous_commit = off.
$standby->safe_psql('postgres', 'CHECKPOINT');
my @seen = draw_tokens($standby, 'postgres', 20, 'new primary');
$standby->stop('immediate');
$standby->start;
my @after_crash = draw_tokens($standby, 'postgres', 20, 'after a crash');
ok(min_of(@after_crash) > max_of(@seen),
	'a crash of the new primary repeats no token');

# A dump of it, restored into a new database of the same cluster.
my $dump = $standby->basedir . '/tokens.dump';
$standby->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'postgres' ],
	'pg_dump');
my @after_dump = draw_tokens($standby, 'postgres', 20, 'after the dump');
$standby->safe_psql('postgres', 'CREATE DATABASE restored');
$standby->command_ok([ 'pg_restore', '-d', 'restored', $dump ],
	'pg_restore into a new database');
my @restored = draw_tokens($standby, 'restored', 20, 'restored database');
ok(min_of(@restored) > max_of(@after_dump),
	'a restored database hands out tokens above every token of its source, even those drawn after the dump'
);

# The same dump, restored into a new cluster, whose timeline starts at 1,
# with a standby of its own.
my $copy = PostgreSQL::Test::Cluster->new('copy');
$copy->init(allows_streaming => 1);
$copy->append_conf('postgresql.conf', $conf);
$copy->start;
$copy->safe_psql('postgres', 'CREATE DATABASE restored');
$copy->command_ok([ 'pg_restore', '-d', 'restored', $dump ],
	'pg_restore into a new cluster');
$copy->backup('copy_base');
my $copy_standby = PostgreSQL::Test::Cluster->new('copy_standby');
$copy_standby->init_from_backup($copy, 'copy_base', has_streaming => 1);
$copy_standby->start;
$copy->wait_for_catchup($copy_standby);
$copy_standby->stop;

my @copied = draw_tokens($copy, 'restored', 20, 'new cluster');
ok(min_of(@copied) > max_of(@after_dump),
	'a dump restored into a new cluster hands out tokens above every token of its source'
);
$copy->stop('immediate');
$copy_standby->start;
$copy_standby->promote;
$copy_standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby of the copy was not promoted';
my @copy_promoted =
  draw_tokens($copy_standby, 'restored', 20, 'promoted standby of the copy');
ok( min_of(@copy_promoted) > max_of(@copied),
	'after failover onto a standby that had none of the restored cluster\'s tokens, every token exceeds them'
);

done_testing();
