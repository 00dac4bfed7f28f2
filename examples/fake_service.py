#!/usr/bin/env python3
"""examples/fake_service.py: the external service of the two-phase examples.

A loopback HTTP server standing in for an e-mail or payment API that the
examples' two-phase handlers call.  It does what a downstream must do for
two-phase claims to give exactly-once effects:

  - the message id arrives as the idempotency key (header Idempotency-Key):
    a key whose effect was applied is answered 200 again, without a second
    effect;
  - the claim's token arrives as the fence (header Fencing-Token): a token
    lower than the highest seen for the key is refused with 409, so a stale
    owner (one whose lease ran out while it paused) cannot act after the
    owner that took over.

POST /send      applies the effect of a key (201 applied, 200 replay of an
                applied key, 409 stale token, 503 injected failure)
GET /stats?prefix=P   plain text about the keys starting with P: "keys N"
                (keys seen), "applied N" (keys whose effect was applied),
                "replays N" (requests answered 200: a handler sent an
                applied key again, which the claim should have prevented),
                "rejected N" (409), "injected N" (503)

Usage: fake_service.py PORTFILE [--fail-first-suffix S]
It listens on a free loopback port and writes the port to PORTFILE.  With
--fail-first-suffix, the first request of every key ending in S fails with
503 before any effect, so the handlers' inbox_fail and takeover paths run.
"""

import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

lock = threading.Lock()
highest = {}        # key -> highest token seen (accepted or not)
applied = set()     # keys whose effect was applied (once: it is idempotent)
replays = {}        # key -> requests for a key already applied
rejected = {}       # key -> requests refused for a stale token
injected = {}       # key -> injected failures
fail_suffix = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Keep-alive clients (Node's fetch) would otherwise wait for a delayed
    # ACK between the headers and the body of each answer: 40 ms a request.
    disable_nagle_algorithm = True

    def reply(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        key = self.headers.get("Idempotency-Key")
        token = self.headers.get("Fencing-Token")
        if urlparse(self.path).path != "/send" or not key or not token:
            return self.reply(400, "need POST /send with Idempotency-Key and Fencing-Token\n")
        # Tokens are bigints: compare them as integers.  (Compared as strings,
        # which is what a Node client holds, "9" would outrank "10".)
        token = int(token)
        with lock:
            if token < highest.get(key, token):
                rejected[key] = rejected.get(key, 0) + 1
                return self.reply(409, "stale token\n")
            highest[key] = token
            if fail_suffix and key.endswith(fail_suffix) and key not in injected:
                injected[key] = 1
                return self.reply(503, "injected failure\n")
            if key in applied:
                replays[key] = replays.get(key, 0) + 1
                return self.reply(200, "replay\n")
            applied.add(key)
        return self.reply(201, "applied\n")

    def do_GET(self):
        url = urlparse(self.path)
        if url.path != "/stats":
            return self.reply(404, "not found\n")
        prefix = parse_qs(url.query).get("prefix", [""])[0]
        with lock:
            keys = [k for k in highest if k.startswith(prefix)]
            done = sum(1 for k in keys if k in applied)
            rep = sum(replays.get(k, 0) for k in keys)
            rej = sum(rejected.get(k, 0) for k in keys)
            inj = sum(injected.get(k, 0) for k in keys)
        self.reply(200, f"keys {len(keys)}\napplied {done}\nreplays {rep}\n"
                        f"rejected {rej}\ninjected {inj}\n")

    def log_message(self, *args):
        pass


def main():
    global fail_suffix
    args = sys.argv[1:]
    if "--fail-first-suffix" in args:
        i = args.index("--fail-first-suffix")
        fail_suffix = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit("usage: fake_service.py PORTFILE [--fail-first-suffix S]")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # Written under a temporary name and renamed, so a reader polling for
    # the file never sees it half written.
    with open(args[0] + ".tmp", "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.rename(args[0] + ".tmp", args[0])
    server.serve_forever()


if __name__ == "__main__":
    main()
