# The README's SQL, pasted as a person pastes it.
#
# Every ```sql block of README.md and docs/maintenance.md is fed to psql
# whole, as it stands (what a paste or a code host's copy button gives),
# each in a session of its own, in the order of the file, on a fresh server
# with the library preloaded, in a fresh database named "app" (the name
# the README uses).  A ```text block right after a ```sql block (blank
# lines may stand between) is what psql prints for it; a ```sql block with
# no such block must print nothing at all.  So a block that mixes
# statements and output fails: pasted, its output lines are not SQL.
#
# The blocks run as a superuser, in a database whose owner is not one and
# who has planted decoys in "public" (a function of the same name and
# arguments as each of the extension's, a table of the same name as each of
# its tables and views) before the README's set-up runs: the attack of
# CVE-2018-1058.  A decoy function that runs tries to make its owner a
# superuser and records the call.  So every name of the extension in the
# README must be reached without an untrusted schema first on the search
# path (schema-qualified), or its output differs, or a decoy runs: the
# test checks that none did, and that the owner is still not a superuser.
#
# The application's login role the README grants to, orders_service,
# exists before the blocks run, as the README assumes.
#
# A block may be marked, visibly, by an HTML comment on the line just
# before its fence:
#	<!-- doctest: skip (REASON) -->	not run at all (it needs pg_cron, a
#					second server, a role's password ...)
#	<!-- doctest: no-output -->		run; it must not raise an error, and
#					what it prints is not compared (a result
#					with timestamps, say)
# The skipped blocks are counted and reported, so that none hides.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# ---------------------------------------------------------------------------
# The blocks, with their marks and their output.

sub blocks_of
{
	my ($file) = @_;
	my $text = slurp_file("$FindBin::RealBin/../$file");
	my @lines = split /\n/, $text, -1;
	my @blocks;
	my $mark = '';
	my $last_sql;	# the sql block a text block may follow
	for (my $i = 0; $i < @lines; $i++)
	{
		my $line = $lines[$i];
		if ($line =~ /^<!-- doctest: (skip \(.+\)|no-output) -->$/)
		{
			$mark = $1;
			$last_sql = undef;
			next;
		}
		if ($line =~ /^```(\S*)$/ && $1 ne '')
		{
			my $lang = $1;
			my $start = $i + 1;
			my @body;
			for ($i++; $i < @lines && $lines[$i] ne '```'; $i++)
			{
				push @body, $lines[$i];
			}
			die "$file: unterminated block at line $start" if $i >= @lines;
			die "$file line $start: a doctest mark on a $lang block"
			  if $mark ne '' && $lang ne 'sql';
			if ($lang eq 'sql')
			{
				$last_sql = {
					where => "$file line $start",
					mark => $mark,
					input => join('', map { "$_\n" } @body),
					output => undef
				};
				push @blocks, $last_sql;
			}
			elsif ($lang eq 'text' && $last_sql)
			{
				$last_sql->{output} = join("\n", @body);
				$last_sql = undef;
			}
			else
			{
				$last_sql = undef;
			}
			$mark = '';
			next;
		}
		# A mark applies to the block right after it, and an output block
		# to the block right before it (blank lines and other HTML comments
		# may stand between).
		next if $line eq '' || $line =~ /^<!--.*-->$/;
		$mark = '';
		$last_sql = undef;
	}
	return @blocks;
}

my @blocks = (blocks_of('README.md'), blocks_of('docs/maintenance.md'));
ok(scalar(@blocks) >= 10, 'README.md has its SQL blocks (' . scalar(@blocks) . ')');

# normalized TEXT: lines without trailing blanks, no blank lines at the end.
sub normalized
{
	my ($text) = @_;
	$text =~ s/[ \t]+$//mg;
	$text =~ s/\n+\z//;
	return $text eq '' ? '' : "$text\n";
}

# ---------------------------------------------------------------------------
# The server the README's installation section describes.

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'inbox'\ninbox.naptime = '1d'\n");
$node->start;

# The decoys: the extension's functions and relations, as found in a
# scratch database, re-created in "public" of "app" by its owner.
$node->safe_psql('postgres', q{
	CREATE DATABASE scratch;
	CREATE ROLE app_owner LOGIN;
	CREATE DATABASE app OWNER app_owner;
	CREATE ROLE orders_service LOGIN;
});
$node->safe_psql('scratch', 'CREATE SCHEMA inbox; CREATE EXTENSION inbox SCHEMA inbox;');
my $decoys = $node->safe_psql('scratch', q{
	WITH members AS (
		SELECT classid, objid FROM pg_depend
		WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
		  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'inbox'))
	SELECT string_agg(ddl, E'\n' ORDER BY ord, ddl) FROM (
		SELECT 1 AS ord, format('CREATE TABLE public.%I (%s);', c.relname,
			(SELECT string_agg(format('%I %s', a.attname,
				CASE WHEN t.typnamespace = c.relnamespace THEN 'text'
					 ELSE format_type(a.atttypid, a.atttypmod) END), ', ' ORDER BY a.attnum)
			 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
			 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)) AS ddl
		FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
		WHERE c.relkind IN ('r', 'v', 'p')
		UNION ALL
		SELECT 2, format($f$CREATE %s public.%I(%s) %s LANGUAGE plpgsql AS $d$
BEGIN
	INSERT INTO public.decoy_calls VALUES (%L, current_user);
	IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
		EXECUTE 'ALTER ROLE app_owner SUPERUSER';
	END IF;
	RETURN %s;
END $d$;$f$, CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,
			p.proname,
			replace(pg_get_function_arguments(p.oid), 'inbox.', 'public.'),
			CASE WHEN p.prokind = 'p' THEN ''
				 ELSE 'RETURNS ' || replace(pg_get_function_result(p.oid), 'inbox.', 'public.') END,
			p.proname,
			CASE WHEN p.proretset OR p.proargmodes IS NOT NULL OR p.prorettype = 'void'::regtype
				 THEN '' ELSE 'NULL' END)
		FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
		WHERE p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype)
	) d});
like($decoys, qr/public\.inbox_claim\(/, 'decoys of the extension\'s functions');
$node->safe_psql('app', 'CREATE TABLE public.decoy_calls (fn text, caller name);'
	  . 'GRANT INSERT ON public.decoy_calls TO PUBLIC;'
	  . $decoys,
	extra_params => [ '-U', 'app_owner' ]);

my @skipped;
foreach my $block (@blocks)
{
	my $where = $block->{where};
	if ($block->{mark} =~ /^skip \((.+)\)$/)
	{
		push @skipped, "$where: $1";
		next;
	}
	my $output = '';
	IPC::Run::run(
		[ 'psql', '-X', '-q', '-d', $node->connstr('app') ],
		'<' => \$block->{input},
		'>&' => \$output);
	if ($block->{mark} eq 'no-output')
	{
		unlike($output, qr/(ERROR|FATAL|PANIC):/m, "$where runs without an error")
		  or diag $output;
	}
	else
	{
		is(normalized($output), normalized($block->{output} // ''),
			"$where, pasted whole, prints what the README shows");
	}
}
note "skipped, as marked: $_" foreach @skipped;
diag(scalar(@skipped) . " README block(s) skipped as marked") if @skipped;

is($node->safe_psql('app', 'SELECT count(*) FROM public.decoy_calls'),
	'0', 'no decoy in public ran');
is($node->safe_psql('postgres',
		"SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'"),
	'f', 'the database owner is not a superuser after the README');

$node->stop;
done_testing();
