#!/usr/bin/python3
"""examples/http/test.py: the HTTP example's test, for either server.

Usage: test.py PREFIX CHECK_CONNINFO SERVER_ARG [--wait-only] -- SERVER_CMD...

Starts the server (SERVER_CMD SERVER_ARG PORT_FILE) as each scenario
needs it, sends requests with keys PREFIX-..., and checks the responses
and the payments table through CHECK_CONNINFO.  Prints one line per
check; exits 1 if any failed.

  concurrent identical requests, no wait: one payment; every answer the
    same 201 or a 409 with Retry-After
  a retry after success: the same 201, byte for byte
  the same key with another body: 422, no payment
  no key: 400
  concurrent identical requests, with a wait: one payment, every answer
    the same 201
  a crash between the payment and the completion (one transaction): no
    payment; the retry, once the lease ran out, pays once, and a retry
    after it gets the same 201
With --wait-only, only the scenario with a wait (the PgBouncer run).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import psycopg

prefix, check_conninfo, server_arg = sys.argv[1:4]
wait_only = "--wait-only" in sys.argv
server_cmd = sys.argv[sys.argv.index("--") + 1:]
failures = 0
servers = []


def check(what, got, want):
    global failures
    if got == want:
        print(f"  ok: {what}")
    else:
        failures += 1
        print(f"  FAIL: {what}: got {got!r}, want {want!r}")


class Server:
    def __init__(self, **env):
        self.dir = tempfile.mkdtemp()
        self.port_file = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.proc = subprocess.Popen(
            server_cmd + [server_arg, self.port_file],
            stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, **{k: str(v) for k, v in env.items()}})
        servers.append(self)
        for _ in range(200):            # until it listens (it writes the port)
            if os.path.exists(self.port_file) or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.url = f"http://127.0.0.1:{f.read()}/payments"

    def post(self, key, body):
        """(status, body bytes, Retry-After) or ("no response", error)."""
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.read(), r.headers.get("Retry-After")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Retry-After")
        except (OSError, urllib.error.URLError) as e:
            return "no response", type(e).__name__, None

    def concurrent(self, key, body, n):
        answers = [None] * n
        start = threading.Barrier(n)

        def send(i):
            start.wait()
            answers[i] = self.post(key, body)
        threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return answers

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait()


def stop_all():
    """Stop every server still running; show the log of any that wrote
    one (a traceback, a database error) when a check failed."""
    for server in servers:
        server.stop()
        server.log.seek(0)
        text = server.log.read()
        if failures and text:
            print(f"  server log ({' '.join(server_cmd)}):\n{text}")


def payments(key):
    with psycopg.connect(check_conninfo) as conn:
        return conn.execute("SELECT count(*) FROM payments WHERE idempotency_key = %s",
                            (key,)).fetchone()[0]


def marker(key):
    with psycopg.connect(check_conninfo) as conn:
        return conn.execute("SELECT state::text, attempts FROM inbox"
                            " WHERE message_id = %s AND consumer = 'payments'",
                            (key,)).fetchone()


BODY = json.dumps({"account": 7, "amount": 250}).encode()
OTHER = json.dumps({"account": 7, "amount": 999}).encode()

try:
    if not wait_only:
        # No wait: the first request pays; those that overlap it get 409.
        server = Server(INBOX_HTTP_EFFECT_DELAY=1)
        key = f"{prefix}-concurrent"
        answers = server.concurrent(key, BODY, 6)
        created = {a[1] for a in answers if a[0] == 201}
        check("concurrent: every answer is 201 or 409",
              sorted({a[0] for a in answers} - {409}), [201])
        check("concurrent: every 201 has the same body", len(created), 1)
        check("concurrent: every 409 has a Retry-After",
              all(a[2] is not None and int(a[2]) > 0 for a in answers if a[0] == 409), True)
        check("concurrent: some overlapped the first (409)", any(a[0] == 409 for a in answers), True)
        check("concurrent: one payment", payments(key), 1)
        first = created.pop() if created else None
        check("retry after success: the same 201, byte for byte",
              server.post(key, BODY)[:2], (201, first))
        status = server.post(key, OTHER)
        check("same key, another body: 422", (status[0], json.loads(status[1])["status"]), (422, 422))
        check("same key, another body: still one payment", payments(key), 1)
        check("no Idempotency-Key: 400", server.post(None, BODY)[0], 400)
        server.stop()

    # With a wait: the overlapping requests wait for the first, and replay it.
    server = Server(INBOX_HTTP_EFFECT_DELAY=1, INBOX_HTTP_WAIT=30)
    key = f"{prefix}-waiting"
    answers = server.concurrent(key, BODY, 6)
    check("concurrent, waiting: every answer is 201", sorted({a[0] for a in answers}), [201])
    check("concurrent, waiting: all the same body", len({a[1] for a in answers}), 1)
    check("concurrent, waiting: one payment", payments(key), 1)
    server.stop()

    if not wait_only:
        # A crash between the payment and the completion: one transaction, so
        # both roll back; the claim stays until its lease (1 s) runs out.
        key = f"{prefix}-crash"
        server = Server(INBOX_HTTP_LEASE=1, INBOX_HTTP_CRASH_KEY=key)
        check("crash: no response", server.post(key, BODY)[0], "no response")
        check("crash: the server exited at the switch", server.stop(), 3)
        check("crash: no payment", payments(key), 0)
        check("crash: the claim is left to its lease", marker(key), ("claimed", 1))
        # The retry waits for the lease to run out, then takes the claim over.
        server = Server(INBOX_HTTP_LEASE=1, INBOX_HTTP_WAIT=30)
        retried = server.post(key, BODY)
        check("crash, the retry: 201", retried[0], 201)
        check("crash, the retry: one payment", payments(key), 1)
        check("crash, a retry after it: the same 201, byte for byte",
              server.post(key, BODY)[:2], retried[:2])
        check("crash: the marker", marker(key), ("processed", 2))
        server.stop()
except Exception as e:
    failures += 1
    print(f"  FAIL: {type(e).__name__}: {e}")
finally:
    stop_all()

sys.exit(1 if failures else 0)
