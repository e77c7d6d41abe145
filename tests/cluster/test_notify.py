"""LISTEN/NOTIFY as a hint (cluster/notify.py, issue 15): a rebalance that moves leaders
notifies every listener; one that changes nothing does not; a listener stops promptly."""

from __future__ import annotations

import threading
import time

from cluster_store import session, wait_until
from oncelog.cluster import leadership, topics
from oncelog.cluster.notify import MetadataListener


def test_a_rebalance_that_moves_leaders_notifies_listeners(store) -> None:
    heard = threading.Event()
    count = [0]

    def on_notify() -> None:
        count[0] += 1
        heard.set()

    listener = MetadataListener(store.connect, on_notify).start()
    try:
        time.sleep(0.5)  # the listener's LISTEN is in place (a notification before it is lost: a hint)
        session(store.dsn, 1).register()
        topics.create(store.conn, "orders", 3)
        assert leadership.rebalance(store.conn).changes
        wait_until(heard.is_set, 10, what="a notification")
        before = count[0]
        assert not leadership.rebalance(store.conn).changes
        time.sleep(1.0)
        assert count[0] == before
    finally:
        started = time.monotonic()
        listener.close()
        assert time.monotonic() - started < 5
