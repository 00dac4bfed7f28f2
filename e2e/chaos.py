#!/usr/bin/python3
"""e2e/chaos.py: runs the producer and the consumers, and the faults.

Starts the producer and the consumer processes (credit-1..., notify-1...;
the odd-numbered ones connect through PgBouncer, the others directly),
then works through a schedule of faults drawn from E2E_SEED:

  kill      arms a consumer to SIGKILL itself at one exact step of its next
            message: credit between claim and commit, between commit and
            ack; notify before the service call, during it, after it
            (before the complete), after the complete (before the ack);
  random    kill -9 of a consumer at whatever it is doing;
  pause     arms a notify consumer to SIGSTOP itself before the call or
            before the complete, and sends SIGCONT once another consumer
            has taken the message over and completed it (its lease ran out,
            the broker dropped the frozen consumer's connection and
            delivered the message again): it wakes up a stale owner;
  backend   pg_terminate_backend of a consumer's backend;
  pg-crash  PostgreSQL stopped in immediate mode (a crash: no checkpoint,
            recovery from WAL at the next start), then started;
  broker    the RabbitMQ application stopped and started in its running
            node (every connection dropped, the queues recovered from
            disk); in a soak, every other time, the node killed with
            SIGKILL and booted instead.

A consumer that dies is started again at once.  The run ends when the
producer is done, every fault has happened and the queues are drained
(seen empty twice in a row), or at the deadline.  Then the consumers are
stopped and WORK/chaos.json says what happened, for verify.py.

Usage: chaos.py   (settings from the environment, see e2e/run)
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import psycopg

import e2elib

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable
PGDATA = os.environ["E2E_PGDATA"]
PG_BIN = os.environ["E2E_PG_BIN"]
PG_LOG = os.environ["E2E_PG_LOG"]
CREDIT_CONSUMERS = int(os.environ.get("E2E_CREDIT_CONSUMERS", "4"))
NOTIFY_CONSUMERS = int(os.environ.get("E2E_NOTIFY_CONSUMERS", "3"))
PUBLISH_SECONDS = float(os.environ["E2E_PUBLISH_SECONDS"])
# After the last publish, how long the consumers may take to drain the
# queues before the run is declared stuck.
DRAIN_LIMIT = float(os.environ.get("E2E_DRAIN_LIMIT", "90"))
SOAK = os.environ.get("E2E_SOAK", "") not in ("", "0")

# A frozen owner is woken once another consumer has taken its message
# over and completed it (then its call must be refused, its complete
# false), or after PAUSE_LIMIT seconds in any case.
PAUSE_LIMIT = 30
# An armed consumer that has not reached its point by then (no message
# came, or it was stalled by another fault) is disarmed, and the fault is
# done again later, on whichever consumer is free then (while messages are
# still being published).
ARM_TIMEOUT = 20
POINTS = {
    "credit": ("before-commit", "after-commit"),
    "notify": ("before-call", "during-call", "after-call", "after-complete"),
}
PAUSE_POINTS = ("before-call", "after-call")


def say(text):
    print(text, flush=True)


class Slot:
    """One consumer process, restarted under the same name when it dies."""

    def __init__(self, kind, number):
        self.kind = kind
        self.name = f"{kind}-{number}"
        # application_name: the driver spares a frozen consumer's backend.
        self.dsn = (e2elib.BOUNCER_DSN if number % 2 else e2elib.PG_DSN) + f" application_name={self.name}"
        self.proc = None
        self.armed = None       # (action, point, since) while armed
        self.paused_at = None   # when it was seen stopped
        self.paused_point = None
        self.paused_claim = None    # (message_id, token) it holds, frozen
        self.killed = False     # SIGKILL sent by the driver itself

    def start(self):
        err = open(f"{e2elib.WORK}/log/{self.name}.err", "a")
        # SIGUSR1 blocked until the consumer has its handler (e2elib's
        # ChaosPoints): an arm sent during its start-up waits, rather than
        # killing it (the default action).
        self.proc = subprocess.Popen(
            [PYTHON, f"{HERE}/{self.kind}.py", self.name, self.dsn],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}))
        err.close()
        # e2e/run's cleanup kills what these files name.
        with open(f"{e2elib.WORK}/pids/{self.name}", "w") as f:
            f.write(f"{self.proc.pid}\n")
        self.armed = None
        self.paused_at = None
        self.killed = False

    def idle(self):
        return self.proc.poll() is None and self.armed is None and self.paused_at is None

    def stopped(self):
        """Whether the process is stopped (SIGSTOP): state T in /proc."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except (FileNotFoundError, IndexError):
            return False

    def arm(self, action, point):
        path = f"{e2elib.WORK}/arm/{self.name}"
        with open(path + ".tmp", "w") as f:
            f.write(f"{action} {point}\n" if action else "")
        os.rename(path + ".tmp", path)
        self.proc.send_signal(signal.SIGUSR1)
        self.armed = (action, point, time.monotonic()) if action else None

    def last_event(self):
        """The last line of this consumer's event log, split."""
        events = e2elib.read_events(self.name)
        return events[-1] if events else []


class Driver:
    def __init__(self):
        self.rng = random.Random(f"{e2elib.SEED}-chaos")
        self.started = time.monotonic()
        self.slots = ([Slot("credit", i) for i in range(1, CREDIT_CONSUMERS + 1)]
                      + [Slot("notify", i) for i in range(1, NOTIFY_CONSUMERS + 1)])
        self.counts = {}
        self.unplanned = []     # (name, exit status, last lines of stderr)
        self.db = None
        self.producer = None
        self.next_progress = 0
        self.next_takeover_check = 0
        self.faults = []        # [(seconds from start, fault, argument)], in order

    def count(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1

    def elapsed(self):
        return time.monotonic() - self.started

    # --- the schedule ---------------------------------------------------------

    def schedule(self):
        """[(seconds from start, fault, argument)], sorted: each kind of
        fault at least once, the rest spread over the publishing window."""
        window = PUBLISH_SECONDS
        scale = max(1.0, window / 40)
        faults = []
        for point in POINTS["credit"]:
            faults += [("kill", ("credit", point))] * round(3 * scale)
        for point in POINTS["notify"]:
            faults += [("kill", ("notify", point))] * round(2 * scale)
        for point in PAUSE_POINTS:
            faults += [("pause", ("notify", point))] * round(2 * scale)
        faults += [("random", None)] * round(6 * scale)
        faults += [("backend", None)] * round(5 * scale)
        # Within the first 85% of the window (pauses, which take seconds
        # each, 70%): an armed consumer needs messages still coming to reach
        # its point.
        timed = [(self.rng.uniform(2, (0.7 if f == "pause" else 0.85) * window), f, a)
                 for f, a in faults]
        # One crash and one broker restart (more in a soak), apart from each
        # other and from the ends of the window, so that traffic flows
        # before and after.
        crashes = 1 + (int(window // 120) if SOAK else 0)
        for i in range(crashes):
            span = window / crashes
            timed.append((span * i + self.rng.uniform(0.25, 0.45) * span, "pg-crash", None))
            timed.append((span * i + self.rng.uniform(0.55, 0.75) * span, "broker",
                          "crash" if SOAK and i % 2 == 0 else "restart"))
        return sorted(timed, key=lambda t: t[0])

    # --- the faults -------------------------------------------------------------

    def later(self, fault, argument):
        """Puts FAULT back in the schedule, half a second from now; or,
        for an armed kill or pause once everything is published, drops it:
        the consumers may have no message left to be caught in."""
        if fault in ("kill", "pause") and self.producer.poll() is not None:
            self.count("skipped (no traffic left)")
            return
        self.faults.append((self.elapsed() + 0.5, fault, argument))
        self.faults.sort(key=lambda t: t[0])

    def outage_over(self):
        """After a crash or a restart, during which no consumer could reach
        its point: the armed ones get their full ARM_TIMEOUT again."""
        for slot in self.slots:
            if slot.armed:
                slot.armed = slot.armed[:2] + (time.monotonic(),)

    def freezing(self):
        """The consumers frozen, or armed to freeze."""
        return [s for s in self.slots if s.paused_at or (s.armed and s.armed[0] == "pause")]

    def pick(self, kind=None):
        idle = [s for s in self.slots if s.idle() and (kind is None or s.kind == kind)]
        return self.rng.choice(idle) if idle else None

    def fault(self, fault, argument):
        """Does one fault; returns False to be tried again later."""
        if fault in ("kill", "pause"):
            kind, point = argument
            if fault == "pause" and len(self.freezing()) >= NOTIFY_CONSUMERS - 1:
                # One notify consumer never frozen: it must be free to take
                # the frozen ones' messages over, which is what wakes them.
                return False
            slot = self.pick(kind)
            if slot is None:
                return False
            slot.arm(fault, point)
        elif fault == "random":
            slot = self.pick()
            if slot is None:
                return False
            slot.killed = True
            slot.proc.send_signal(signal.SIGKILL)
        elif fault == "backend":
            return self.terminate_backend()
        elif fault == "pg-crash" and self.freezing():
            # Not while an owner is frozen: its connection would die with
            # the server, and it would wake to an error rather than as the
            # stale owner it is meant to be.
            return False
        elif fault == "pg-crash":
            say(f"  {self.elapsed():5.1f}s  PostgreSQL: immediate stop (a crash), then start")
            # The worker's counts live in shared memory and start again at
            # zero: keep what it released so far.
            self.counts["reclaimed before crashes"] = (
                self.counts.get("reclaimed before crashes", 0) + self.worker_reclaimed())
            run([f"{PG_BIN}/pg_ctl", "-D", PGDATA, "-m", "immediate", "-w", "stop"])
            run([f"{PG_BIN}/pg_ctl", "-D", PGDATA, "-l", PG_LOG, "-w", "start"])
            self.db = None
            self.outage_over()
            self.count("pg-crash")
            say(f"  {self.elapsed():5.1f}s  PostgreSQL: up again")
        elif fault == "broker" and argument == "restart":
            say(f"  {self.elapsed():5.1f}s  RabbitMQ: application stopped, then started")
            run([f"{HERE}/broker", "restart"])
            self.outage_over()
            self.count("broker-restart")
            say(f"  {self.elapsed():5.1f}s  RabbitMQ: up again")
        elif fault == "broker":
            say(f"  {self.elapsed():5.1f}s  RabbitMQ: node killed (SIGKILL), then booted")
            run([f"{HERE}/broker", "kill"])
            run([f"{HERE}/broker", "start"])
            self.outage_over()
            self.count("broker-crash")
            say(f"  {self.elapsed():5.1f}s  RabbitMQ: up again")
        return True

    def terminate_backend(self):
        """Terminates one consumer's backend: its transaction is rolled back
        and its connection (or PgBouncer's server connection) dies."""
        try:
            db = self.connection()
            # Not a frozen consumer's (see the crash, above).
            pids = [r[0] for r in db.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                " AND application_name <> ALL (%s) ORDER BY pid",
                ([s.name for s in self.freezing()],)).fetchall()]
            if not pids:
                return False
            db.execute("SELECT pg_terminate_backend(%s)", (self.rng.choice(pids),))
        except psycopg.Error:
            self.db = None
            return False
        self.count("backend")
        return True

    def worker_reclaimed(self):
        """Expired claims the worker released since the server started."""
        try:
            return self.connection().execute(
                "SELECT coalesce(sum(reclaimed_total), 0)::bigint FROM inbox.inbox_worker_status()"
                " WHERE database = current_database()").fetchone()[0]
        except psycopg.Error:
            self.db = None
            return 0

    def connection(self):
        if self.db is None or self.db.closed:
            self.db = psycopg.connect(e2elib.PG_DSN, autocommit=True, connect_timeout=5)
        return self.db

    # --- watching the consumers ---------------------------------------------------

    def watch(self, stopping=False):
        """Restarts dead consumers, counting how each died; resumes paused
        ones; disarms consumers that got no message in time."""
        now = time.monotonic()
        for slot in self.slots:
            status = slot.proc.poll()
            if status is not None:
                last = slot.last_event()
                if slot.killed:
                    self.count("kill random")
                elif status == -signal.SIGKILL and last[:1] == ["kill"]:
                    self.count(f"kill {slot.kind} {last[1]}")
                else:
                    self.unplanned.append((slot.name, status, tail(f"{e2elib.WORK}/log/{slot.name}.err")))
                    self.count("unplanned exit")
                if not stopping:
                    slot.start()
                continue
            if slot.paused_at is None and slot.stopped():
                slot.paused_at = now
                slot.armed = None
                slot.paused_point, slot.paused_claim = paused_where(e2elib.read_events(slot.name))
            elif slot.paused_at is not None and (now - slot.paused_at >= PAUSE_LIMIT
                                                 or self.taken_over(slot.paused_claim)):
                slot.proc.send_signal(signal.SIGCONT)
                slot.paused_at = None
                self.count(f"pause {slot.kind} {slot.paused_point}")
            elif slot.armed and now - slot.armed[2] > ARM_TIMEOUT:
                action, point = slot.armed[:2]
                slot.arm(None, None)
                self.later(action, (slot.kind, point))
                self.count("disarmed")

    def taken_over(self, claim):
        """Whether another owner completed the message CLAIM (message_id,
        token) names, with a later token.  Asked at most twice a second."""
        if claim is None or time.monotonic() < self.next_takeover_check:
            return False
        self.next_takeover_check = time.monotonic() + 0.5
        try:
            row = self.connection().execute(
                "SELECT state::text, token FROM inbox.inbox"
                " WHERE message_id = %s AND consumer = 'notify'", (claim[0],)).fetchone()
        except psycopg.Error:
            self.db = None      # down (the crash): ask again later
            return False
        return row is not None and row[0] == "processed" and row[1] > claim[1]

    def progress(self, force=False):
        if not force and time.monotonic() < self.next_progress:
            return
        self.next_progress = time.monotonic() + 5
        try:
            with open(f"{e2elib.WORK}/producer.progress") as f:
                published, total = f.read().split()
        except (FileNotFoundError, ValueError):
            published, total = 0, "?"
        try:
            credited, notified = self.connection().execute(
                "SELECT (SELECT count(*) FROM ledger),"
                " (SELECT count(*) FROM inbox.inbox WHERE consumer = 'notify' AND state = 'processed')"
            ).fetchone()
        except psycopg.Error:
            self.db = None
            credited = notified = "?"
        kills = sum(n for k, n in self.counts.items() if k.startswith("kill"))
        pauses = sum(n for k, n in self.counts.items() if k.startswith("pause"))
        say(f"  {self.elapsed():5.1f}s  published {published}/{total}"
            f"  credited {credited}/{e2elib.MESSAGES}  notified {notified}/{e2elib.MESSAGES_2PC}"
            f"  kills {kills}  pauses {pauses}  backends {self.counts.get('backend', 0)}"
            f"  crashes {self.counts.get('pg-crash', 0)}"
            f"  broker restarts {self.counts.get('broker-restart', 0) + self.counts.get('broker-crash', 0)}")

    # --- the run ------------------------------------------------------------------

    def run(self):
        for d in ("log", "arm", "pids"):
            os.makedirs(f"{e2elib.WORK}/{d}", exist_ok=True)
        self.faults = self.schedule()
        say(f"  {len(self.faults)} faults over {PUBLISH_SECONDS:.0f} s, seed {e2elib.SEED}")
        self.producer = subprocess.Popen(
            [PYTHON, f"{HERE}/producer.py", str(PUBLISH_SECONDS)],
            stdin=subprocess.DEVNULL, stderr=open(f"{e2elib.WORK}/log/producer.err", "a"))
        with open(f"{e2elib.WORK}/pids/producer", "w") as f:
            f.write(f"{self.producer.pid}\n")
        for slot in self.slots:
            slot.start()

        # The faults, in order, while watching the consumers; then until
        # every pause is resumed, every arm used, the producer done.
        give_up = PUBLISH_SECONDS + DRAIN_LIMIT
        while (self.faults or self.producer.poll() is None
               or any(s.armed or s.paused_at for s in self.slots)):
            self.watch()
            self.progress()
            if self.faults and self.elapsed() >= self.faults[0][0]:
                _, fault, argument = self.faults.pop(0)
                if not self.fault(fault, argument):
                    # Not possible now (no consumer free for it, say).
                    self.later(fault, argument)
            if self.elapsed() > give_up:
                # Something is stuck (a producer that cannot publish, say):
                # stop here; verify.py reports what is left.
                say(f"  {self.elapsed():5.1f}s  stuck: giving up on {len(self.faults)} faults")
                self.counts["faults not done"] = len(self.faults)
                break
            time.sleep(0.05)
        producer_status = self.producer.returncode
        say(f"  {self.elapsed():5.1f}s  faults done, producer exited ({producer_status}); draining")

        # Drained: every queue empty (ready and unacked) twice in a row.
        deadline = time.monotonic() + DRAIN_LIMIT
        empty_in_a_row = 0
        queues = {}
        while empty_in_a_row < 2 and time.monotonic() < deadline:
            self.watch()
            self.progress()
            queues = broker_queues()
            empty_in_a_row = empty_in_a_row + 1 if queues and not any(queues.values()) else 0
        drained = empty_in_a_row >= 2
        self.progress(force=True)
        say(f"  {self.elapsed():5.1f}s  " + ("queues drained" if drained else
                                             f"NOT drained by the deadline: {queues}"))
        self.stop()
        with open(f"{e2elib.WORK}/chaos.json", "w") as f:
            json.dump({
                "seed": e2elib.SEED,
                "counts": self.counts,
                "unplanned": self.unplanned,
                "producer_status": producer_status,
                "drained": drained,
                "queues": queues,
                "seconds": round(self.elapsed(), 1),
            }, f, indent=1)

    def stop(self):
        for slot in self.slots:
            if slot.proc and slot.proc.poll() is None:
                slot.proc.send_signal(signal.SIGCONT)
                slot.proc.terminate()
        for slot in self.slots:
            if slot.proc:
                slot.proc.wait()
        if self.producer and self.producer.poll() is None:
            self.producer.kill()
            self.producer.wait()


def paused_where(events):
    """(point, (message_id, token)) for a consumer that froze itself: the
    point from its last event ("pause POINT"), the claim from the last
    begin before it ("begin ID OUTCOME TOKEN")."""
    if not events or events[-1][0] != "pause":
        return "?", None
    for e in reversed(events):
        if e[0] == "begin" and e[3] != "None":
            return events[-1][1], (e[1], int(e[3]))
    return events[-1][1], None


def run(command):
    subprocess.run(command, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def broker_queues():
    """{queue: messages ready + unacked}, or {} if the broker did not answer."""
    result = subprocess.run([f"{HERE}/broker", "queues"], capture_output=True, text=True)
    if result.returncode != 0:
        return {}
    queues = {}
    for line in result.stdout.splitlines():
        name, messages = line.split()
        queues[name] = int(messages)
    return queues


def tail(path, lines=5):
    try:
        with open(path) as f:
            return f.read().splitlines()[-lines:]
    except FileNotFoundError:
        return []


def main():
    driver = Driver()
    # Interrupted (e2e/run's cleanup, Ctrl-C): take the consumers along.
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(130))
    signal.signal(signal.SIGINT, lambda *a: sys.exit(130))
    try:
        driver.run()
    finally:
        for slot in driver.slots:
            if slot.proc and slot.proc.poll() is None:
                slot.proc.kill()
        if driver.producer and driver.producer.poll() is None:
            driver.producer.kill()


if __name__ == "__main__":
    main()
