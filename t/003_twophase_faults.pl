# The fault experiments of the queue literature, run against the real
# clock: leases of one second expire while the test polls, never sleeps.
#
#  - an owner dies after claiming: its lease expires and another takes over;
#  - an owner is delayed past its lease: its completion returns false and
#    changes nothing;
#  - a completion reply is lost: the repeat returns true and changes nothing;
#  - a message that always fails ends failed, with its last error, after
#    the consumer's max attempts;
#  - tokens are never handed out twice, across a crash and a restart.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('faults');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION inbox');

# An owner dies after claiming: its session ends without completing.
my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
	SELECT inbox_begin('m-dies', 'email', interval '1 second');
	SELECT pg_terminate_backend(pg_backend_pid());
});
my $dead_token = $node->safe_psql('postgres',
	q{SELECT token FROM inbox WHERE message_id = 'm-dies'});
ok($dead_token > 0, 'the owner claimed before dying');
is($node->safe_psql('postgres', q{SELECT inbox_begin('m-dies', 'email') IS NULL}),
	't', 'while the lease runs, nobody else gets the message');
ok( $node->poll_query_until('postgres',
		q{SELECT inbox_begin('m-dies', 'email') IS NOT NULL}),
	'after the lease expired, another owner takes over');
is( $node->safe_psql('postgres',
		qq{SELECT state, attempts, token > $dead_token FROM inbox WHERE message_id = 'm-dies'}),
	'claimed|2|t',
	'the takeover is a second attempt with a larger token');

# An owner is delayed past its lease (a GC pause, a slow network): by the
# time it completes, another owner holds the message.
my $slow_token = $node->safe_psql('postgres',
	q{SELECT inbox_begin('m-slow', 'email', interval '1 second')});
ok( $node->poll_query_until('postgres',
		q{SELECT inbox_begin('m-slow', 'email') IS NOT NULL}),
	'the message is taken over while its first owner is paused');
my $before = $node->safe_psql('postgres',
	q{SELECT state, token, attempts, lease_until FROM inbox WHERE message_id = 'm-slow'});
is( $node->safe_psql('postgres',
		qq{SELECT inbox_complete('m-slow', 'email', $slow_token)}),
	'f', 'the paused owner\'s completion returns false');
is( $node->safe_psql('postgres',
		q{SELECT state, token, attempts, lease_until FROM inbox WHERE message_id = 'm-slow'}),
	$before, 'and changes nothing');
is( $node->safe_psql('postgres', qq{SELECT inbox_extend('m-slow', 'email', $slow_token)}),
	'f', 'nor can it renew the lease it lost');

# A completion whose reply was lost is repeated.
my $token = $node->safe_psql('postgres', q{SELECT inbox_begin('m-lost', 'email')});
is($node->safe_psql('postgres', qq{SELECT inbox_complete('m-lost', 'email', $token)}),
	't', 'completion succeeds (and its reply is lost)');
$before = $node->safe_psql('postgres',
	q{SELECT state, token, attempts, processed_at FROM inbox WHERE message_id = 'm-lost'});
is($node->safe_psql('postgres', qq{SELECT inbox_complete('m-lost', 'email', $token)}),
	't', 'the repeated completion returns true');
is( $node->safe_psql('postgres',
		q{SELECT state, token, attempts, processed_at FROM inbox WHERE message_id = 'm-lost'}),
	$before, 'and changes nothing');

# A message that fails every time ends in the failed state.
$node->safe_psql('postgres', q{SELECT inbox_configure('sms', max_attempts => 3)});
foreach my $attempt (1 .. 3)
{
	my $t = $node->safe_psql('postgres', q{SELECT inbox_begin('m-poison', 'sms')});
	ok($t > 0, "attempt $attempt gets a token");
	is( $node->safe_psql('postgres',
			qq{SELECT inbox_fail('m-poison', 'sms', $t, 'gateway said no ($attempt)')}),
		't', "attempt $attempt records its failure");
}
is( $node->safe_psql('postgres',
		q{SELECT state, attempts, last_error FROM inbox WHERE message_id = 'm-poison'}),
	'failed|3|gateway said no (3)',
	'after max attempts the message is failed, with its last error');
is($node->safe_psql('postgres', q{SELECT inbox_begin('m-poison', 'sms') IS NULL}),
	't', 'a failed message is not claimed again');
is($node->safe_psql('postgres', q{SELECT failed FROM inbox_stats WHERE consumer = 'sms'}),
	'1', 'inbox_stats counts it');

# Tokens survive a crash and a restart without ever repeating.
my $max_token = $node->safe_psql('postgres', 'SELECT max(token) FROM inbox');
$node->stop('immediate');
$node->start;
my $after_crash = $node->safe_psql('postgres', q{SELECT inbox_begin('m-crash', 'email')});
ok($after_crash > $max_token, "token after a crash ($after_crash) exceeds every earlier one ($max_token)");
$node->restart;
my $after_restart = $node->safe_psql('postgres', q{SELECT inbox_begin('m-restart', 'email')});
ok($after_restart > $after_crash, 'token after a restart exceeds the one before');

$node->stop;
done_testing();
