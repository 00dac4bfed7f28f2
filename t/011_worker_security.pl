# The maintenance worker never runs user code as a superuser: a table owner
# who is not a superuser adds a trigger, an index expression and a rule
# that try to make it a superuser during the worker's reclaim, and the
# worker skips the database instead; on a table a superuser owns, no
# trigger fires in the worker (t/031 has the grantee's), and what does run
# (a CHECK) runs as that owner in a security-restricted operation.  And the
# worker's figures are shown to whom they concern: a grantee sees its own
# database's, pg_monitor every database's, and pg_monitor may read
# inbox_stats.
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
});
$node->start;

# The attacker owns the database and, handed over by a superuser, the
# inbox table; the extension lives in a schema a superuser owns.
$node->safe_psql(
	'postgres', q{
	CREATE ROLE attacker LOGIN;
	CREATE ROLE watcher LOGIN;
	CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
	CREATE DATABASE app OWNER attacker;
	CREATE EXTENSION inbox;
});
$node->safe_psql(
	'app', q{
	CREATE SCHEMA ext;
	CREATE EXTENSION inbox SCHEMA ext;
	GRANT USAGE ON SCHEMA ext TO attacker, watcher;
	GRANT EXECUTE ON FUNCTION ext.inbox_worker_status() TO watcher;
	-- A claim, with a lease long enough to outlive the set-up.
	SELECT ext.inbox_begin('job-1', 'jobs', interval '1 hour');
	ALTER TABLE ext.inbox OWNER TO attacker;
	GRANT CREATE ON SCHEMA ext TO attacker;
});

# spy() notes who runs it, and tries to make the attacker a superuser; the
# attacker attaches it to the table as a trigger, an index expression and a
# rule.
$node->safe_psql(
	'app', q{
	CREATE SCHEMA att;
	CREATE TABLE att.seen (via text, who name);
	CREATE FUNCTION att.spy(via text) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO att.seen VALUES (via, current_user);
		BEGIN
			ALTER ROLE attacker SUPERUSER;
		EXCEPTION WHEN insufficient_privilege THEN
			NULL;
		END;
	END
	$$;
	CREATE FUNCTION att.on_update() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM att.spy('trigger');
		RETURN NEW;
	END
	$$;
	CREATE TRIGGER spy BEFORE UPDATE ON ext.inbox
		FOR EACH ROW EXECUTE FUNCTION att.on_update();
	CREATE FUNCTION att.key(s ext.inbox_state) RETURNS int
		LANGUAGE plpgsql IMMUTABLE AS $$
	BEGIN
		PERFORM att.spy('index');
		RETURN 0;
	END
	$$;
	CREATE INDEX spy ON ext.inbox (att.key(state));
	CREATE RULE spy AS ON UPDATE TO ext.inbox DO ALSO SELECT att.spy('rule');
	UPDATE ext.inbox SET lease_until = now() - interval '1 second'
		WHERE message_id = 'job-1';
	TRUNCATE att.seen;
	},
	extra_params => [ '-U', 'attacker' ]);

# The worker will not serve a database whose extension objects a role
# that is not a superuser owns: it says so, once a pass, and runs nothing.
my $log_offset = -s $node->logfile;
ok( $node->wait_for_log(qr/WARNING:  inbox worker skips database "app"/, $log_offset),
	'the worker skips the database, with a warning');
$node->wait_for_log(qr/WARNING:  inbox worker skips database "app"/, -s $node->logfile);
is($node->safe_psql('app', 'SELECT count(*) FROM att.seen'),
	'0', "the worker ran none of the owner's code");
is($node->safe_psql('app', q{SELECT state FROM ext.inbox WHERE message_id = 'job-1'}),
	'claimed', 'and changed nothing');
# Nor does a superuser's session run it through the extension.
my ($ret, $out, $err) = $node->psql('app', 'SELECT ext.inbox_reclaim()');
like($err, qr/is owned by a role that is not a superuser/,
	"a superuser's inbox_reclaim() refuses too");
is($node->safe_psql('app', 'SELECT count(*) FROM att.seen'),
	'0', "nothing of the owner's ran");
is( $node->safe_psql(
		'postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}),
	'f', 'the attacker did not become a superuser');
is( $node->safe_psql(
		'app', q{SELECT last_error FROM ext.inbox_worker_status() WHERE database = 'app'}),
	q{inbox worker skips database "app": the extension's schema or objects are controlled by a role that is not a superuser},
	'the status says why');

# Handed back to a superuser, without the attacker's additions, the
# worker serves the database again.  No trigger fires in its batches
# (session_replication_role = replica; t/031); what a superuser attached
# that still runs, a CHECK constraint here, runs as the table's owner in a
# security-restricted operation, as VACUUM runs an index expression.
$node->safe_psql(
	'app', q{
	ALTER TABLE ext.inbox OWNER TO postgres;
	DROP TRIGGER spy ON ext.inbox;
	DROP INDEX ext.spy;
	DROP RULE spy ON ext.inbox;
	CREATE FUNCTION att.restricted(s ext.inbox_state) RETURNS boolean
		LANGUAGE plpgsql VOLATILE AS $$
	BEGIN
		INSERT INTO att.seen VALUES ('restricted', current_user);
		CREATE TEMP TABLE probe (x int);
		RETURN true;
	EXCEPTION WHEN insufficient_privilege THEN
		INSERT INTO att.seen VALUES ('no temp table', current_user);
		RETURN true;
	END
	$$;
	ALTER TABLE ext.inbox ADD CONSTRAINT restricted
		CHECK (att.restricted(state)) NOT VALID;
	CREATE FUNCTION att.on_update_again() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO att.seen VALUES ('trigger', current_user);
		RETURN NEW;
	END
	$$;
	CREATE TRIGGER superusers BEFORE UPDATE ON ext.inbox
		FOR EACH ROW EXECUTE FUNCTION att.on_update_again();
	TRUNCATE att.seen;
});
ok( $node->poll_query_until(
		'app', q{SELECT state = 'released' FROM ext.inbox WHERE message_id = 'job-1'}),
	'the worker reclaims the claim again');
is( $node->safe_psql(
		'app', q{SELECT string_agg(via || ':' || who, ',' ORDER BY via) FROM att.seen}),
	'no temp table:postgres',
	"no trigger fires; a CHECK runs as the table's owner, in a security-restricted operation");
$node->safe_psql('app', 'DROP TRIGGER superusers ON ext.inbox');

# A pass that fails keeps its error in the status, cut to the status's
# size at a character boundary: here a message of two-byte characters.
$node->safe_psql(
	'app', q{
	CREATE OR REPLACE FUNCTION att.restricted(s ext.inbox_state) RETURNS boolean
		LANGUAGE plpgsql VOLATILE AS $$
	BEGIN
		RAISE EXCEPTION '%', repeat('é', 200);
	END
	$$;
	ALTER TABLE ext.inbox DROP CONSTRAINT restricted;
	SELECT ext.inbox_begin('job-5', 'jobs', interval '1 microsecond');
	ALTER TABLE ext.inbox ADD CONSTRAINT restricted
		CHECK (att.restricted(state)) NOT VALID;
});
ok( $node->poll_query_until(
		'app', q{SELECT last_error LIKE 'éé%' FROM ext.inbox_worker_status() WHERE database = 'app'}),
	'a failed pass records its error');
my $hex = $node->safe_psql('app',
	q{SELECT encode(convert_to(last_error, 'UTF8'), 'hex') FROM ext.inbox_worker_status() WHERE database = 'app'});
my $bytes = pack('H*', $hex);
ok(length($bytes) <= 255 && utf8::decode($bytes),
	'its error is cut at a character boundary: valid UTF-8, at most 255 bytes');
$node->safe_psql('app', 'ALTER TABLE ext.inbox DROP CONSTRAINT restricted');

# The worker's figures: a grantee without pg_read_all_stats sees its own
# database only; pg_monitor sees them all, and reads inbox_stats.
ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) = 2 FROM inbox_worker_status()
					  WHERE database IN ('app', 'postgres')}),
	'the worker reports both databases');
is( $node->safe_psql(
		'app', q{SELECT string_agg(database::text, ',') FROM ext.inbox_worker_status()},
		extra_params => [ '-U', 'watcher' ]),
	'app', 'a grantee sees the figures of its own database only');
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(database::text, ',' ORDER BY database) FROM inbox_worker_status()
		  WHERE database IN ('app', 'postgres')},
		extra_params => [ '-U', 'monitor' ]),
	'app,postgres', 'pg_monitor sees every database');
($ret, $out, $err) = $node->psql(
	'postgres', q{SELECT count(*) FROM inbox_stats},
	extra_params => [ '-U', 'monitor' ]);
is($ret, 0, 'pg_monitor reads inbox_stats') or diag $err;

$node->stop;
done_testing();
