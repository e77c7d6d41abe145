"""Reporting what a coordinator skips while it loads an internal topic partition (R22).

Loading ``__transaction_state`` or ``__consumer_offsets`` must never stop on a record it cannot
decode — garbage a client wrote before Produce refused internal topics, a record of a version
this broker does not know, a batch whose records do not parse or decompress, offsets the storage
layer cannot read. Stopping would keep the broker from starting (transaction coordinator) or a
group partition loading forever (group coordinator). The loader skips such a record and tells a
``SkipReport``, which logs it.

Rate limit, by count rather than time so that it is deterministic: the first ``detail_limit``
skips of a partition get one WARNING line each, naming the topic-partition, the offset and the
reason; the rest are only counted, and ``finish`` writes one summary line with how many were
skipped and the range of their offsets. A partition full of garbage therefore costs
``detail_limit + 1`` log lines, whatever its size. A coordinator also logs one total line per
load (``total_line``), so a global limit on repeated lines cannot hide skips either.

Not thread-safe; one report per partition load.
"""

from __future__ import annotations

import logging

from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError

__all__ = ["SkipReport", "batch_records"]

DETAIL_LIMIT = 10


class SkipReport:
    """Skips of one partition's load. ``skip`` for each skipped record or batch, ``finish``
    once at the end (idempotent). ``skipped`` counts every ``skip`` call."""

    def __init__(self, topic_partition: str, logger: logging.Logger, *, detail_limit: int = DETAIL_LIMIT) -> None:
        self.topic_partition = topic_partition
        self._log = logger
        self._detail_limit = detail_limit
        self.skipped = 0
        self._first_offset: int | None = None
        self._last_offset: int | None = None
        self._finished = False

    def skip(self, offset: int, what: str, reason: object, *, exc_info: bool = False) -> None:
        """Record that ``what`` ("record", "batch of 3 records", ...) at ``offset`` was skipped
        because of ``reason`` (an exception or a sentence). ``exc_info``: add the traceback of
        the exception being handled (for skips that reveal a bug rather than bad data)."""
        self.skipped += 1
        if self._first_offset is None or offset < self._first_offset:
            self._first_offset = offset
        if self._last_offset is None or offset > self._last_offset:
            self._last_offset = offset
        if self.skipped <= self._detail_limit:
            self._log.warning("%s: %s at offset %d skipped while loading: %s", self.topic_partition, what, offset, reason,
                              exc_info=exc_info)

    def finish(self) -> int:
        """Log the summary line if some skips were not logged one by one. Returns ``skipped``."""
        if not self._finished and self.skipped > self._detail_limit:
            self._log.warning(
                "%s: %d unreadable records or batches skipped while loading, offsets %d..%d "
                "(only the first %d logged one by one)",
                self.topic_partition, self.skipped, self._first_offset, self._last_offset, self._detail_limit,
            )
        self._finished = True
        return self.skipped

    @staticmethod
    def total_line(topic: str, skipped: dict[int, int]) -> str:
        """One line for a whole coordinator load: how many skips in which partitions. Logged
        once per load, it survives any rate limit applied to the per-partition lines (such as
        ``oncelog.logs.StormFilter``, which keys lines by their template)."""
        parts = ", ".join(f"{topic}-{p} ({n})" for p, n in sorted(skipped.items()))
        return f"{sum(skipped.values())} unreadable record(s) or batch(es) skipped while loading, in {parts}"


def batch_records(header: records.BatchHeader, data: bytes, report: SkipReport) -> list[records.Record]:
    """The records of one data batch of an internal topic, or none (the whole batch reported as
    skipped) when they do not parse or decompress. Never raises for bad data."""
    try:
        return list(records.iter_records(data))
    except KafkaError as exc:
        report.skip(header.base_offset, f"batch of {header.records_count} record(s) "
                    f"(offsets {header.base_offset}..{header.last_offset})", exc)
        return []
