#!/usr/bin/python3
"""examples/python/consumer.py: a one-phase inbox consumer with psycopg 3.

Reads messages from standard input, one per line, "message_id<TAB>account
<TAB>amount": the test's stand-in for a broker.  For each one it opens a
transaction, claims the message with inbox_claim, credits the account and
writes a ledger row, and commits: the claim and the business change commit
together or not at all.  It acks (prints "ack ID done" or "ack ID
duplicate") on both answers.  On an error it does what the README's Errors
table says (errors.py): nacks it ("nack ID retry|reconnect SQLSTATE"), and
the stand-in broker delivers the message again later; reconnects, with
backoff, when the connection is gone (a restart, a terminated backend);
dead-letters a poison message; stops on a deployment error.

Usage: consumer.py CONNINFO [--fail-every N]
--fail-every N makes the first delivery of every Nth message fail after
its claim and business change, before the commit: a crash stand-in.  A
correct consumer loses nothing to it (the claim rolls back with the rest).
"""

import sys
from collections import deque

import psycopg

import errors

CONSUMER = "ledger"


class SimulatedCrash(Exception):
    pass


def handle(conn, message_id, account, amount, crash):
    # The claim and the business change in ONE transaction.  A claim
    # committed on its own (another connection, or autocommit before the
    # UPDATE) would survive a failed UPDATE, and the redelivery would then
    # be skipped as a duplicate: the message would be lost silently.
    with conn.transaction():
        # message_id must be a str (text) or a uuid.UUID (uuid): a Python
        # int is sent as a number, and there is no inbox_claim(integer, ...)
        # (SQLSTATE 42883).  Use str(offset) for a Kafka offset.
        claimed = conn.execute(
            "SELECT inbox_claim(%s, %s)", (message_id, CONSUMER)).fetchone()[0]
        if not claimed:
            return "duplicate"
        conn.execute(
            "UPDATE accounts SET balance = balance + %s WHERE id = %s",
            (amount, account))
        conn.execute(
            "INSERT INTO ledger (message_id, account, amount) VALUES (%s, %s, %s)",
            (message_id, account, amount))
        if crash:
            raise SimulatedCrash("simulated crash before commit")
    return "done"


def main():
    args = sys.argv[1:]
    fail_every = 0
    if "--fail-every" in args:
        i = args.index("--fail-every")
        fail_every = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit("usage: consumer.py CONNINFO [--fail-every N]")

    # autocommit=True and explicit conn.transaction() blocks: every
    # transaction's bounds are visible in the code.  (The default,
    # autocommit=False, opens a transaction at the first statement and
    # keeps it open until commit(): fine here, wrong for two-phase claims.)
    # prepare_threshold=None: no server-side prepared statements, which
    # PgBouncer's transaction pooling breaks before 1.21 (and from 1.21 on
    # unless max_prepared_statements is set).  Without such a pooler the
    # default (prepare from the 5th execution) is fine.
    def connect():
        return errors.connect(args[0], autocommit=True, prepare_threshold=None)

    conn = connect()
    queue = deque()
    order = {}
    for line in sys.stdin:
        message_id, account, amount = line.rstrip("\n").split("\t")
        order.setdefault(message_id, len(order) + 1)
        queue.append((message_id, int(account), int(amount)))

    crashed = set()
    while queue:
        message_id, account, amount = queue.popleft()
        crash = (fail_every and order[message_id] % fail_every == 0
                 and message_id not in crashed)
        if crash:
            crashed.add(message_id)
        if conn.closed:
            conn = connect()            # with backoff while the server restarts
        try:
            answer = handle(conn, message_id, account, amount, crash)
        except (SimulatedCrash, psycopg.Error) as e:
            # What to do is the README's Errors table (errors.py).  Not
            # acked, except a poison message, which goes to a dead-letter
            # queue (here: a line) instead of coming back forever.
            what = errors.action(e)
            state = getattr(e, "sqlstate", None) or type(e).__name__
            if what == "dead-letter":
                print(f"dead-letter {message_id} {state}")
                continue
            if what == "stop":
                print(f"stop {message_id} {state}: {e}", file=sys.stderr)
                sys.exit(3)
            print(f"nack {message_id} {what} {state}")
            queue.append((message_id, account, amount))
            if what == "reconnect":
                conn.close()
            continue
        print(f"ack {message_id} {answer}")
    conn.close()


if __name__ == "__main__":
    main()
