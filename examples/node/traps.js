#!/usr/bin/env node
// examples/node/traps.js: the type traps of node-postgres with inbox, shown.
//
// Each line printed is a fact examples/test compares with what
// examples/README.md says.  Usage: traps.js CONNECTION_STRING
'use strict';

const { Pool } = require('pg');

async function sqlstate(pool, sql, values) {
	try {
		await pool.query(sql, values);
		return 'ok';
	} catch (err) {
		return err.code || err.name;
	}
}

async function main() {
	const pool = new Pool({ connectionString: process.argv[2], max: 2 });
	const begin = "SELECT token FROM inbox_begin_outcome($1, 'traps', payload => $2)";

	// bigint comes back as a string: compare tokens as BigInt, never as
	// strings, and do not Number() them (digits above 2^53 are lost).
	const { rows } = await pool.query("SELECT inbox_begin('node-trap-1', 'traps') AS token");
	console.log(`token type: ${typeof rows[0].token}`);
	console.log(`"9" > "10" as strings: ${'9' > '10'}, as BigInt: ${BigInt('9') > BigInt('10')}`);

	// An object is sent as JSON; an array as a PostgreSQL array literal.
	console.log(`object payload: ${await sqlstate(pool, begin, ['node-trap-2', { to: 'a@example.com' }])}`);
	console.log(`array payload: ${await sqlstate(pool, begin, ['node-trap-3', [1, 2]])}`);
	console.log(`JSON.stringify(array) payload: ${await sqlstate(pool, begin, ['node-trap-4', JSON.stringify([1, 2])])}`);

	// Every parameter is sent as text, so a number "works", as its digits.
	console.log(`number message id: ${await sqlstate(pool, "SELECT inbox_claim($1, 'traps')", [1001])}`);

	// The pitfall: a claim with pool.query() commits alone.  The UPDATE that
	// follows fails (a constraint, a crash); the redelivery finds the
	// claim, and the message is skipped as a duplicate: lost.
	await pool.query("SELECT inbox_claim('node-trap-5', 'traps')");
	const failed = await sqlstate(pool, 'UPDATE accounts SET balance = balance + $1 WHERE id = 1', ['not a number']);
	const { rows: again } = await pool.query("SELECT inbox_claim('node-trap-5', 'traps') AS claimed");
	console.log(`pool.query claim, failed update (${failed}), redelivery claims: ${again[0].claimed}`);
	await pool.end();
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
