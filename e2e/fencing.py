#!/usr/bin/python3
"""e2e/fencing.py: the external service the two-phase consumers call.

A loopback HTTP server standing in for an e-mail or payment API: the side
effect that cannot join the database transaction.  It does what a
downstream must do for two-phase claims to give exactly-once effects, and
counts everything for verify.py:

  - the message id is the idempotency key (header Idempotency-Key): the
    first accepted call applies the effect, a later one is a replay
    (answered 200, no second effect);
  - the claim's token is the fence (header Fencing-Token): a token lower
    than the highest seen for the key is refused with 409, so an owner
    whose lease ran out while it was frozen cannot act after the owner
    that took over;
  - the caller names itself (header Caller, "consumer:pid"): one token
    arriving from two callers would mean the inbox gave one claim to two
    owners at once, which verify.py reports.

The first call for one key in twenty-five fails with 503 before any
effect, so the handlers' inbox_fail path runs.

POST /effects   201 applied, 200 replay, 409 stale token, 503 injected
GET /stats      JSON: per key, its counts; and the shared tokens

Usage: fencing.py PORT
"""

import json
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import e2elib

lock = threading.Lock()
keys = {}           # key -> its record, see Key
shared_tokens = []  # (key, token, first caller, second caller)


class Key:
    def __init__(self):
        self.highest = 0        # highest token seen, accepted or not
        self.applied = 0        # effects applied (must end at 1)
        self.applied_token = None
        self.replays = 0
        self.refused = 0        # stale tokens refused
        self.injected = 0
        self.callers = {}       # token -> the caller that first sent it


def injects_failure(key):
    return zlib.crc32(f"{e2elib.SEED}-{key}".encode()) % 25 == 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"       # keep-alive: one connection per consumer
    disable_nagle_algorithm = True

    def log_message(self, *args):       # no line per request on stderr
        pass

    def reply(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if body.startswith("{") else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass                        # the caller died waiting (the chaos)

    def do_GET(self):
        if self.path != "/stats":
            return self.reply(404, "not found\n")
        with lock:
            body = json.dumps({
                "keys": {k: {"applied": r.applied, "applied_token": r.applied_token,
                             "highest": r.highest, "replays": r.replays,
                             "refused": r.refused, "injected": r.injected}
                         for k, r in keys.items()},
                "shared_tokens": shared_tokens,
            })
        self.reply(200, body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        key = self.headers.get("Idempotency-Key")
        token = self.headers.get("Fencing-Token")
        caller = self.headers.get("Caller", "?")
        if self.path != "/effects" or not key or not token:
            return self.reply(400, "need POST /effects with Idempotency-Key and Fencing-Token\n")
        token = int(token)
        with lock:
            r = keys.setdefault(key, Key())
            if token < r.highest:
                r.refused += 1
                return self.reply(409, "stale token\n")
            r.highest = token
            first = r.callers.setdefault(token, caller)
            if first != caller:
                shared_tokens.append((key, token, first, caller))
            if r.applied == 0 and injects_failure(key) and r.injected == 0:
                r.injected += 1
                return self.reply(503, "injected failure\n")
            if r.applied:
                r.replays += 1
                return self.reply(200, "replay\n")
            r.applied += 1
            r.applied_token = token
        self.reply(201, "applied\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A caller killed mid-request (the chaos) resets its connection:
        # expected, not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def main():
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
