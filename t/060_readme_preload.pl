# The README's advice for preloading the library, followed literally.
#
# Quick start's shell lines (marked <!-- preload:alone --> and
# <!-- preload:several -->) are run as they stand, "sudo -u postgres" aside,
# against a server where nothing is preloaded, and one where
# pg_stat_statements is; Installation's postgresql.conf line (marked
# <!-- preload:conf -->) is appended to a server's configuration.  Each
# server is then restarted, as the README says, and must come up with
# every library loaded: inbox's launcher running, and pg_stat_statements
# answering where it was preloaded before.  An earlier README advised
# 'pg_stat_statements, inbox', quoted: ALTER SYSTEM stores that as one
# library's name and the server does not start again.  No README or docs
# line may advise that form.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $readme = slurp_file("$FindBin::RealBin/../README.md");
my %advice;
while ($readme =~ /<!-- preload:(\w+) -->\n```\w+\n(.*?)^```$/gms)
{
	$advice{$1} = $2;
}
is_deeply([ sort keys %advice ], [qw(alone conf several)],
	'the README shows how to preload it alone, next to others, and in postgresql.conf');

# run_advice NODE TEXT: the shell lines, as a person runs them on the
# server's machine (the node's socket and port in the environment).
sub run_advice
{
	my ($node, $text) = @_;
	my $script = $text =~ s/^sudo -u postgres //mgr;
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = 'postgres';
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'bash', '-e', '-c', $script ], '>', \$out, '2>', \$err);
	return ($ok, "$out$err");
}

# restarted_with NODE LIBRARIES...: the node restarts, and each library is
# loaded in it.
sub restarts_with
{
	my ($node, $name, @libraries) = @_;
	$node->stop;
	my $started = $node->start(fail_ok => 1);
	ok($started, "$name: the server starts again")
	  or diag slurp_file($node->logfile);
	return unless $started;
	ok( $node->poll_query_until('postgres',
			q{SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'inbox launcher'}),
		"$name: inbox is loaded, its launcher runs");
	if (grep { $_ eq 'pg_stat_statements' } @libraries)
	{
		my ($ret, $out, $err) = $node->psql('postgres',
			'CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT count(*) >= 0 FROM pg_stat_statements');
		is($out, 't', "$name: pg_stat_statements is still loaded") or diag $err;
	}
}

SKIP:
{
	skip 'the README lacks the advice', 1 unless keys %advice == 3;

	my $alone = PostgreSQL::Test::Cluster->new('alone');
	$alone->init;
	$alone->start;
	my ($ok, $out) = run_advice($alone, $advice{alone});
	ok($ok, 'alone: the README\'s command runs') or diag $out;
	restarts_with($alone, 'alone', 'inbox');
	$alone->stop('fast');

	# The README's example names pg_stat_statements: Debian's packages
	# have it, a source build may not (scripts/build-pg builds a few
	# contrib modules only).
	my $libdir = `pg_config --pkglibdir`;
	chomp $libdir;
	skip "pg_stat_statements is not installed in $libdir", 1
	  unless -f "$libdir/pg_stat_statements.so";

	my $several = PostgreSQL::Test::Cluster->new('several');
	$several->init;
	$several->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_stat_statements'\n");
	$several->start;
	is($several->safe_psql('postgres', 'SHOW shared_preload_libraries'),
		'pg_stat_statements', 'several: what SHOW prints, as in the README\'s example');
	($ok, $out) = run_advice($several, $advice{several});
	ok($ok, 'several: the README\'s command runs') or diag $out;
	restarts_with($several, 'several', 'pg_stat_statements', 'inbox');
	$several->stop('fast') if $several->{_pid};

	my $conf = PostgreSQL::Test::Cluster->new('conf');
	$conf->init;
	$conf->append_conf('postgresql.conf', $advice{conf});
	$conf->start(fail_ok => 1);
	restarts_with($conf, 'conf', 'pg_stat_statements', 'inbox');
	$conf->stop('fast') if $conf->{_pid};
}

# Nowhere the quoted list after ALTER SYSTEM.
foreach my $path ("$FindBin::RealBin/../README.md", glob("$FindBin::RealBin/../docs/*.md"))
{
	my $text = slurp_file($path);
	my @bad = $text =~ /(ALTER\s+SYSTEM\s+SET\s+shared_preload_libraries\s*=\s*'[^']*,[^']*')/gi;
	my $name = $path =~ s{.*/\.\./}{}r;
	is(scalar(@bad), 0, "$name: no ALTER SYSTEM with a quoted list of libraries")
	  or diag @bad;
}

done_testing();
