# The README's two-phase handler against a broker that redelivers, with
# consumers killed in the middle of a message.
#
# A broker is simulated here: a queue of message ids, each delivered to a
# consumer instance (every call is a session of its own, so which instance
# makes it does not matter to the database).  An instance that is killed
# while it holds a delivery
# (after inbox_begin, before or after its side effect, always before
# inbox_complete) never acks, so the broker delivers the message again at
# once to another consumer, as RabbitMQ does when a channel closes.  An
# ack removes the message for good; a requeue with a delay holds it back
# until the delay has passed on the database's clock (the test polls for
# that moment, it never sleeps).  The side effect is a call to a
# downstream service that records every call, idempotent by message id.
#
#  - The handler the README gave before inbox_begin_outcome ("token is
#    null: ack") loses messages: the redelivery meets the dead consumer's
#    live lease, gets NULL, and acks; the broker forgets the message, which
#    is never processed, some never reach the downstream service at all.
#  - The new handler (busy: requeue after retry_after) loses none, with no
#    sweeper: every message is processed, its completion succeeding
#    exactly once.
#  - With a sweeper calling inbox_next, the handler may ack a busy message
#    (the sweeper takes the claim once its lease runs out): none is lost
#    either.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('handler');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'inbox'
# The reclaimer runs during the test too: expired claims become released.
inbox.naptime = 1
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION inbox;
	CREATE TABLE downstream (n bigserial, consumer text, message_id text, token bigint);
});

my $messages = 30;
my $lease = '2 seconds';

sub sql { return $node->safe_psql('postgres', $_[0]); }

# The first delivery of every fifth message dies: before its side effect,
# or after it, alternately; never before its begin, never after its ack.
sub kill_point
{
	my ($id, $delivery) = @_;
	return undef if $delivery > 1 || $id % 5 != 0;
	return ($id / 5) % 2 ? 'before_send' : 'after_send';
}

# The side effect: a call to the downstream service, with the message id
# as its idempotency key and the token for fencing.
sub send_downstream
{
	my ($consumer, $m, $token) = @_;
	sql("INSERT INTO downstream (consumer, message_id, token) VALUES ('$consumer', '$m', $token)");
}

sub complete
{
	my ($consumer, $m, $token, $completions) = @_;
	my $done = sql("SELECT inbox_complete('$m', '$consumer', $token)");
	$completions->{$m}++ if $done eq 't';
	return $done eq 't';
}

# The README's handler before inbox_begin_outcome.
sub old_handler
{
	my ($consumer, $m, $kill, $completions) = @_;
	my $token = sql("SELECT inbox_begin('$m', '$consumer', lease => '$lease')");
	return ['ack'] if $token eq '';    # processed, failed, or held: ack
	return ['killed'] if defined $kill && $kill eq 'before_send';
	send_downstream($consumer, $m, $token);
	return ['killed'] if defined $kill;
	complete($consumer, $m, $token, $completions);
	return ['ack'];    # true, or another owner took over
}

# The README's handler: $sweeper says whether a sweeper runs inbox_next.
sub new_handler
{
	my ($sweeper, $consumer, $m, $kill, $completions) = @_;
	my ($outcome, $token, $retry_after) = split /\|/,
	  sql("SELECT outcome, token, retry_after FROM inbox_begin_outcome('$m', '$consumer', lease => '$lease')"),
	  -1;
	return ['ack'] if $outcome eq 'processed' || $outcome eq 'failed';
	if ($outcome eq 'busy')
	{
		return $sweeper ? ['ack'] : ['requeue', $retry_after];
	}
	die "unexpected outcome '$outcome'"
	  unless $outcome eq 'claimed' || $outcome eq 'taken_over';
	return ['killed'] if defined $kill && $kill eq 'before_send';
	send_downstream($consumer, $m, $token);
	return ['killed'] if defined $kill;
	return ['ack'] if complete($consumer, $m, $token, $completions);
	# Ownership lost: the redelivery's begin says what is left to do.
	return $sweeper ? ['ack'] : ['requeue', '0'];
}

# One sweeper call: take what is released or expired, and finish it.
sub sweep
{
	my ($consumer, $completions) = @_;
	my $taken = sql("SELECT message_id, token FROM inbox_next('$consumer', lease => '$lease', max => 100)");
	for my $row (split /\n/, $taken)
	{
		my ($m, $token) = split /\|/, $row;
		send_downstream($consumer, $m, $token);
		complete($consumer, $m, $token, $completions);
	}
	return;
}

# Delivers every message until the broker has none left; returns the
# completions that succeeded, per message.
sub run_broker
{
	my ($consumer, $handler, $sweeper) = @_;
	my @ready = map { "m-$_" } 1 .. $messages;
	my @delayed;    # [message, when it is due: epoch on the database's clock]
	my %deliveries;
	my %completions;
	my ($kills, $requeues) = (0, 0);

	while (@ready || @delayed)
	{
		if (!@ready)
		{
			# Wait, polling, for the first delayed message to be due.
			my ($first) = sort { $a->[1] <=> $b->[1] } @delayed;
			$node->poll_query_until('postgres',
				"SELECT extract(epoch FROM clock_timestamp()) >= $first->[1]")
			  or die "a delayed message never came due";
			my $now = sql('SELECT extract(epoch FROM clock_timestamp())');
			push @ready, map { $_->[0] } grep { $_->[1] <= $now } @delayed;
			@delayed = grep { $_->[1] > $now } @delayed;
			next;
		}
		my $m = shift @ready;
		my ($id) = $m =~ /(\d+)$/;
		my $kill = kill_point($id, ++$deliveries{$m});
		my $action = $handler->($consumer, $m, $kill, \%completions);
		if ($action->[0] eq 'killed')
		{
			# The connection dropped without an ack: delivered again at once.
			$kills++;
			unshift @ready, $m;
		}
		elsif ($action->[0] eq 'requeue')
		{
			$requeues++;
			push @delayed,
			  [
				$m,
				sql("SELECT extract(epoch FROM clock_timestamp() + interval '$action->[1]')")
			  ];
		}
		sweep($consumer, \%completions) if $sweeper;
	}

	# The broker is empty.  A sweeper goes on until nothing is left to take.
	while ($sweeper)
	{
		my $open = sql("SELECT count(*) FROM inbox WHERE consumer = '$consumer' AND state IN ('claimed', 'released')");
		last if $open == 0;
		$node->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM inbox WHERE consumer = '$consumer' AND (state = 'released' OR (state = 'claimed' AND lease_until <= clock_timestamp()))")
		  or die "an open claim never became takeable";
		sweep($consumer, \%completions);
	}
	note("$consumer: $kills consumers killed, $requeues requeues");
	return \%completions;
}

# The old handler, no sweeper: messages are lost.
run_broker('old', \&old_handler, 0);
my $lost = sql(q{SELECT count(*) FROM inbox WHERE consumer = 'old' AND state <> 'processed'});
ok($lost > 0, "the old handler ('token is null: ack') loses messages: $lost of $messages never processed");
is( sql(q{SELECT count(*) FROM inbox WHERE consumer = 'old' AND state IN ('claimed', 'released')}),
	$lost, 'they are left claimed or released, with the broker empty');
ok( sql(q{SELECT count(*) FROM inbox i WHERE consumer = 'old' AND state <> 'processed'
	AND NOT EXISTS (SELECT FROM downstream d WHERE d.consumer = 'old' AND d.message_id = i.message_id)}) > 0,
	'some of them never reached the downstream service');

# The new handler, with no sweeper and with one.
for my $variant (['new', 0, 'without a sweeper'], ['swept', 1, 'with a sweeper'])
{
	my ($consumer, $sweeper, $what) = @$variant;
	my $completions = run_broker($consumer,
		sub { new_handler($sweeper, @_) }, $sweeper);
	is( sql("SELECT count(*) FILTER (WHERE state = 'processed'), count(*) FROM inbox WHERE consumer = '$consumer'"),
		"$messages|$messages", "new handler $what: every message processed");
	is( sql("SELECT count(DISTINCT message_id) FROM downstream WHERE consumer = '$consumer'"),
		$messages, "new handler $what: every message reached the downstream service");
	is_deeply(
		[ sort grep { $completions->{$_} != 1 } keys %$completions ],
		[], "new handler $what: each completion succeeded exactly once");
	is(scalar(keys %$completions), $messages,
		"new handler $what: every message completed");
	my $killed = join ', ', map { "'m-$_'" } grep { $_ % 5 == 0 } 1 .. $messages;
	is( sql("SELECT count(*) FROM inbox WHERE consumer = '$consumer' AND attempts > 1 AND message_id IN ($killed)"),
		$messages / 5, "new handler $what: the killed consumers' messages were retried");
}

done_testing();
