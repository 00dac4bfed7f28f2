# A database owner who is not a superuser must not become one through the
# extension.  In PostgreSQL 15 the owner controls public (it belongs to
# pg_database_owner), so it can rename the schema and put a look-alike
# table with a trigger where the extension's was; a superuser's session or
# the maintenance worker that then wrote into it would run the trigger as
# a superuser.  The extension refuses to run from such a schema, and the
# supported install, a schema a superuser owns, gives the owner nothing to
# rename.  Each attack checks that the attacker is still not a superuser
# and that no decoy was written.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('security');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
inbox.lock_timeout = 200
});
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE ROLE mallory LOGIN;
	CREATE DATABASE shop OWNER mallory;
	CREATE DATABASE shop2 OWNER mallory;
});

# What an attack looks for: did mallory become superuser, did anything
# write the decoy?
sub mallory_is_superuser
{
	return $node->safe_psql('postgres',
		q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'});
}

# The decoy: a table of the extension's name, in a new public, whose
# trigger makes mallory a superuser if a superuser writes to it.
my $decoy = q{
	CREATE SCHEMA public;
	CREATE TABLE public.inbox (id bigint, message_id text, consumer text,
		state text, received_at timestamptz, processed_at timestamptz,
		token bigint, lease_until timestamptz, attempts int,
		last_error text, payload jsonb);
	CREATE TABLE public.inbox_consumers (consumer text PRIMARY KEY,
		retention interval, lease interval, max_attempts int);
	CREATE FUNCTION public.escalate() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
			ALTER ROLE mallory SUPERUSER;
		END IF;
		RETURN NEW;
	END $$;
	CREATE TRIGGER escalate BEFORE INSERT OR UPDATE ON public.inbox
		FOR EACH ROW EXECUTE FUNCTION public.escalate();
	CREATE TRIGGER escalate BEFORE INSERT OR UPDATE ON public.inbox_consumers
		FOR EACH ROW EXECUTE FUNCTION public.escalate();
	CREATE SEQUENCE public.inbox_token_seq;
	-- Bait for a reclaim pass: an expired claim.
	INSERT INTO public.inbox (id, message_id, consumer, state, received_at,
		token, lease_until, attempts)
	VALUES (1, 'bait', 'email', 'claimed', now(), 1, now() - interval '1 hour', 1);
};

# 1. The install in public of a database mallory owns is refused, by every
# function, for a superuser too.
$node->safe_psql('shop', 'CREATE EXTENSION inbox');
my ($ret, $out, $err) =
  $node->psql('shop', q{SELECT inbox_claim('m-1', 'credit')});
like($err, qr/which a role that is not a superuser controls/,
	'a claim is refused when the schema belongs to a database owner who is not a superuser');

# Mallory renames public and puts the decoy in its place.
my $log_offset = -s $node->logfile;
$node->safe_psql('shop', 'ALTER SCHEMA public RENAME TO public_old',
	extra_params => [ '-U', 'mallory' ]);
$node->safe_psql('shop', $decoy, extra_params => [ '-U', 'mallory' ]);

# 2. A superuser's session: inbox_configure (whose body once named the
# schema as text), a two-phase begin and a claim.
for my $call (
	q{SELECT public_old.inbox_configure('credit', max_attempts => 3)},
	q{SELECT public_old.inbox_begin('m-1', 'email', payload => '{"card": 1}')},
	q{SELECT public_old.inbox_claim('m-2', 'credit')},
	q{SELECT public_old.inbox_reclaim()})
{
	($ret, $out, $err) = $node->psql('shop', $call);
	isnt($ret, 0, "refused after the rename: $call");
}

# 3. The worker's passes in that database: skipped, with a warning.
ok( $node->wait_for_log(qr/inbox worker skips database "shop"/, $log_offset),
	'the worker reports the database it will not serve');

is(mallory_is_superuser(), 'f', 'mallory is not a superuser');
is( $node->safe_psql(
		'shop',
		q{SELECT (SELECT string_agg(message_id || ':' || state, ',') FROM public.inbox)
			|| ' ' || (SELECT count(*) FROM public.inbox_consumers)}
	),
	'bait:claimed 0',
	'nothing was written into the decoys');

# The supported install: a schema a superuser owns.  Mallory owns the
# database but cannot rename that schema or create in it.
$node->safe_psql(
	'shop2', q{
	CREATE SCHEMA inbox AUTHORIZATION postgres;
	CREATE EXTENSION inbox SCHEMA inbox;
	SELECT inbox.inbox_configure('short', retention => interval '1 hour');
	SELECT inbox.inbox_claim('old', 'short');
	UPDATE inbox.inbox SET processed_at = processed_at - interval '2 hours';
});
($ret, $out, $err) = $node->psql('shop2', 'ALTER SCHEMA inbox RENAME TO other',
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/must be owner of schema inbox/, 'the owner of the database cannot rename it');
($ret, $out, $err) = $node->psql('shop2', 'CREATE TABLE inbox.decoy ()',
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied for schema inbox/, 'nor create objects in it');

# It works, the worker included.
is($node->safe_psql('shop2', q{SELECT inbox.inbox_claim('m-1', 'credit')}),
	't', 'a superuser-owned schema serves claims');
ok($node->poll_query_until('shop2', 'SELECT count(*) = 0 FROM inbox.inbox WHERE message_id = \'old\''),
	'and the worker prunes there');
is(mallory_is_superuser(), 'f', 'mallory is still not a superuser');

# 3. An operator planted before CREATE EXTENSION, in a schema a superuser
# owns but where mallory may create objects (as in a cluster upgraded from
# PostgreSQL 14, whose public let everyone create), is not bound into
# inbox_stats, which a superuser then reads.
$node->safe_psql(
	'postgres', q{
	CREATE DATABASE shop3 OWNER postgres;
});
$node->safe_psql(
	'shop3', q{
	CREATE SCHEMA ext3 AUTHORIZATION postgres;
	GRANT USAGE, CREATE ON SCHEMA ext3 TO mallory;
	CREATE SCHEMA att AUTHORIZATION mallory;
	GRANT USAGE ON SCHEMA att TO PUBLIC;
});
$node->safe_psql(
	'shop3', q{
	-- Returns the middle of the schema name it hides in, so that the
	-- statement it is injected into goes on and commits.
	CREATE FUNCTION att.escalate() RETURNS text LANGUAGE plpgsql AS $f$
	BEGIN
		IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
			ALTER ROLE mallory SUPERUSER;
		END IF;
		RETURN $q$'||att.escalate()||'$q$;
	END $f$;
	CREATE FUNCTION ext3.hostile_eq(anyenum, text) RETURNS boolean
	LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM att.escalate();
		RETURN true;
	END $$;
	CREATE OPERATOR ext3.= (LEFTARG = anyenum, RIGHTARG = text,
							FUNCTION = ext3.hostile_eq);
	}, extra_params => [ '-U', 'mallory' ]);
$node->safe_psql(
	'shop3', q{
	CREATE EXTENSION inbox SCHEMA ext3;
	SELECT ext3.inbox_claim('m-1', 'credit');
	SELECT ext3.inbox_begin('m-2', 'email');
	SELECT * FROM ext3.inbox_stats;
});
is(mallory_is_superuser(), 'f',
	'a superuser reading inbox_stats runs no operator planted before the install');

# 4. A schema name that reads as SQL inside a string literal: a superuser
# named it (only a superuser may rename this schema), and the statements
# that draw tokens must not run what it says.
$node->safe_psql(
	'shop3', q{
	ALTER SCHEMA ext3 RENAME TO "x'||att.escalate()||'";
	UPDATE "x'||att.escalate()||'".inbox SET lease_until = now() - interval '1 second';
});
for my $call (
	q{SELECT "x'||att.escalate()||'".inbox_begin('m-2', 'email')},
	q{SELECT * FROM "x'||att.escalate()||'".inbox_next('email')})
{
	$node->safe_psql('shop3', $call);
}
is(mallory_is_superuser(), 'f',
	'a schema name with a quote injects nothing into inbox_begin or inbox_next');

done_testing();
