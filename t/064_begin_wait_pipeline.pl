# inbox_begin_wait commits between its looks.  In an extended-protocol
# pipeline, statements sent before it share its transaction until the
# client's Sync: a commit inside the CALL would commit them early, and the
# pipeline's atomicity with them.  So it refuses there (25001), as core's
# commands that cannot run in a transaction block do, and the statements
# before it roll back.  First in a pipeline (nothing before it to commit),
# and on its own, it runs.
#
# pgbench sends the pipelines (\startpipeline, extended protocol).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('begin_wait_pipeline');
$node->init;
$node->append_conf('postgresql.conf', "inbox.naptime = '1d'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION inbox;
	CREATE TABLE orders (id integer);
	SELECT inbox_begin('m-1', 'email', interval '5 minutes');
});

# A pipeline: an INSERT, then the CALL, which waits for the live claim on
# m-1 (and would commit between its looks), then a statement that fails,
# then Sync: nothing of it may be committed.
$node->pgbench(
	'--no-vacuum --transactions=1 --client=1 --protocol=extended',
	2,
	[qr{processed: 0/1}],
	[qr{aborted in command}],
	'after another statement in a pipeline, inbox_begin_wait refuses',
	{
		'064_after_insert' => q{
\startpipeline
INSERT INTO orders VALUES (1);
CALL inbox_begin_wait('m-1', 'email', wait => '1 second');
SELECT 1 / 0;
\endpipeline
}
	});
# (pgbench 16 and later leave the server's message out of theirs.  From
# PostgreSQL 18 on, a CALL after another statement in a pipeline is already
# atomic, as in a transaction block.)
ok( $node->log_contains(
		qr/ERROR:  inbox_begin_wait cannot (be executed within a pipeline|run inside a transaction block)/),
	'with its error');
is($node->safe_psql('postgres', 'SELECT count(*) FROM orders'), '0',
	'and the statement before it is not committed');
is($node->safe_psql('postgres', q{SELECT state FROM inbox WHERE message_id = 'm-1'}),
	'claimed', 'and the claim it waited for is as it was');

# First in a pipeline, it commits nothing of anyone else's: it runs.
$node->pgbench(
	'--no-vacuum --transactions=1 --client=1 --protocol=extended',
	0,
	[qr{processed: 1/1}],
	[qr{^$}],
	'first in a pipeline, inbox_begin_wait runs',
	{
		'064_first' => q{
\startpipeline
CALL inbox_begin_wait('m-2', 'email', wait => '1 second');
\endpipeline
}
	});
is($node->safe_psql('postgres', q{SELECT state FROM inbox WHERE message_id = 'm-2'}),
	'claimed', 'and claims the message');

$node->stop;
done_testing();
