# A fencing token is durable before any client sees it, whatever
# synchronous_commit says: a crash never hands the same token out again.
#
#  - with synchronous_commit = off, autocommit claims see their tokens
#    before the sequence's WAL is flushed;
#  - inside an explicit transaction, a token is seen before the commit, so
#    even synchronous_commit = on does not flush it in time.
#
# In both cases the server then crashes (an immediate stop, no checkpoint),
# and the tokens drawn after the restart must exceed every token a client
# saw before it, in the order drawn.  The WAL writer is slowed down so that
# only the extension's own flush can make a token durable in time.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('tokens_crash');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = '1d'
synchronous_commit = off
wal_writer_delay = '10s'
wal_writer_flush_after = '1GB'
checkpoint_timeout = '1d'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION inbox');

# Draws 3 x count tokens with autocommit claims (new messages, released
# ones taken by inbox_next, then by inbox_begin's takeover), checks that they increase in the order drawn, and returns the
# largest.
my $round = 0;
sub draw_tokens
{
	my ($count, $what) = @_;
	$round++;
	my $release = qq{UPDATE inbox SET state = 'released', lease_until = NULL
		WHERE message_id LIKE 'r$round-%';};
	my @tokens = split /\n/, $node->safe_psql(
		'postgres', qq{
		SELECT inbox_begin('r$round-' || g, 'email') FROM generate_series(1, $count) g;
		$release
		SELECT token FROM inbox_next('email', max => $count) ORDER BY token;
		$release
		SELECT inbox_begin('r$round-' || g, 'email') FROM generate_series(1, $count) g;
	});
	my @sorted = sort { $a <=> $b } @tokens;
	is(scalar(@tokens), 3 * $count, "$what: every claim got a token");
	is("@tokens", "@sorted", "$what: tokens increase in the order drawn");
	return $sorted[-1];
}

# A checkpoint, so that the next draw writes a new WAL record for the
# sequence, which only a flush makes durable.
$node->safe_psql('postgres', 'CHECKPOINT');
my $seen = draw_tokens(10, 'synchronous_commit = off');
$node->stop('immediate');
$node->start;
my $after = $node->safe_psql('postgres',
	q{SELECT inbox_begin('after-crash-1', 'email')});
ok($after > $seen,
	"synchronous_commit = off: the first token after a crash ($after) exceeds every token seen before it ($seen)"
);

# Seen inside a transaction that never commits: synchronous_commit = on
# would flush only at the commit.  More tokens than one raise of the
# reserve covers (src/tokens.c), so the raise must be made durable too.
$node->safe_psql('postgres', 'CHECKPOINT');
my $session = $node->background_psql('postgres');
$session->query_safe('SET synchronous_commit = on');
$session->query_safe('BEGIN');
my $uncommitted = $session->query_safe(
	q{SELECT max(inbox_begin('in-transaction-' || g, 'email'))
	  FROM generate_series(1, 1500) g});
chomp $uncommitted;
ok($uncommitted > $after, 'tokens are seen before their transaction commits');
$node->stop('immediate');
$session->quit;
$node->start;
$after = $node->safe_psql('postgres',
	q{SELECT inbox_begin('after-crash-2', 'email')});
ok($after > $uncommitted,
	"a token seen in an open transaction ($uncommitted) is not handed out again after a crash ($after)"
);

# A backend that dies by a signal makes the postmaster reinitialize shared
# memory and recover without restarting (restart_after_crash): the WAL not
# yet flushed is lost the same way, but the server keeps its start time.
$session = $node->background_psql('postgres');
$session->query_safe('BEGIN');
my $pid = $session->query_safe('SELECT pg_backend_pid()');
chomp $pid;
$uncommitted = $session->query_safe(
	q{SELECT max(inbox_begin('killed-' || g, 'email'))
	  FROM generate_series(1, 1500) g});
chomp $uncommitted;
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $log_offset = -s $node->logfile;
kill 'KILL', $pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back';
eval { $session->quit };
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$started, 'the server recovered without restarting');
$after = $node->safe_psql('postgres',
	q{SELECT inbox_begin('after-kill', 'email')});
ok($after > $uncommitted,
	"after a backend crash, the first token ($after) exceeds every token seen before it ($uncommitted)"
);

# Many rounds, each crashing: never a repeat, always in order.
for my $crash (1 .. 3)
{
	$node->safe_psql('postgres', 'CHECKPOINT') if $crash == 2;
	my $before = draw_tokens(40, "crash $crash");
	$node->stop('immediate');
	$node->start;
	my $next = $node->safe_psql('postgres',
		qq{SELECT inbox_begin('after-crash-r$crash', 'email')});
	ok($next > $before, "crash $crash: $next follows $before");
}

is( $node->safe_psql('postgres',
		'SELECT count(*) = count(DISTINCT token) FROM inbox'),
	't', 'no two claims in the table share a token');

done_testing();
