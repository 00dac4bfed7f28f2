# The maintenance worker runs user code as the inbox table's owner, never
# as a superuser: a table owner who is not a superuser adds a trigger, then
# an index expression, a rule, then a deferred trigger, that try to make it
# a superuser during the worker's reclaim.  And the worker's figures are shown to whom they concern: a
# grantee sees its own database's, pg_monitor every database's, and
# pg_monitor may read inbox_stats.
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
	ALTER TABLE ext.inbox OWNER TO attacker;
	GRANT SELECT ON ext.inbox_consumers TO attacker;
	GRANT EXECUTE ON FUNCTION ext.inbox_worker_status() TO watcher;
	-- Two claims, with leases long enough to outlive the set-up.
	SELECT ext.inbox_begin('job-1', 'jobs', interval '1 hour');
	SELECT ext.inbox_begin('job-2', 'jobs', interval '1 hour');
	SELECT ext.inbox_begin('job-3', 'jobs', interval '1 hour');
	SELECT ext.inbox_begin('job-4', 'jobs', interval '1 hour');
});

# spy() notes who runs it, and tries to make the attacker a superuser.
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
	},
	extra_params => [ '-U', 'attacker' ]);

# expire($message): the attacker expires a claim's lease (running its own
# code as itself), and forgets what it saw so far.
sub expire
{
	my ($message) = @_;
	$node->safe_psql(
		'app', qq{
		UPDATE ext.inbox SET lease_until = now() - interval '1 second'
			WHERE message_id = '$message';
		TRUNCATE att.seen;
	},
		extra_params => [ '-U', 'attacker' ]);
}

# reclaimed($message, $via): wait for the worker to reclaim the claim, and
# check who ran the attacker's code.
sub reclaimed
{
	my ($message, $via) = @_;
	ok( $node->poll_query_until(
			'app', qq{
			SELECT state = 'released' FROM ext.inbox WHERE message_id = '$message'}),
		"$via: the worker reclaims the claim")
	  or diag $node->safe_psql('app', 'SELECT * FROM ext.inbox_worker_status()');
	is( $node->safe_psql(
			'app', qq{SELECT string_agg(DISTINCT who, ',') FROM att.seen WHERE via = '$via'}),
		'attacker', "$via: the worker ran it as the table's owner");
	is( $node->safe_psql(
			'postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}),
		'f', "$via: the attacker did not become a superuser");
	# (Should it have, the rest of the test still needs it not to be.)
	$node->safe_psql('postgres', 'ALTER ROLE attacker NOSUPERUSER');
}

expire('job-1');
reclaimed('job-1', 'trigger');

# An index expression: an IMMUTABLE function that calls the spy.  (An
# index goes in its table's schema, which takes CREATE there: granted for
# the moment.)
$node->safe_psql('app', 'GRANT CREATE ON SCHEMA ext TO attacker');
$node->safe_psql(
	'app', q{
	DROP TRIGGER spy ON ext.inbox;
	CREATE FUNCTION att.key(s ext.inbox_state) RETURNS int
		LANGUAGE plpgsql IMMUTABLE AS $$
	BEGIN
		PERFORM att.spy('index');
		RETURN 0;
	END
	$$;
	CREATE INDEX spy ON ext.inbox (att.key(state));
	},
	extra_params => [ '-U', 'attacker' ]);
$node->safe_psql('app', 'REVOKE CREATE ON SCHEMA ext FROM attacker');
expire('job-2');
reclaimed('job-2', 'index');

# A rule.
$node->safe_psql(
	'app', q{
	DROP INDEX ext.spy;
	CREATE RULE spy AS ON UPDATE TO ext.inbox DO ALSO SELECT att.spy('rule');
	},
	extra_params => [ '-U', 'attacker' ]);
expire('job-3');
reclaimed('job-3', 'rule');

# A deferred constraint trigger, which would fire at COMMIT, after the
# batch, with the worker's own rights: core refuses to queue it within a
# security-restricted operation, so the pass fails (the owner's doing), and
# says why.
$node->safe_psql(
	'app', q{
	DROP RULE spy ON ext.inbox;
	CREATE FUNCTION att.at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM att.spy('deferred');
		RETURN NULL;
	END
	$$;
	CREATE CONSTRAINT TRIGGER spy AFTER UPDATE ON ext.inbox
		DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION att.at_commit();
	},
	extra_params => [ '-U', 'attacker' ]);
expire('job-4');
ok( $node->poll_query_until(
		'app', q{
		SELECT last_error = 'cannot fire deferred trigger within security-restricted operation'
		FROM ext.inbox_worker_status() WHERE database = 'app'}),
	'deferred: the pass fails, and says why')
  or diag $node->safe_psql('app', 'SELECT * FROM ext.inbox_worker_status()');
is($node->safe_psql('app', 'SELECT count(*) FROM att.seen'),
	'0', 'deferred: the trigger did not run');
is( $node->safe_psql(
		'postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}),
	'f', 'deferred: the attacker did not become a superuser');

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
my ($ret, $out, $err) = $node->psql(
	'postgres', q{SELECT count(*) FROM inbox_stats},
	extra_params => [ '-U', 'monitor' ]);
is($ret, 0, 'pg_monitor reads inbox_stats') or diag $err;

$node->stop;
done_testing();
