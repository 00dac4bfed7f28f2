# Many clients at once, not just the two of an isolation spec: pgbench runs
# several clients that claim the same small set of messages over and over,
# and every message must be won exactly once, by one-phase, two-phase and
# batch claims alike.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION inbox;
	CREATE TABLE wins (message_id text, kind text);
});

my $script = $node->basedir . '/race.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set m random(1, 200)
INSERT INTO wins SELECT 'm-' || :m, 'one-phase' WHERE inbox_claim('m-' || :m, 'credit');
INSERT INTO wins SELECT 'm-' || :m, 'two-phase'
	WHERE inbox_begin('m-' || :m, 'email', interval '1 hour') IS NOT NULL;
INSERT INTO wins SELECT id, 'batch'
	FROM inbox_claim_many(ARRAY['m-' || :m, 'm-' || (:m + 1), 'm-' || :m], 'batch') AS id;
});

$node->command_ok(
	[ 'pgbench', '-n', '-c', '8', '-j', '4', '-t', '300', '-f', $script, 'postgres' ],
	'8 clients race for 200 messages');

is( $node->safe_psql(
		'postgres', q{
		SELECT count(*) FROM (
			SELECT message_id, kind FROM wins GROUP BY 1, 2 HAVING count(*) > 1) d
	}),
	'0', 'no message was won twice');
is( $node->safe_psql(
		'postgres', q{
		SELECT count(*) FROM inbox i
		WHERE NOT EXISTS (
			SELECT FROM wins w WHERE w.message_id = i.message_id
			  AND w.kind = CASE i.consumer WHEN 'credit' THEN 'one-phase'
						   WHEN 'email' THEN 'two-phase' ELSE 'batch' END)
	}),
	'0', 'every marker has its winner');
my $markers = $node->safe_psql('postgres', 'SELECT count(*) FROM inbox');
ok($markers > 400, "the race produced markers for all three kinds ($markers)");

done_testing();
