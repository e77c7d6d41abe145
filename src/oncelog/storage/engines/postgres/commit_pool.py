"""Several group-commit rounds in flight per broker: one ``GroupCommitter`` per connection, each
partition always on the same one (issue 28).

Why. One committer is one thread on one PostgreSQL connection: one round (one transaction, one
WAL flush) at a time, and on the server one backend doing all of the broker's inserts; a batch
that arrives while a round commits waits for that round and its own. With ``n`` committers a
broker has up to ``n`` rounds in flight, on ``n`` backends, and PostgreSQL flushes the WAL of
concurrent COMMITs together (its own group commit).

Order. A partition's batches must commit in the order their leader gave them offsets (the
store refuses a batch whose base offset is not its log end, and every later batch of the
partition then fails, pg_log.py). Each committer takes its requests first in, first out, and
a partition is always routed to the same committer (by its store id), so a partition's batches
still commit in submission order; batches of different partitions never depended on each other's
order (each append is checked against its own partition's row). Two committers of one broker
never lock the same partition row, so they never wait for each other.

Same interface as ``GroupCommitter`` (``start``, ``submit``, ``stats``, ``close``); thread-safe
like it.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable

from oncelog.storage.engines.postgres.group_commit import AppendRequest, CommitStats, GroupCommitter

__all__ = ["CommitterPool"]


class CommitterPool:
    """``n`` GroupCommitters (``n`` >= 1), a partition always on the same one."""

    def __init__(self, connect: Callable[[], Any], n: int, *, name: str = "oncelog-group-commit", **kw: Any) -> None:
        if n < 1:
            raise ValueError("a committer pool needs at least one committer")
        self._committers = [GroupCommitter(connect, name=f"{name}-{i}" if n > 1 else name, **kw) for i in range(n)]

    def start(self) -> "CommitterPool":
        for c in self._committers:
            c.start()
        return self

    def submit(self, req: AppendRequest) -> Future:
        """``GroupCommitter.submit`` on the partition's committer."""
        return self._committers[req.partition_id % len(self._committers)].submit(req)

    def stats(self) -> CommitStats:
        """The committers' counters added up (the largest round: the largest of any)."""
        out = CommitStats()
        for c in self._committers:
            s = c.stats()
            out.transactions += s.transactions
            out.appends += s.appends
            out.bytes += s.bytes
            out.refused += s.refused
            out.failed_rounds += s.failed_rounds
            out.max_batches_per_transaction = max(out.max_batches_per_transaction, s.max_batches_per_transaction)
        return out

    def close(self, timeout_s: float = 30.0) -> None:
        """Close every committer (each writes what is queued first)."""
        for c in self._committers:
            c.close(timeout_s)
