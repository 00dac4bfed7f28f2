# The library works preloaded (the normal set-up, which later features such
# as the background worker need) and loaded on demand by CREATE EXTENSION.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

foreach my $preload (1, 0)
{
	my $label = $preload ? 'preloaded' : 'loaded on demand';
	my $node = PostgreSQL::Test::Cluster->new($preload ? 'preload' : 'ondemand');
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'")
	  if $preload;
	$node->start;

	is( $node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
		$preload ? 'inbox' : '',
		"$label: shared_preload_libraries as configured");

	$node->safe_psql('postgres', 'CREATE EXTENSION inbox');
	is( $node->safe_psql(
			'postgres', q{
			SELECT inbox_claim('m-1', 'credit');
			SELECT inbox_claim('m-1', 'credit');
			SELECT count(*) FROM inbox_claim_many(ARRAY['m-1', 'm-2'], 'credit');
		}),
		"t\nf\n1",
		"$label: claim, duplicate and batch");

	# A new session that has never loaded the library works too.
	is( $node->safe_psql('postgres',
			q{SELECT inbox_claim('3f6c0f4e-6d2b-4f7e-9b1a-2a3b4c5d6e7f'::uuid, 'credit')}),
		't',
		"$label: fresh session loads the library");

	# The worker and its shared memory exist only when preloaded.
	my ($ret, $out, $err) = $node->psql('postgres', 'SELECT count(*) FROM inbox_worker_status()');
	if ($preload)
	{
		is($ret, 0, "$label: inbox_worker_status answers");
	}
	else
	{
		like($err, qr/the inbox worker is not running/,
			"$label: inbox_worker_status says the worker needs preloading");
		like($err, qr/shared_preload_libraries/, "$label: and names the setting");
	}

	$node->stop;
}

done_testing();
