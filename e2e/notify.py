#!/usr/bin/python3
"""e2e/notify.py: a two-phase consumer, written the way the README says.

Its side effect is a call to an external service (e2e/fencing.py), which
cannot join a database transaction.  So each step is its own short
transaction (autocommit): inbox_begin_outcome commits the claim, the
service is called with the message id as the idempotency key and the
claim's token as the fence, and inbox_complete marks it processed.

    on message m:
        outcome, token, retry_after = select * from inbox_begin_outcome(m.id, 'notify', ...)
        if outcome in ('processed', 'failed'): ack m; return
        if outcome is 'busy': redeliver m after retry_after; return   -- never ack
        try:
            send(m, idempotency_key = m.id, fencing_token = token)
            if select inbox_complete(m.id, 'notify', token): ack m
            else: redeliver m                                          -- ownership was lost
        except error e:
            select inbox_fail(m.id, 'notify', token, e.message)
            redeliver m

"Redeliver" is RabbitMQ's recipe from the README: republish the message
to a delay queue (x-message-ttl, dead-lettered back to the work queue),
and ack the original once the broker confirmed the copy.

The lines "chaos(...)" are where the chaos driver can kill or freeze this
process at an exact step; they do nothing unless it armed them.
E2E_BROKEN=ack-busy acks a busy message, the mistake the README warns
about, to check that the harness catches it.

Usage: notify.py NAME DSN   (NAME: this consumer's log name; DSN: where to
                             connect, PostgreSQL or PgBouncer)
"""

import http.client
import json
import os
import sys
from datetime import timedelta

import psycopg
from psycopg.types.json import Jsonb

import e2elib

CONSUMER = "notify"
# The service answers in milliseconds; a lease of 2 seconds lets a dead
# owner's message be taken over quickly.  (Production: several times the
# side effect's p99.)
LEASE = timedelta(seconds=2)
PREFETCH = 5
# Short, so that the broker notices a frozen consumer within seconds and
# delivers its messages to another one, as a takeover needs.
HEARTBEAT = 2


class ServiceError(Exception):
    pass


class Service:
    """The external service, over one keep-alive HTTP connection."""

    def __init__(self, caller):
        self.caller = caller
        self.http = None

    def send(self, key, token, chaos):
        """Applies the effect of KEY with TOKEN as the fence; returns the
        HTTP status (201 applied, 200 replay) or raises ServiceError."""
        try:
            if self.http is None:
                self.http = http.client.HTTPConnection("127.0.0.1", e2elib.SERVICE_PORT, timeout=10)
            self.http.request("POST", "/effects", body=b"", headers={
                "Idempotency-Key": key, "Fencing-Token": str(token), "Caller": self.caller})
            # The request is sent and the service may be applying it: dying
            # here leaves an effect this owner never hears about.
            chaos("during-call")
            response = self.http.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as e:
            self.http.close()
            self.http = None
            raise ServiceError(f"{type(e).__name__}: {e}")
        if response.status not in (200, 201):
            # 409: a later owner exists (this one's lease ran out); 503: the
            # service failed.  Either way this owner stops here.
            raise ServiceError(f"HTTP {response.status}")
        return response.status


def handle(db, service, message_id, body, ack, redeliver, log, chaos):
    """The README's handler."""
    outcome, token, retry_after = db.execute(
        "SELECT outcome, token, retry_after"
        " FROM inbox_begin_outcome(%s, %s, lease => %s, payload => %s)",
        (message_id, CONSUMER, LEASE, Jsonb(body))).fetchone()
    log("begin", message_id, outcome, token)
    if outcome in ("processed", "failed"):
        ack()
        return
    if outcome == "busy":
        if e2elib.BROKEN == "ack-busy":
            ack()                           # WRONG, on purpose: see the docstring
            return
        # Never ack: the holder may die.  The delay queue brings it back.
        redeliver("busy")
        return
    # "claimed" or "taken_over": this delivery owns the message, with token.
    chaos("before-call")
    try:
        status = service.send(message_id, token, chaos)
        log("call", message_id, token, status)
    except ServiceError as e:
        log("call", message_id, token, str(e).replace(" ", "_"))
        released = db.execute("SELECT inbox_fail(%s, %s, %s, %s)",
                            (message_id, CONSUMER, token, str(e))).fetchone()[0]
        log("fail", message_id, token, int(released))
        redeliver("error")                  # retried, or failed for good
        return
    chaos("after-call")
    completed = db.execute("SELECT inbox_complete(%s, %s, %s)",
                           (message_id, CONSUMER, token)).fetchone()[0]
    log("complete", message_id, token, int(completed))
    if completed:
        chaos("after-complete")
        ack()
    else:
        redeliver("lost")                   # the next begin says what is left


def consume(name, dsn, log, chaos):
    """Consumes until killed; reconnects to the broker and to the database
    when the chaos driver restarts them."""
    db = e2elib.pg_connect(dsn)
    service = Service(f"{name}:{os.getpid()}")
    while True:
        amqp = e2elib.amqp_connect(heartbeat=HEARTBEAT)
        try:
            channel = amqp.channel()
            e2elib.declare_queues(channel)
            channel.confirm_delivery()      # so that redeliver() knows the copy is safe
            channel.basic_qos(prefetch_count=PREFETCH)
            for method, properties, body in channel.consume(e2elib.NOTIFY_QUEUE):
                message_id = properties.message_id
                log("deliver", message_id, int(method.redelivered))

                def ack():
                    channel.basic_ack(method.delivery_tag)

                def redeliver(why):
                    log("redeliver", message_id, why)
                    channel.basic_publish("", e2elib.NOTIFY_DELAY_QUEUE, body, properties)
                    channel.basic_ack(method.delivery_tag)

                try:
                    handle(db, service, message_id, json.loads(body), ack, redeliver, log, chaos)
                except psycopg.Error as e:
                    # The database went away (crash, terminated backend) or
                    # refused: whatever was claimed keeps its lease, and the
                    # redelivery's begin says what is left.
                    log("error", message_id, e.sqlstate or type(e).__name__)
                    db = e2elib.pg_usable(db, dsn)
                    channel.basic_nack(method.delivery_tag, requeue=True)
        except e2elib.AMQP_LOST as e:
            log("amqp-lost", type(e).__name__)
        finally:
            e2elib.amqp_close(amqp)


def main():
    name, dsn = sys.argv[1:3]
    log = e2elib.EventLog(name)
    chaos = e2elib.ChaosPoints(name, log)
    log("start")
    consume(name, dsn, log, chaos)


if __name__ == "__main__":
    main()
