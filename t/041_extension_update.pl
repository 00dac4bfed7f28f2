# ALTER EXTENSION inbox UPDATE, from every release to this one.
#
# test/upgrade/ keeps the install script of every release as it shipped
# (inbox--X.Y.Z.sql), and the Makefile installs those older than
# default_version, so that CREATE EXTENSION inbox VERSION 'X.Y.Z' makes a
# database as that release did.  For each:
#
#  - a database made at that release gets markers, a live two-phase claim
#    and a history of tokens, then ALTER EXTENSION inbox UPDATE;
#  - its schema (pg_dump --schema-only) must equal a fresh install's;
#  - the markers still answer (a duplicate is false), the live claim
#    completes with its token, and the next token is above every old one.
#
# And the release being made is frozen: while default_version names a
# release kept in test/upgrade/, inbox.sql must be that file, byte for
# byte; a change to the SQL needs a new version and its upgrade script
# (CONTRIBUTING.md, Releasing).  A new version with no upgrade script from
# the last release fails here, at the update.  (That every release tagged
# v* is kept in test/upgrade/ as it shipped is scripts/check-meta's to
# check: it runs in the git checkout.)  Before all that, the schema
# comparison shows it can fail: changes made on purpose to a fresh
# install must be seen.
use strict;
use warnings;

use File::Basename;
use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = "$FindBin::RealBin/..";
my ($current) = slurp_file("$top/inbox.control") =~ /^default_version = '([^']+)'/m;
die "no default_version in inbox.control" unless defined $current;

# Versions as numbers, for their order.
sub version_key { return sprintf('%05d' x 3, split(/\./, $_[0])); }

my @releases = sort { version_key($a) cmp version_key($b) }
  map { /inbox--(\d+\.\d+\.\d+)\.sql$/ ? $1 : () } glob("$top/test/upgrade/inbox--*.sql");
ok(scalar(@releases) > 0, 'test/upgrade/ keeps the install script of at least one release');

# The release being made, if it is kept: inbox.sql is what it ships.
if (grep { $_ eq $current } @releases)
{
	is(slurp_file("$top/inbox.sql"), slurp_file("$top/test/upgrade/inbox--$current.sql"),
		"inbox.sql is release ${current}'s install script as kept in test/upgrade/ (a change needs a new version)");
}
else
{
	ok(-f "$top/inbox--" . $releases[-1] . "--$current.sql",
		"an upgrade script from the last release, $releases[-1], to $current");
}

my $node = PostgreSQL::Test::Cluster->new('update');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'inbox'\ninbox.naptime = 3600\n");
$node->start;

# schema DB: the database's schema as pg_dump writes it, normalised.  In
# binary-upgrade mode, which dumps each of the extension's objects (a
# plain dump says only CREATE EXTENSION), without what differs between
# any two databases with the same schema: OIDs and transaction ids
# pg_upgrade would carry over, sequences' positions (data, not schema),
# the dump's own name and its random \restrict key.
sub schema
{
	my ($db) = @_;
	my ($stdout, $stderr);
	$node->run_log([ 'pg_dump', '--schema-only', '--binary-upgrade', '--no-owner', '-d', $db ],
		'>', \$stdout, '2>', \$stderr)
	  or die "pg_dump of $db failed: $stderr";
	my @lines = grep {
		!/^-- Dumped (from|by)|^\\(un)?restrict |binary_upgrade_set_next_|binary_upgrade_set_missing_value|^-- For binary upgrade, must preserve|^SET relfrozenxid|^SELECT pg_catalog\.setval\(/
	} split(/\n/, $stdout);
	foreach (@lines)
	{
		# the OIDs of the tables registered for pg_dump: compared by name
		# below (extconfig)
		s/'\{[0-9,]*\}'/'{oids}'/ if /binary_upgrade_create_empty_extension/;
		s/WHERE oid = '[0-9]+'/WHERE oid = 'oid'/;
	}
	return join("\n", @lines);
}

# extconfig DB: the relations the extension registered for pg_dump, by
# name, in order (the dump above shows them as OIDs).
sub extconfig
{
	return $node->safe_psql($_[0],
		"SELECT extconfig::regclass[]::text[] FROM pg_extension WHERE extname = 'inbox'");
}

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION inbox');
my $fresh = schema('fresh');

# The comparison sees what an upgrade script can get wrong: each change
# below, made to a copy of the fresh install, makes the schemas differ.
my %mutations = (
	'a comment' => q{COMMENT ON FUNCTION inbox_prune() IS 'changed'},
	'a privilege' => q{GRANT EXECUTE ON FUNCTION inbox_prune() TO PUBLIC},
	'a function body' => q{CREATE OR REPLACE FUNCTION inbox_lease_is_valid(lease interval)
		RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'},
	'a table option' => q{ALTER TABLE inbox SET (fillfactor = 90)},
	'an index' => q{CREATE INDEX inbox_extra ON inbox (received_at)},
	'a constraint' => q{ALTER TABLE inbox_consumers ADD CONSTRAINT extra CHECK (max_attempts < 1000)});
foreach my $what (sort keys %mutations)
{
	$node->safe_psql('postgres', 'DROP DATABASE IF EXISTS mutated');
	$node->safe_psql('postgres', 'CREATE DATABASE mutated');
	$node->safe_psql('mutated', "CREATE EXTENSION inbox; $mutations{$what}");
	isnt(schema('mutated'), $fresh, "the schema comparison sees $what changed");
}
$node->safe_psql('postgres', 'DROP DATABASE mutated');

foreach my $from (grep { version_key($_) lt version_key($current) } @releases)
{
	my $db = "from_" . ($from =~ s/\./_/gr);

	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION inbox VERSION '$from'");
	$node->safe_psql($db, q{SELECT inbox_claim('m-1', 'credit')});
	my $old_token = $node->safe_psql($db, q{SELECT inbox_begin('t-1', 'mail', lease => '1 hour')});

	# This library with that release's SQL, before the update: the
	# functions whose signatures changed work as they were declared (no
	# result column, three arguments), on a table without the new columns.
	is($node->safe_psql($db, q{SELECT * FROM inbox_begin_outcome('t-0', 'mail')}) =~ /^claimed\|\d+\|$/ ? 1 : 0,
		1, "$from: inbox_begin_outcome as $from declared it, before the update");
	my $t0 = $node->safe_psql($db, q{SELECT token FROM inbox WHERE message_id = 't-0'});
	is($node->safe_psql($db, "SELECT inbox_complete('t-0', 'mail', $t0)"), 't',
		"$from: inbox_complete with three arguments, before the update");
	is($node->safe_psql($db, q{SELECT * FROM inbox_begin_outcome('t-0', 'mail')}), 'processed||',
		"$from: a processed marker's outcome, before the update");

	$node->safe_psql($db, 'ALTER EXTENSION inbox UPDATE');
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'inbox'"),
		$current, "$from: updated to $current");
	is(schema($db), $fresh, "$from: the updated schema is a fresh install's");
	is(extconfig($db), extconfig('fresh'), "$from: the same relations registered for pg_dump");
	is($node->safe_psql($db, q{SELECT inbox_claim('m-1', 'credit')}), 'f',
		"$from: a marker made before the update still answers");
	is($node->safe_psql($db, "SELECT inbox_complete('t-1', 'mail', $old_token)"), 't',
		"$from: the claim begun before the update completes with its token");
	ok($node->safe_psql($db, q{SELECT inbox_begin('t-2', 'mail')}) > $old_token,
		"$from: a token drawn after the update is above every token before it");
	# Idempotency keys on markers made before the update: no result, no
	# fingerprint, so not checked; the new ones store and return theirs.
	is($node->safe_psql($db, q{SELECT * FROM inbox_claim_outcome('m-1', 'credit', 'fp')}), 'processed|',
		"$from: a marker made before the update is processed, not checked");
	is($node->safe_psql($db, q{SELECT * FROM inbox_begin_outcome('t-1', 'mail', fingerprint => 'fp')}),
		'processed|||', "$from: a claim completed across the update has no result");
	my $t3 = $node->safe_psql($db, q{SELECT token FROM inbox_begin_outcome('t-3', 'mail', fingerprint => 'fp')});
	$node->safe_psql($db, qq{SELECT inbox_complete('t-3', 'mail', $t3, '{"ok": true}')});
	is($node->safe_psql($db, q{SELECT inbox_result('t-3', 'mail')}), '{"ok": true}',
		"$from: a result stored after the update");
	is($node->safe_psql($db, q{SELECT outcome FROM inbox_begin_outcome('t-3', 'mail', fingerprint => 'other')}),
		'mismatch', "$from: a fingerprint checked after the update");
}

# The roles granted EXECUTE on a function the update drops and creates
# again (a new signature) keep it on the new one, with its grant option;
# no one else gets it.
$node->safe_psql('postgres', 'CREATE ROLE regress_worker; CREATE ROLE "Mixed Case"; CREATE ROLE regress_other');
foreach my $from (grep { version_key($_) lt version_key($current) } @releases)
{
	my $db = "grants_" . ($from =~ s/\./_/gr);

	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION inbox VERSION '$from';
		GRANT EXECUTE ON FUNCTION inbox_complete(text, text, bigint) TO regress_worker;
		GRANT EXECUTE ON FUNCTION inbox_begin_outcome(text, text, interval, jsonb)
			TO regress_worker, "Mixed Case" WITH GRANT OPTION;
	});
	$node->safe_psql($db, 'ALTER EXTENSION inbox UPDATE');
	is( $node->safe_psql($db, q{
		SELECT r, f, has_function_privilege(r, f, 'EXECUTE'),
			   has_function_privilege(r, f, 'EXECUTE WITH GRANT OPTION')
		FROM unnest(ARRAY['regress_worker', 'Mixed Case', 'regress_other', 'public']) r,
			 unnest(ARRAY['inbox_complete(text, text, bigint, jsonb)',
						  'inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz)']) f
		ORDER BY 1, 2}),
		join("\n",
			'Mixed Case|inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz)|t|t',
			'Mixed Case|inbox_complete(text, text, bigint, jsonb)|f|f',
			'public|inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz)|f|f',
			'public|inbox_complete(text, text, bigint, jsonb)|f|f',
			'regress_other|inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz)|f|f',
			'regress_other|inbox_complete(text, text, bigint, jsonb)|f|f',
			'regress_worker|inbox_begin_outcome(text, text, interval, jsonb, text, timestamptz)|t|t',
			'regress_worker|inbox_complete(text, text, bigint, jsonb)|t|f'),
		"$from: the grants on the functions the update replaced carry over");
	$node->safe_psql('postgres', "DROP DATABASE $db");
}

$node->stop;
done_testing();
