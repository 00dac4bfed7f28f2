#!/usr/bin/env node
// examples/http/server.js: an HTTP API with idempotency keys, node-postgres.
//
// The same service as server.py (see it, and README.md, for what each
// answer means), with node's http module and a pg.Pool.  It uses the pg
// package installed in examples/node.
//
// Usage: node server.js DATABASE_URL PORT_FILE
// Settings and test switches: as server.py's (INBOX_HTTP_WAIT,
// INBOX_HTTP_LEASE, INBOX_HTTP_EFFECT_DELAY, INBOX_HTTP_CRASH_KEY).
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const path = require('path');
const { Pool } = require(path.join(__dirname, '..', 'node', 'node_modules', 'pg'));

const CONSUMER = 'payments';
const WAIT = Number(process.env.INBOX_HTTP_WAIT || '0');
const LEASE = Number(process.env.INBOX_HTTP_LEASE || '30');
const EFFECT_DELAY = Number(process.env.INBOX_HTTP_EFFECT_DELAY || '0');
const CRASH_KEY = process.env.INBOX_HTTP_CRASH_KEY;
const PROBLEMS = 'https://github.com/inbox-extension/inbox/blob/main/examples/http/README.md';

const [databaseUrl, portFile] = process.argv.slice(2);
const pool = new Pool({ connectionString: databaseUrl, max: 20 });
pool.on('error', () => {});   // an idle client's lost connection: the pool replaces it

function problem(status, title, retryAfter) {
  return { status, body: JSON.stringify({ type: PROBLEMS, title, status }), retryAfter };
}

// An interval as node-postgres returns it (an object of parts), in seconds.
function seconds(interval) {
  const { days = 0, hours = 0, minutes = 0, seconds: s = 0, milliseconds = 0 } = interval || {};
  return days * 86400 + hours * 3600 + minutes * 60 + s + milliseconds / 1000;
}

// The claim, in its own transaction (a pool query autocommits).  With a
// wait, the procedure inbox_begin_wait sleeps while the first request
// holds the key, holding no snapshot; a CALL must run outside BEGIN.
async function begin(client, key, fingerprint) {
  const { rows } = WAIT
    ? await client.query(
      'CALL inbox_begin_wait($1, $2, wait => make_interval(secs => $3),'
      + ' lease => make_interval(secs => $4), fingerprint => $5)',
      [key, CONSUMER, WAIT, LEASE, fingerprint])
    : await client.query(
      'SELECT outcome, token, retry_after, result'
      + ' FROM inbox_begin_outcome($1, $2, lease => make_interval(secs => $3), fingerprint => $4)',
      [key, CONSUMER, LEASE, fingerprint]);
  return rows[0];
}

// The payment and the completion, with the response, in one transaction
// (see server.py).  null when the claim was lost.
async function pay(client, key, token, request) {
  await client.query('BEGIN');
  try {
    const { rows } = await client.query(
      'INSERT INTO payments (idempotency_key, account, amount) VALUES ($1, $2, $3) RETURNING id',
      [key, request.account, request.amount]);
    if (EFFECT_DELAY) await client.query('SELECT pg_sleep($1)', [EFFECT_DELAY]);
    if (key === CRASH_KEY) process.exit(3);   // the test's crash, before the commit
    // node-postgres returns a bigint as a string: the id goes out as a number.
    const body = JSON.stringify({ id: Number(rows[0].id), account: request.account, amount: request.amount });
    const response = { status: 201, body };
    const done = await client.query('SELECT inbox_complete($1, $2, $3, $4) AS ok',
      [key, CONSUMER, token, JSON.stringify(response)]);
    if (!done.rows[0].ok) {
      await client.query('ROLLBACK');
      return null;
    }
    await client.query('COMMIT');
    return response;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {});
    throw e;
  }
}

async function handle(key, raw) {
  if (!key) return problem(400, 'Idempotency-Key is missing');
  let request;
  try {
    const parsed = JSON.parse(raw.toString());
    request = { account: parsed.account, amount: parsed.amount };
    if (!Number.isInteger(request.account) || !Number.isInteger(request.amount)) throw new Error();
  } catch (e) {
    return problem(400, 'the body must be {"account": int, "amount": int}');
  }
  const fingerprint = crypto.createHash('sha256').update(raw).digest('hex');
  const client = await pool.connect();
  client.on('error', () => {});
  try {
    const { outcome, token, retry_after: retryAfter, result } = await begin(client, key, fingerprint);
    if (outcome === 'claimed' || outcome === 'taken_over') {
      const response = await pay(client, key, token, request);
      return response || problem(409, 'a request with this Idempotency-Key is being processed', 1);
    }
    if (outcome === 'processed') return { status: result.status, body: result.body };
    if (outcome === 'mismatch') return problem(422, 'this Idempotency-Key was used for another request');
    if (outcome === 'busy') {
      return problem(409, 'a request with this Idempotency-Key is being processed',
        Math.ceil(seconds(retryAfter)));
    }
    return problem(500, `the request could not be completed (${outcome})`);
  } finally {
    client.release();
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    let answer;
    if (req.method !== 'POST' || req.url !== '/payments') {
      answer = { status: 404, body: JSON.stringify({ title: 'not found' }) };
    } else {
      try {
        answer = await handle(req.headers['idempotency-key'], Buffer.concat(chunks));
      } catch (e) {
        answer = problem(500, `database error ${e.code || e.message}`);
      }
    }
    const data = Buffer.from(answer.body);
    const headers = {
      'Content-Type': answer.status >= 400 ? 'application/problem+json' : 'application/json',
      'Content-Length': data.length,
    };
    if (answer.retryAfter !== undefined) headers['Retry-After'] = String(answer.retryAfter);
    res.writeHead(answer.status, headers);
    res.end(data);
  });
});

server.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(`${portFile}.tmp`, String(server.address().port));
  fs.renameSync(`${portFile}.tmp`, portFile);
});
