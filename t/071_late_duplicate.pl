# A late duplicate, end to end: a message is processed, the background
# worker prunes its marker past the consumer's retention, and the broker
# delivers it again with its original send time (RabbitMQ's timestamp
# property, Kafka's record timestamp, SQS's SentTimestamp).  The claim
# answers expired, one-phase and two-phase, and writes nothing; so it does
# after a restart, and in a database restored from pg_dump.  A claim
# without a send time is claimed as before; a message sent after the floor
# is claimed.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('late');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'inbox'\ninbox.naptime = '1s'\n");
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION inbox;
	SELECT inbox_configure('credit', retention => '1 second');
	SELECT inbox_configure('email', retention => '1 second');
});

# The broker stamped both messages an hour ago; each is processed once.
my $sent = $node->safe_psql('app',
	q{SELECT (now() - interval '1 hour')::timestamptz});
my $claim = "SELECT outcome FROM inbox_claim_outcome('order-1', 'credit', sent_at => '$sent')";
my $begin = "SELECT outcome FROM inbox_begin_outcome('order-2', 'email', sent_at => '$sent')";
is($node->safe_psql('app', $claim), 'claimed', 'one-phase: the first delivery is claimed');
my $token = $node->safe_psql('app',
	"SELECT token FROM inbox_begin_outcome('order-2', 'email', sent_at => '$sent')");
ok($token > 0, 'two-phase: the first delivery is claimed');
is($node->safe_psql('app', "SELECT inbox_complete('order-2', 'email', $token)"),
	't', 'two-phase: ... and completed');
is($node->safe_psql('app', $claim), 'processed', 'a redelivery within the retention is a duplicate');
is($node->safe_psql('app', $begin), 'processed', '... for two-phase too');

# The worker prunes both markers and raises each consumer's floor.
$node->poll_query_until('app',
	q{SELECT count(*) = 0 FROM inbox WHERE message_id IN ('order-1', 'order-2')})
  or die 'the worker did not prune the markers';
is($node->safe_psql('app',
		q{SELECT string_agg(consumer, ',' ORDER BY consumer) FROM inbox_floors}),
	'credit,email', 'the worker raised both floors');

# The broker delivers both again, with their original send time.
is($node->safe_psql('app', $claim), 'expired', 'one-phase: the late duplicate is expired');
is($node->safe_psql('app', $begin), 'expired', 'two-phase: the late duplicate is expired');
is($node->safe_psql('app',
		q{SELECT count(*) FROM inbox WHERE message_id IN ('order-1', 'order-2')}),
	'0', 'an expired claim writes nothing');

# A message sent after the floor (past the minute allowed for the broker's
# clock) is new.
is($node->safe_psql('app', q{
		SELECT outcome FROM inbox_claim_outcome('order-3', 'credit',
			sent_at => clock_timestamp() + interval '2 minutes')}),
	'claimed', 'a message sent after the floor is claimed');

# The floor outlives a restart.
$node->restart;
is($node->safe_psql('app', $claim), 'expired', 'after a restart, still expired');

# ... and a dump and restore.
my $dump = $node->basedir . '/app.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'app' ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', 'restored', $dump ], 'pg_restore');
is($node->safe_psql('restored', $claim), 'expired', 'after a restore, still expired');
is($node->safe_psql('restored', $begin), 'expired', '... for two-phase too');

# Without a send time nothing is checked: claimed again, as in 1.0.0.
is($node->safe_psql('restored',
		q{SELECT outcome FROM inbox_claim_outcome('order-1', 'credit')}),
	'claimed', 'a claim without sent_at is not checked');

$node->stop;
done_testing();
