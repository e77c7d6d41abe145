"""One broker started ahead of time, so the next test that asks for one does not wait for it.

A broker process needs most of a second of CPU to start (mostly Python importing the broker);
per-test brokers would pay it in every test. ``Spare`` starts the next broker in a background
thread while the current test runs, and ``take()`` hands it over when the next request has the
same properties. At most one spare exists: a request with other properties gets a broker
started on the spot, and the spare is replaced by one with those properties. A spare that
failed to start, or died while waiting, is discarded and the request falls back to a fresh
start. ``discard()`` (at the end of the session) stops the one left over.

Used only from pytest's main thread; the background thread does nothing but ``Broker.start()``.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Mapping

from oncelog.testing.broker import Broker


def _key(config: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


class Spare:
    def __init__(self) -> None:
        self._broker: Broker | None = None
        self._key: tuple[tuple[str, str], ...] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def prepare(self, config: Mapping[str, object], data_dir: Path | None = None) -> None:
        """Start a broker with ``config`` in ``data_dir`` (None: a temporary directory that
        ``close()`` removes) in the background, replacing any spare."""
        self.discard()
        broker = Broker(config, data_dir=data_dir)
        self._broker, self._key, self._error = broker, _key(config), None

        def run() -> None:
            try:
                broker.start()
            except BaseException as exc:  # noqa: BLE001 - kept; take() falls back to a fresh start
                self._error = exc

        self._thread = threading.Thread(target=run, name="oncelog-spare-broker", daemon=True)
        self._thread.start()

    def take(self, config: Mapping[str, object]) -> Broker | None:
        """The spare, running, if it was started with ``config`` (waiting for its start to
        finish); None otherwise."""
        if self._broker is None or self._key != _key(config):
            return None
        broker, self._broker = self._broker, None
        self._join(broker)
        if self._error is not None or not broker.running:
            with contextlib.suppress(Exception):
                broker.close()
            return None
        return broker

    def discard(self) -> None:
        """Stop the spare, if any (errors of a broker nobody used are not the tests' business)."""
        broker, self._broker = self._broker, None
        if broker is not None:
            self._join(broker)
            with contextlib.suppress(Exception):
                broker.close()

    def _join(self, broker: Broker) -> None:
        if self._thread is not None:
            self._thread.join(broker.startup_timeout + 10)
            self._thread = None
