# Upgrading PostgreSQL keeps the inbox.  A cluster of an older major gets
# markers, live two-phase claims and a history of tokens (a takeover
# draws a second token for its claim); then, on the major this suite runs
# on:
#
#  - dump and restore: the old cluster dumped with this major's pg_dump
#    (the documented way) and restored into a new cluster;
#  - pg_upgrade: the old cluster upgraded in place (--copy);
#
# and on each result every marker survives column for column, live claims
# keep their tokens, the next token is above every old one, and (after
# pg_upgrade) the worker starts.
#
# Each needs an older installation with the extension installed in it,
# named by the directory above its bin/: INBOX_DUMP_FROM for the first,
# INBOX_UPGRADE_FROM for the second.  "make test-all" sets both when it
# runs the newest major (docs/architecture.md, Per major, says which
# majors and why); without them the test is skipped.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my %from = (
	dump => $ENV{INBOX_DUMP_FROM},
	upgrade => $ENV{INBOX_UPGRADE_FROM});
for my $way (keys %from)
{
	delete $from{$way}
	  unless defined $from{$way} && -x "$from{$way}/bin/postgres";
}
plan skip_all => 'neither INBOX_DUMP_FROM nor INBOX_UPGRADE_FROM names an older installation'
  unless %from;

my $conf = q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
};

# Every marker, as text, to compare across clusters.
my $markers_sql = q{
	SELECT string_agg(concat_ws(':', id, message_id, consumer, state,
								token, attempts, received_at, processed_at,
								lease_until, last_error), ',' ORDER BY id)
	FROM inbox};

# old_cluster(NAME, INSTALL): an old cluster with an inbox in database app,
# running; returns it, the markers as text, the highest token, and the
# live claims as "message=token" pairs.
sub old_cluster
{
	my ($name, $install) = @_;
	my $old = PostgreSQL::Test::Cluster->new($name, install_path => $install);

	$old->init;
	$old->append_conf('postgresql.conf', $conf);
	$old->start;
	$old->safe_psql('postgres', 'CREATE DATABASE app');

	# Leases of an hour, so that no claim expires during the test.
	$old->safe_psql(
		'app', q{
		CREATE EXTENSION inbox;
		SELECT inbox_configure('email', lease => interval '1 hour');
		SELECT inbox_claim('m-' || g, 'credit') FROM generate_series(1, 50) g;
		SELECT count(*) FROM inbox_claim_many(ARRAY['b-1', 'b-2'], 'audit');
		SELECT inbox_begin('e-' || g, 'email') FROM generate_series(1, 6) g;
		SELECT inbox_complete('e-1', 'email', token) FROM inbox WHERE message_id = 'e-1';
		SELECT inbox_fail('e-2', 'email', token, 'boom') FROM inbox WHERE message_id = 'e-2';
	});

	# A takeover: the expired claim of e-3 gets a second token.
	$old->safe_psql(
		'app', q{
		UPDATE inbox SET lease_until = now() - interval '1 second'
		WHERE message_id = 'e-3';
		SELECT inbox_begin('e-3', 'email');
	});

	my $markers = $old->safe_psql('app', $markers_sql);
	my $max_token = $old->safe_psql('app', 'SELECT max(token) FROM inbox');
	my @live = split /,/,
	  $old->safe_psql('app',
		q{SELECT string_agg(message_id || '=' || token, ',' ORDER BY message_id)
		  FROM inbox WHERE state = 'claimed'});
	is(scalar(@live), 4, "$name: four live claims on the old cluster");
	cmp_ok($max_token, '>', 6, "$name: the takeover drew another token");
	return ($old, $markers, $max_token, @live);
}

# check(NODE, DATABASE, WHAT, MARKERS, MAX_TOKEN, LIVE...): the inbox came
# through.
sub check
{
	my ($node, $db, $what, $markers, $max_token, @live) = @_;

	is($node->safe_psql($db, $markers_sql),
		$markers, "$what: every marker survives, column for column");
	for my $claim (@live)
	{
		my ($message, $token) = split /=/, $claim;
		is( $node->safe_psql($db,
				"SELECT inbox_complete('$message', 'email', $token)"),
			't',
			"$what: the live claim of $message completes with its old token $token");
	}
	cmp_ok($node->safe_psql($db, q{SELECT inbox_begin('e-new', 'email')}),
		'>', $max_token, "$what: the next token is above every old one");
	is($node->safe_psql($db, q{SELECT inbox_claim('m-1', 'credit')}),
		'f', "$what: an old marker still deduplicates");
}

# The new cluster, on this suite's major.  18's initdb turns data
# checksums on by default; pg_upgrade needs them as the old cluster has
# them (off).
my $new = PostgreSQL::Test::Cluster->new('new');
$new->init(extra => $new->pg_version >= 18 ? ['--no-data-checksums'] : []);
$new->append_conf('postgresql.conf', $conf);

if ($from{upgrade})
{
	my ($old, $markers, $max_token, @live) =
	  old_cluster('upgrade_from', $from{upgrade});
	$old->stop;

	my $dir = $new->basedir . '/upgrade';
	mkdir $dir;
	chdir $dir;
	command_ok(
		[
			'pg_upgrade', '--no-sync',
			'-d', $old->data_dir, '-D', $new->data_dir,
			'-b', "$from{upgrade}/bin", '-B', $new->config_data('--bindir'),
			'-s', $new->host, '-p', $old->port, '-P', $new->port,
			'--copy'
		],
		'pg_upgrade from ' . $old->pg_version);
	$new->start;
	check($new, 'app', 'pg_upgrade', $markers, $max_token, @live);
	ok( $new->poll_query_until(
			'postgres', q{
			SELECT count(*) = 2 FROM pg_stat_activity
			WHERE backend_type IN ('inbox launcher', 'inbox worker app')}),
		'pg_upgrade: the launcher and the database\'s worker start');
}
else
{
	$new->start;
}

if ($from{dump})
{
	my ($old, $markers, $max_token, @live) =
	  old_cluster('dump_from', $from{dump});
	my $dump = $new->basedir . '/app.dump';
	command_ok(
		[
			'pg_dump', '-Fc', '-f', $dump, '-d', 'app',
			'-h', $old->host, '-p', $old->port
		],
		'pg_dump ' . $new->pg_version . ' dumps ' . $old->pg_version);
	$old->stop;

	$new->safe_psql('postgres', 'CREATE DATABASE restored');
	command_ok(
		[
			'pg_restore', '-d', 'restored', '-h', $new->host,
			'-p', $new->port, $dump
		],
		'the dump restores into ' . $new->pg_version);
	check($new, 'restored', 'dump and restore', $markers, $max_token, @live);
}

$new->stop;
done_testing();
