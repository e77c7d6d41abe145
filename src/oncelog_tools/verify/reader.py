"""The concurrent read_committed reader of ``oncelog verify copy``, and its watch.

The reader (confluent-kafka) is assigned every output partition from the beginning and never
seeks or restarts. It keeps what it read per partition; ``copy._check`` compares that with the
final read (a prefix at the same offsets).

The watch makes a stalled reader diagnosable after the fact. Every ``watch_s`` seconds a second
thread writes one line per partition to ``reader.log`` in the run's directory: the records read
and the seconds since the last one, the consumer's position, and what librdkafka's statistics
say of the partition (its leader broker, fetch state, next fetch offset, the high watermark and
last stable offset of the last fetch answer, the queued records) and of each broker connection
(state, requests waiting for an answer). When a partition has read nothing for ``stall_s`` the
line also carries what the brokers answer *now* to a fresh read_committed client's ListOffsets
(``lso``): a reader behind that LSO is stuck, a reader at it is only waiting. The reader's
own loop is timed too (``loop_age``): a ``consume`` call that never returns shows there.
Errors the reader skips (``m.error()``) and librdkafka's log lines are written there as well.

``ONCELOG_VERIFY_READER_DEBUG`` (e.g. ``topic,metadata,fetch``) sets librdkafka's ``debug``
contexts of the reader, whose lines then go to ``reader.log`` too.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

__all__ = ["ConcurrentReader"]

DEBUG_ENV = "ONCELOG_VERIFY_READER_DEBUG"


class ConcurrentReader(threading.Thread):
    """The concurrent read_committed consumer: never seeks, never restarts."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, log_path: Path | None = None, *,
                 watch_s: float = 5.0, stall_s: float = 10.0) -> None:
        super().__init__(daemon=True, name="verify-reader")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        self.stop_at: float | None = None
        self.error: str | None = None
        self.last_at = 0.0  # time.monotonic() of the last record read
        self.part_last_at: dict[int, float] = {p: 0.0 for p in range(partitions)}
        self.loop_at = 0.0  # time.monotonic() of the last return from consume()
        self.skipped_errors = 0
        self.watch_s, self.stall_s = watch_s, stall_s
        self._stats: dict = {}
        self._stats_at = 0.0
        self._log = self._logger(log_path)
        self._t0 = time.monotonic()
        self._done = threading.Event()
        self._consumer = None

    @staticmethod
    def _logger(path: Path | None) -> logging.Logger:
        log = logging.getLogger(f"oncelog_tools.verify.reader.{path}")
        log.propagate = False
        log.setLevel(logging.DEBUG)
        for old in list(log.handlers):  # a second run into the same directory in one process
            log.removeHandler(old)
            old.close()
        if path is not None:
            h = logging.FileHandler(path)
            h.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            log.addHandler(h)
        return log

    def _on_stats(self, raw: str) -> None:
        try:
            self._stats = json.loads(raw)
            self._stats_at = time.monotonic()
        except ValueError:
            pass

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        conf = {"bootstrap.servers": self.bootstrap, "group.id": "verify-reader", "enable.auto.commit": False,
                "isolation.level": "read_committed", "reconnect.backoff.max.ms": 500,
                "statistics.interval.ms": int(self.watch_s * 1000), "stats_cb": self._on_stats,
                "logger": self._log, "error_cb": lambda e: self._log.info("reader error_cb: %s", e)}
        if os.environ.get(DEBUG_ENV):
            conf["debug"] = os.environ[DEBUG_ENV]
        c = Consumer(conf)
        self._consumer = c
        c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        watch = threading.Thread(target=self._watch, daemon=True, name="verify-reader-watch")
        self.loop_at = time.monotonic()
        watch.start()
        try:
            while self.stop_at is None or time.monotonic() < self.stop_at:
                msgs = c.consume(5000, 0.2)
                now = self.loop_at = time.monotonic()
                for m in msgs:
                    if m.error():
                        self.skipped_errors += 1
                        self._log.info("reader skips an error: %s (partition %s)", m.error(), m.partition())
                        continue
                    self.seen[m.partition()].append((m.offset(), m.value()))
                    self.last_at = self.part_last_at[m.partition()] = now
        except Exception as exc:  # noqa: BLE001 - reported as an anomaly
            self.error = f"{type(exc).__name__}: {exc}"
            self._log.info("reader failed: %s", self.error)
        finally:
            self._done.set()
            self._status(final=True)
            c.close()

    def _watch(self) -> None:
        """Every ``watch_s``: one status line per partition (the module docstring)."""
        probe = None
        try:
            while not self._done.wait(self.watch_s):
                stalled = [p for p in range(self.partitions)
                           if time.monotonic() - (self.part_last_at[p] or self._t0) >= self.stall_s]
                lso: dict[int, object] = {}
                if stalled:
                    if probe is None:
                        from confluent_kafka import Consumer

                        probe = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "verify-reader-probe",
                                          "isolation.level": "read_committed", "enable.auto.commit": False})
                    from confluent_kafka import TopicPartition

                    for p in stalled:
                        try:
                            lso[p] = probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=3)[1]
                        except Exception as exc:  # noqa: BLE001 - a line of the log
                            lso[p] = f"? ({exc})"
                self._status(lso=lso)
        except Exception as exc:  # noqa: BLE001 - the watch never stops the run
            self._log.info("reader watch failed: %s", exc)
        finally:
            if probe is not None:
                probe.close()

    def _status(self, lso: dict[int, object] | None = None, final: bool = False) -> None:
        now = time.monotonic()
        stats = self._stats
        parts = stats.get("topics", {}).get(self.topic, {}).get("partitions", {})
        brokers = stats.get("brokers", {})
        self._log.info("%s t=%.0fs loop_age=%.1fs read=%d skipped_errors=%d stats_age=%s", "FINAL" if final else "STATUS",
                       now - self._t0, now - self.loop_at, sum(len(v) for v in self.seen.values()),
                       self.skipped_errors, f"{now - self._stats_at:.1f}s" if stats else "none")
        for p in range(self.partitions):
            seen = self.seen[p]
            ps = parts.get(str(p), {})
            idle = now - (self.part_last_at[p] or self._t0)
            self._log.info(
                "  %s-%d read=%d last_offset=%s idle=%.0fs | leader=%s broker=%s epoch=%s fetch_state=%s "
                "next_offset=%s app_offset=%s hi=%s lso_fetched=%s fetchq=%s%s",
                self.topic, p, len(seen), seen[-1][0] if seen else None, idle, ps.get("leader"), ps.get("broker"),
                ps.get("leader_epoch"), ps.get("fetch_state"), ps.get("next_offset"), ps.get("app_offset"),
                ps.get("hi_offset"), ps.get("ls_offset"), ps.get("fetchq_cnt"),
                f" | brokers' lso now={lso[p]}" if lso and p in lso else "")
        for b in brokers.values():
            if b.get("nodeid", -1) < 0 and not b.get("toppars"):
                continue
            self._log.info("  broker %s state=%s for %.1fs outbuf=%s waitresp=%s toppars=%s", b.get("name"),
                           b.get("state"), b.get("stateage", 0) / 1e6, b.get("outbuf_cnt"), b.get("waitresp_cnt"),
                           sorted(b.get("toppars", {})))
