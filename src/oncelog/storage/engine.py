"""The storage engine contract: what the partition leader (``broker/partitions/partition.py``)
and the rest of the broker need from one partition's log, and nothing more. This module depends
on no engine (the read parts are ``storage/parts.py``'s, the configuration
``storage/config.py``'s).

The engines live under ``storage/engines/`` (its package docstring lists them). Everything
above this contract — producer state checks, the LSO, markers, the aborted-transaction index,
fetch, ListOffsets, coordinator loading — is shared and never asks which engine it has.
Engine-specific work stays with its engine: segment rolling exists only for local files; each
engine compacts its own way (``plan_compaction``: the local cleaner swaps new segments in, the
PostgreSQL engine rewrites or deletes rows) with the same keep rules (``storage/keep_rules.py``).

One append path. ``submit`` is the one append every engine implements: it gives the batch its
offsets at once and returns a ``PendingAppend``, which the caller awaits; awaiting it completes
when the batch is as durable as the engine promises (local: at once, the page cache, fsync by
flush policy; PostgreSQL: at its group COMMIT; an object-store engine: at its object commit).
``done`` says whether it already is, so a caller can go on without suspending (the local
engine's appends never suspend, and cost no future or task).

Invariants every engine keeps:

* Offsets: ``log_start_offset <= log_end_offset``; both only grow, except that a truncation
  (local engine only, ``PartitionLog.truncate_to``) may lower the end. ``submit`` gives a batch
  the offsets ``[end, end + last_offset_delta]`` (``end``: the log end plus what is submitted
  and not complete yet) by rewriting its base offset and partition leader epoch (the 16 bytes
  outside the CRC); the rest of the batch is stored byte for byte, never decoded per record.
  Appends of one partition complete in offset order; if one fails, every later one fails too.
* Durability: once a ``PendingAppend`` completes, the batch is as durable as the engine
  promises and every later read sees it (``log_end_offset`` has passed it).
* Reads return whole batches, oldest first, starting with the batch that holds the offset
  asked for (it may begin before it), as a list of ``ReadPart``: a ``FileSlice`` (fd, position,
  length: sent with sendfile) or ``bytes`` (an in-memory chunk of whole batches). Callers treat
  the parts as opaque and measure them with ``part_length``.
* Errors are ``KafkaError``s carrying Kafka codes: ``OffsetOutOfRange`` outside
  ``[log_start_offset, log_end_offset]``, ``MessageTooLarge`` over max.message.bytes,
  ``KafkaStorageError`` on I/O failure, ``CorruptMessage`` for damaged stored data; an engine
  that can lose leadership raises ``NotLeaderOrFollower`` and has then written nothing.
  ``ValueError`` means a caller bug. ``submit`` raises what it knows at once; the
  ``PendingAppend`` raises what it learns later.
* Time is passed in (``now_ms``); no engine reads the clock.
"""

from __future__ import annotations

import threading
from operator import itemgetter
from typing import Any, Generator, Iterator, Protocol, runtime_checkable

from oncelog.protocol.records import BatchHeader
from oncelog.storage.config import LogConfig
from oncelog.storage.parts import ReadPart

__all__ = ["Appended", "CompactionPass", "PartitionEngine", "PendingAppend"]


class PendingAppend(Protocol):
    """A batch handed to an engine by ``submit``: its offsets, assigned at once, and its
    completion. ``await`` it: it returns (None) once the batch is as durable as the engine
    promises, or raises the append's KafkaError (the batch is then not in the log, or its fate
    is unknown: ``KafkaStorageError``/``outcome_unknown``, and the engine refuses appends until
    its leader is rebuilt)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def done(self) -> bool:
        """True when awaiting returns at once (the append completed within ``submit``)."""
        ...

    def __await__(self) -> Generator[Any, None, None]: ...


class Appended(tuple):
    """A ``PendingAppend`` that completed within ``submit`` (an engine whose append is synchronous,
    e.g. the local one): awaiting it returns at once, without a future or a task. It is the
    tuple ``(base_offset, last_offset)``, made without running Python code (the hot path)."""

    __slots__ = ()
    done = True
    base_offset = property(itemgetter(0), doc="The offset the batch got.")
    last_offset = property(itemgetter(1), doc="The offset of the batch's last record.")

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator: awaiting it never suspends


class CompactionPass(Protocol):
    """One compaction pass over a partition (``PartitionEngine.plan_compaction``), in two steps:
    ``build`` on a worker thread (the heavy part: reading and writing; may block; raises
    InterruptedError when the broker stops it, a KafkaError when the store refuses), then
    ``commit`` on the partition owner's thread (makes the result the log that is read; returns
    a line for the broker's log when the pass changed something, else None). ``abort`` instead
    of ``commit`` discards the pass (the partition went away meanwhile)."""

    def build(self) -> None: ...

    def commit(self) -> str | None: ...

    def abort(self) -> None: ...


@runtime_checkable
class PartitionEngine(Protocol):
    """One partition's log, as the partition leader uses it. See the module docstring for the
    invariants; each method states its own contract."""

    @property
    def log_start_offset(self) -> int:
        """The first offset a read may ask for (retention and DeleteRecords move it up)."""
        ...

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (the high watermark of a single replica)."""
        ...

    @property
    def active_base_offset(self) -> int:
        """An offset that changes exactly when the engine starts a new unit of storage (the
        local engine's segment roll); the leader snapshots its producer state when it changes.
        An engine without such units keeps it constant."""
        ...

    @property
    def pending_deletes(self) -> int:
        """Storage retired but not yet released (local: files kept open for
        file.delete.delay.ms); 0 when nothing is pending."""
        ...

    config: LogConfig

    def submit(self, batch: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int, *,
               drained: tuple[int, ...] = ()) -> PendingAppend:
        """THE append (see the module docstring): give one validated batch (``header`` is
        ``parse_header(batch)``) the next offsets and start writing it; the returned
        ``PendingAppend`` completes when it is durable as the engine promises. Either the whole
        batch is appended or nothing is (the error says why). ``drained``: rows of the engine's
        transactional outbox (``outbox_id``) that the batch carries, removed in the same commit
        (all of them, or the batch is refused); an engine without an outbox refuses any
        (ValueError)."""
        ...

    def disk_usage(self) -> tuple[int, int]:
        """(bytes, storage units) this log holds on the broker's own disk, for operators (metrics,
        console): local (bytes, segments); (-1, -1) for an engine with no local files."""
        ...

    @property
    def outbox_id(self) -> int | None:
        """The key of this partition's transactional outbox in the engine's store (issue 31:
        rows an application inserted, appended by the outbox drainer with ``submit(...,
        drained=...)``); None for an engine without an outbox."""
        ...

    def plan_compaction(self, upper: int, now_ms: int, stop: threading.Event) -> CompactionPass | None:
        """The compaction pass due now on a compacted topic (R4), never touching offsets at or
        above ``upper`` (the partition's LSO); None when nothing is due (not compacted, not
        dirty enough). ``stop`` set: the pass's ``build`` gives up (InterruptedError)."""
        ...

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> list[ReadPart]:
        """Whole batches from the one holding ``offset``, only those whose last offset <
        ``max_offset`` (default: the log end), at most ``max_bytes`` in total except that with
        ``min_one_batch`` the first batch comes even when larger (KIP-74). ``offset ==
        log_end_offset`` gives ``[]``; outside [log_start_offset, log_end_offset] raises
        OffsetOutOfRange."""
        ...

    def read_batches(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """The bytes of ``read(...)`` in memory (internal topics, replay of a marker)."""
        ...

    def iter_batches(self, from_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every readable batch from ``from_offset`` (default: the log start) to the log end,
        with its bytes, oldest first: for loading coordinator state, never for fetch."""
        ...

    def iter_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers (with final offsets) of every readable batch whose last offset >=
        ``from_offset``, oldest first: producer-state and aborted-index rebuild."""
        ...

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the record with the largest timestamp, the first one on
        ties (ListOffsets -3, KIP-734; Kafka answers the record, not its batch); None for an
        empty log. An engine decodes at most the one batch holding it."""
        ...

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start whose
        timestamp >= ``ts_ms`` (ListOffsets); None when no batch reaches it. An engine may answer
        at batch granularity (the batch's base offset and max timestamp)."""
        ...

    @property
    def leader_epoch(self) -> int:
        """The leader epoch this engine writes into the batches it appends (each batch's
        partitionLeaderEpoch): local 0, PostgreSQL the epoch it leads under."""
        ...

    def epoch_bounds(self, epoch: int) -> tuple[int | None, int | None]:
        """For OffsetForLeaderEpoch (``storage/leader_epochs.py``): the largest leader epoch <=
        ``epoch`` among the stored batches (None if none), and the base offset of the first
        stored batch whose leader epoch > ``epoch`` (None if none)."""
        ...

    def epoch_at(self, offset: int) -> int:
        """The leader epoch of the batch holding ``offset`` (ListOffsets answers it); the
        current ``leader_epoch`` at or past the log end."""
        ...

    def set_log_start_offset(self, offset: int, now_ms: int | None = None) -> None:
        """Advance the log start (DeleteRecords); no-op if not an advance; OffsetOutOfRange
        beyond the log end. Durable: it survives restarts."""
        ...

    def enforce_retention(self, now_ms: int) -> int:
        """Delete what retention.ms / retention.bytes allow (cleanup.policy ``delete`` only),
        never the newest data; advance the log start accordingly. Returns how many storage
        units (segments, or batches for a row engine) were deleted."""
        ...

    def cleanup_deleted(self, now_ms: int) -> int:
        """Release retired storage whose delay has passed; returns how many units."""
        ...

    def flush(self, now_ms: int | None = None) -> None:
        """Make everything appended so far durable (a no-op where append already is)."""
        ...

    def close(self) -> None:
        """Flush and release everything; no other method may be called afterwards."""
        ...

    def delete(self, now_ms: int | None = None) -> None:
        """Remove the partition's data (DeleteTopics). With ``now_ms``, parts already handed to
        readers stay valid until ``cleanup_deleted`` runs past the engine's delay."""
        ...
