# Issue 35, finding 5: inbox.lease and inbox.max_attempts apply to every
# claim made where they are set, so only a superuser (or a role a
# superuser granted SET on the parameter) sets them.  A database owner
# who is not a superuser can no longer shorten every session's lease or
# fail every claim after one attempt with ALTER DATABASE ... SET.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('claim_settings');
$node->init;
$node->append_conf('postgresql.conf', q{shared_preload_libraries = 'inbox'});
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE ROLE owner LOGIN;
	CREATE ROLE app LOGIN;
	CREATE DATABASE shop OWNER owner;
});
$node->safe_psql(
	'shop', q{
	CREATE SCHEMA ext;
	CREATE EXTENSION inbox SCHEMA ext;
	GRANT USAGE ON SCHEMA ext TO app;
	GRANT EXECUTE ON FUNCTION ext.inbox_begin(text, text, interval, jsonb),
		ext.inbox_fail(text, text, bigint, text) TO app;
	GRANT SELECT, INSERT, UPDATE ON ext.inbox TO app;
	GRANT SELECT ON ext.inbox_consumers TO app;
	GRANT USAGE ON SEQUENCE ext.inbox_token_seq TO app;
});

# The database owner tries, for every session of its database, and for
# its own role.
foreach my $setting ([ 'inbox.lease', q{'1s'} ], [ 'inbox.max_attempts', '1' ])
{
	my ($name, $value) = @$setting;
	foreach my $target ('DATABASE shop', 'ROLE owner')
	{
		my ($ret, $out, $err) = $node->psql('shop',
			"ALTER $target SET $name = $value",
			extra_params => [ '-U', 'owner' ]);
		like($err, qr/permission denied to set parameter "\Q$name\E"/,
			"the database owner cannot ALTER $target SET $name");
	}
	my ($ret, $out, $err) = $node->psql('shop', "SET $name = $value",
		extra_params => [ '-U', 'app' ]);
	like($err, qr/permission denied to set parameter "\Q$name\E"/,
		"an application role cannot SET $name");
}
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_db_role_setting WHERE array_to_string(setconfig, ',') ~ 'inbox'}),
	'0', 'nothing was stored');

# The application's claims get the server's defaults: a lease of 5
# minutes, and a failure releases the claim for another attempt.
my $token = $node->safe_psql('shop',
	q{SELECT ext.inbox_begin('m-1', 'mail')}, extra_params => [ '-U', 'app' ]);
is( $node->safe_psql('shop',
		q{SELECT lease_until - received_at BETWEEN interval '4 min' AND interval '6 min'
		  FROM ext.inbox WHERE message_id = 'm-1'}),
	't', 'a claim gets the server\'s lease');
$node->safe_psql('shop', qq{SELECT ext.inbox_fail('m-1', 'mail', $token, 'boom')},
	extra_params => [ '-U', 'app' ]);
is($node->safe_psql('shop', q{SELECT state FROM ext.inbox WHERE message_id = 'm-1'}),
	'released', 'a first failure releases the claim: max_attempts is the server\'s');

# A superuser may choose them for a database, or let a role choose them.
$node->safe_psql('postgres', q{ALTER DATABASE shop SET inbox.lease = '10min'});
is($node->safe_psql('shop', 'SHOW inbox.lease', extra_params => [ '-U', 'app' ]),
	'10min', 'a superuser sets them for a database');
$node->safe_psql('postgres', q{GRANT SET ON PARAMETER inbox.max_attempts TO owner});
my ($ret, $out, $err) = $node->psql('shop',
	q{ALTER DATABASE shop SET inbox.max_attempts = 3},
	extra_params => [ '-U', 'owner' ]);
is($ret, 0, 'or grants a role SET on one') or diag $err;

$node->stop;
done_testing();
