#!/usr/bin/env node
// examples/node/consumer.js: a one-phase inbox consumer with node-postgres.
//
// Reads messages from standard input, one per line, "message_id<TAB>account
// <TAB>amount": the test's stand-in for a broker.  For each one it takes a
// client from the pool, and in ONE transaction on that client claims the
// message with inbox_claim, credits the account and writes a ledger row.
// It acks ("ack ID done" or "ack ID duplicate") on both answers.  On an
// error it does what the README's Errors table says (errors.js): nacks
// ("nack ID retry|reconnect SQLSTATE"), and the stand-in broker delivers
// the message again later; waits with backoff before the pool connects
// again after a lost connection; dead-letters a poison message; stops on
// a deployment error.
//
// Usage: consumer.js CONNECTION_STRING [--fail-every N]
// --fail-every N makes the first delivery of every Nth message fail after
// its claim and business change, before the commit: a crash stand-in.
'use strict';

const fs = require('fs');
const { Pool } = require('pg');
const errors = require('./errors');

const CONSUMER = 'ledger';

async function handle(pool, msg, crash) {
	// NOT pool.query(): each pool.query() call runs on whichever connection
	// is free, in autocommit, so a claim made with it commits on its own.
	// If the UPDATE then fails, the redelivery finds the claim and is
	// skipped as a duplicate: the message is lost silently.  BEGIN and
	// COMMIT must run on the same client, and the claim between them.
	const client = await pool.connect();
	let broken = false;
	// A checked-out client whose connection the server ends (a restart, a
	// terminated backend) emits 'error' besides failing its query; with no
	// listener, Node ends the process.  The pool listens only to idle ones.
	const onError = () => { broken = true; };
	client.on('error', onError);
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
			throw Object.assign(new Error('simulated crash before commit'), { simulated: true });
		await client.query('COMMIT');
		return 'done';
	} catch (err) {
		broken = broken || errors.action(err) === 'reconnect';
		if (!broken)
			await client.query('ROLLBACK').catch(() => {});
		throw err;
	} finally {
		// A connection that broke is destroyed, not handed out again.
		client.removeListener('error', onError);
		client.release(broken);
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
	// An idle connection the server ended (a restart, a terminated
	// backend) is reported here; without a listener, Node ends the
	// process on the unhandled 'error' event.  The pool drops it.
	pool.on('error', (err) => console.error(`# idle connection lost: ${err.message}`));
	const backoff = new errors.Backoff();

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
			backoff.reset();
		} catch (err) {
			// What to do is the README's Errors table (errors.js).  Not
			// acked, except a poison message, which goes to a dead-letter
			// queue (here: a line) instead of coming back forever.
			const what = errors.action(err);
			const state = err.code || 'Error';
			if (what === 'dead-letter') {
				out.push(`dead-letter ${msg.id} ${state}`);
				continue;
			}
			if (what === 'stop') {
				console.log(out.join('\n'));
				console.error(`stop ${msg.id} ${state}: ${err.message}`);
				process.exit(3);
			}
			out.push(`nack ${msg.id} ${what} ${state}`);
			queue.push(msg);
			if (what === 'reconnect')
				await backoff.wait(err);
		}
	}
	console.log(out.join('\n'));
	await pool.end();
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
