#!/usr/bin/python3
"""examples/python/twophase.py: a two-phase inbox handler with psycopg 3.

For a side effect that cannot join the database transaction (here an HTTP
call to examples/fake_service.py): begin (commit the claim), call the
service with the message id as the idempotency key and the claim's token as
the fence, then complete, each step in its own short transaction.

Usage:
  twophase.py CONNINFO SERVICE_URL      consume standard input, one message
                                        per line, "message_id<TAB>account
                                        <TAB>amount"; prints "ack ID ..."
                                        or "nack ID ..."
  twophase.py stale CONNINFO SERVICE_URL MESSAGE_ID
                                        a stale owner, step by step: its
                                        send is fenced and its completion
                                        refused
"""

import os
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from datetime import timedelta

import psycopg
from psycopg.types.json import Jsonb

import errors

CONSUMER = "notify"
# INBOX_EXAMPLE_LEASE (seconds): the test's restart run shortens it, so
# that a claim whose owner lost its connection is taken over sooner.
LEASE = timedelta(seconds=float(os.environ.get("INBOX_EXAMPLE_LEASE", "30")))


def connect(conninfo):
    # autocommit=True is what makes it two-phase: each statement commits at
    # once, so the claim is visible to every other instance before the side
    # effect starts.  With psycopg's default (autocommit=False) the begin
    # stays uncommitted until conn.commit(): other instances block on it,
    # and a crash rolls it back after the side effect: not two-phase at all.
    # prepare_threshold=None: see consumer.py (PgBouncer).  errors.connect
    # retries with backoff while the server is down or starting.
    return errors.connect(conninfo, autocommit=True, prepare_threshold=None)


def begin(conn, message_id, payload, lease=LEASE):
    # A dict must be wrapped in Jsonb(...): psycopg adapts no dict by itself
    # ("cannot adapt type 'dict'").  The lease is a timedelta (an interval).
    # The token comes back as a Python int (bigint), or None.
    return conn.execute(
        "SELECT outcome, token, retry_after"
        " FROM inbox_begin_outcome(%s, %s, lease => %s, payload => %s)",
        (message_id, CONSUMER, lease, Jsonb(payload))).fetchone()


def send(url, message_id, token):
    """Call the service; returns its HTTP status (201 applied, 200 replay,
    409 refused: a later token was seen for this key)."""
    request = urllib.request.Request(
        url + "/send", data=b"{}", method="POST",
        headers={"Idempotency-Key": message_id, "Fencing-Token": str(token)})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        if e.code == 409:
            return 409
        raise


def complete(conn, message_id, token):
    return conn.execute("SELECT inbox_complete(%s, %s, %s)",
                        (message_id, CONSUMER, token)).fetchone()[0]


def handle(conn, url, message_id, payload):
    """Returns ("ack", why) or ("nack", why, delay in seconds)."""
    outcome, token, retry_after = begin(conn, message_id, payload)
    if outcome in ("processed", "failed"):
        return ("ack", outcome)             # alert on a failed one
    if outcome == "busy":
        # A live claim holds it: never ack (its holder may die).  A broker
        # would redeliver after retry_after; the holders here finish in
        # milliseconds, so the stand-in retries sooner.
        return ("nack", "busy", min(retry_after.total_seconds(), 0.02))
    # "claimed" or "taken_over": this call owns the message.
    try:
        status = send(url, message_id, token)
    except Exception as e:
        conn.execute("SELECT inbox_fail(%s, %s, %s, %s)",
                     (message_id, CONSUMER, token, str(e)))
        return ("nack", "error", 0)
    if status == 409:
        return ("nack", "fenced", 0)        # a later owner exists
    if complete(conn, message_id, token):
        return ("ack", "done")
    return ("nack", "lost", 0)              # the next begin says what is left


def consume(conninfo, url):
    conn = connect(conninfo)
    queue = deque()
    for line in sys.stdin:
        message_id, account, amount = line.rstrip("\n").split("\t")
        queue.append((message_id, {"account": int(account), "amount": int(amount)}))
    while queue:
        message_id, payload = queue.popleft()
        if conn.closed:
            conn = connect(conninfo)
        try:
            answer = handle(conn, url, message_id, payload)
        except psycopg.Error as e:
            # The README's Errors table (errors.py).  A claim this process
            # began and could not complete is left to its lease: the
            # redelivery answers busy until it runs out, then taken_over.
            what = errors.action(e)
            state = e.sqlstate or type(e).__name__
            if what == "dead-letter":
                print("dead-letter", message_id, state)
                continue
            if what == "stop":
                print(f"stop {message_id} {state}: {e}", file=sys.stderr)
                sys.exit(3)
            if what == "reconnect":
                conn.close()
            answer = ("nack", f"{what} {state}", 0)
        print(answer[0], message_id, answer[1])
        if answer[0] == "nack":
            time.sleep(answer[2])
            queue.append((message_id, payload))
    conn.close()


def stale(conninfo, url, message_id):
    """Owner A claims with a 1 second lease and pauses past it; owner B
    takes over; then A wakes up and carries on with its old token."""
    a, b = connect(conninfo), connect(conninfo)
    outcome_a, token_a, _ = begin(a, message_id, {}, timedelta(seconds=1))
    print("first begin:", outcome_a)
    while True:
        # B's begin answers busy, with the lease A has left, until it ran out.
        outcome_b, token_b, retry_after = begin(b, message_id, {})
        if outcome_b != "busy":
            break
        time.sleep(retry_after.total_seconds())
    print("second begin:", outcome_b)
    print("later token is higher:", str(token_b > token_a).lower())
    print("new owner send:", send(url, message_id, token_b))
    print("stale owner send:", send(url, message_id, token_a))
    print("stale owner complete:", str(complete(a, message_id, token_a)).lower())
    print("new owner complete:", str(complete(b, message_id, token_b)).lower())


def main():
    args = sys.argv[1:]
    if len(args) == 4 and args[0] == "stale":
        stale(*args[1:])
    elif len(args) == 2:
        consume(*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
