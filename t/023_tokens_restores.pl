# Every new owner of a message gets a token above every token an earlier
# owner of that message was given, after what moves a database without
# its token sequence (docs/tokens.md):
#
#  - the writes moved to a logical replica (the usual blue/green major
#    upgrade): the rows arrive with their tokens, the sequence does not;
#  - a base backup started as is, on its timeline: the server it was taken
#    from handed out tokens after the backup, which the backup lacks.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = q{
shared_preload_libraries = 'inbox'
inbox.naptime = '1d'
};

# Takes message over on node (its lease made to expire first), returns the
# new token.
sub take_over
{
	my ($node, $message) = @_;
	return $node->safe_psql(
		'postgres', qq{
		UPDATE inbox SET lease_until = now() - interval '1 second'
		WHERE message_id = '$message';
		SELECT inbox_begin('$message', 'email');
	});
}

# 1. Logical replication: the publisher hands out tokens 1 to 5; the
# subscriber, with a sequence of its own that never drew a token, takes
# message 5 over.
my $publisher = PostgreSQL::Test::Cluster->new('publisher');
$publisher->init(allows_streaming => 'logical');
$publisher->append_conf('postgresql.conf', $conf);
$publisher->start;
my $subscriber = PostgreSQL::Test::Cluster->new('subscriber');
$subscriber->init;
$subscriber->append_conf('postgresql.conf', $conf);
$subscriber->start;

$publisher->safe_psql(
	'postgres', q{
	CREATE EXTENSION inbox;
	SELECT inbox_begin('m-' || g, 'email') FROM generate_series(1, 5) g;
	CREATE PUBLICATION inbox_pub FOR TABLE inbox;
});
is( $publisher->safe_psql(
		'postgres', "SELECT token FROM inbox WHERE message_id = 'm-5'"),
	'5',
	'the publisher gave message m-5 token 5');
$subscriber->safe_psql('postgres', 'CREATE EXTENSION inbox');
my $connstr = $publisher->connstr . ' dbname=postgres';
$subscriber->safe_psql('postgres',
	"CREATE SUBSCRIPTION inbox_sub CONNECTION '$connstr' PUBLICATION inbox_pub"
);
$subscriber->wait_for_subscription_sync($publisher, 'inbox_sub');
is($subscriber->safe_psql('postgres', 'SELECT count(*) FROM inbox'),
	'5', 'the subscriber has the markers');

# The switch: the subscriber takes the writes.
$subscriber->safe_psql('postgres', 'ALTER SUBSCRIPTION inbox_sub DISABLE');
my $token = take_over($subscriber, 'm-5');
cmp_ok($token, '>', 5,
	"after the switch, m-5's new owner gets a token above 5 ($token)");
my $again = take_over($subscriber, 'm-5');
cmp_ok($again, '>', $token, "and the next one above that ($again)");
$subscriber->safe_psql('postgres', 'DROP SUBSCRIPTION inbox_sub');
$subscriber->stop;
$publisher->stop;

# 2. A base backup started as is.  Message r-1 is claimed before the
# backup; afterwards the primary takes it over after handing out more
# tokens than one raise of the durable ceiling covers (1024), so the
# backup has neither r-1's new token nor a ceiling above it.
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', $conf);
$primary->start;
$primary->safe_psql(
	'postgres', q{
	CREATE EXTENSION inbox;
	SELECT inbox_begin('r-1', 'email');
});
$primary->backup('base');
$primary->safe_psql('postgres',
	"SELECT count(inbox_begin('after-' || g, 'email')) FROM generate_series(1, 3000) g"
);
my $seen = take_over($primary, 'r-1');
cmp_ok($seen, '>', 3000,
	"the primary handed r-1 token $seen after the backup");
$primary->stop;

my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init_from_backup($primary, 'base');
$restored->start;
is( $restored->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'),
	'1', 'the backup started as is, on the same timeline');
is( $restored->safe_psql(
		'postgres', "SELECT count(*) FROM inbox WHERE message_id LIKE 'after-%'"),
	'0',
	'it lacks what the primary wrote after the backup');
my $after = take_over($restored, 'r-1');
cmp_ok($after, '>', $seen,
	"r-1's next owner on the restored backup gets a token ($after) above the one the primary handed out after the backup ($seen)"
);
my @fresh = split /\n/, $restored->safe_psql('postgres',
	"SELECT inbox_begin('new-' || g, 'email') FROM generate_series(1, 3) g");
cmp_ok($fresh[0], '>', $seen,
	"and new messages get tokens ($fresh[0] and up) above every token of the primary"
);

# A clean restart of the restored server keeps its tokens going up.
$restored->restart;
my $later = take_over($restored, 'r-1');
cmp_ok($later, '>', $after, "after a clean restart, too ($later)");
$restored->stop;

done_testing();
