# pg_dump / pg_restore keeps every marker, so a restored database does not
# process any message again; the identity and the fencing tokens continue
# past the highest restored values; consumer settings are kept.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dump');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'");
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE source');
$node->safe_psql('source', q{
	CREATE EXTENSION inbox;
	SELECT inbox_claim('m-' || g, 'credit') FROM generate_series(1, 100) g;
	SELECT count(*) FROM inbox_claim_many(ARRAY['b-1', 'b-2', 'b-3'], 'audit');
	SELECT inbox_configure('email', max_attempts => 7);
	SELECT inbox_begin('e-' || g, 'email') FROM generate_series(1, 5) g;
	BEGIN;
	SELECT * FROM inbox_claim_outcome('k-1', 'api', 'fp-1');
	SELECT inbox_set_result('k-1', 'api', '{"order": 1}');
	COMMIT;
});
my $max_id = $node->safe_psql('source', 'SELECT max(id) FROM inbox');
my $max_token = $node->safe_psql('source', 'SELECT max(token) FROM inbox');

my $dump = $node->basedir . '/source.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'source' ],
	'pg_dump of a database with markers');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', 'restored', $dump ],
	'pg_restore into an empty database');

is( $node->safe_psql('restored',
		'SELECT count(*), max(id), count(DISTINCT consumer) FROM inbox'),
	"109|$max_id|4",
	'every marker is restored');
is($node->safe_psql('restored', 'SELECT consumer, max_attempts FROM inbox_consumers'),
	'email|7', 'consumer settings are restored');

is( $node->safe_psql(
		'restored', q{
		SELECT inbox_claim('m-1', 'credit');
		SELECT inbox_claim('m-100', 'credit');
		SELECT count(*) FROM inbox_claim_many(ARRAY['b-1', 'b-2', 'b-3'], 'audit');
	}),
	"f\nf\n0",
	'restored markers still deduplicate');

is( $node->safe_psql(
		'restored', q{
		SELECT inbox_claim('m-101', 'credit');
		SELECT id > } . $max_id . q{ FROM inbox WHERE message_id = 'm-101';
	}),
	"t\nt",
	'a new marker gets an id past the highest restored one');

is( $node->safe_psql(
		'restored', q{
		SELECT inbox_begin('e-1', 'email') IS NULL;
		SELECT inbox_begin('e-6', 'email') > } . $max_token),
	"t\nt",
	'restored claims hold, and new tokens continue past the restored ones');

is( $node->safe_psql(
		'restored', q{
		SELECT * FROM inbox_claim_outcome('k-1', 'api', 'fp-1');
		SELECT * FROM inbox_claim_outcome('k-1', 'api', 'fp-2');
	}),
	"processed|{\"order\": 1}\nmismatch|",
	'restored idempotency keys keep their result and fingerprint');

# A plain-format dump restores through psql just as well.
my $plain = $node->basedir . '/source.sql';
$node->command_ok([ 'pg_dump', '-f', $plain, '-d', 'source' ],
	'plain pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored_plain');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'restored_plain', '-f', $plain ],
	'plain dump restores');
is( $node->safe_psql('restored_plain',
		q{SELECT count(*), inbox_claim('m-50', 'credit'), inbox_result('k-1', 'api') FROM inbox}),
	'109|f|{"order": 1}',
	'plain restore keeps markers');

done_testing();
