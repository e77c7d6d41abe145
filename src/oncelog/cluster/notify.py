"""A hint that the cluster's metadata changed: LISTEN on ``oncelog_metadata``.

``leadership.rebalance`` sends ``NOTIFY oncelog_metadata`` in the transaction that moves
leaders, so brokers can react at once instead of at their next poll. Notifications are not
durable (one sent while a listener is disconnected is lost), so they are only a hint: brokers
poll as well, and nothing depends on a notification arriving.

``ChannelListener`` LISTENs on any channel (the outbox drainer uses it for ``oncelog_outbox``);
``MetadataListener`` is the one on ``oncelog_metadata``. Each owns one thread and one
connection: it LISTENs, calls ``on_notify`` (on its own thread: the callee hops to its event
loop) for every notification, and reconnects after a failure (pausing ``RECONNECT_PAUSE_S``); ``close`` stops it within about ``WAIT_S``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from oncelog.cluster.leadership import METADATA_CHANNEL

__all__ = ["ChannelListener", "MetadataListener"]

log = logging.getLogger(__name__)

#: how long one wait for notifications lasts (bounds how long ``close`` takes)
WAIT_S = 0.5
RECONNECT_PAUSE_S = 1.0


class ChannelListener:
    """LISTEN on ``channel`` on its own thread and connection; ``on_notify(payload)`` on that
    thread for each notification; reconnects after a failure (one log line naming ``what``, then
    a pause of ``RECONNECT_PAUSE_S``); ``close`` stops it within about ``WAIT_S``."""

    def __init__(self, connect: Callable[[], Any], channel: str, on_notify: Callable[[str], None], name: str,
                 what: str) -> None:
        """``connect`` returns a new autocommit psycopg connection; ``channel`` is a trusted
        identifier (a constant of ours, never client input)."""
        self._connect = connect
        self._channel = channel
        self._on_notify = on_notify
        self._what = what
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "ChannelListener":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WAIT_S * 4 + RECONNECT_PAUSE_S + 10)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                conn.execute(f"LISTEN {self._channel}")
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=WAIT_S):
                        self._on_notify(note.payload)
            except Exception as exc:  # the store is down or the connection broke: the poll covers it
                log.info("listening for %s failed (%s); retrying", self._what, exc)
                self._stop.wait(RECONNECT_PAUSE_S)
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass


class MetadataListener(ChannelListener):
    """``ChannelListener`` on ``oncelog_metadata``; ``on_notify()`` takes no payload."""

    def __init__(self, connect: Callable[[], Any], on_notify: Callable[[], None], name: str = "oncelog-listen") -> None:
        """``connect`` returns a new autocommit psycopg connection."""
        super().__init__(connect, METADATA_CHANNEL, lambda _payload: on_notify(), name, "metadata changes")

    def start(self) -> "MetadataListener":
        super().start()
        return self
