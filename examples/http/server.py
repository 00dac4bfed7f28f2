#!/usr/bin/python3
"""examples/http/server.py: an HTTP API with idempotency keys, psycopg 3.

POST /payments with an Idempotency-Key header and a JSON body
{"account": 1, "amount": 250} records one payment.  The key is claimed
as a message id of the consumer "payments", with the hex SHA-256 of the
body as fingerprint, following draft-ietf-httpapi-idempotency-key-header-06:

  first request          201, the payment; the response is stored with
                         the claim's completion
  a retry (same body)    the stored response, status and body byte for byte
  same key, other body   422
  first still running    409 with Retry-After, or, with INBOX_HTTP_WAIT,
                         the first one's response once it finishes
  no key                 400

Usage: server.py CONNINFO PORT_FILE   (listens on a free loopback port,
                                       written to PORT_FILE)

Settings (environment): INBOX_HTTP_WAIT, seconds to wait for a request in
flight (default 0: answer 409); INBOX_HTTP_LEASE, seconds a claim is held
(default 30).  Test switches: INBOX_HTTP_EFFECT_DELAY, seconds the
payment takes; INBOX_HTTP_CRASH_KEY, a key for which the process exits
after the payment, before its transaction commits.
"""

import hashlib
import json
import math
import os
import sys
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
from psycopg.types.json import Jsonb

CONSUMER = "payments"
WAIT = timedelta(seconds=float(os.environ.get("INBOX_HTTP_WAIT", "0")))
LEASE = timedelta(seconds=float(os.environ.get("INBOX_HTTP_LEASE", "30")))
EFFECT_DELAY = float(os.environ.get("INBOX_HTTP_EFFECT_DELAY", "0"))
CRASH_KEY = os.environ.get("INBOX_HTTP_CRASH_KEY")
PROBLEMS = "https://github.com/inbox-extension/inbox/blob/main/examples/http/README.md"


def problem(status, title):
    """An RFC 9457 problem document, as the draft's examples answer."""
    return status, json.dumps({"type": PROBLEMS, "title": title, "status": status})


def begin(conn, key, fingerprint):
    """The claim, in its own transaction (autocommit): (outcome, token,
    retry_after, result).  With a wait, the procedure inbox_begin_wait
    sleeps while the first request holds the key, holding no snapshot;
    a CALL must run in autocommit mode, as here."""
    if WAIT:
        return conn.execute(
            "CALL inbox_begin_wait(%s, %s, wait => %s, lease => %s, fingerprint => %s)",
            (key, CONSUMER, WAIT, LEASE, fingerprint)).fetchone()
    return conn.execute(
        "SELECT outcome, token, retry_after, result"
        " FROM inbox_begin_outcome(%s, %s, lease => %s, fingerprint => %s)",
        (key, CONSUMER, LEASE, fingerprint)).fetchone()


def pay(conn, key, token, request):
    """The payment and the completion, with the response, in one
    transaction: both commit, or neither (a crash between them rolls the
    payment back, and a retry takes the claim over once its lease ran
    out).  Returns the response, or None when the claim was lost."""
    with conn.transaction():
        payment_id = conn.execute(
            "INSERT INTO payments (idempotency_key, account, amount)"
            " VALUES (%s, %s, %s) RETURNING id",
            (key, request["account"], request["amount"])).fetchone()[0]
        if EFFECT_DELAY:
            conn.execute("SELECT pg_sleep(%s)", (EFFECT_DELAY,))
        if key == CRASH_KEY:
            os._exit(3)                     # the test's crash, before the commit
        body = json.dumps({"id": payment_id, "account": request["account"],
                           "amount": request["amount"]})
        response = {"status": 201, "body": body}
        if not conn.execute("SELECT inbox_complete(%s, %s, %s, %s)",
                            (key, CONSUMER, token, Jsonb(response))).fetchone()[0]:
            # Another request took the claim over (this one outlived its
            # lease): its payment counts, not this one's.
            raise psycopg.Rollback()
        return response["status"], response["body"]
    return None


def handle(conninfo, key, raw):
    if not key:
        return problem(400, "Idempotency-Key is missing")
    try:
        request = json.loads(raw)
        request = {"account": int(request["account"]), "amount": int(request["amount"])}
    except (ValueError, KeyError, TypeError):
        return problem(400, "the body must be {\"account\": int, \"amount\": int}")
    fingerprint = hashlib.sha256(raw).hexdigest()
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        outcome, token, retry_after, result = begin(conn, key, fingerprint)
        if outcome in ("claimed", "taken_over"):
            response = pay(conn, key, token, request)
            if response is not None:
                return response
            return problem(409, "a request with this Idempotency-Key is being processed") + (1,)
        if outcome == "processed":
            return result["status"], result["body"]
        if outcome == "mismatch":
            return problem(422, "this Idempotency-Key was used for another request")
        if outcome == "busy":
            return problem(409, "a request with this Idempotency-Key is being processed") + \
                (math.ceil(retry_after.total_seconds()),)
        return problem(500, f"the request could not be completed ({outcome})")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/payments":
            self.answer(404, json.dumps({"title": "not found"}))
            return
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            answer = handle(self.server.conninfo, self.headers.get("Idempotency-Key"), raw)
        except psycopg.Error as e:
            answer = problem(500, f"database error {e.sqlstate or type(e).__name__}")
        self.answer(*answer)

    def answer(self, status, body, retry_after=None):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/problem+json"
                         if status >= 400 else "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def main():
    conninfo, port_file = sys.argv[1], sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.conninfo = conninfo
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
