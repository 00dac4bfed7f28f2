#!/usr/bin/env node
// examples/node/twophase.js: a two-phase inbox handler with node-postgres.
//
// For a side effect that cannot join the database transaction (here an HTTP
// call to examples/fake_service.py): begin (commit the claim), call the
// service with the message id as the idempotency key and the claim's token
// as the fence, then complete, each step in its own short transaction.
//
// Usage:
//   twophase.js CONNECTION_STRING SERVICE_URL
//       consume standard input, one message per line, "message_id<TAB>
//       account<TAB>amount"; prints "ack ID ..." or "nack ID ..."
//   twophase.js stale CONNECTION_STRING SERVICE_URL MESSAGE_ID
//       a stale owner, step by step: its send is fenced and its completion
//       refused
'use strict';

const fs = require('fs');
const { Pool } = require('pg');
const errors = require('./errors');

const CONSUMER = 'notify';
// INBOX_EXAMPLE_LEASE (seconds): the test's restart run shortens it, so
// that a claim whose owner lost its connection is taken over sooner.
const LEASE = `${process.env.INBOX_EXAMPLE_LEASE || 30} seconds`;

// Here pool.query() is right: each step of a two-phase claim must commit
// on its own, before the side effect (begin) or after it (complete).
async function begin(pool, id, payload, lease = LEASE) {
	// token is a bigint, which node-postgres returns as a STRING ("17"):
	// keep it a string, or make it a BigInt.  Number(token) loses digits
	// above 2^53, and comparing two strings compares them as text ("9" >
	// "10").  retry_after is asked for in seconds, a float8: a JS number.
	// The payload is passed as JSON text: node-postgres sends a plain object
	// as JSON, but a JS array as a PostgreSQL array literal, which is not
	// valid jsonb.
	const { rows } = await pool.query(
		'SELECT outcome, token, extract(epoch FROM retry_after)::float8 AS retry_seconds' +
		' FROM inbox_begin_outcome($1, $2, lease => $3, payload => $4)',
		[id, CONSUMER, lease, JSON.stringify(payload)]);
	return rows[0];
}

// Returns the service's HTTP status: 201 applied, 200 replay, 409 refused
// (a later token was seen for this key); throws on any other.
async function send(url, id, token) {
	const res = await fetch(`${url}/send`, {
		method: 'POST',
		headers: { 'Idempotency-Key': id, 'Fencing-Token': token },
		body: '{}',
	});
	await res.text();
	if (res.status === 201 || res.status === 200 || res.status === 409)
		return res.status;
	throw new Error(`service answered ${res.status}`);
}

async function complete(pool, id, token) {
	const { rows } = await pool.query(
		'SELECT inbox_complete($1, $2, $3) AS ok', [id, CONSUMER, token]);
	return rows[0].ok;
}

// Returns [ack or nack, why, delay in seconds].
async function handle(pool, url, id, payload) {
	const { outcome, token, retry_seconds } = await begin(pool, id, payload);
	if (outcome === 'processed' || outcome === 'failed')
		return ['ack', outcome, 0];			// alert on a failed one
	if (outcome === 'busy')
		// A live claim holds it: never ack (its holder may die).  A broker
		// would redeliver after retry_after; the holders here finish in
		// milliseconds, so the stand-in retries sooner.
		return ['nack', 'busy', Math.min(retry_seconds, 0.02)];
	// 'claimed' or 'taken_over': this call owns the message.
	let status;
	try {
		status = await send(url, id, token);
	} catch (err) {
		await pool.query('SELECT inbox_fail($1, $2, $3, $4)',
			[id, CONSUMER, token, String(err.message)]);
		return ['nack', 'error', 0];
	}
	if (status === 409)
		return ['nack', 'fenced', 0];		// a later owner exists
	if (await complete(pool, id, token))
		return ['ack', 'done', 0];
	return ['nack', 'lost', 0];				// the next begin says what is left
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

async function consume(pool, url) {
	const queue = [];
	for (const line of fs.readFileSync(0, 'utf8').split('\n')) {
		if (line === '')
			continue;
		const [id, account, amount] = line.split('\t');
		queue.push({ id, payload: { account: Number(account), amount: Number(amount) } });
	}
	const out = [];
	const backoff = new errors.Backoff();
	while (queue.length > 0) {
		const msg = queue.shift();
		let answer, why, delay;
		try {
			[answer, why, delay] = await handle(pool, url, msg.id, msg.payload);
			backoff.reset();
		} catch (err) {
			// The README's Errors table (errors.js).  A claim this process
			// began and could not complete is left to its lease: the
			// redelivery answers busy until it runs out, then taken_over.
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
			[answer, why, delay] = ['nack', `${what} ${state}`, 0];
			if (what === 'reconnect')
				await backoff.wait(err);
		}
		out.push(`${answer} ${msg.id} ${why}`);
		if (answer === 'nack') {
			await sleep(delay);
			queue.push(msg);
		}
	}
	console.log(out.join('\n'));
}

// Owner A claims with a 1 second lease and pauses past it; owner B takes
// over; then A wakes up and carries on with its old token.
async function stale(pool, url, id) {
	const a = await begin(pool, id, {}, '1 second');
	console.log(`first begin: ${a.outcome}`);
	let b;
	for (;;) {
		// B's begin answers busy, with the lease A has left, until it ran out.
		b = await begin(pool, id, {});
		if (b.outcome !== 'busy')
			break;
		await sleep(b.retry_seconds);
	}
	console.log(`second begin: ${b.outcome}`);
	console.log(`later token is higher: ${BigInt(b.token) > BigInt(a.token)}`);
	console.log(`new owner send: ${await send(url, id, b.token)}`);
	console.log(`stale owner send: ${await send(url, id, a.token)}`);
	console.log(`stale owner complete: ${await complete(pool, id, a.token)}`);
	console.log(`new owner complete: ${await complete(pool, id, b.token)}`);
}

async function main() {
	const args = process.argv.slice(2);
	let run;
	if (args.length === 4 && args[0] === 'stale')
		run = (pool) => stale(pool, args[2], args[3]);
	else if (args.length === 2)
		run = (pool) => consume(pool, args[1]);
	else {
		console.error('usage: twophase.js [stale] CONNECTION_STRING SERVICE_URL [MESSAGE_ID]');
		process.exit(2);
	}
	const pool = new Pool({ connectionString: args.length === 4 ? args[1] : args[0], max: 2 });
	// An idle connection the server ended is reported here; without a
	// listener, Node ends the process (an unhandled 'error' event).
	pool.on('error', (err) => console.error(`# idle connection lost: ${err.message}`));
	try {
		await run(pool);
	} finally {
		await pool.end();
	}
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
