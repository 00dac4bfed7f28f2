# The README's Privileges section and docs/privileges.md, run as written.
# Every ```sql block of them sits between <!-- privileges:NAME --> and
# <!-- /privileges:NAME --> markers; this test runs each recipe verbatim
# against a throwaway server and checks what the section says of it:
#
#	- without row-level security the worker grants isolate nothing (a
#	  worker reads and updates another consumer's payload and last_error,
#	  and completes its claims) and let a worker lock the whole table;
#	- with the per-consumer FOR ALL policies, a consumer's role can claim,
#	  begin, extend, complete, fail, take with inbox_next, read and update
#	  its own consumer's rows, and none of another's, under READ
#	  COMMITTED, REPEATABLE READ and SERIALIZABLE; its own completion
#	  returns true, where the INSERT and SELECT policies this README once
#	  recommended made it false;
#	- the maintenance role prunes and reclaims, and needs its policy;
#	- the operator role retries and discards failed claims, recorded
#	  under its login's name, and a consumer's role may not;
#	- the monitoring role reads inbox_stats, which shows what row security
#	  lets the reader see;
#	- the column grants refuse LOCK TABLE and keep the isolation;
#	- pg_dump keeps the grants but not the policies;
#	- once row security is on, a member of inbox_app alone (the README's
#	  orders_service) can claim nothing, as docs/privileges.md warns;
#	- every recipe runs again as it is, in the same database and in a
#	  second one (roles belong to the whole server).
use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# ---------------------------------------------------------------------------
# The recipes, from README.md (at the top of the tree this test runs in).

# The one-phase recipe is in the README's Privileges section, the others
# in docs/privileges.md; every SQL block of both is a marked recipe.
my $readme = slurp_file("$FindBin::RealBin/../README.md");
my ($readme_section) = $readme =~ /^## Privileges\n(.*?)^## /ms
  or die "README.md has no Privileges section";
my $section =
  $readme_section . slurp_file("$FindBin::RealBin/../docs/privileges.md");

my %recipe;
my $marked_blocks = 0;
while ($section =~ /<!-- privileges:([\w-]+) -->\n(.*?)<!-- \/privileges:\1 -->/gs)
{
	my ($name, $body) = ($1, $2);
	my @blocks = $body =~ /^```sql\n(.*?)^```\n/gms;
	die "recipe $name has no sql block" unless @blocks;
	die "recipe $name appears twice" if exists $recipe{$name};
	$recipe{$name} = join('', @blocks);
	$marked_blocks += @blocks;
}
my $all_blocks = () = $section =~ /^```sql$/gm;
is($marked_blocks, $all_blocks,
	'every SQL block of the privileges recipes is marked, and run here');
is_deeply(
	[ sort keys %recipe ],
	[
		sort qw(app login worker columns consumer-roles consumer-policies
		  maintenance operator monitoring)
	],
	'the recipes this test knows');

# ---------------------------------------------------------------------------
# A server, and the install the recipes are written for.

my $node = PostgreSQL::Test::Cluster->new('privileges');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'inbox'\ninbox.naptime = '1d'\n");
$node->start;

my $db = 'app';
$node->safe_psql('postgres', "CREATE DATABASE $db");
$node->safe_psql($db, q{
	CREATE SCHEMA inbox AUTHORIZATION CURRENT_ROLE;
	CREATE EXTENSION inbox SCHEMA inbox;
});

# The monitoring recipe relies on the install script's grants to
# pg_monitor.
is( $node->safe_psql($db, q{
		SELECT has_table_privilege('pg_monitor', 'inbox.inbox_stats', 'SELECT')
		   AND has_function_privilege('pg_monitor', 'inbox.inbox_worker_status()', 'EXECUTE')
		   AND has_column_privilege('pg_monitor', 'inbox.inbox', 'state', 'SELECT')
		   AND NOT has_column_privilege('pg_monitor', 'inbox.inbox', 'payload', 'SELECT')}),
	't', 'the install script grants pg_monitor what the README says');

# The application's login role, which the README takes as existing.
$node->safe_psql($db, 'CREATE ROLE orders_service LOGIN');

foreach my $name (qw(app login worker consumer-roles maintenance operator monitoring))
{
	my ($ret, $out, $err) = $node->psql($db, $recipe{$name});
	is($ret, 0, "recipe $name runs as written") or diag $err;
}

# Login roles, as an application would have them: members of the recipes'
# group roles, with the search_path the README suggests.  The consumers'
# roles make one-phase claims as well, to check those under the policies.
$node->safe_psql($db, q{
	CREATE ROLE credit_svc LOGIN IN ROLE credit_worker, inbox_app;
	CREATE ROLE email_svc LOGIN IN ROLE email_worker, inbox_app;
	CREATE ROLE maint_svc LOGIN IN ROLE inbox_maintenance;
	CREATE ROLE ops_alice LOGIN IN ROLE inbox_operator;
	CREATE ROLE monitor_svc LOGIN IN ROLE inbox_monitor;
	ALTER ROLE credit_svc SET search_path = "$user", public, inbox;
	ALTER ROLE email_svc SET search_path = "$user", public, inbox;
	ALTER ROLE maint_svc SET search_path = "$user", public, inbox;
	ALTER ROLE monitor_svc SET search_path = "$user", public, inbox;
});

# ---------------------------------------------------------------------------
# Helpers.

my @levels = ('read committed', 'repeatable read', 'serializable');

# run($user, $level, $sql): the output of $sql run by $user, each statement
# in its own transaction at $level; 'ERROR: ...' if it failed.
sub run
{
	my ($user, $level, $sql) = @_;
	my ($out, $err);
	my $ret = $node->psql(
		$db,
		"SET default_transaction_isolation = '$level';\n$sql",
		stdout => \$out,
		stderr => \$err,
		extra_params => [ '-U', $user ]);
	if ($ret != 0)
	{
		my ($message) = $err =~ /(ERROR:.*)/;
		return $message // "failed: $err";
	}
	return $out;
}

# as_owner($sql): run by the superuser who created the extension.
sub as_owner
{
	return $node->safe_psql($db, shift);
}

# A new two-phase claim of $user's, with a payload; its token.
sub begin_claim
{
	my ($user, $level, $id, $consumer, $lease) = @_;
	$lease //= '5 minutes';
	my $token = run($user, $level,
		"SELECT inbox_begin('$id', '$consumer', '$lease', '{\"id\": \"$id\"}')");
	like($token, qr/^\d+$/, "$user begins $id ($level)");
	return $token;
}

# expire($id): the claim's lease ran out.
sub expire
{
	my $id = shift;
	as_owner("UPDATE inbox.inbox SET lease_until = now() - interval '1 minute'"
		  . " WHERE message_id = '$id'");
}

# Every column of a consumer's rows, as the owner sees them.
sub rows_of
{
	my $consumer = shift;
	return as_owner(qq{
		SELECT string_agg(concat_ws('|', message_id, state, token, attempts,
			lease_until, processed_at, payload, last_error), E'\\n' ORDER BY id)
		FROM inbox.inbox WHERE consumer = '$consumer'});
}

my $rls_error = qr/^ERROR:  new row violates row-level security policy for table "inbox"/;

# completes_own_claim($level, $tag): does a consumer's role complete its own
# claim?  The check the policies this README once recommended failed.
sub completes_own_claim
{
	my ($level, $tag) = @_;
	my $token = run('credit_svc', $level, "SELECT inbox_begin('own-$tag', 'credit')");
	return 0 unless $token =~ /^\d+$/;
	return run('credit_svc', $level,
		"SELECT inbox_complete('own-$tag', 'credit', $token)") eq 't';
}

# isolation($level, $tag): with the per-consumer policies, credit_svc does
# nothing to email's rows on any path, and everything to its own.
sub isolation
{
	my ($level, $tag) = @_;
	my $who = "(" . substr($tag, 1) . ")";

	# email's rows: a live claim, a released one with its error, an expired
	# one, a completed one.
	my $live = begin_claim('email_svc', $level, "e-live$tag", 'email');
	my $rel = begin_claim('email_svc', $level, "e-rel$tag", 'email');
	is(run('email_svc', $level, "SELECT inbox_fail('e-rel$tag', 'email', $rel, 'smtp down')"),
		't', "email fails its own claim $who");
	begin_claim('email_svc', $level, "e-exp$tag", 'email');
	expire("e-exp$tag");
	my $done = begin_claim('email_svc', $level, "e-done$tag", 'email');
	is(run('email_svc', $level, "SELECT inbox_complete('e-done$tag', 'email', $done)"),
		't', "email completes its own claim $who");
	my $before = rows_of('email');

	foreach my $sql (
		"SELECT inbox_claim('e-new$tag', 'email')",
		"SELECT inbox_claim('e-done$tag', 'email')",
		"SELECT * FROM inbox_claim_many(ARRAY['e-new$tag'], 'email')",
		"SELECT * FROM inbox_claim_many(ARRAY['e-done$tag'], 'email')",
		"SELECT inbox_begin('e-new$tag', 'email')",
		"SELECT inbox_begin('e-live$tag', 'email')",
		"SELECT inbox_begin('e-rel$tag', 'email')",
		"SELECT inbox_begin('e-exp$tag', 'email')",
		"SELECT inbox_begin('e-done$tag', 'email')",
		"INSERT INTO inbox (message_id, consumer, state, received_at)"
		  . " VALUES ('e-new$tag', 'email', 'processed', now())")
	{
		like(run('credit_svc', $level, $sql), $rls_error, "credit refused: $sql $who");
	}
	foreach my $sql (
		"SELECT inbox_extend('e-live$tag', 'email', $live)",
		"SELECT inbox_complete('e-live$tag', 'email', $live)",
		"SELECT inbox_complete('e-done$tag', 'email', $done)",
		"SELECT inbox_fail('e-live$tag', 'email', $live, 'not mine')",
		"SELECT inbox_fail('e-rel$tag', 'email', $rel, 'not mine')")
	{
		is(run('credit_svc', $level, $sql), 'f', "credit gets false: $sql $who");
	}
	foreach my $sql (
		"SELECT message_id FROM inbox_next('email', max => 100)",
		"SELECT message_id FROM inbox WHERE consumer = 'email'",
		"SELECT payload, last_error FROM inbox WHERE message_id LIKE 'e-%'")
	{
		is(run('credit_svc', $level, $sql), '', "credit sees nothing: $sql $who");
	}
	is( run('credit_svc', $level,
			"WITH u AS (UPDATE inbox SET payload = '{}', last_error = 'x'"
			  . " WHERE consumer = 'email' RETURNING 1) SELECT count(*) FROM u"),
		'0', "credit updates none of email's payloads and errors $who");
	is(rows_of('email'), $before, "email's rows are as they were $who");
	is(run('email_svc', $level, "SELECT inbox_complete('e-live$tag', 'email', $live)"),
		't', "email still completes its live claim $who");

	# credit's own rows, on every path.
	is(run('credit_svc', $level, "SELECT inbox_claim('c-one$tag', 'credit')"),
		't', "credit claims its own message $who");
	is(run('credit_svc', $level, "SELECT inbox_claim('c-one$tag', 'credit')"),
		'f', "credit's duplicate answers false $who");
	is( run('credit_svc', $level,
			"SELECT * FROM inbox_claim_many(ARRAY['c-one$tag', 'c-many$tag'], 'credit')"),
		"c-many$tag", "credit claims a batch of its own $who");
	my $own = begin_claim('credit_svc', $level, "c-live$tag", 'credit');
	is(run('credit_svc', $level, "SELECT inbox_extend('c-live$tag', 'credit', $own)"),
		't', "credit extends its own claim $who");
	is(run('email_svc', $level, "SELECT inbox_complete('c-live$tag', 'credit', $own)"),
		'f', "email cannot complete credit's claim $who");
	is(run('email_svc', $level, "SELECT message_id FROM inbox WHERE consumer = 'credit'"),
		'', "email sees none of credit's rows $who");
	is(run('credit_svc', $level, "SELECT inbox_complete('c-live$tag', 'credit', $own)"),
		't', "credit completes its own claim $who");
	is(run('credit_svc', $level, "SELECT inbox_complete('c-live$tag', 'credit', $own)"),
		't', "credit's repeated completion answers true $who");
	is(run('credit_svc', $level, "SELECT inbox_begin('c-live$tag', 'credit') IS NULL"),
		't', "credit's begin of its processed message answers NULL $who");
	my $rel_own = begin_claim('credit_svc', $level, "c-rel$tag", 'credit');
	is( run('credit_svc', $level,
			"SELECT inbox_fail('c-rel$tag', 'credit', $rel_own, 'timeout')"),
		't', "credit fails its own claim $who");
	is( run('credit_svc', $level,
			"SELECT payload, last_error FROM inbox WHERE message_id = 'c-rel$tag'"),
		qq({"id": "c-rel$tag"}|timeout), "credit reads its own payload and error $who");
	my $exp_own = begin_claim('credit_svc', $level, "c-exp$tag", 'credit');
	expire("c-exp$tag");
	my $taken = run('credit_svc', $level, "SELECT inbox_begin('c-exp$tag', 'credit')");
	ok($taken =~ /^\d+$/ && $taken > $exp_own,
		"credit takes over its own expired claim $who");
	is(run('credit_svc', $level, "SELECT inbox_begin('c-exp$tag', 'credit') IS NULL"),
		't', "credit's begin of its own live claim answers NULL $who");
	is( run('credit_svc', $level,
			"SELECT message_id, attempts, payload FROM inbox_next('credit', max => 100)"
			  . " WHERE message_id = 'c-rel$tag'"),
		qq(c-rel$tag|2|{"id": "c-rel$tag"}),
		"credit's sweeper takes its own released claim $who");
	is( run('credit_svc', $level,
			"WITH u AS (UPDATE inbox SET payload = '{\"fixed\": true}'"
			  . " WHERE message_id = 'c-rel$tag' RETURNING 1) SELECT count(*) FROM u"),
		'1', "credit updates its own payload $who");
	like(
		run('credit_svc', $level,
			"UPDATE inbox SET consumer = 'email' WHERE message_id = 'c-rel$tag'"),
		qr/$rls_error|^ERROR:  permission denied for table inbox/,
		"credit cannot hand its row to email $who");
	ok(completes_own_claim($level, $tag), "credit's begin and complete: true $who");
}

# ---------------------------------------------------------------------------
# The application role, and what the worker grants allow without row
# security.

is(run('credit_svc', 'read committed', q{
	SELECT inbox_claim('a-1', 'credit');
	SELECT inbox_claim('a-1', 'credit');
	SELECT * FROM inbox_claim_many(ARRAY['a-1', 'a-2'], 'credit');
}), "t\nf\na-2", 'the application role claims, answers duplicates, claims a batch');

{
	my $token = begin_claim('email_svc', 'read committed', 'x-1', 'email');
	is(run('email_svc', 'read committed', "SELECT inbox_fail('x-1', 'email', $token, 'smtp down')"),
		't', 'email fails its claim');
	$token = begin_claim('email_svc', 'read committed', 'x-2', 'email');

	is( run('credit_svc', 'read committed',
			"SELECT payload, last_error FROM inbox WHERE message_id = 'x-1'"),
		'{"id": "x-1"}|smtp down',
		'without row security, a worker reads another consumer\'s payload and error');
	is( run('credit_svc', 'read committed',
			"WITH u AS (UPDATE inbox SET payload = '{}', last_error = 'x'"
			  . " WHERE message_id = 'x-1' RETURNING 1) SELECT count(*) FROM u"),
		'1', '... and updates them');
	is(run('credit_svc', 'read committed', "SELECT inbox_complete('x-2', 'email', $token)"),
		't', '... and completes its claims');
	is(run('credit_svc', 'read committed', "SELECT inbox_claim('x-3', 'email')"),
		't', '... and claims its messages');
	is( run('credit_svc', 'read committed',
			"BEGIN; LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE; ROLLBACK;"),
		'', 'the table-wide UPDATE lets a worker lock the whole table');
}

# ---------------------------------------------------------------------------
# The policies this README once recommended, INSERT and SELECT only: the
# role's own completion answers false, and a role without a SELECT policy
# cannot begin.  The same check passes with the new recipe below.

as_owner(q{
	ALTER TABLE inbox.inbox ENABLE ROW LEVEL SECURITY;
	CREATE POLICY credit_claims ON inbox.inbox FOR INSERT TO credit_worker
		WITH CHECK (consumer = 'credit');
	CREATE POLICY email_claims ON inbox.inbox FOR INSERT TO email_worker
		WITH CHECK (consumer = 'email');
	CREATE POLICY credit_reads ON inbox.inbox FOR SELECT TO credit_worker
		USING (consumer = 'credit');
});
foreach my $level (@levels)
{
	my $tag = $level =~ s/ /-/r;
	ok(!completes_own_claim($level, "old-$tag"),
		"old policies: credit's completion of its own claim answers false ($level)");
	like(run('email_svc', $level, "SELECT inbox_begin('old-$tag', 'email')"),
		$rls_error, "old policies: email, with no SELECT policy, cannot begin ($level)");
}
as_owner(q{
	DROP POLICY credit_claims ON inbox.inbox;
	DROP POLICY email_claims ON inbox.inbox;
	DROP POLICY credit_reads ON inbox.inbox;
	ALTER TABLE inbox.inbox DISABLE ROW LEVEL SECURITY;
});

# ---------------------------------------------------------------------------
# One role per consumer.

{
	my ($ret, $out, $err) = $node->psql($db, $recipe{'consumer-policies'});
	is($ret, 0, 'recipe consumer-policies runs as written') or diag $err;
}
as_owner(q{
	CREATE ROLE lone_svc LOGIN IN ROLE inbox_worker, inbox_app;
	ALTER ROLE lone_svc SET search_path = "$user", public, inbox;
});
like(run('orders_service', 'read committed', "SELECT inbox_claim('orders-1', 'credit')"),
	$rls_error, 'under row security, a member of inbox_app alone cannot claim (docs/privileges.md)');
like(run('lone_svc', 'read committed', "SELECT inbox_begin('lone-1', 'credit')"),
	$rls_error, 'a worker of no consumer\'s role cannot begin');
like(run('lone_svc', 'read committed', "SELECT inbox_claim('lone-1', 'credit')"),
	$rls_error, '... nor claim');
is(run('lone_svc', 'read committed', 'SELECT count(*) FROM inbox'), '0', '... nor see a row');
foreach my $level (@levels)
{
	my $tag = $level =~ s/ /-/r;
	ok(completes_own_claim($level, "new-$tag"),
		"FOR ALL policies: credit's completion of its own claim answers true ($level)");
	like(run('email_svc', $level, "SELECT inbox_begin('new-$tag', 'email')"),
		qr/^\d+$/, "FOR ALL policies: email begins ($level)");
	isolation($level, "-$tag");
}

# ---------------------------------------------------------------------------
# Monitoring: inbox_stats shows the reader what row security lets it see.

my $stats = 'SELECT consumer, processed, in_flight, expired, released, failed'
  . ' FROM inbox.inbox_stats ORDER BY consumer';
my $all_stats = as_owner($stats);
like($all_stats, qr/^credit\|.*\nemail\|/, 'inbox_stats counts both consumers');
is(run('monitor_svc', 'read committed', $stats), $all_stats,
	'the monitoring role reads every consumer\'s counts');
like(run('monitor_svc', 'read committed', 'SELECT payload FROM inbox.inbox LIMIT 1'),
	qr/^ERROR:  permission denied for table inbox/,
	'the monitoring role cannot read payloads');
is(run('monitor_svc', 'read committed', 'SELECT count(*) >= 0 FROM inbox.inbox_worker_status()'),
	't', 'the monitoring role reads the worker\'s status');
as_owner('GRANT SELECT ON inbox.inbox_stats TO credit_worker');
is(run('credit_svc', 'read committed', $stats), ($all_stats =~ /^(credit\|.*)$/m)[0],
	'a consumer\'s role counts its own consumer only');
as_owner(q{
	CREATE ROLE bare_svc LOGIN IN ROLE pg_monitor;
	GRANT USAGE ON SCHEMA inbox TO bare_svc;
});
is(run('bare_svc', 'read committed', $stats), '',
	'pg_monitor alone reads the security_invoker view (the install script grants it the columns), and under row-level security without a policy sees no rows');
as_owner(q{
	CREATE ROLE blind_svc LOGIN IN ROLE pg_monitor;
	GRANT USAGE ON SCHEMA inbox TO blind_svc;
	GRANT SELECT (consumer, state, received_at, lease_until) ON inbox.inbox TO blind_svc;
});
is(run('blind_svc', 'read committed', $stats), '',
	'a monitoring role without the policy sees no rows');

# ---------------------------------------------------------------------------
# Maintenance: prunes and reclaims, under row security thanks to its policy.

as_owner(q{
	SELECT inbox.inbox_claim('old-' || g, c)
	FROM generate_series(1, 3) g, (VALUES ('credit'), ('email')) v(c);
	UPDATE inbox.inbox SET received_at = received_at - interval '30 days',
		processed_at = processed_at - interval '30 days'
	WHERE message_id LIKE 'old-_';
	SELECT inbox.inbox_begin('dead-' || c, c) FROM (VALUES ('credit'), ('email')) v(c);
	UPDATE inbox.inbox SET lease_until = now() - interval '1 minute'
	WHERE message_id LIKE 'dead-%';
});
my $prunable = "SELECT count(*) FROM inbox.inbox WHERE state IN ('processed', 'failed')"
  . " AND processed_at < now() - interval '7 days'";
my $expired = "SELECT count(*) FROM inbox.inbox WHERE state = 'claimed' AND lease_until <= now()";
my ($to_prune, $to_reclaim) = (as_owner($prunable), as_owner($expired));
cmp_ok($to_prune, '>=', 6, 'markers past their retention');
cmp_ok($to_reclaim, '>=', 2, 'claims past their lease');

my ($maintenance_policy) = $recipe{maintenance} =~ /(CREATE POLICY .*?;)/s;
ok($maintenance_policy, 'the maintenance recipe has a policy');
as_owner('DROP POLICY maintenance_all ON inbox.inbox');
is(run('maint_svc', 'read committed', 'SELECT inbox.inbox_reclaim(); SELECT inbox.inbox_prune()'),
	"0\n0", 'without its policy, the maintenance role finds nothing to do');
as_owner($maintenance_policy);
is(run('maint_svc', 'read committed', 'SELECT inbox.inbox_reclaim()'), $to_reclaim,
	'the maintenance role reclaims every expired claim');
is(run('maint_svc', 'read committed', 'SELECT inbox.inbox_prune()'), $to_prune,
	'the maintenance role prunes every marker past its retention');
is(as_owner("$prunable UNION ALL $expired"), "0\n0", 'nothing is left to prune or reclaim');

# ---------------------------------------------------------------------------
# The operator role retries and discards failed claims of every consumer,
# under row security; a consumer's role may not.

is(as_owner("SELECT count(*) FROM inbox.inbox_consumers"), '0',
	'no consumer is configured yet');
as_owner(q{
	INSERT INTO inbox.inbox_consumers (consumer, max_attempts)
	VALUES ('credit', 1), ('email', 1) ON CONFLICT (consumer) DO UPDATE SET max_attempts = 1;
	SELECT inbox.inbox_fail(m || '-' || c, c, inbox.inbox_begin(m || '-' || c, c), 'boom')
	FROM (VALUES ('ops-1'), ('ops-2')) v(m), (VALUES ('credit'), ('email')) w(c);
});
like(run('credit_svc', 'read committed', "SELECT inbox.inbox_retry('ops-1-credit', 'credit')"),
	qr/^ERROR:  permission denied for function inbox_retry/,
	'a consumer\'s role may not retry its failed claims');
is(run('ops_alice', 'read committed',
		"SELECT inbox.inbox_retry('ops-1-credit', 'credit');"
		  . " SELECT inbox.inbox_discard('ops-1-email', 'email', 'checked');"
		  . " SELECT inbox.inbox_discard_failed('email', 'checked too');"
		  . " SELECT inbox.inbox_retry_failed('credit')"),
	"\n\nops-2-email\nops-2-credit",
	'the operator retries and discards the failed claims of every consumer');
is(as_owner("SELECT string_agg(message_id || ' ' || state || ' ' || resolved_by"
		  . " || ' ' || coalesce(resolution, '-'), ', ' ORDER BY message_id)"
		  . " FROM inbox.inbox WHERE message_id LIKE 'ops-%'"),
	'ops-1-credit released ops_alice -, ops-1-email processed ops_alice checked, '
	  . 'ops-2-credit released ops_alice -, ops-2-email processed ops_alice checked too',
	'each decision is recorded under the operator\'s login');
as_owner('DELETE FROM inbox.inbox_consumers');

# ---------------------------------------------------------------------------
# pg_dump keeps the grants, not the policies (README: keep them in your
# migrations).

{
	my ($dump, $err) = run_command(
		[ 'pg_dump', '-h', $node->host, '-p', $node->port, '-d', $db ]);
	like($dump, qr/^GRANT SELECT,INSERT,UPDATE ON TABLE inbox\.inbox TO inbox_worker;$/m,
		'pg_dump keeps the grants on the extension\'s table');
	unlike($dump, qr/CREATE POLICY|ROW LEVEL SECURITY/,
		'pg_dump does not keep its policies or row security');
}

# ---------------------------------------------------------------------------
# Column grants instead of the table-wide UPDATE: no more LOCK TABLE, and
# the same isolation.

{
	my ($ret, $out, $err) = $node->psql($db, $recipe{columns});
	is($ret, 0, 'recipe columns runs as written') or diag $err;
}
like(
	run('credit_svc', 'read committed',
		'BEGIN; LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE; ROLLBACK;'),
	qr/^ERROR:  permission denied for table inbox/,
	'with column grants, a worker cannot lock the table');
is(run('credit_svc', 'read committed', 'BEGIN; LOCK TABLE inbox IN ROW EXCLUSIVE MODE; ROLLBACK;'),
	'', '... but in the mode every writer takes');
foreach my $level (@levels)
{
	my $tag = $level =~ s/ /-/r;
	isolation($level, "-$tag-columns");
}

# ---------------------------------------------------------------------------
# Every recipe runs again as it is: in the same database, and in a second
# one, where the roles exist already.

my @order = qw(app login worker consumer-roles consumer-policies columns
  maintenance operator monitoring);
foreach my $name (@order)
{
	my ($ret, $out, $err) = $node->psql($db, $recipe{$name});
	is($ret, 0, "recipe $name runs again in the same database") or diag $err;
}
$node->safe_psql('postgres', 'CREATE DATABASE app2');
$node->safe_psql('app2', 'CREATE SCHEMA inbox; CREATE EXTENSION inbox SCHEMA inbox;');
foreach my $name (@order)
{
	my ($ret, $out, $err) = $node->psql('app2', $recipe{$name});
	is($ret, 0, "recipe $name runs in a second database") or diag $err;
}

$node->stop;
done_testing();
