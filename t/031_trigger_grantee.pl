# Issue 35, finding 1: a role with the TRIGGER privilege on inbox (GRANT
# ALL includes it) attaches a trigger whose function is its own.  Neither
# the worker's passes nor a superuser's inbox_prune() or inbox_reclaim()
# fire it: they run with session_replication_role = replica.  What would
# fire anyway (a trigger enabled ALWAYS or REPLICA, a rule) and what that
# mode would skip that the data relies on (a foreign key) make the worker
# skip the database, with one warning naming it, and a superuser's pass
# refuse.  Anyone else's pass fires the trigger with its own rights.
#
# The attacker's function tries to make it a superuser and writes a decoy
# row; afterwards it is not one, and no decoy row exists.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('grantee');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'inbox'
inbox.naptime = 1
inbox.batch_delay = 0
});
$node->start;

$node->safe_psql(
	'postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE ops LOGIN;
	CREATE DATABASE shop;
	CREATE EXTENSION inbox;  -- for inbox_worker_status()
});
# The extension in a schema a superuser owns; the application role gets
# every privilege on the table, TRIGGER and REFERENCES among them, as
# "GRANT ALL ON ALL TABLES IN SCHEMA" gives them.
$node->safe_psql(
	'shop', q{
	CREATE SCHEMA ext;
	CREATE EXTENSION inbox SCHEMA ext;
	GRANT USAGE ON SCHEMA ext TO app, ops;
	GRANT ALL ON ALL TABLES IN SCHEMA ext TO app;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ext TO app;
	GRANT EXECUTE ON FUNCTION ext.inbox_prune(), ext.inbox_reclaim() TO ops;
	GRANT SELECT, UPDATE, DELETE ON ext.inbox TO ops;
	GRANT SELECT ON ext.inbox_consumers TO ops;
	CREATE SCHEMA att AUTHORIZATION app;
	SELECT ext.inbox_configure('short', retention => interval '1 hour');
});

# work(): 20 markers past their retention and an expired claim, inserted
# as they would be found later (no update, so no trigger fires).
my $round = 0;
sub work
{
	$round++;
	$node->safe_psql(
		'shop', qq{
		INSERT INTO ext.inbox (message_id, consumer, state, received_at, processed_at)
			SELECT 'r$round-' || g, 'short', 'processed', now() - interval '3 hours',
				now() - interval '2 hours'
			FROM generate_series(1, 20) g;
		INSERT INTO ext.inbox (message_id, consumer, state, received_at, token,
							   lease_until, attempts)
			VALUES ('job-$round', 'jobs', 'claimed', now() - interval '1 hour',
					nextval('ext.inbox_token_seq'), now() - interval '1 second', 1);
	});
}

# done(): wait until the worker (or a pass) has pruned and reclaimed it all.
sub done
{
	return $node->poll_query_until(
		'shop', q{SELECT count(*) = 0 FROM ext.inbox
				  WHERE consumer = 'short' OR state = 'claimed'});
}

sub attacker_is_superuser
{
	return $node->safe_psql('postgres',
		q{SELECT rolsuper FROM pg_roles WHERE rolname = 'app'});
}

sub decoys
{
	return $node->safe_psql('shop',
		q{SELECT coalesce(string_agg(via || ':' || who, ',' ORDER BY via, who), '')
		  FROM att.decoy});
}

# The attacker's trigger: on any update or delete of a row, and once per
# statement, it tries to become a superuser and leaves a decoy row.
$node->safe_psql(
	'shop', q{
	CREATE TABLE att.decoy (via text, who name);
	GRANT USAGE ON SCHEMA att TO PUBLIC;
	GRANT INSERT ON att.decoy TO PUBLIC;
	CREATE FUNCTION att.evil() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO att.decoy VALUES (TG_LEVEL || ' ' || TG_OP, current_user);
		BEGIN
			ALTER ROLE app SUPERUSER;
		EXCEPTION WHEN insufficient_privilege THEN
			NULL;
		END;
		IF TG_LEVEL = 'ROW' AND TG_OP = 'DELETE' THEN
			RETURN OLD;
		END IF;
		RETURN NEW;
	END
	$$;
	GRANT EXECUTE ON FUNCTION att.evil() TO PUBLIC;
	CREATE TRIGGER evil_row BEFORE UPDATE OR DELETE ON ext.inbox
		FOR EACH ROW EXECUTE FUNCTION att.evil();
	CREATE TRIGGER evil_statement AFTER UPDATE OR DELETE ON ext.inbox
		FOR EACH STATEMENT EXECUTE FUNCTION att.evil();
	},
	extra_params => [ '-U', 'app' ]);
is(decoys(), '', 'no decoy yet');

# The worker's passes.
work();
ok(done(), 'the worker prunes and reclaims');
is(attacker_is_superuser(), 'f', 'the attacker is not a superuser after the worker\'s passes');
is(decoys(), '', 'and the worker fired none of its triggers');
is( $node->safe_psql('shop',
		q{SELECT coalesce(last_error, '') FROM ext.inbox_worker_status() WHERE database = 'shop'}),
	'', 'the worker reports no error');

# A superuser's passes, with the worker kept out of the database; and a
# deferred trigger besides, fired at commit.
$node->safe_psql(
	'shop', q{
	CREATE CONSTRAINT TRIGGER evil_deferred AFTER UPDATE OR DELETE ON ext.inbox
		DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION att.evil();
	},
	extra_params => [ '-U', 'app' ]);
# (Two rounds of the launcher in "postgres" after the reload: the first
# may have started before it.)
my $passes = $node->safe_psql('postgres',
	q{SELECT passes FROM inbox_worker_status() WHERE database = 'postgres'});
$node->append_conf('postgresql.conf', q{inbox.databases = 'postgres'});
$node->reload;
$node->poll_query_until('postgres',
	qq{SELECT passes >= $passes + 2 FROM inbox_worker_status() WHERE database = 'postgres'});
work();
is($node->safe_psql('shop', q{
		SELECT ext.inbox_reclaim();
		SELECT ext.inbox_prune();
		SHOW session_replication_role;
	}),
	"1\n20\norigin",
	"a superuser's inbox_reclaim() reclaims, its inbox_prune() prunes, and its session is left as it was");
is(attacker_is_superuser(), 'f', "the attacker is not a superuser after a superuser's passes");
is(decoys(), '', "and a superuser's passes fired none of its triggers");

# The same for a superuser's inbox_configure(), which writes
# inbox_consumers: the grantee has TRIGGER on that table too.
$node->safe_psql(
	'shop', q{
	CREATE TRIGGER evil_consumers BEFORE INSERT OR UPDATE ON ext.inbox_consumers
		FOR EACH ROW EXECUTE FUNCTION att.evil();
	},
	extra_params => [ '-U', 'app' ]);
$node->safe_psql('shop', q{
	SELECT ext.inbox_configure('short', retention => interval '1 hour');
	SELECT ext.inbox_configure('other', max_attempts => 3);
});
is(attacker_is_superuser(), 'f', "the attacker is not a superuser after a superuser's inbox_configure()");
is(decoys(), '', "which fired none of its triggers");
is($node->safe_psql('shop', q{SELECT max_attempts FROM ext.inbox_consumers WHERE consumer = 'other'}),
	'3', 'and configured the consumer');

# A superuser's operator decisions (docs/operations.md) are maintenance
# too: retry and discard, one by one and in bulk, fire none of the
# triggers.  Failed claims inserted as found later.
$node->safe_psql(
	'shop', q{
	INSERT INTO ext.inbox (message_id, consumer, state, received_at, processed_at,
						   token, attempts, last_error)
		SELECT 'f-' || g, 'ops', 'failed', now() - interval '1 hour', now(),
			nextval('ext.inbox_token_seq'), 5, 'boom'
		FROM generate_series(1, 4) g;
});
# In one session, with a refused decision (f-1 is no longer failed) rolled
# back to a savepoint: the session's mode is origin after each.
my (undef, $decided, $refused) = $node->psql(
	'shop', q{
	SELECT ext.inbox_retry('f-1', 'ops');
	SELECT ext.inbox_discard('f-2', 'ops', 'refunded by hand');
	SELECT count(*) FROM ext.inbox_retry_failed('ops', error_like => 'boom', max => 1);
	SELECT count(*) FROM ext.inbox_discard_failed('ops', 'refunded by hand');
	SHOW session_replication_role;
	BEGIN;
	SAVEPOINT s;
	SELECT ext.inbox_retry('f-1', 'ops');
	ROLLBACK TO s;
	SHOW session_replication_role;
	COMMIT;
},
	on_error_stop => 0);
like($refused, qr/marker of message "f-1" for consumer "ops" is not a failed claim/,
	'a decision on a claim that is not failed is refused');
is($decided, "\n\n1\n1\norigin\norigin",
	"the superuser's session is left as it was, after a refused decision too");
is($node->safe_psql('shop',
		q{SELECT string_agg(state::text, ',' ORDER BY message_id) FROM ext.inbox WHERE consumer = 'ops'}),
	'released,processed,released,processed', "a superuser's retries and discards apply");
is(attacker_is_superuser(), 'f', "the attacker is not a superuser after a superuser's decisions");
is(decoys(), '', "which fired none of its triggers");

# Anyone else's pass fires the triggers with its own rights, like any of
# its statements.
work();
is($node->safe_psql('shop', 'SELECT ext.inbox_reclaim()', extra_params => [ '-U', 'ops' ]),
	'1', "another role's inbox_reclaim() reclaims");
is(decoys(), 'ROW UPDATE:ops,ROW UPDATE:ops,STATEMENT UPDATE:ops',
	'and fires the triggers as that role');
is(attacker_is_superuser(), 'f', 'which gives the attacker nothing');
$node->safe_psql('shop', 'TRUNCATE att.decoy');
$node->safe_psql('shop', 'SELECT ext.inbox_prune()');

# The attacker cannot make its trigger fire in replica mode: that takes
# the table's owner.
my ($ret, $out, $err) = $node->psql('shop',
	'ALTER TABLE ext.inbox ENABLE ALWAYS TRIGGER evil_row',
	extra_params => [ '-U', 'app' ]);
like($err, qr/must be owner of table inbox/, 'the attacker cannot enable its trigger ALWAYS');

# What fires anyway, or what the mode would skip, stops the worker: one
# warning naming it, the status says so, nothing fires, nothing changes.
# refused($what, $pattern, $setup, $user): $setup (run as $user) makes the
# table so; then work to do is added (by inserts, which fire nothing).
$node->append_conf('postgresql.conf', q{inbox.databases = ''});
$node->reload;
sub refused
{
	my ($what, $pattern, $setup, $user) = @_;
	$node->safe_psql('shop', $setup, extra_params => [ '-U', $user ]);
	work();
	my $offset = -s $node->logfile;
	ok( $node->wait_for_log(
			qr/WARNING:  inbox worker skips database "shop": $pattern/, $offset),
		"$what: the worker skips the database, with a warning naming it");
	ok( $node->poll_query_until('shop',
			qq{SELECT last_error ~ '$pattern' FROM ext.inbox_worker_status() WHERE database = 'shop'}),
		"$what: the status says why");
	my ($r, $o, $e) = $node->psql('shop', 'SELECT ext.inbox_reclaim()');
	like($e, qr/inbox_reclaim\(\) refuses to run as a superuser: $pattern/,
		"$what: a superuser's inbox_reclaim() refuses");
	($r, $o, $e) = $node->psql('shop', 'SELECT ext.inbox_prune()');
	like($e, qr/inbox_prune\(\) refuses to run as a superuser: $pattern/,
		"$what: a superuser's inbox_prune() refuses");
	($r, $o, $e) = $node->psql('shop', q{SELECT ext.inbox_retry('job-1', 'jobs')});
	like($e, qr/inbox_retry\(\) refuses to run as a superuser: $pattern/,
		"$what: a superuser's inbox_retry() refuses");
	is($node->safe_psql('shop',
			q{SELECT count(*) FROM ext.inbox WHERE consumer = 'short' OR state = 'claimed'}),
		'21', "$what: nothing pruned or reclaimed");
	is(decoys(), '', "$what: nothing fired");
	is(attacker_is_superuser(), 'f', "$what: the attacker is not a superuser");
}

refused('a trigger enabled ALWAYS',
	'trigger "evil_row" on table "inbox" is enabled ALWAYS',
	'ALTER TABLE ext.inbox ENABLE ALWAYS TRIGGER evil_row', 'postgres');
$node->safe_psql('shop', 'ALTER TABLE ext.inbox ENABLE TRIGGER evil_row');
ok(done(), 'made to fire on origin only, the trigger no longer stops the worker');
is(decoys(), '', 'and does not fire in it');

refused('a trigger enabled REPLICA',
	'trigger "evil_statement" on table "inbox" is enabled REPLICA',
	'ALTER TABLE ext.inbox ENABLE REPLICA TRIGGER evil_statement', 'postgres');
$node->safe_psql('shop', 'ALTER TABLE ext.inbox ENABLE TRIGGER evil_statement');
ok(done(), 'the worker serves the database again');

# A foreign key from the attacker's table: in replica mode its checks
# would not run, and a pruned marker would leave a dangling reference.
refused('a foreign key', 'foreign key "orders_message_id_consumer_fkey" involves table "inbox"',
	q{CREATE TABLE att.orders (message_id text COLLATE "C", consumer text COLLATE "C",
		FOREIGN KEY (message_id, consumer) REFERENCES ext.inbox)}, 'app');
$node->safe_psql('shop', 'DROP TABLE att.orders');
ok(done(), 'the worker serves the database again');

# A rule, which only the owner can add.
refused('a rule', 'rule "keep" on table "inbox" is enabled',
	q{CREATE RULE keep AS ON DELETE TO ext.inbox WHERE old.consumer = 'nobody' DO INSTEAD NOTHING},
	'postgres');
$node->safe_psql('shop', 'DROP RULE keep ON ext.inbox');
ok(done(), 'without them, the worker serves the database again');
is(decoys(), '', 'still firing nothing');
is(attacker_is_superuser(), 'f', 'the attacker never became a superuser');

$node->stop;
done_testing();
