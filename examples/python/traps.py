#!/usr/bin/python3
"""examples/python/traps.py: the type traps of psycopg 3 with inbox, shown.

Each line printed is a fact examples/test compares with what
examples/README.md says.  Usage: traps.py CONNINFO
"""

import sys
import uuid

import psycopg
from psycopg.types.json import Jsonb


def sqlstate(conn, sql, args):
    try:
        conn.execute(sql, args)
        return "ok"
    except psycopg.Error as e:
        return e.sqlstate or type(e).__name__


def main():
    conn = psycopg.connect(sys.argv[1], autocommit=True, prepare_threshold=None)
    begin = "SELECT token FROM inbox_begin_outcome(%s, 'traps', payload => %s)"

    # A dict is not adapted by itself: wrap it in Jsonb(...).
    print("dict payload:", sqlstate(conn, begin, ("py-trap-1", {"to": "a@example.com"})))
    print("Jsonb(dict) payload:", sqlstate(conn, begin, ("py-trap-2", Jsonb({"to": "a@example.com"}))))

    # Tokens are bigint: Python ints, exact at any size.
    token = conn.execute("SELECT inbox_begin('py-trap-3', 'traps')").fetchone()[0]
    print("token type:", type(token).__name__)

    # A Python int is sent as a number: no inbox_claim takes one.
    print("int message id:", sqlstate(conn, "SELECT inbox_claim(%s, 'traps')", (1001,)))
    print("str message id:", sqlstate(conn, "SELECT inbox_claim(%s, 'traps')", ("1001",)))

    # A uuid.UUID goes to the uuid overload, stored in canonical form, so
    # the same id as text (lower case) is a duplicate.
    u = uuid.UUID("6F9619FF-8B86-D011-B42D-00C04FC964FF")
    claim = "SELECT inbox_claim(%s, 'traps')"
    print("uuid, then the same as text:",
          conn.execute(claim, (u,)).fetchone()[0], conn.execute(claim, (str(u),)).fetchone()[0])

    # psycopg's default, autocommit=False, keeps a begin in an open
    # transaction: not committed, so another instance's begin waits for it
    # (here until its lock_timeout), and a crash would roll it back.
    tx = psycopg.connect(sys.argv[1], prepare_threshold=None)
    tx.execute("SELECT inbox_begin('py-trap-4', 'traps')")
    conn.execute("SET lock_timeout = '200ms'")
    print("begin held in an open transaction, another begin:",
          sqlstate(conn, "SELECT inbox_begin('py-trap-4', 'traps')", ()))
    tx.rollback()
    tx.close()
    conn.close()


if __name__ == "__main__":
    main()
