# The README's way to reach the functions, followed by an application role.
#
# A newcomer's application role calls inbox_claim(...) unqualified before
# anyone set its search_path: the error it meets must be the one the
# README's Troubleshooting names.  The README's fixes must then work as
# written: the qualified call with no search_path at all, and the login
# recipe (the role's own path, extended).  And they must leave a
# superuser's path alone: no README or docs block sets the path of a
# superuser or of the whole database.
use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $readme = slurp_file("$FindBin::RealBin/../README.md");

# The marked recipes of the README's Privileges section.
my %recipe;
while ($readme =~ /<!-- privileges:([\w-]+) -->\n```sql\n(.*?)^```\n<!-- \/privileges:\1 -->/gms)
{
	$recipe{$1} = $2;
}
ok($recipe{app} && $recipe{login}, 'the README has the app and login recipes');

# The set-up block: the first SQL block, which creates the extension.
my ($setup) = $readme =~ /^```sql\n(CREATE SCHEMA inbox;.*?)^```$/ms;
ok($setup, 'the README creates the extension in a schema of its own');

# The Troubleshooting entry for a missing search_path.
my ($section) = $readme =~ /^## Troubleshooting\n(.*?)^## /ms;
my ($quoted) = ($section // '') =~ /`(function inbox_claim\([^`]*\) does not exist)`/;
ok($quoted, 'Troubleshooting names the error of a call without the schema');

my $node = PostgreSQL::Test::Cluster->new('search_path');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app; CREATE ROLE orders_service LOGIN;');
$node->safe_psql('app', $setup);
$node->safe_psql('app', $recipe{app});
$node->safe_psql('app', 'GRANT inbox_app TO orders_service');

sub as_app
{
	my ($sql) = @_;
	my ($out, $err);
	$node->psql('app', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-U', 'orders_service' ]);
	return $out ne '' ? $out : $err;
}

my $error = as_app(q{SELECT inbox_claim('m-1', 'credit')});
like($error, qr/ERROR:  function inbox_claim\(unknown, unknown\) does not exist/,
	'an unqualified call without the schema on the path fails');
ok($quoted && index($error, $quoted) >= 0,
	'... with the error Troubleshooting quotes')
  or diag "got: $error";

is(as_app(q{SELECT inbox.inbox_claim('m-1', 'credit')}), 't',
	'the qualified call works with no search_path set');

$node->safe_psql('app', $recipe{login});
is(as_app(q{SELECT inbox_claim('m-2', 'credit')}), 't',
	'after the login recipe, the unqualified call works in a new session');
is(as_app('SHOW search_path'), '"$user", public, inbox',
	'... and the role keeps "$user" and public first');
is($node->safe_psql('app', 'SHOW search_path'), '"$user", public',
	'a superuser\'s search_path is left alone');

# No block in the README or the docs sets the path of the whole database
# or of a superuser.
foreach my $file ('README.md', glob("$FindBin::RealBin/../docs/*.md"))
{
	my $path = $file =~ m{^/} ? $file : "$FindBin::RealBin/../$file";
	my $text = slurp_file($path);
	my @blocks = $text =~ /^```(?:sql|sh)\n(.*?)^```$/gms;
	my @bad = grep { /ALTER\s+DATABASE\s+\S+\s+SET\s+search_path|ALTER\s+ROLE\s+postgres\b.*search_path/i } @blocks;
	is(scalar(@bad), 0, "$file: no block sets a database's or a superuser's search_path")
	  or diag @bad;
}

$node->stop;
done_testing();
