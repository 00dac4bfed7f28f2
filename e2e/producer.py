#!/usr/bin/python3
"""e2e/producer.py: publishes the run's messages, paced over its window.

Every message is persistent, goes to a durable queue, and carries a
message_id (the id consumers claim).  A publish counts only once the
broker committed it (AMQP transactions, a batch at a time).  One message in twenty is published a
second time, later, as a producer retries a send whose confirm it never
got; and when the broker goes away mid-publish (the chaos driver restarts
it), the uncommitted batch is published again after reconnecting, which
may duplicate it for real.

The messages come from e2elib (the seed), so verify.py knows what was
published without being told.  Progress goes to WORK/producer.progress
("published TOTAL"), read by the chaos driver.

Usage: producer.py SECONDS   (publish everything over about SECONDS)
"""

import json
import os
import random
import sys
import time

import pika

import e2elib


def publish_order():
    """[(queue, message_id, body)] in publishing order: both kinds mixed,
    and the duplicates a few hundred messages after their first copy."""
    rng = random.Random(f"{e2elib.SEED}-producer")
    items = [(e2elib.CREDIT_QUEUE, mid, json.dumps({"account": account, "amount": amount}))
             for mid, account, amount in e2elib.credit_messages()]
    items += [(e2elib.NOTIFY_QUEUE, mid, json.dumps({"to": f"user-{mid[-4:]}"}))
              for mid in e2elib.notify_messages()]
    rng.shuffle(items)
    order = []
    later = []                              # (position, item): duplicates to come
    for i, item in enumerate(items):
        order.append(item)
        if rng.random() < e2elib.DUPLICATE_SHARE:
            later.append((i + rng.randint(1, 500), item))
        later.sort(key=lambda p: p[0])
        while later and later[0][0] <= i:
            order.append(later.pop(0)[1])
    order.extend(item for _, item in later)
    return order


class Publisher:
    """Publishes in AMQP transactions of up to BATCH messages: tx.commit-ok
    comes once the broker has the persistent messages on disk, so a batch
    is confirmed with one wait instead of one per message."""

    BATCH = 50

    def __init__(self, log):
        self.log = log
        self.connection = None
        self.channel = None

    def connect(self):
        self.connection = e2elib.amqp_connect()
        self.channel = self.connection.channel()
        e2elib.declare_queues(self.channel)
        self.channel.tx_select()

    def publish(self, batch):
        """Publishes BATCH [(queue, message_id, body)] until the broker
        commits it; retries over a broker restart."""
        while True:
            try:
                if self.channel is None:
                    self.connect()
                for queue, message_id, body in batch:
                    self.channel.basic_publish(
                        "", queue, body,
                        pika.BasicProperties(message_id=message_id, delivery_mode=2,
                                             content_type="application/json"))
                self.channel.tx_commit()
                return
            except e2elib.AMQP_LOST as e:
                # No commit-ok: the broker may have the batch or not (the
                # connection can die after the commit).  Send it again: a
                # duplicate at worst, which the consumers are there to absorb.
                self.log("retry", len(batch), type(e).__name__)
                self.channel = None


def main():
    seconds = float(sys.argv[1])
    log = e2elib.EventLog("producer")
    order = publish_order()
    log("start", len(order))
    publisher = Publisher(log)
    interval = Publisher.BATCH * seconds / len(order)
    due = time.monotonic()
    for i in range(0, len(order), Publisher.BATCH):
        # Paced, so that the chaos driver's faults land while traffic
        # flows.  After a broker outage, the rate resumes where it was
        # rather than catching up in a burst (at most a second's lag is
        # made up): the traffic lasts as long as the outage longer.
        ahead = due - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        publisher.publish(order[i:i + Publisher.BATCH])
        due = max(due + interval, time.monotonic() - 1.0)
        # Written aside and renamed: the chaos driver never reads it half done.
        with open(f"{e2elib.WORK}/producer.progress.tmp", "w") as f:
            f.write(f"{min(i + Publisher.BATCH, len(order))} {len(order)}\n")
        os.rename(f"{e2elib.WORK}/producer.progress.tmp", f"{e2elib.WORK}/producer.progress")
    log("done", len(order))
    publisher.connection.close()


if __name__ == "__main__":
    main()
