# A timeline ID used twice (docs/tokens.md, "What breaks uniqueness across
# messages"): two standbys of one primary, promoted one after the other,
# the second without the first's history.
#
# PostgreSQL picks a promoted standby's timeline as one above the highest
# it can see; without the first promotion's history file, the second
# standby picks the same ID, so its tokens come from the same epoch and
# repeat the first's.  The docs give two ways out, and this test holds
# each to its word:
#
#  - a WAL archive that every standby reads (restore_command): the second
#    standby sees the first's history and takes the next timeline ID, so
#    its tokens exceed every token the first handed out;
#  - moving the sequence two epochs up by hand before the first claim,
#    with the docs' setval.
#
# And a standby made from a base backup is not a restore: its tokens
# stay in its timeline's epoch (before, the first standby's backup_label
# moved it one epoch further, onto the archive-reading standby's).
#
# It also shows the limit is real: a standby promoted with neither
# repeats the first standby's timeline ID and its tokens.  If PostgreSQL
# ever stops repeating the ID, that check fails and docs/tokens.md should
# say so.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $conf = q{
shared_preload_libraries = 'inbox'
inbox.naptime = '1d'
};

# Draws count tokens on node for new messages; returns them in order.
my $round = 0;
sub draw_tokens
{
	my ($node, $count) = @_;
	$round++;
	return sort { $a <=> $b } split /\n/, $node->safe_psql('postgres',
		"SELECT inbox_begin('r$round-' || g, 'email') FROM generate_series(1, $count) g");
}

sub max_of { my $max = shift; for (@_) { $max = $_ if $_ > $max } return $max; }
sub min_of { my $min = shift; for (@_) { $min = $_ if $_ < $min } return $min; }

sub timeline
{
	return $_[0]->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
}

sub promote
{
	my ($node) = @_;
	$node->promote;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die $node->name . ' was not promoted';
	# pg_control_checkpoint() shows the new timeline after the end-of-
	# recovery checkpoint.
	$node->safe_psql('postgres', 'CHECKPOINT');
	return;
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', $conf);
$primary->start;
# In schema inbox, as the README installs it, so that the docs' setval
# runs as written.
$primary->safe_psql('postgres',
	'CREATE SCHEMA inbox; CREATE EXTENSION inbox SCHEMA inbox; ALTER DATABASE postgres SET search_path = inbox, public');
my @from_primary = draw_tokens($primary, 10);
$primary->backup('base');

# The first standby archives what it writes once promoted (its history
# file among it) into a directory the archive-reading standby restores
# from.
my $archive = PostgreSQL::Test::Utils::tempdir;
my $first = PostgreSQL::Test::Cluster->new('first');
$first->init_from_backup($primary, 'base', has_streaming => 1);
$first->append_conf('postgresql.conf',
	qq{archive_mode = on\narchive_command = 'cp "%p" "$archive/%f"'\n});

my %second;
foreach my $name ('bare', 'archive', 'setval')
{
	$second{$name} = PostgreSQL::Test::Cluster->new("second_$name");
	$second{$name}->init_from_backup($primary, 'base', has_streaming => 1);
}
$second{archive}->append_conf('postgresql.conf',
	qq{restore_command = 'cp "$archive/%f" "%p"'\n});

$_->start foreach ($first, values %second);
$primary->wait_for_catchup($_) foreach ($first, values %second);
$_->stop foreach (values %second);

# The primary dies; the first standby is promoted and hands out tokens.
$primary->stop('immediate');
promote($first);
is(timeline($first), 2, 'the first promotion starts timeline 2');
my @from_first = draw_tokens($first, 10);
ok(min_of(@from_first) > max_of(@from_primary),
	'the first promoted standby hands out tokens above the primary\'s');
# Its history file reaches the archive (the archiver's first work after
# the promotion; pg_stat_archiver may report it late, so the file is
# looked for).
my $waited = 0;
while (!-f "$archive/00000002.history" && $waited++ < 10 * $PostgreSQL::Test::Utils::timeout_default)
{
	usleep(100_000);
}
ok(-f "$archive/00000002.history", 'the first standby archived its history file');
$first->stop('immediate');

# Without the first's history, the second standby repeats timeline 2 and
# the first's tokens: the documented limit.
$second{bare}->start;
promote($second{bare});
is(timeline($second{bare}), 2,
	'a standby promoted without the first promotion\'s history repeats its timeline ID');
my @bare = draw_tokens($second{bare}, 10);
ok(min_of(@bare) <= max_of(@from_first),
	'and repeats its tokens (' . min_of(@bare) . ' is not above ' . max_of(@from_first)
	  . '): the limit docs/tokens.md states');

# With the archive, it sees the history, takes timeline 3, and a higher
# epoch.
$second{archive}->start;
promote($second{archive});
is(timeline($second{archive}), 3,
	'a standby that reads the archive takes the next timeline ID');
my @archived = draw_tokens($second{archive}, 10);
ok(min_of(@archived) > max_of(@from_first),
	'and every token it hands out (' . min_of(@archived)
	  . ' and up) exceeds the first promoted standby\'s (' . max_of(@from_first) . ')');

# Without it, the docs' setval before the first claim does the same.
$second{setval}->start;
promote($second{setval});
is(timeline($second{setval}), 2, 'a third standby repeats timeline 2 too');
$second{setval}->safe_psql('postgres',
	q{SELECT setval('inbox.inbox_token_seq', ((last_value >> 44) + 2) << 44) FROM inbox.inbox_token_seq});
my @moved = draw_tokens($second{setval}, 10);
ok(min_of(@moved) > max_of(@from_first),
	'after the docs\' setval, every token it hands out (' . min_of(@moved)
	  . ' and up) exceeds the first promoted standby\'s (' . max_of(@from_first) . ')');

done_testing();
