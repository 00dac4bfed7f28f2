#!/usr/bin/python3
"""e2e/verify.py: counts every effect at the end of a run, and judges it.

What must hold (each miss is a violation):
  one-phase   every credit message applied exactly once: one ledger row
              per message id, none unknown, every balance the sum of its
              messages' amounts, one processed marker per message;
  two-phase   every notify message processed, and its effect applied once
              by the service; no processed marker without an effect; no
              token held by two owners at once; every inbox_complete that
              returned true made with the marker's last token (a stale
              owner's complete returns false);
  the run     the queues drained, the producer done.
And the run must have met the danger it is about, or it proves nothing:
duplicates caught on a broker redelivery, expired leases released by the
worker, takeovers, stale tokens refused by the service, stale completes
refused.

Writes the summary (Markdown) to WORK/summary.md and prints it; exits 1
on any violation or an unexercised danger.

Usage: verify.py   (settings from the environment, see e2e/run)
"""

import glob
import json
import os
import sys
import time
import urllib.request
from collections import Counter

import psycopg

import e2elib

STARTED = float(os.environ.get("E2E_STARTED", time.time()))


def consumer_events(kind):
    """Every event of every consumer of KIND, in log order per consumer."""
    events = []
    for path in sorted(glob.glob(f"{e2elib.WORK}/log/{kind}-*.log")):
        events += e2elib.read_events(os.path.basename(path)[:-4])
    return events


class Verdict:
    def __init__(self):
        self.violations = []    # (what, how many, examples)
        self.unexercised = []

    def check(self, what, bad):
        """BAD: the offending items (ids, or descriptions)."""
        bad = list(bad)
        if bad:
            self.violations.append((what, len(bad), bad[:5]))

    def exercised(self, what, count):
        if count == 0:
            self.unexercised.append(what)


def main():
    verdict = Verdict()
    chaos = json.load(open(f"{e2elib.WORK}/chaos.json"))
    db = psycopg.connect(e2elib.PG_DSN, autocommit=True)
    stats = json.load(urllib.request.urlopen(f"http://127.0.0.1:{e2elib.SERVICE_PORT}/stats"))

    # --- one-phase ------------------------------------------------------------
    credits = e2elib.credit_messages()
    rows = Counter(dict(db.execute(
        "SELECT message_id, count(*) FROM ledger GROUP BY message_id").fetchall()))
    expected_ids = {m for m, _, _ in credits}
    verdict.check("credit messages lost (no ledger row)",
                  (m for m in sorted(expected_ids) if rows[m] == 0))
    verdict.check("credit messages applied more than once",
                  (f"{m} x{rows[m]}" for m in sorted(expected_ids) if rows[m] > 1))
    verdict.check("ledger rows of unknown messages", (m for m in rows if m not in expected_ids))
    expected_balance = Counter()
    for _, account, amount in credits:
        expected_balance[account] += amount
    balances = dict(db.execute("SELECT id, balance FROM accounts").fetchall())
    verdict.check("accounts with a wrong balance",
                  (f"account {a}: {balances.get(a)} instead of {expected_balance[a]}"
                   for a in sorted(set(balances) | set(expected_balance))
                   if balances.get(a, 0) != expected_balance[a]))
    credit_markers = db.execute(
        "SELECT count(*) FILTER (WHERE state = 'processed'), count(*)"
        " FROM inbox.inbox WHERE consumer = 'credit'").fetchone()
    verdict.check("credit markers other than one processed per message",
                  [f"{credit_markers[0]} processed, {credit_markers[1]} in all, "
                   f"{len(credits)} messages"] if credit_markers != (len(credits), len(credits)) else [])

    ce = consumer_events("credit")
    c = Counter(e[0] for e in ce)
    redelivered = sum(1 for e in ce if e[0] == "deliver" and e[2] == "1")
    dup_redelivered = sum(1 for e in ce if e[0] == "duplicate" and e[2] == "1")
    verdict.exercised("a broker redelivery meeting a committed marker (credit)", dup_redelivered)

    # --- two-phase ------------------------------------------------------------
    notifies = e2elib.notify_messages()
    markers = {m: (state, token) for m, state, token in db.execute(
        "SELECT message_id, state::text, token FROM inbox.inbox WHERE consumer = 'notify'").fetchall()}
    keys = stats["keys"]
    verdict.check("notify messages not processed",
                  (f"{m} ({markers.get(m, ('no marker',))[0]})" for m in notifies
                   if markers.get(m, (None,))[0] != "processed"))
    # The service applies a key at most once (its idempotency key), so what
    # can go wrong here is an effect never applied; a second application
    # would show as a token held by two owners, or a stale call accepted.
    verdict.check("notify effects missing",
                  (m for m in notifies if keys.get(m, {}).get("applied", 0) == 0))
    verdict.check("tokens held by two owners at once",
                  (f"{k} token {t}: {a} and {b}" for k, t, a, b in stats["shared_tokens"]))
    notify_ids = set(notifies)
    verdict.check("service calls for unknown keys", (k for k in keys if k not in notify_ids))

    ne = consumer_events("notify")
    n = Counter(e[0] for e in ne)
    begins = Counter(e[2] for e in ne if e[0] == "begin")
    completes = [e for e in ne if e[0] == "complete"]
    verdict.check("inbox_complete true with a token that was not the last",
                  (f"{e[1]} token {e[2]} (last {markers.get(e[1], (None, None))[1]})"
                   for e in completes if e[3] == "1" and int(e[2]) != markers.get(e[1], (None, None))[1]))
    stale_completes = sum(1 for e in completes if e[3] == "0")
    # The worker's count since the server's last start, plus what chaos.py
    # read before each crash.
    reclaimed = db.execute("SELECT coalesce(sum(reclaimed_total), 0)::bigint FROM inbox.inbox_worker_status()"
                           " WHERE database = current_database()").fetchone()[0]
    reclaimed += chaos["counts"].get("reclaimed before crashes", 0)
    verdict.exercised("an expired lease released by the worker", reclaimed)
    refused = sum(k["refused"] for k in keys.values())
    # A begin answers taken_over after an inbox_fail released the claim too;
    # the danger is a takeover of a lease that ran out.
    released_by_fail = sum(1 for e in ne if e[0] == "fail" and e[3] == "1")
    verdict.exercised("a two-phase takeover of an expired lease",
                      max(0, begins["taken_over"] - released_by_fail))
    verdict.exercised("a stale token refused by the service", refused)
    verdict.exercised("a stale owner's inbox_complete refused", stale_completes)

    # --- the run ----------------------------------------------------------------
    verdict.check("queues not drained",
                  [] if chaos["drained"] else
                  ([f"{q}: {m}" for q, m in chaos["queues"].items() if m] or ["the broker did not answer"]))
    verdict.check("faults not done (the run got stuck)",
                  [str(chaos["counts"]["faults not done"])] if chaos["counts"].get("faults not done") else [])
    verdict.check("producer failed",
                  [f"exit status {chaos['producer_status']}"] if chaos["producer_status"] != 0 else [])

    producer = e2elib.read_events("producer")
    published = int(next((e[1] for e in producer if e[0] == "start"), 0))
    retried = sum(int(e[1]) for e in producer if e[0] == "retry")
    counts = chaos["counts"]
    kills = sorted((k[5:], v) for k, v in counts.items() if k.startswith("kill "))
    pauses = sorted((k[6:], v) for k, v in counts.items() if k.startswith("pause "))

    nviol = sum(v[1] for v in verdict.violations)
    passed = nviol == 0 and not verdict.unexercised
    elapsed = time.time() - STARTED
    lines = [
        "# e2e: the last run",
        "",
        f"{'PASS' if passed else 'FAIL'}: {nviol} violations"
        + (f", {len(verdict.unexercised)} dangers not exercised" if verdict.unexercised else "")
        + f"{', E2E_BROKEN=' + e2elib.BROKEN if e2elib.BROKEN else ''}.",
        f"Seed {e2elib.SEED} (`E2E_SEED={e2elib.SEED} make e2e` draws the same messages and faults),"
        f" {elapsed:.0f} s in all, {chaos['seconds']:.0f} s of traffic and faults;"
        f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| | |",
        "|---|---:|",
        f"| messages published, one-phase (credit) | {len(credits)} |",
        f"| messages published, two-phase (notify) | {len(notifies)} |",
        f"| publishes in all (some twice on purpose) | {published} |",
        f"| publishes repeated (no commit-ok before the broker went away) | {retried} |",
        f"| deliveries, credit | {c['deliver']} |",
        f"| redeliveries, credit (broker's flag) | {redelivered} |",
        f"| duplicates caught, credit (claim false) | {c['duplicate']} |",
        f"| of which broker redeliveries of a committed message | {dup_redelivered} |",
        f"| errors rolled back and nacked, credit | {c['error']} |",
        f"| effects, credit (ledger rows) | {sum(rows.values())} |",
        f"| deliveries, notify | {n['deliver']} |",
        f"| begins: claimed, taken over, busy, processed, failed | {begins['claimed']}, "
        f"{begins['taken_over']}, {begins['busy']}, {begins['processed']}, {begins['failed']} |",
        f"| service calls applied, replayed, refused (stale token), failed (injected) | "
        f"{sum(k['applied'] for k in keys.values())}, {sum(k['replays'] for k in keys.values())}, "
        f"{refused}, {sum(k['injected'] for k in keys.values())} |",
        f"| expired leases released by the worker | {reclaimed} |",
        f"| completes true, false (stale owner) | {len(completes) - stale_completes}, {stale_completes} |",
        f"| inbox_fail calls | {n['fail']} |",
        f"| redelivered through the delay queue | {n['redeliver']} |",
        f"| errors nacked, notify | {n['error']} |",
        f"| kills | {', '.join(f'{k} {v}' for k, v in kills) or 0} |",
        f"| pauses past the lease | {', '.join(f'{k} {v}' for k, v in pauses) or 0} |",
        f"| backends terminated | {counts.get('backend', 0)} |",
        f"| PostgreSQL crashes (immediate stop) | {counts.get('pg-crash', 0)} |",
        f"| RabbitMQ restarts (application), crashes (node killed) | "
        f"{counts.get('broker-restart', 0)}, {counts.get('broker-crash', 0)} |",
        f"| arms withdrawn (no message in time), of which not done again | "
        f"{counts.get('disarmed', 0)}, {counts.get('skipped (no traffic left)', 0)} |",
        f"| unplanned consumer exits | {counts.get('unplanned exit', 0)} |",
        f"| violations | {nviol} |",
        "",
    ]
    if verdict.violations:
        lines += ["Violations:", ""]
        lines += [f"- {what}: {count} (for example {', '.join(map(str, examples))})"
                  for what, count, examples in verdict.violations]
        lines.append("")
    if verdict.unexercised:
        lines += ["Not exercised (the run proves nothing about it):", ""]
        lines += [f"- {what}" for what in verdict.unexercised]
        lines.append("")
    if chaos["unplanned"]:
        lines += ["Unplanned consumer exits (last lines of stderr):", ""]
        for name, status, tail in chaos["unplanned"][:5]:
            lines.append(f"- {name}, status {status}: {' / '.join(tail)}")
        lines.append("")
    summary = "\n".join(lines)
    with open(f"{e2elib.WORK}/summary.md", "w") as f:
        f.write(summary)
    print(summary)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
