"""e2e/e2elib.py: what the end-to-end programs share.

- the run's settings, from the environment e2e/run exports (E2E_*);
- the messages, generated from the seed, so the producer that publishes
  them and verify.py that counts their effects agree without a manifest;
- the queues' names and declarations;
- connecting to PostgreSQL and RabbitMQ, and waiting for them to come back
  after the chaos driver took them down;
- the event log every program appends to (one line per event, one write()
  per line, so a SIGKILL never leaves half a line), read by verify.py;
- the chaos points: places in a consumer where the chaos driver can have
  it die (SIGKILL) or freeze (SIGSTOP) at an exact step of a message.
"""

import os
import random
import signal
import time

import pika
import psycopg

# --- settings ---------------------------------------------------------------

WORK = os.environ.get("E2E_WORK", "")
SEED = int(os.environ.get("E2E_SEED", "1"))
MESSAGES = int(os.environ.get("E2E_MESSAGES", "20000"))
MESSAGES_2PC = int(os.environ.get("E2E_MESSAGES_2PC", "4000"))
ACCOUNTS = int(os.environ.get("E2E_ACCOUNTS", "50"))
BROKEN = os.environ.get("E2E_BROKEN", "")
PG_DSN = os.environ.get("E2E_PG_DSN", "")            # PostgreSQL, directly
BOUNCER_DSN = os.environ.get("E2E_BOUNCER_DSN", "")  # through PgBouncer
AMQP_PORT = int(os.environ.get("E2E_AMQP_PORT", "5672"))
SERVICE_PORT = int(os.environ.get("E2E_SERVICE_PORT", "0"))

# Share of messages the producer publishes a second time, as a producer
# whose confirm was lost would.
DUPLICATE_SHARE = 0.05

# --- messages ---------------------------------------------------------------

CREDIT_QUEUE = "e2e.credit"
NOTIFY_QUEUE = "e2e.notify"
# Where the two-phase handler parks a message it must not ack yet (a live
# claim holds it): after the TTL, RabbitMQ dead-letters it back to the work
# queue.  This is the README's "redeliver m after retry_after" for RabbitMQ.
NOTIFY_DELAY_QUEUE = "e2e.notify.delay"
NOTIFY_DELAY_MS = 1000


def credit_messages():
    """The one-phase messages: [(message_id, account, amount)]."""
    rng = random.Random(f"{SEED}-credit")
    return [(f"credit-{i:06d}", rng.randint(1, ACCOUNTS), rng.randint(1, 1000))
            for i in range(1, MESSAGES + 1)]


def notify_messages():
    """The two-phase messages: [message_id]."""
    return [f"notify-{i:06d}" for i in range(1, MESSAGES_2PC + 1)]


def declare_queues(channel):
    """Declares the durable queues (idempotent: every program calls it)."""
    channel.queue_declare(CREDIT_QUEUE, durable=True)
    channel.queue_declare(NOTIFY_QUEUE, durable=True)
    channel.queue_declare(NOTIFY_DELAY_QUEUE, durable=True, arguments={
        "x-message-ttl": NOTIFY_DELAY_MS,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": NOTIFY_QUEUE,
    })


# --- connections --------------------------------------------------------------

# How long a program waits for a server the chaos driver took down.  A
# PostgreSQL crash and restart takes a second or two here, a broker restart
# about fifteen; past this the program gives up and exits, and the chaos
# driver counts it as an unplanned exit.
OUTAGE_LIMIT = 90


def pg_connect(dsn):
    """A psycopg connection in autocommit: each transaction is an explicit
    conn.transaction() block, or one statement.  prepare_threshold=None:
    no server-side prepared statements, which PgBouncer's transaction
    pooling breaks (README, PgBouncer and poolers).  Retries while the
    server is down (crashed by the chaos driver, or restarting)."""
    deadline = time.monotonic() + OUTAGE_LIMIT
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True, prepare_threshold=None,
                                   connect_timeout=5)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def pg_usable(conn, dsn):
    """After an error: CONN if it answers, else a new connection, once the
    server (or PgBouncer's server connection) answers again.  Waiting here,
    before the message goes back to the broker, keeps an outage from
    spinning the message between the consumers."""
    deadline = time.monotonic() + OUTAGE_LIMIT
    while True:
        try:
            if conn.closed:
                conn = pg_connect(dsn)
            conn.execute("SELECT 1")
            return conn
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            conn.close()
            time.sleep(0.1)


def amqp_connect(heartbeat=30):
    """A blocking pika connection to the test's broker, retried while the
    broker restarts.  The heartbeat is how the broker notices a consumer
    that froze: after about that many seconds without a frame it closes
    the connection and delivers the consumer's unacked messages again."""
    params = pika.ConnectionParameters(
        host="127.0.0.1", port=AMQP_PORT, heartbeat=heartbeat,
        connection_attempts=1, socket_timeout=5, blocked_connection_timeout=30)
    deadline = time.monotonic() + OUTAGE_LIMIT
    while True:
        try:
            return pika.BlockingConnection(params)
        except pika.exceptions.AMQPConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# The exceptions that mean "the broker connection is gone": reconnect and
# carry on (unacked messages come back from the broker).
AMQP_LOST = (pika.exceptions.AMQPConnectionError,
             pika.exceptions.AMQPChannelError,
             pika.exceptions.StreamLostError,
             ConnectionError)


def amqp_close(conn):
    """Close a broker connection that may already be gone."""
    if conn.is_open:
        try:
            conn.close()
        except AMQP_LOST:
            pass


# --- event log ----------------------------------------------------------------

class EventLog:
    """Appends "event field..." lines to WORK/log/NAME.log, one write()
    each: O_APPEND makes every line whole even when the writer is killed,
    and the restarted process appends to the same file."""

    def __init__(self, name):
        os.makedirs(f"{WORK}/log", exist_ok=True)
        self.fd = os.open(f"{WORK}/log/{name}.log",
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, *fields):
        os.write(self.fd, (" ".join(str(f) for f in fields) + "\n").encode())


def read_events(name):
    """The lines of WORK/log/NAME.log, split into fields."""
    try:
        with open(f"{WORK}/log/{name}.log") as f:
            return [line.split() for line in f]
    except FileNotFoundError:
        return []


# --- chaos points ---------------------------------------------------------------

class ChaosPoints:
    """The chaos driver arms a consumer by writing "kill POINT" or "pause
    POINT" to WORK/arm/NAME and sending SIGUSR1.  When the consumer next
    reaches POINT, it logs it and sends itself SIGKILL (dies on the spot,
    as with kill -9) or SIGSTOP (frozen until the driver's SIGCONT, as in a
    long GC pause or a stalled VM).  Unarmed, a point costs a comparison."""

    def __init__(self, name, log):
        self.path = f"{WORK}/arm/{name}"
        self.log = log
        self.armed = None
        signal.signal(signal.SIGUSR1, self._arm)
        # The driver starts consumers with SIGUSR1 blocked (see chaos.py).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})

    def _arm(self, signum, frame):
        try:
            with open(self.path) as f:
                words = f.read().split()
            os.unlink(self.path)
        except FileNotFoundError:
            words = []
        self.armed = tuple(words) if len(words) == 2 else None

    def __call__(self, point):
        if self.armed is None or self.armed[1] != point:
            return
        action = self.armed[0]
        self.armed = None
        self.log(action, point)
        os.kill(os.getpid(), signal.SIGKILL if action == "kill" else signal.SIGSTOP)
