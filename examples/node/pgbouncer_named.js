#!/usr/bin/env node
// examples/node/pgbouncer_named.js: node-postgres's named statements
// through PgBouncer in transaction pooling mode.
//
// node-postgres prepares nothing by itself: a query runs as an unnamed
// statement, which lives only as long as the query, so it works through
// any pooler.  A query given a name ({ name: 'claim', text, values }) is
// prepared once per client connection and then executed by name: through a
// pooler in transaction mode, the next transaction may run on a server
// connection where that name is missing (26000) or was prepared by another
// client (42P05).
//
// Usage: pgbouncer_named.js CONNECTION_STRING (through PgBouncer, to a pool
// of ONE server connection, so that the outcome is deterministic).  Prints
// "NAME: F of T failed [SQLSTATEs]" for unnamed, then named statements.
'use strict';

const { Client } = require('pg');

async function run(url, name, named) {
	const clients = [new Client(url), new Client(url)];
	const failures = [];
	let total = 0;
	for (const [n, client] of clients.entries()) {
		await client.connect();
		for (let i = 0; i < 3; i++) {
			total++;
			const query = { text: "SELECT inbox_claim($1, 'named')", values: [`${name}-${n}-${i}`] };
			if (named)
				query.name = 'claim';
			try {
				await client.query(query);
			} catch (err) {
				failures.push(err.code);
			}
		}
	}
	for (const client of clients)
		await client.end();
	const states = [...new Set(failures)].sort().join(',');
	console.log(`${name}: ${failures.length} of ${total} failed${states ? ' ' + states : ''}`);
}

async function main() {
	await run(process.argv[2], 'unnamed', false);
	await run(process.argv[2], 'named', true);
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
