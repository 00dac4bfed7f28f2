# Forgetting the preload is not silent, and the worker's status is never
# an empty answer.
#
# Without shared_preload_libraries, CREATE EXTENSION loads the library
# (it checks the C functions it creates) and everything works but
# maintenance: no worker prunes or reclaims.  The README says CREATE
# EXTENSION then warns; this checks it does, in each database, naming the
# setting, and that claims still work.  With the library preloaded there
# is no such warning, and inbox_worker_status() answers a row for the
# current database (passes 0) before the worker's first round reached it,
# instead of no row at all, which read as a broken worker.
use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $warning = qr/WARNING:  inbox is not loaded through shared_preload_libraries/;

# The README's Troubleshooting names the warning, as the server words it.
my $readme = slurp_file("$FindBin::RealBin/../README.md");
my ($troubleshooting) = $readme =~ /^## Troubleshooting\n(.*?)^## /ms;
$troubleshooting //= '';
$troubleshooting =~ s/\s+/ /g;
like($troubleshooting, qr/`inbox is not loaded through shared_preload_libraries`/,
	'Troubleshooting names the warning');

my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
foreach my $db ('app', 'other')
{
	$plain->safe_psql('postgres', "CREATE DATABASE $db");
	my ($ret, $out, $err) = $plain->psql($db,
		'CREATE SCHEMA inbox; CREATE EXTENSION inbox SCHEMA inbox;');
	is($ret, 0, "not preloaded: CREATE EXTENSION succeeds in $db");
	like($err, $warning, "... and warns that the worker does not run ($db)");
	like($err, qr/HINT:  Add inbox to shared_preload_libraries and restart the server\./,
		"... naming the setting ($db)");
	is($plain->safe_psql($db, q{SELECT inbox.inbox_claim('m-1', 'credit')}), 't',
		"... and claims work ($db)");
}
$plain->stop;

my $node = PostgreSQL::Test::Cluster->new('preloaded');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'inbox'\ninbox.naptime = 3600\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
my ($ret, $out, $err) = $node->psql('app',
	'CREATE SCHEMA inbox; CREATE EXTENSION inbox SCHEMA inbox;');
is($ret, 0, 'preloaded: CREATE EXTENSION succeeds');
unlike($err, qr/WARNING/, '... without a warning');
is( $node->safe_psql('app',
		q{SELECT database, passes, last_pass_start IS NULL, last_pass_end IS NULL, pruned,
				 reclaimed, last_error IS NULL, pruned_total, reclaimed_total
		  FROM inbox.inbox_worker_status()}),
	'app|0|t|t|0|0|t|0|0',
	'before the first pass, inbox_worker_status() answers a row for this database, with no pass');
$node->stop;

done_testing();
