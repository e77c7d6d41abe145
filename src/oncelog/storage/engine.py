"""The storage engine interface: what the partition leader (``broker/partition.py``) and the
rest of the broker need from one partition's log, and nothing more.

Two engines implement it. ``storage.log.PartitionLog`` keeps the batches in local segment files
(the embedded single broker); ``cluster.pg_log.PgPartitionLog`` keeps them in PostgreSQL rows
(cluster mode, issue 15). Everything above this interface — producer state checks, the LSO,
markers, the aborted-transaction index, fetch, ListOffsets, coordinator loading — is shared.
Engine-specific work stays with its engine: segment rolling exists only for local files; each
engine compacts its own way (``storage/cleaner.py``: new segments swapped in;
``PgPartitionLog.compact``: rows rewritten or deleted) with the same keep rules
(``storage/keep_rules.py``), and the broker calls the one that matches the log
(broker.py ``_compact``).

Invariants every engine keeps:

* Offsets: ``log_start_offset <= log_end_offset``; both only grow, except that a truncation
  (local engine only, ``PartitionLog.truncate_to``) may lower the end. ``append`` gives a batch
  the offsets ``[log_end_offset, log_end_offset + last_offset_delta]`` by rewriting its base
  offset and partition leader epoch (the 16 bytes outside the CRC); the rest of the batch is
  stored byte for byte, never decoded per record.
* Durability: once ``append`` returns, the batch is as durable as the engine promises (local:
  in the page cache, fsync by flush policy; PostgreSQL: committed) and every later read sees it.
* Reads return whole batches, oldest first, starting with the batch that holds the offset
  asked for (it may begin before it), as a list of ``ReadPart``: a ``FileSlice`` (fd, position,
  length: sent with sendfile) or ``bytes`` (an in-memory chunk of whole batches). Callers treat
  the parts as opaque and measure them with ``part_length``.
* Errors are ``KafkaError``s carrying Kafka codes: ``OffsetOutOfRange`` outside
  ``[log_start_offset, log_end_offset]``, ``MessageTooLarge`` over max.message.bytes,
  ``KafkaStorageError`` on I/O failure, ``CorruptMessage`` for damaged stored data; an engine
  that can lose leadership raises ``NotLeaderOrFollower`` and has then written nothing.
  ``ValueError`` means a caller bug.
* Time is passed in (``now_ms``); no engine reads the clock.
"""

from __future__ import annotations

from typing import Iterator, Protocol, Union, runtime_checkable

from oncelog.protocol.records import BatchHeader
from oncelog.storage.parts import FileSlice

__all__ = ["PartitionEngine", "ReadPart", "part_length", "parts_length"]

#: One piece of a read: a range of a log file, or bytes already in memory (whole batches).
ReadPart = Union[FileSlice, bytes]


def part_length(part: ReadPart) -> int:
    return len(part) if isinstance(part, (bytes, bytearray, memoryview)) else part.length


def parts_length(parts: list[ReadPart]) -> int:
    return sum(part_length(p) for p in parts)


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

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int, *,
               leader_epoch: int = 0) -> tuple[int, int]:
        """Append one validated batch (``header`` is ``parse_header(batch)``) at the log end;
        returns ``(base_offset, last_offset)`` once it is durable as the engine promises.
        Either the whole batch is appended or nothing is (the error says why)."""
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
