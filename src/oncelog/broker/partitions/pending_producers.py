"""The pending layer of a partition's producer state (issue 29): each producer's appends that an
engine has not completed yet, and which of its next batches may go to the engine at once.

Why. On an engine that completes an append later (PostgreSQL at its group COMMIT, the diskless
object writer at its object's commit, 100-250 ms on) a producer's next batch used to wait for the
COMMIT of the one before it, so an idempotent producer got one batch per partition per commit
round, and its records waited up to two rounds. Kafka's leader appends synchronously and checks
up to five in-flight batches of a producer (``max.in.flight.requests.per.connection``) against
its producer state at append time. Here a batch that *continues* the producer's run of data
batches in flight is checked against the producer state as it will be once they commit, gets its
offsets and goes to the engine at once.

What continues a run (``ahead_of``): a data batch of the producer whose latest append on this
partition (the tail of its line) is a data batch in flight, with the same producer epoch, the
same transactional flag, base sequence = that batch's last sequence + 1 (wrapping as Kafka's), and
fewer than ``WINDOW`` (5) batches of the run in flight. For such a batch the producer state, once
the run has committed, has that epoch, that last sequence and (transactional) that open
transaction, so ``ProducerStateManager.check`` would accept it as the next batch: the check is
done by the comparison. Everything else (a duplicate or a gap against an in-flight batch, another
epoch, a marker, a coordinator's append, a batch after a marker, the sixth of a window) waits in
the producer's line for the appends ahead of it to complete and is checked then, against the
producer state itself.

Invariants (``Partition`` keeps them; tests/unit/test_pending_producers.py checks them against a
model):

1. The producer state (storage/producer_state.py) changes only when an append completes, in
   offset order: a pipelined batch's completion waits for its predecessor's (``ahead_of`` gives
   the predecessor), and a batch that waits in line starts after the latest one has completed,
   so after every append ahead of it.
2. An append that completes later holds the high watermark below it until its producer state is
   applied (``Partition._unapplied``), pipelined or not.
3. A run's batches have contiguous offsets on the engine, and both engines that complete later
   commit a partition's batches conditionally on the log end (PostgreSQL: ``oncelog_append``;
   diskless: ``oncelog_dl_commit``): when one fails, every later batch of the partition, so every
   batch pipelined behind it, fails too (retriable: KAFKA_STORAGE_ERROR or
   NOT_LEADER_OR_FOLLOWER) and none of them is in the log; the engine then refuses appends until
   the leader is rebuilt from the store. The producer state takes in exactly what the engine
   committed.
4. Producer id -1 (no producer) has no line; an engine that completes within ``submit`` (the local
   one) leaves nothing here, so its appends never touch this object.

Single-threaded: owned by one ``Partition``, called on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from oncelog.protocol.records import BatchHeader
from oncelog.storage.producer_state import MAX_BATCHES, next_sequence

__all__ = ["PendingProducers", "WINDOW"]

#: batches of one producer pipelined on one partition (Kafka's max.in.flight.requests.per.connection,
#: and the batches the producer state remembers for duplicates)
WINDOW = MAX_BATCHES


class _Run:
    """A producer's data batches in flight back to back at the tail of its line."""

    __slots__ = ("tail", "epoch", "last_seq", "transactional", "inflight")

    def __init__(self, tail: "asyncio.Future[Any]", h: BatchHeader) -> None:
        self.tail = tail
        self.epoch = h.producer_epoch
        self.last_seq = h.last_sequence
        self.transactional = h.is_transactional
        self.inflight = 1

    def landed(self, _task: "asyncio.Future[Any]") -> None:
        self.inflight -= 1


class PendingProducers:
    """Per producer id: the latest append on this partition that has not completed (the tail of
    its line), and the run of data batches in flight there. See the module docstring."""

    __slots__ = ("lines", "_runs")

    def __init__(self) -> None:
        #: producer id -> its latest append here that has not completed
        self.lines: dict[int, asyncio.Future[Any]] = {}
        #: producer id -> its run of data batches; valid only while its tail is the line's tail
        self._runs: dict[int, _Run] = {}

    def __contains__(self, pid: int) -> bool:
        return pid in self.lines

    def __bool__(self) -> bool:
        return bool(self.lines)

    def latest(self, pid: int) -> "asyncio.Future[Any] | None":
        return self.lines.get(pid) if pid >= 0 else None

    def ahead_of(self, h: BatchHeader) -> "asyncio.Future[Any] | None":
        """The append ``h`` may be pipelined behind (it continues the producer's run, see the
        module docstring), or None: ``h`` waits in line."""
        run = self._runs.get(h.producer_id)
        if (run is None or self.lines.get(h.producer_id) is not run.tail or run.inflight >= WINDOW
                or h.is_control or h.producer_epoch != run.epoch or h.is_transactional != run.transactional
                or h.base_sequence < 0 or h.base_sequence != next_sequence(run.last_seq)):
            return None
        return run.tail

    def queued(self, pid: int, task: "asyncio.Future[Any]") -> None:
        """``task`` (an append of any kind) is now the tail of ``pid``'s line; it ends the run."""
        self.lines[pid] = task
        task.add_done_callback(functools.partial(self._left, pid))

    def started(self, pid: int, task: "asyncio.Future[Any]", h: BatchHeader) -> None:
        """``task`` completes a data batch ``h`` just submitted to the engine after being checked
        against the producer state itself. When it is the tail of the line it starts a run that
        later batches may continue."""
        if h.base_sequence >= 0 and not h.is_control and self.lines.get(pid) is task:
            run = _Run(task, h)
            self._runs[pid] = run
            task.add_done_callback(run.landed)

    def continued(self, pid: int, task: "asyncio.Future[Any]", h: BatchHeader) -> None:
        """``task`` (``queued`` already) completes ``h``, pipelined (``ahead_of``) and submitted:
        the run's new tail."""
        run = self._runs[pid]
        run.tail = task
        run.last_seq = h.last_sequence
        run.inflight += 1
        task.add_done_callback(run.landed)

    def _left(self, pid: int, task: "asyncio.Future[Any]") -> None:
        if self.lines.get(pid) is task:
            del self.lines[pid]
            self._runs.pop(pid, None)
