"""examples/python/errors.py: what a consumer does with an error.

The README's Errors table, as code: every error sorts into one of four
actions, and the consumers here act on it.

  dead-letter  a poison message: set it aside, never retry it
  retry        roll back; the message comes again (nack)
  reconnect    the connection is gone or useless: nack, connect again
               with backoff
  stop         a deployment error: every message would fail; stop and
               alert
"""

import sys
import time

import psycopg

DEAD_LETTER = {"22004", "22023", "22001", "2202E", "22P02"}
RETRY = {"40001", "40P01", "55P03", "57014", "XX000"}
RECONNECT = {"57P01", "57P02", "57P03", "25006"}
# Server-side prepared statements through a pooler in transaction mode:
# the driver's setting is wrong, whatever the message.
STOP = {"42P05", "26000", "08P01"}


def action(error):
    """The action for a psycopg error (or any other exception)."""
    if not isinstance(error, psycopg.Error):
        return "retry"
    state = error.sqlstate
    if state is None:
        return "reconnect"              # the connection broke: no answer
    if state in STOP:
        return "stop"
    if state == "54000":
        # Two errors share it: a payload over 1 MB is poison; the 65th new
        # claim of one REPEATABLE READ transaction is not.
        primary = error.diag.message_primary or ""
        return "retry" if primary.startswith("too many subtransactions") else "dead-letter"
    if state in DEAD_LETTER:
        return "dead-letter"
    if state in RETRY:
        return "retry"
    if state in RECONNECT or state.startswith("08"):
        return "reconnect"
    return "stop"


def connect(conninfo, give_up_after=120, **kwargs):
    """psycopg.connect, retried with exponential backoff (0.1 s doubling
    to 5 s) while the server is down or starting, for give_up_after
    seconds."""
    delay, deadline = 0.1, time.monotonic() + give_up_after
    while True:
        try:
            return psycopg.connect(conninfo, **kwargs)
        except psycopg.OperationalError as e:
            if time.monotonic() + delay > deadline:
                raise
            print(f"# connect failed ({str(e).strip().splitlines()[0]}); again in {delay:.1f} s",
                  file=sys.stderr)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
