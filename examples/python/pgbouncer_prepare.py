#!/usr/bin/python3
"""examples/python/pgbouncer_prepare.py: psycopg's prepared statements
through PgBouncer in transaction pooling mode.

psycopg 3 prepares a query on the server once a connection has run it
prepare_threshold times (5 by default), under a name of its own ("_pg3_0",
"_pg3_1", ...), and from then on executes it by that name.  A pooler in
transaction mode hands each transaction any server connection of the pool:
a statement prepared on one is missing on the others (SQLSTATE 26000,
prepared statement "_pg3_0" does not exist), and another client preparing
under the same name on the same server connection collides (42P05,
prepared statement "_pg3_0" already exists).  PgBouncer 1.21 and later
track protocol-level prepared statements when max_prepared_statements is
set above 0; earlier ones cannot.

Usage: pgbouncer_prepare.py ONE_CONNECTION_POOL TWO_CONNECTION_POOL
(two conninfo strings through PgBouncer, to pools of 1 and 2 server
connections).  Prints one line per run: "NAME: F of T failed [SQLSTATEs]".
"""

import sys
import threading

import psycopg

CLAIM = "SELECT inbox_claim(%s, %s)"


def run(conn, ids, failures):
    for message_id in ids:
        try:
            with conn.transaction():
                conn.execute(CLAIM, (message_id, "prepare")).fetchone()
        except psycopg.Error as e:
            failures.append(e.sqlstate)


def report(name, total, failures):
    states = ",".join(sorted(set(failures)))
    print(f"{name}: {len(failures)} of {total} failed{' ' + states if states else ''}")


def sequential(conninfo, name, **options):
    """Two clients, one after the other, each running the claim six times,
    through a pool of one server connection: deterministic."""
    failures = []
    clients = [psycopg.connect(conninfo, autocommit=True, **options) for _ in range(2)]
    for n, conn in enumerate(clients):
        run(conn, [f"{name}-{n}-{i}" for i in range(6)], failures)
    report(name, 12, failures)


def concurrent(conninfo, name, **options):
    """Four clients at once, 40 claims each, through a pool of two server
    connections: what a consumer fleet meets.  The count varies."""
    failures = []
    clients = [psycopg.connect(conninfo, autocommit=True, **options) for _ in range(4)]
    threads = [threading.Thread(target=run, args=(conn, [f"{name}-{n}-{i}" for i in range(40)], failures))
               for n, conn in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report(name, 160, failures)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    one, two = sys.argv[1:]
    sequential(one, "default-sequential")                     # prepare_threshold=5
    concurrent(two, "default-concurrent")
    sequential(one, "none-sequential", prepare_threshold=None)
    concurrent(two, "none-concurrent", prepare_threshold=None)


if __name__ == "__main__":
    main()
