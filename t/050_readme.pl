# The README's SQL, run as written.
#
# Every ```sql block of README.md runs, in the order of the file, each in a
# session of its own, on a fresh server with the library preloaded, in a
# fresh database named "app" (the name the README uses).  A block is what
# psql prints for it with -a (echo) -q: the statements, and after each the
# output it gives (a result table, an error with its detail and hint).  The
# test takes the statements out of the block, runs them, and compares what
# psql printed with the block, line for line (trailing blanks aside).
#
# A block may be marked, visibly, by an HTML comment on the line just
# before its fence:
#	<!-- doctest: skip (REASON) -->	not run at all (it needs pg_cron, a
#					second server, a role's password ...)
#	<!-- doctest: no-output -->		run; it must not raise an error, and
#					what it prints is not compared (a result
#					with timestamps, say)
# The skipped blocks are counted and reported, so that none hides.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $readme = slurp_file("$FindBin::RealBin/../README.md");

# ---------------------------------------------------------------------------
# The blocks, with their marks.

my @blocks;
{
	my @lines = split /\n/, $readme, -1;
	my $mark = '';
	for (my $i = 0; $i < @lines; $i++)
	{
		my $line = $lines[$i];
		if ($line =~ /^<!-- doctest: (skip \(.+\)|no-output) -->$/)
		{
			$mark = $1;
			next;
		}
		if ($line =~ /^```(\S*)$/ && $1 ne '')
		{
			my $lang = $1;
			my $start = $i + 1;
			my @body;
			for ($i++; $i < @lines && $lines[$i] ne '```'; $i++)
			{
				push @body, $lines[$i];
			}
			die "README.md: unterminated block at line $start" if $i >= @lines;
			push @blocks,
			  { line => $start, lang => $lang, mark => $mark, body => \@body }
			  if $lang eq 'sql';
			die "README.md line $start: a doctest mark on a $lang block"
			  if $mark ne '' && $lang ne 'sql';
			$mark = '';
			next;
		}
		# A mark applies to the block right after it (blank lines and other
		# HTML comments may stand between).
		$mark = '' unless $line eq '' || $line =~ /^<!--.*-->$/;
	}
}
ok(scalar(@blocks) >= 10, 'README.md has its SQL blocks (' . scalar(@blocks) . ')');

# input_of BODY: the statements of a block, without the output psql printed
# for them: result tables (a header, its ----+---- rule, the rows, "(N
# rows)" and the blank line after it) and server messages.
sub input_of
{
	my @body = @_;
	my @drop = (0) x @body;
	for (my $i = 1; $i < @body; $i++)
	{
		next unless $body[$i] =~ /^-+(\+-+)*$/;
		my $j = $i;
		$j++ while $j < @body && $body[$j] !~ /^\(\d+ rows?\)$/;
		die "a result table without its row count" if $j >= @body;
		$j++ if $j + 1 < @body && $body[ $j + 1 ] eq '';
		$drop[$_] = 1 for ($i - 1) .. $j;
		$i = $j;
	}
	for (my $i = 0; $i < @body; $i++)
	{
		$drop[$i] = 1
		  if $body[$i] =~ /^(ERROR|WARNING|NOTICE|INFO|DETAIL|HINT|CONTEXT):  /;
	}
	return join('', map { "$body[$_]\n" } grep { !$drop[$_] } 0 .. $#body);
}

# normalized TEXT: lines without trailing blanks, no blank lines at the end.
sub normalized
{
	my ($text) = @_;
	$text =~ s/[ \t]+$//mg;
	$text =~ s/\n+\z//;
	return "$text\n";
}

# ---------------------------------------------------------------------------
# The server the README's installation section describes.

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'inbox'\ninbox.naptime = '1d'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');

my @skipped;
foreach my $block (@blocks)
{
	my $where = "README.md line $block->{line}";
	if ($block->{mark} =~ /^skip \((.+)\)$/)
	{
		push @skipped, "$where: $1";
		next;
	}
	my $input = input_of(@{ $block->{body} });
	my $output = '';
	IPC::Run::run(
		[ 'psql', '-X', '-a', '-q', '-d', $node->connstr('app') ],
		'<' => \$input,
		'>&' => \$output);
	if ($block->{mark} eq 'no-output')
	{
		unlike($output, qr/^(ERROR|FATAL|PANIC):/m, "$where runs without an error")
		  or diag $output;
	}
	else
	{
		is(normalized($output), normalized(join("\n", @{ $block->{body} })),
			"$where prints what the README shows");
	}
}
note "skipped, as marked: $_" foreach @skipped;
diag(scalar(@skipped) . " README block(s) skipped as marked") if @skipped;

$node->stop;
done_testing();
