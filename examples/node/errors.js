// examples/node/errors.js: what a consumer does with an error.
//
// The README's Errors table, as code: every error sorts into one of four
// actions, and the consumers here act on it.
//
//   dead-letter  a poison message: set it aside, never retry it
//   retry        roll back; the message comes again (nack)
//   reconnect    the connection is gone or useless: nack, and connect
//                again with backoff (the pool makes a new connection)
//   stop         a deployment error: every message would fail; stop and
//                alert
'use strict';

const { DatabaseError } = require('pg');

const DEAD_LETTER = new Set(['22004', '22023', '22001', '2202E', '22P02']);
const RETRY = new Set(['40001', '40P01', '55P03', '57014', 'XX000']);
const RECONNECT = new Set(['57P01', '57P02', '57P03', '25006']);
// Server-side prepared statements through a pooler in transaction mode:
// the driver's setting is wrong, whatever the message.
const STOP = new Set(['42P05', '26000', '08P01']);

function action(err) {
	if (err && err.simulated)
		return 'retry';
	// Not an answer of the server: the connection was refused, reset or
	// ended ("Connection terminated unexpectedly").
	if (!(err instanceof DatabaseError))
		return 'reconnect';
	const state = err.code;
	if (STOP.has(state))
		return 'stop';
	if (state === '54000')
		// Two errors share it: a payload over 1 MB is poison; the 65th new
		// claim of one REPEATABLE READ transaction is not.
		return err.message.startsWith('too many subtransactions') ? 'retry' : 'dead-letter';
	if (DEAD_LETTER.has(state))
		return 'dead-letter';
	if (RETRY.has(state))
		return 'retry';
	if (RECONNECT.has(state) || state.startsWith('08'))
		return 'reconnect';
	return 'stop';
}

// Backoff for reconnecting: 0.1 s doubling to 5 s, reset by a success;
// gives up after giveUpAfter seconds of failures in a row.
class Backoff {
	constructor(giveUpAfter = 120) {
		this.giveUpAfter = giveUpAfter;
		this.reset();
	}

	reset() {
		this.delay = 0.1;
		this.since = null;
	}

	async wait(err) {
		const now = Date.now();
		if (this.since === null)
			this.since = now;
		if (now - this.since > this.giveUpAfter * 1000)
			throw err;
		console.error(`# connection lost (${err.message}); again in ${this.delay.toFixed(1)} s`);
		await new Promise((resolve) => setTimeout(resolve, this.delay * 1000));
		this.delay = Math.min(this.delay * 2, 5);
	}
}

module.exports = { action, Backoff };
