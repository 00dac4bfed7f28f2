#!/usr/bin/python3
"""e2e/credit.py: a one-phase consumer, written the way the README says.

For each message from the queue e2e.credit (pika), in ONE transaction on
ONE connection (psycopg 3): inbox_claim, the business change (credit the
account, write a ledger row), commit.  Then ack, also when the claim said
false (done before: skip).  An error rolls everything back and leaves the
message to the broker (nack with requeue), which delivers it again.

    on message m:
        begin transaction
        if select inbox_claim(m.id, 'credit'):
            apply the business change
        commit
        ack m            -- on both paths: done now, or done before

The lines "chaos(...)" are where the chaos driver can kill this process at
an exact step; they do nothing unless it armed them.  E2E_BROKEN selects
one of the deliberately wrong handlers at the end of the file, to check
that the harness catches them.

Usage: credit.py NAME DSN   (NAME: this consumer's log name; DSN: where to
                             connect, PostgreSQL or PgBouncer)
"""

import json
import sys

import psycopg

import e2elib

CONSUMER = "credit"
PREFETCH = 20


def handle(conn, message_id, account, amount, ack, chaos):
    """The README's handler.  Returns whether this delivery did the work.
    ACK acks the delivery (passed in so that the broken variants below can
    call it at the wrong moment)."""
    with conn.transaction():
        claimed = conn.execute("SELECT inbox_claim(%s, %s)",
                               (message_id, CONSUMER)).fetchone()[0]
        if claimed:
            conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s",
                         (amount, account))
            conn.execute("INSERT INTO ledger (message_id, account, amount) VALUES (%s, %s, %s)",
                         (message_id, account, amount))
        chaos("before-commit")
    # Committed.  Dying here, before the ack, is the classic duplicate: the
    # broker delivers the message again and the claim answers false.
    chaos("after-commit")
    ack()
    return claimed


def consume(dsn, handler, log, chaos):
    """Consumes until killed; reconnects to the broker and to the database
    when the chaos driver restarts them."""
    conn = e2elib.pg_connect(dsn)
    while True:
        amqp = e2elib.amqp_connect()
        try:
            channel = amqp.channel()
            e2elib.declare_queues(channel)
            channel.basic_qos(prefetch_count=PREFETCH)
            for method, properties, body in channel.consume(e2elib.CREDIT_QUEUE):
                message_id = properties.message_id
                log("deliver", message_id, int(method.redelivered))
                data = json.loads(body)
                try:
                    claimed = handler(conn, message_id, data["account"], data["amount"],
                                      lambda: channel.basic_ack(method.delivery_tag), chaos)
                except psycopg.Error as e:
                    # Rolled back (or, if the connection died during COMMIT,
                    # maybe committed: the redelivery's claim will tell).
                    log("error", message_id, e.sqlstate or type(e).__name__)
                    conn = e2elib.pg_usable(conn, dsn)
                    channel.basic_nack(method.delivery_tag, requeue=True)
                    continue
                log("claimed" if claimed else "duplicate", message_id, int(method.redelivered))
        except e2elib.AMQP_LOST as e:
            log("amqp-lost", type(e).__name__)
        finally:
            e2elib.amqp_close(amqp)


# --- Deliberately broken handlers (E2E_BROKEN=...) ----------------------------
# Each makes a mistake the README warns about.  The chaos kills turn the
# mistake into lost messages, which verify.py must report.

def handle_ack_before_commit(conn, message_id, account, amount, ack, chaos):
    """Acks inside the transaction: dying before the commit loses the
    message (the broker forgot it, the database rolled it back)."""
    with conn.transaction():
        claimed = conn.execute("SELECT inbox_claim(%s, %s)",
                               (message_id, CONSUMER)).fetchone()[0]
        if claimed:
            conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s",
                         (amount, account))
            conn.execute("INSERT INTO ledger (message_id, account, amount) VALUES (%s, %s, %s)",
                         (message_id, account, amount))
        ack()
        chaos("before-commit")
    chaos("after-commit")
    return claimed


def handle_claim_outside_transaction(conn, message_id, account, amount, ack, chaos):
    """Claims in autocommit, then changes the business tables in a second
    transaction: dying in between leaves a marker without its effect, and
    the redelivery is skipped as a duplicate."""
    claimed = conn.execute("SELECT inbox_claim(%s, %s)",
                           (message_id, CONSUMER)).fetchone()[0]
    if claimed:
        with conn.transaction():
            conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s",
                         (amount, account))
            conn.execute("INSERT INTO ledger (message_id, account, amount) VALUES (%s, %s, %s)",
                         (message_id, account, amount))
            chaos("before-commit")
    chaos("after-commit")
    ack()
    return claimed


HANDLERS = {
    "": handle,
    "ack-before-commit": handle_ack_before_commit,
    "claim-outside-transaction": handle_claim_outside_transaction,
}


def main():
    name, dsn = sys.argv[1:3]
    log = e2elib.EventLog(name)
    chaos = e2elib.ChaosPoints(name, log)
    log("start")
    consume(dsn, HANDLERS.get(e2elib.BROKEN, handle), log, chaos)


if __name__ == "__main__":
    main()
