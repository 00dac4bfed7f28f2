#!/usr/bin/env node
// examples/node/consumer.js: a one-phase inbox consumer with node-postgres.
//
// Reads messages from standard input, one per line, "message_id<TAB>account
// <TAB>amount": the test's stand-in for a broker.  For each one it takes a
// client from the pool, and in ONE transaction on that client claims the
// message with inbox_claim, credits the account and writes a ledger row.
// It acks ("ack ID done" or "ack ID duplicate") on both answers; on an
// error it nacks ("nack ID error") and the stand-in broker delivers the
// message again, later.
//
// Usage: consumer.js CONNECTION_STRING [--fail-every N]
// --fail-every N makes the first delivery of every Nth message fail after
// its claim and business change, before the commit: a crash stand-in.
'use strict';

const fs = require('fs');
const { Pool } = require('pg');

const CONSUMER = 'ledger';

async function handle(pool, msg, crash) {
	// NOT pool.query(): each pool.query() call runs on whichever connection
	// is free, in autocommit, so a claim made with it commits on its own.
	// If the UPDATE then fails, the redelivery finds the claim and is
	// skipped as a duplicate: the message is lost silently.  BEGIN and
	// COMMIT must run on the same client, and the claim between them.
	const client = await pool.connect();
	try {
		await client.query('BEGIN');
		// message_id: pass a string (text; a uuid string works too).  A JS
		// number is sent as text as well, but loses digits above 2^53.
		const { rows } = await client.query(
			'SELECT inbox_claim($1, $2) AS claimed', [msg.id, CONSUMER]);
		if (!rows[0].claimed) {
			await client.query('COMMIT');
			return 'duplicate';
		}
		await client.query(
			'UPDATE accounts SET balance = balance + $1 WHERE id = $2',
			[msg.amount, msg.account]);
		await client.query(
			'INSERT INTO ledger (message_id, account, amount) VALUES ($1, $2, $3)',
			[msg.id, msg.account, msg.amount]);
		if (crash)
			throw new Error('simulated crash before commit');
		await client.query('COMMIT');
		return 'done';
	} catch (err) {
		await client.query('ROLLBACK').catch(() => {});
		throw err;
	} finally {
		client.release();
	}
}

async function main() {
	const args = process.argv.slice(2);
	let failEvery = 0;
	const i = args.indexOf('--fail-every');
	if (i >= 0) {
		failEvery = Number(args[i + 1]);
		args.splice(i, 2);
	}
	if (args.length !== 1) {
		console.error('usage: consumer.js CONNECTION_STRING [--fail-every N]');
		process.exit(2);
	}
	const pool = new Pool({ connectionString: args[0], max: 2 });

	const order = new Map();
	const queue = [];
	for (const line of fs.readFileSync(0, 'utf8').split('\n')) {
		if (line === '')
			continue;
		const [id, account, amount] = line.split('\t');
		if (!order.has(id))
			order.set(id, order.size + 1);
		queue.push({ id, account: Number(account), amount: Number(amount) });
	}

	const crashed = new Set();
	const out = [];
	while (queue.length > 0) {
		const msg = queue.shift();
		const crash = failEvery > 0 && order.get(msg.id) % failEvery === 0 && !crashed.has(msg.id);
		if (crash)
			crashed.add(msg.id);
		try {
			out.push(`ack ${msg.id} ${await handle(pool, msg, crash)}`);
		} catch (err) {
			// Not acked: the broker delivers it again.  A real consumer would
			// dead-letter poison input (err.code 22004, 22023, 22001).
			out.push(`nack ${msg.id} error ${err.code || 'Error'}`);
			queue.push(msg);
		}
	}
	console.log(out.join('\n'));
	await pool.end();
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
