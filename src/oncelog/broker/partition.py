"""Leader state of one partition: its log, its producer state, its high watermark, and
fetchers waiting for data.

With a single replica the high watermark is the log end offset: a batch is committed (R2) once
it is in the log. ``append`` validates a produce batch at the header level (records.py: one
magic-2 batch, CRC, lengths, size), checks it against the producer state (R6: duplicates are
answered with their original offsets and not written again; gaps, stale epochs and unknown
producers are refused), appends it whole, and only then updates the producer state. Nothing here
looks at single records.

Producer state survives restarts (R7): a snapshot is written whenever the log rolls a segment and
on clean close; on open the newest snapshot at or below the log end is loaded and the batch
headers after it are replayed (the whole log when no snapshot is usable).

Long-poll fetches register a future with ``waiter()``; every append resolves all of them, so a
fetch parked on min_bytes wakes up as soon as data arrives.

Single-threaded: called only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import logging

from oncelog.protocol import records
from oncelog.storage.log import FileSlice, LogConfig, PartitionLog
from oncelog.storage.producer_state import ProducerStateManager
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class ReadResult:
    slices: list[FileSlice]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


class Partition:
    def __init__(self, tp: TopicPartition, log: PartitionLog, config: LogConfig, producers: ProducerStateManager) -> None:
        self.tp = tp
        self.log = log
        self.config = config
        self.producers = producers
        self._waiters: set[asyncio.Future[None]] = set()

    @classmethod
    def open(cls, tp: TopicPartition, path: Path, config: LogConfig, now_ms: int) -> "Partition":
        """Open the log (recovering it) and rebuild the producer state (R7)."""
        plog = PartitionLog.open(path, config, now_ms)
        producers = ProducerStateManager(path, str(tp))
        end = plog.log_end_offset
        if not producers.load_latest_snapshot(end) or producers.map_end_offset < plog.log_start_offset:
            producers.entries.clear()
            producers.map_end_offset = plog.log_start_offset
        replayed = 0
        for h in plog.iter_headers(producers.map_end_offset):
            producers.update(h, h.base_offset)
            replayed += 1
        producers.map_end_offset = end
        if replayed:
            log.info("%s: producer state rebuilt, %d batch headers replayed", tp, replayed)
        return cls(tp, plog, config, producers)

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append(self, batch: bytes, now_ms: int, *, from_client: bool = True) -> AppendResult:
        """Validate and append one batch. Raises a KafkaError on invalid input.

        ``from_client``: a producer's batch (Produce API): fully validated and checked against
        the producer state. Batches written by the broker's own coordinators (offset commits,
        transactional offset commits carrying a producer id without sequence numbers, group
        metadata) pass ``from_client=False``: header and CRC are still checked, sequence numbers
        are not (as Kafka's ``AppendOrigin.COORDINATOR``)."""
        if from_client:
            header = records.validate_produce_batch(batch, self.config.max_message_bytes)
            dup = self.producers.check(header)
            if dup is not None:
                return AppendResult(dup.first_offset, dup.last_offset, self.log.log_start_offset, duplicate=True)
        else:
            header = records.parse_header(batch)
        segments = len(self.log.segments)
        base, last = self.log.append(batch, header, now_ms)
        self.producers.update(header, base, now_ms)
        if len(self.log.segments) != segments:
            self.producers.write_snapshot()
        self._wake()
        return AppendResult(base, last, self.log.log_start_offset)

    def read(self, offset: int, max_bytes: int, *, read_committed: bool = False, min_one_batch: bool = True) -> ReadResult:
        """Whole batches from ``offset`` up to the high watermark (or the LSO when read_committed).

        Raises OffsetOutOfRange when ``offset`` is outside [log start, log end].
        """
        hw = self.high_watermark
        lso = self.last_stable_offset
        upper = lso if read_committed else hw
        slices = self.log.read(offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)
        return ReadResult(slices, hw, lso, self.log.log_start_offset)

    def waiter(self) -> asyncio.Future[None]:
        """A future resolved by the next append. Cancelling it unregisters it."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        fut.add_done_callback(self._waiters.discard)
        return fut

    def wake_waiters(self) -> None:
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def close(self) -> None:
        """Flush and close the log and snapshot the producer state (a clean shutdown)."""
        self._wake()
        self.log.close()
        self.producers.write_snapshot()
